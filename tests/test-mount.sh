#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# lungate mount: a file system on a remote LUN with no kernel module and no
# block device (mkfs.ext4 on DIR/lun1, fuse2fs on that file, a tree copied
# in, unmounted, mounted again, compared, e2fsck clean), plain and
# encrypted; fio with verify; punch hole and zero range; .stats; read-only.
. "${srcdir:-.}/functions.sh"
require_lungate
require fusermount3 fuse2fs mkfs.ext4 e2fsck fio fallocate cmp mountpoint
[ -c /dev/fuse ] || skip "no /dev/fuse"
tgt_start
t=iqn.2026-11.org.lungate:mount
tgt_add_target 1 "$t"
tgt_add_lun 1 1 128M
tgt_lun_params 1 1 thin_provisioning=1
tgt_add_lun 1 2 128M
tgt_allow 1 ALL
url="iscsi://$TGT_PORTAL/$t"
key="$TGT_DIR/key"; head -c 32 /dev/urandom >"$key"
"$LUNGATE" format --key-file "$key" "$url/2" >/dev/null 2>&1 || fail "format"
mnt="$TGT_DIR/mnt"; fsm="$TGT_DIR/fs"
mount_points "$mnt" "$fsm"

# fuse2fs in the foreground, so that unmounting can wait for it to let
# go of the LUN file.
fuse2fs_pid=
fs_mount ()   # fs_mount IMAGE [OPTS]
{
  fuse2fs "$1" "$fsm" -f -o "fakeroot${2:+,$2}" 2>>"$TGT_DIR/fuse2fs.log" &
  fuse2fs_pid=$!
  for _ in $(seq 100); do
    mountpoint -q "$fsm" && return 0
    sleep 0.1
  done
  cat "$TGT_DIR/fuse2fs.log" >&2
  fail "fuse2fs did not mount $1"
}
fs_umount ()
{
  fusermount3 -u "$fsm" || fail "unmount fuse2fs"
  wait "$fuse2fs_pid" || true
}

# A tree to copy.
src="$TGT_DIR/src"; mkdir -p "$src/a/b"
head -c 3M /dev/urandom >"$src/big"
for i in $(seq 40); do head -c $((i * 997)) /dev/urandom >"$src/a/b/f$i"; done
ln -s big "$src/link"

with_timeout 60 "$LUNGATE" mount --key-file "$key" "$url" "$mnt" || fail "mount"
if [ ! -f "$mnt/lun1" ] || [ ! -f "$mnt/lun2" ]; then fail "the LUN files are missing"; fi
[ "$(stat -c %s "$mnt/lun2")" -lt $((128 << 20)) ] || fail "lun2 does not show the decrypted size"
grep -q "^file=lun1 " "$mnt/.stats" || fail ".stats"

for lun in lun1 lun2; do
  # fuse2fs (e2fsprogs 1.47) cannot write a journal: no journal.
  mkfs.ext4 -q -F -O ^has_journal "$mnt/$lun" || fail "mkfs.ext4 on $lun"
  fs_mount "$mnt/$lun"
  cp -a "$src/." "$fsm/" \
    || { cat "$TGT_DIR/fuse2fs.log"; grep . "$mnt/.stats"; fail "copy into $lun"; }
  sync
  fs_umount
done
# lungate umount waits for the daemon's end (its final flush and the
# release): a mount right after fusermount3 -u can find the LUN still held
# by it (seen in CI under ASan: "in use by a gateway on this host ... pid").
with_timeout 60 "$LUNGATE" umount "$mnt" >/dev/null || fail "unmount lungate"
# Mount again: the file systems are still there and clean.
with_timeout 60 "$LUNGATE" mount --key-file "$key" "$url" "$mnt" || fail "mount again"
for lun in lun1 lun2; do
  e2fsck -fn "$mnt/$lun" >"$TGT_DIR/fsck" 2>&1 || { cat "$TGT_DIR/fsck"; fail "e2fsck $lun"; }
  fs_mount "$mnt/$lun" ro
  diff -r -x lost+found "$src" "$fsm" >"$TGT_DIR/diff" 2>&1 || { head "$TGT_DIR/diff"; fs_umount; fail "the tree on $lun differs"; }
  fs_umount
done

# fio with verify on the raw file.
fio --name=v --filename="$mnt/lun1" --ioengine=psync --rw=randwrite \
  --bs=4k --size=32m --verify=crc32c --verify_state_save=0 --verify_fatal=1 --do_verify=1 \
  --output="$TGT_DIR/fio.out" >/dev/null 2>&1 || { cat "$TGT_DIR/fio.out"; fail "fio verify"; }

# Punch a hole (the thin LUN deallocates) and zero a range.
head -c 4M /dev/urandom | dd of="$mnt/lun1" bs=1M seek=64 conv=notrunc,fsync status=none
before=$(du -k "$(tgt_lun_file 1 1)" | cut -f1)
fallocate -p -o $((64 << 20)) -l $((2 << 20)) "$mnt/lun1" || fail "punch hole"
fallocate -z -o $((66 << 20)) -l $((1 << 20)) "$mnt/lun1" || fail "zero range"
cmp -n $((3 << 20)) -i $((64 << 20)):0 "$mnt/lun1" /dev/zero || fail "punched/zeroed range not zero"
after=$(du -k "$(tgt_lun_file 1 1)" | cut -f1)
[ "$after" -lt "$before" ] || fail "punching a hole did not deallocate ($before -> $after KiB)"
grep -q "^file=lun1 .*written_bytes=[1-9]" "$mnt/.stats" || fail ".stats counts no writes"
grep -Eq "^file=lun1 .* latency_p50_us=[1-9][0-9]* latency_p99_us=[1-9]" "$mnt/.stats" \
  || { cat "$mnt/.stats"; fail ".stats has no latency percentiles"; }
grep -q "^file=lun2 .* auth_failures=0 " "$mnt/.stats" || fail ".stats: auth_failures"
fusermount3 -u "$mnt" || fail "unmount"

# Read-only.
with_timeout 60 "$LUNGATE" mount -o ro "$url/1" "$mnt" || fail "mount -o ro"
if dd if=/dev/zero of="$mnt/lun1" bs=4k count=1 conv=notrunc status=none 2>/dev/null; then
  fail "a write to a read-only mount succeeded"
fi
fusermount3 -u "$mnt"
expect_fail_with "allow_other needs -o default_permissions" \
  "$LUNGATE" mount -o allow_other "$url/1" "$mnt"
bad="$TGT_DIR/bad"; head -c 32 /dev/urandom >"$bad"
expect_fail_with "wrong key" "$LUNGATE" mount --key-file "$bad" "$url/2" "$mnt"
echo "test-mount: ok"
