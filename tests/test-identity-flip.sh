#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# One bit flipped on the wire in an INQUIRY answer of the identity check
# after a login (tests/tools/fault-proxy.py between the gateway and
# tgtd: plain TCP has no data digest) is no proof that the LUN changed:
# the check asks again, and the export goes on serving (issue 26, case
# 7).  Before, every request failed with ESHUTDOWN until a restart, and
# the LUN stayed reserved at the stop.  A LUN that really changed is
# still refused (test-lun-replaced).
. "${srcdir:-.}/functions-nbd.sh"
require_lungate_plugin
require_nbd_python
require python3
tgt_start
t=iqn.2026-11.org.lungate:idflip
tgt_add_target 1 "$t"
tgt_add_lun 1 1 16M
tgt_allow 1 ALL
fault_proxy_start plain
port=$FAULT_PORT rules=$TGT_DIR/proxy.rules plog=$TGT_DIR/proxy.log
url="iscsi://127.0.0.1:$port/$t/1"

nbd_gw a "url=$url"
nbd_io a write 1 17 >/dev/null || fail "the gateway cannot write"
# The next answer from the target cuts the connection; after the login,
# the first INQUIRY answer has bit 1 of its 9th byte flipped (the vendor
# field of the standard page: IET becomes KET).
printf 'cut count=1\nflip-datain op=0x12 bit=65 count=1\n' >"$rules"
nbd_io a write 2 18 >/dev/null \
  || { cat "$TGT_DIR/a.log"; fail "a write across the cut failed"; }
for _ in $(seq 50); do grep -q "flip-datain" "$plog" && break; sleep 0.1; done
grep -q "^fire 1 cut" "$plog" || fail "the proxy did not cut"
grep -q "^fire 2 flip-datain" "$plog" || fail "the proxy flipped nothing"
for u in 1:17 2:18; do
  r=$(nbd_io a read "${u%:*}" 2>/dev/null)
  [ "$r" = "${u#*:}" ] \
    || { cat "$TGT_DIR/a.log"; fail "after one flipped INQUIRY answer, unit ${u%:*} reads '$r'"; }
done
nbd_io a write 3 19 >/dev/null \
  || { cat "$TGT_DIR/a.log"; fail "after one flipped INQUIRY answer the export refuses writes"; }
grep -q "answered as another (vendor and product IET VIRTUAL-DISK -> KET VIRTUAL-DISK): asking again" "$TGT_DIR/a.log" \
  || { cat "$TGT_DIR/a.log"; fail "the check does not say it asked again"; }
nbd_stop "${NBD_GW[a]}"
"$LUNGATE" info "iscsi://$TGT_PORTAL/$t/1" | grep -q "^reservation: not reserved" \
  || fail "the LUN stayed reserved after the stop"
echo "test-identity-flip: ok"
