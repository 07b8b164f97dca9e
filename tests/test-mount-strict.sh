#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# mount --strict of a portal with more targets than a mount takes (64):
# it fails, naming the count, and mounts nothing (the hostile review:
# it mounted the first 64 and exited 0).
. "${srcdir:-.}/functions.sh"
require_lungate
require fusermount3 mountpoint
[ -c /dev/fuse ] || skip "no /dev/fuse"
tgt_start
for i in $(seq 1 65); do
  tgt_add_target "$i" "iqn.2026-11.org.lungate:strict$(printf %03d "$i")"
  tgt_add_lun "$i" 1 1M
  tgt_allow "$i" ALL
done
mnt=$TGT_DIR/m
mount_points "$mnt"
expect_fail_with "65 targets, more than the 64 a mount takes \(--strict\)" \
  "$LUNGATE" mount --strict -o ro "iscsi://$TGT_PORTAL" "$mnt"
mountpoint -q "$mnt" && fail "mount --strict failed but left a mount"
echo "test-mount-strict: ok"
