#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# A thin target that runs out of space (issue 30, item 11): its backing
# file on a 4 MiB tmpfs, a 64 MiB LUN, 8 MiB written through the mount.
# The write fails (EIO), and the log says what happened in words: the
# sense key by name and that the target could not write its disk.
# (Before: "sense unknown (0x3)".)  With write-behind (test-faults-wb)
# the writes are acknowledged and dd's fsync fails.
. "${srcdir:-.}/functions.sh"
require_lungate
require fusermount3 mountpoint
[ -c /dev/fuse ] || skip "no /dev/fuse"
[ "$(id -u)" -eq 0 ] || skip "needs root to mount a small tmpfs"
small=$(mktemp -d /tmp/lungate-full.XXXXXX) || fail "mktemp"
on_exit rmdir "$small"
mount -t tmpfs -o size=4m tmpfs "$small" || fail "cannot mount a tmpfs"
on_exit umount -l "$small"
tgt_start
iqn=iqn.2026-12.org.lungate:full
tgt_add_target 1 "$iqn"
ln -s "$small/lun.img" "$(tgt_lun_file 1 1)"
tgt_add_lun 1 1 64M
tgt_allow 1 ALL
mnt=$TGT_DIR/m
log=$TGT_DIR/mount.log
mkdir "$mnt"
on_exit fusermount3 -u -z "$mnt"
with_timeout 60 "$LUNGATE" mount -o direct_io --io-timeout 5 --log "$log" \
  "iscsi://$TGT_PORTAL/$iqn/1" "$mnt" || fail "mount"
if with_timeout 120 dd if=/dev/urandom of="$mnt/lun1" bs=1M count=8 \
  oflag=direct conv=notrunc,fsync 2>"$TGT_DIR/dd.err"; then
  fail "8 MiB written to a LUN whose disk holds 4 MiB"
fi
grep -q "Input/output error\|No space left" "$TGT_DIR/dd.err" || { cat "$TGT_DIR/dd.err"; fail "dd: no EIO"; }
grep -q "sense MEDIUM ERROR (0x3)" "$log" || { tail "$log"; fail "the sense key is not named"; }
grep -q "the target could not write to its disk (a thin-provisioned LUN out of space" "$log" \
  || { tail "$log"; fail "no word on a full target"; }
echo "test-target-full: ok"
