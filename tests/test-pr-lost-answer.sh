#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# The answer to the gateway's own PERSISTENT RESERVE OUT RESERVE (or
# PREEMPT, at a takeover) lost with the connection after the target
# executed it (tests/tools/fault-proxy.py between the gateway and tgtd):
# the gateway must recognize the LUN held under its own key as its own,
# write, and release it at close (issue 26, case 6).  Before, it refused
# itself ("in use by a gateway on this host") on every connection.
. "${srcdir:-.}/functions-nbd.sh"
require_lungate_plugin
require_nbd_python
require python3
tgt_start
t=iqn.2026-11.org.lungate:prlost
tgt_add_target 1 "$t"
tgt_add_lun 1 1 16M
tgt_allow 1 ALL
fault_proxy_start plain
port=$FAULT_PORT rules=$TGT_DIR/proxy.rules plog=$TGT_DIR/proxy.log
url="iscsi://127.0.0.1:$port/$t/1"
direct="iscsi://$TGT_PORTAL/$t/1"

reservation ()
{
  "$LUNGATE" info "$direct" | sed -n 's/^reservation: //p'
}

# 1. RESERVE (service action 1) executed, its answer lost.
echo "drop-response op=0x5f sa=1 count=1" >"$rules"
nbd_gw a "url=$url"
nbd_io a write 1 17 >/dev/null \
  || { cat "$TGT_DIR/a.log"; fail "a lost answer to RESERVE: the gateway refused itself"; }
grep -q "^fire 1 drop-response" "$plog" || fail "the proxy did not drop the answer"
nbd_stop "${NBD_GW[a]}"
res=$(reservation)
[ "$res" = "not reserved" ] || fail "after a lost RESERVE answer and a clean stop: '$res'"
echo "RESERVE answer lost: ok"

# 2. PREEMPT (service action 4) at a takeover, executed, answer lost.
nbd_gw b "url=$direct"
nbd_io b write 2 18 >/dev/null || fail "gateway b"
kill -9 "${NBD_GW[b]}"; wait "${NBD_GW[b]}" 2>/dev/null
echo "drop-response op=0x5f sa=4 count=1" >"$rules"
nbd_gw c "url=$url" takeover=true
nbd_io c write 3 19 >/dev/null \
  || { cat "$TGT_DIR/c.log"; fail "a lost answer to PREEMPT: the takeover failed"; }
grep -q "drop-response" "$plog" || fail "the proxy did not drop the PREEMPT answer"
[ "$(nbd_io c read 2)" = 18 ] || fail "unit 2 lost"
nbd_stop "${NBD_GW[c]}"
res=$(reservation)
[ "$res" = "not reserved" ] || fail "after a lost PREEMPT answer and a clean stop: '$res'"
echo "PREEMPT answer lost: ok"
