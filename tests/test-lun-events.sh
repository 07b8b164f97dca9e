#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# Another LUN of the target added and removed eight times in a row while
# a gateway serves LUN 1: tgt queues one REPORTED LUNS DATA HAS CHANGED
# unit attention per change, per LUN, per session, and every one of them
# must be taken and the command sent again; reads and writes of the
# untouched LUN never fail (issue 26, case 4: they failed with EIO once a
# command had met four of them).  Through the plugin, one session.
. "${srcdir:-.}/functions-nbd.sh"
require_lungate_plugin
require_nbd_python
tgt_start
t=iqn.2026-11.org.lungate:lunevents
tgt_add_target 1 "$t"
tgt_add_lun 1 1 16M
tgt_allow 1 ALL
url="iscsi://$TGT_PORTAL/$t/1"
nbd_gw a "url=$url" connections=1
nbd_io a write 1 17 >/dev/null || fail "the gateway cannot write"
for i in 1 2 3 4; do
  tgt_add_lun 1 2 1M
  tgtadm_ --mode logicalunit --op delete --tid 1 --lun 2 || fail "tgtadm delete"
  echo "LUN 2 added and removed ($i)"
done
r=$(nbd_io a read 1 2>/dev/null)
[ "$r" = 17 ] || { cat "$TGT_DIR/a.log"; fail "after eight LUN changes a read of LUN 1 gave '$r'"; }
for i in 5 6 7 8; do
  tgt_add_lun 1 2 1M
  tgtadm_ --mode logicalunit --op delete --tid 1 --lun 2 || fail "tgtadm delete"
done
nbd_io a write 2 18 >/dev/null \
  || { cat "$TGT_DIR/a.log"; fail "after eight more LUN changes a write of LUN 1 failed"; }
[ "$(nbd_io a read 2)" = 18 ] || fail "unit 2"
nbd_stop "${NBD_GW[a]}"
echo "test-lun-events: ok"
