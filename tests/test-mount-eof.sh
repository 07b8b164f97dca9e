#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# Writes at or past the end of a LUN's file in the default page-cache
# mount (issue 27, item 7).  The kernel's writeback cache owns the file
# size there and accepts such a write; the part inside the LUN must reach
# it, and the next fsync must fail (it returned 0, the part past the end
# being silently lost), with a log line naming the LUN and the range.
# Under -o direct_io a write crossing the end returns a short count and
# one past the end ENOSPC, at once.
. "${srcdir:-.}/functions.sh"
require_lungate
require fusermount3 mountpoint python3
[ -c /dev/fuse ] || skip "no /dev/fuse"
tgt_start
t=iqn.2026-12.org.lungate:eof
tgt_add_target 1 "$t"
tgt_add_lun 1 1 8M
tgt_add_lun 1 2 8M
tgt_add_lun 1 3 $((8 * 1048576 + 512))
tgt_allow 1 ALL
m1=$TGT_DIR/m1 m2=$TGT_DIR/m2
mount_points "$m1" "$m2"
"$LUNGATE" mount -f "iscsi://$TGT_PORTAL/$t/1" "$m1" 2>"$TGT_DIR/m1.log" &
on_exit kill -9 "$!"
"$LUNGATE" mount -f -o direct_io "iscsi://$TGT_PORTAL/$t/2" "$m2" 2>"$TGT_DIR/m2.log" &
on_exit kill -9 "$!"
for _ in $(seq 100); do [ -e "$m1/lun1" ] && [ -e "$m2/lun2" ] && break; sleep 0.1; done
{ [ -e "$m1/lun1" ] && [ -e "$m2/lun2" ]; } || fail "the mounts did not come up"

python3 - "$m1/lun1" <<'PY' || fail "page cache: a write crossing the end was acknowledged by fsync"
import errno, os, sys
size = 8 << 20
fd = os.open(sys.argv[1], os.O_RDWR)
assert os.pwrite(fd, b"\x5a" * 8192, size - 4096) == 8192
try:
    os.fsync(fd)
except OSError as e:
    assert e.errno in (errno.ENOSPC, errno.EIO), e
else:
    sys.exit("fsync returned 0")
PY
python3 - "$m1/lun1" <<'PY' || fail "page cache: a write past the end was acknowledged by fsync"
import errno, os, sys
size = 8 << 20
fd = os.open(sys.argv[1], os.O_RDWR)
os.pwrite(fd, b"\x77" * 4096, size + 65536)
try:
    os.fsync(fd)
except OSError as e:
    assert e.errno in (errno.ENOSPC, errno.EIO), e
else:
    sys.exit("fsync returned 0")
PY
img=$(tgt_lun_file 1 1)
[ "$(od -v -An -tx1 -j $((8 * 1048576 - 4096)) -N4096 "$img" | tr -d ' \n' | tr -d 5a)" = "" ] \
  || fail "page cache: the part of the crossing write inside the LUN is not on it"
grep -q "past the LUN's end (8388608 bytes) was refused" "$TGT_DIR/m1.log" \
  || { cat "$TGT_DIR/m1.log"; fail "page cache: the log does not say what was lost"; }

python3 - "$m2/lun2" <<'PY' || fail "direct_io: wrong answers at the end"
import errno, os, sys
size = 8 << 20
fd = os.open(sys.argv[1], os.O_RDWR)
assert os.pwrite(fd, b"\x5a" * 8192, size - 4096) == 4096
try:
    os.pwrite(fd, b"\x77" * 4096, size)
except OSError as e:
    assert e.errno == errno.ENOSPC, e
else:
    sys.exit("a write past the end succeeded")
os.fsync(fd)
PY

# A LUN whose last page is only partly inside it (8 MiB + 512): after a
# write crossing the end (refused, fsync fails), the kernel keeps the
# file size past the end and writes that page back again, stale bytes
# past the end included, with every change to it; a later write wholly
# inside the LUN must not fail fsync for them (the hostile review).
m3=$TGT_DIR/m3
mount_points "$m3"
"$LUNGATE" mount "iscsi://$TGT_PORTAL/$t/3" "$m3" || fail "mount LUN 3"
python3 - "$m3/lun3" <<'PY' || fail "page cache: a write inside the LUN failed fsync for stale bytes past its end"
import errno, os, sys
size = (8 << 20) + 512
fd = os.open(sys.argv[1], os.O_RDWR)
os.pwrite(fd, b"\x5a" * 1024, size - 512)
try:
    os.fsync(fd)
except OSError as e:
    assert e.errno in (errno.ENOSPC, errno.EIO), e
else:
    sys.exit("the crossing write's fsync returned 0")
os.pwrite(fd, b"\x66" * 100, size - 300)
os.fsync(fd)
PY
img=$(tgt_lun_file 1 3)
[ "$(od -v -An -tx1 -j $((8 * 1048576 + 212)) -N100 "$img" | tr -d ' \n' | tr -d 6)" = "" ] \
  || fail "page cache: the write inside the LUN is not on it"
echo "test-mount-eof: ok"
