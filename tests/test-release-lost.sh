#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# A mount whose release of the reservation never reaches the target (the
# PERSISTENT RESERVE OUT CLEAR dropped on the way, the connection cut,
# and no new one let in until the daemon has ended): the LUN stays
# reserved to a gateway that has ended, and the next gateway of this
# host takes it back without --takeover, as after a kill -9 (the proof
# that it ended is kept).  Before, the daemon removed its runtime file
# all the same, and the next mount was refused ("in use by a gateway on
# this host ... --takeover"): CI run s45g, test-umount-stall, where a
# stopped target dropped the CLEAR once its ABORT TASK came first.
. "${srcdir:-.}/functions.sh"
require_lungate
require fusermount3 mountpoint python3
[ -c /dev/fuse ] || skip "no /dev/fuse"
tgt_start
t=iqn.2026-12.org.lungate:release-lost
tgt_add_target 1 "$t"
tgt_add_lun 1 1 16M
tgt_allow 1 ALL
fault_proxy_start hold
m=$TGT_DIR/m
mount_points "$m"
purl="iscsi://127.0.0.1:$FAULT_PORT/$t/1"
with_timeout 60 "$LUNGATE" mount --log "$TGT_DIR/a.log" "$purl" "$m" || fail "mount"
head -c 65536 /dev/urandom >"$TGT_DIR/blk"
dd if="$TGT_DIR/blk" of="$m/lun1" bs=64k conv=fsync,notrunc status=none || fail "write"
# Every PERSISTENT RESERVE OUT CLEAR (service action 3) is dropped.
echo "drop-command op=0x5f sa=3 count=0" >"$TGT_DIR/proxy.rules"
rc=0
with_timeout 120 "$LUNGATE" umount "$m" >"$TGT_DIR/umount.out" 2>&1 || rc=$?
grep -q "fire .* drop-command" "$TGT_DIR/proxy.log" \
  || { cat "$TGT_DIR/umount.out" "$TGT_DIR/a.log"; fail "the release never came to the proxy"; }
grep -q "releasing the reservation" "$TGT_DIR/a.log" \
  || { cat "$TGT_DIR/a.log"; fail "the failed release is not in the log"; }
: >"$TGT_DIR/proxy.rules"
rm -f "$TGT_DIR/hold"
res=$("$LUNGATE" info "iscsi://$TGT_PORTAL/$t/1" | sed -n 's/^reservation: //p')
case $res in
  "not reserved") fail "the target released the LUN after all: the test proves nothing" ;;
esac
# The next gateway of this host: takes it back.
if ! with_timeout 60 "$LUNGATE" mount --log "$TGT_DIR/b.log" "iscsi://$TGT_PORTAL/$t/1" "$m" \
     2>"$TGT_DIR/b.err"; then
  cat "$TGT_DIR/b.err" "$TGT_DIR/a.log"
  fail "a LUN whose release was lost was refused to the next gateway of this host"
fi
grep -q "no longer running: taking it back" "$TGT_DIR/b.err" \
  || { cat "$TGT_DIR/b.err"; fail "the next mount does not say it took the LUN back"; }
cmp -n 65536 "$TGT_DIR/blk" "$m/lun1" || fail "the data written before is not there"
with_timeout 60 "$LUNGATE" umount "$m" >/dev/null || fail "umount b"
res=$("$LUNGATE" info "iscsi://$TGT_PORTAL/$t/1" | sed -n 's/^reservation: //p')
[ "$res" = "not reserved" ] || fail "after the second unmount: '$res'"
echo "test-release-lost: ok"
