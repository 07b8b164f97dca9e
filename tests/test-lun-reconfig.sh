#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# The target's LUN set changes under a running gateway: LUN 1 is removed
# and added again (tgt does that on every resize), which drops its
# reservation without telling the gateway (no unit attention).  A writer
# reads its reservation again every 3 s before a write, and reserves the
# LUN again when it is gone, so that a second gateway is still refused (issue 26, case 4: before, info showed
# 'not reserved', a second gateway was admitted and wrote, and only then
# did the first fail with EPERM).
. "${srcdir:-.}/functions-nbd.sh"
require_lungate_plugin
require_nbd_python
tgt_start
t=iqn.2026-11.org.lungate:reconfig
tgt_add_target 1 "$t"
tgt_add_lun 1 1 16M
tgt_allow 1 ALL
url="iscsi://$TGT_PORTAL/$t/1"
nbd_gw a "url=$url"
nbd_io a write 1 17 >/dev/null || fail "the gateway cannot write"
tgtadm_ --mode logicalunit --op delete --tid 1 --lun 1 || fail "tgtadm delete"
tgt_add_lun 1 1 16M
"$LUNGATE" info "$url" | grep -q "^reservation: not reserved" \
  || fail "tgt kept the reservation of a LUN removed and added again: the test proves nothing"
# tgt tells the gateway nothing: a writer reads its reservation again
# every 3 s, before a write.
sleep 3.5
nbd_io a write 2 18 >/dev/null \
  || { cat "$TGT_DIR/a.log"; fail "the gateway cannot write after the LUN came back"; }
grep -q "the target had forgotten the reservation" "$TGT_DIR/a.log" \
  || { cat "$TGT_DIR/a.log"; fail "the gateway does not say it reserved the LUN again"; }
"$LUNGATE" info "$url" | grep -q "^reservation: Write Exclusive, Registrants Only by a gateway on this host" \
  || fail "the LUN is not reserved again"
nbd_gw b "url=$url"
nbd_io b write 3 1 >/dev/null 2>&1 && fail "a second gateway wrote after the LUN was reconfigured"
nbd_stop "${NBD_GW[b]}"
[ "$(nbd_io a read 1)" = 17 ] || fail "unit 1 lost"
[ "$(nbd_io a read 2)" = 18 ] || fail "unit 2 lost"
[ "$(nbd_io a read 3)" = 0 ] || fail "the second gateway's write reached the LUN"
nbd_stop "${NBD_GW[a]}"
echo "test-lun-reconfig: ok"
