#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# The LUN changes under a mount: resized (the file shows the new size, with
# -o direct_io where the kernel does not own the size), then replaced by a
# disk with another block size (every request fails with EIO and the log
# says why, instead of serving another disk's data).
. "${srcdir:-.}/functions.sh"
require_lungate
require fusermount3 python3 mountpoint
[ -c /dev/fuse ] || skip "no /dev/fuse"
tgt_start
t=iqn.2026-11.org.lungate:resize
tgt_add_target 1 "$t"
tgt_add_lun 1 1 16M
tgt_allow 1 ALL
mnt="$TGT_DIR/mnt"; mount_points "$mnt"
log="$TGT_DIR/mount.log"
"$LUNGATE" mount -f -o direct_io "iscsi://$TGT_PORTAL/$t/1" "$mnt" 2>"$log" &
for _ in $(seq 100); do mountpoint -q "$mnt" && break; sleep 0.1; done
mountpoint -q "$mnt" || { cat "$log"; fail "mount"; }
[ "$(stat -c %s "$mnt/lun1")" = 16777216 ] || fail "size before"
head -c 1M /dev/urandom >"$TGT_DIR/data"
dd if="$TGT_DIR/data" of="$mnt/lun1" bs=64k oflag=direct conv=notrunc,fsync status=none \
  || fail "write before"

# Resized: the same backing file, larger, behind the same LUN number.
tgtadm_ --mode logicalunit --op delete --tid 1 --lun 1 || fail "delete"
truncate -s 32M "$(tgt_lun_file 1 1)"
tgtadm_ --mode logicalunit --op new --tid 1 --lun 1 \
  --backing-store "$(tgt_lun_file 1 1)" || fail "add"
size=
for _ in $(seq 20); do
  size=$(stat -c %s "$mnt/lun1")
  [ "$size" = 33554432 ] && break
  sleep 0.5
done
[ "$size" = 33554432 ] || { cat "$log"; fail "the file still shows $size bytes after the resize"; }
grep -q "capacity changed from 16777216 to 33554432" "$log" || { cat "$log"; fail "no log line for the resize"; }
cmp -n 1048576 "$TGT_DIR/data" "$mnt/lun1" || fail "data after the resize"
dd if=/dev/zero of="$mnt/lun1" bs=64k seek=400 count=1 oflag=direct conv=notrunc,fsync status=none \
  || fail "write past the old end"

# Replaced: another disk (4096-byte blocks) behind the same LUN number.
tgtadm_ --mode logicalunit --op delete --tid 1 --lun 1 || fail "delete"
truncate -s 32M "$TGT_DIR/other.img"
tgtadm_ --mode logicalunit --op new --tid 1 --lun 1 \
  --backing-store "$TGT_DIR/other.img" --blocksize 4096 || fail "add other"
sleep 3.5
stat "$mnt/lun1" >/dev/null
timeout 20 python3 - "$mnt/lun1" <<'PY' || { cat "$log"; fail "I/O on a replaced LUN"; }
import errno, mmap, os, sys
buf = mmap.mmap(-1, 65536)
fd = os.open(sys.argv[1], os.O_RDWR | os.O_DIRECT)
for what, op in (("read", lambda: os.preadv(fd, [buf], 0)),
                 ("write", lambda: os.pwritev(fd, [buf], 0))):
    try:
        op()
        sys.exit(what + " on a replaced LUN succeeded")
    except OSError as e:
        assert e.errno == errno.EIO, (what, e)
PY
grep -q "the LUN changed under the gateway (another block size)" "$log" \
  || { cat "$log"; fail "no log line naming the change"; }
fusermount3 -u "$mnt" || fail "unmount"
echo "test-mount-resize: ok"
