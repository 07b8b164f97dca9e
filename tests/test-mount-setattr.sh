#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# lungate mount: setting a file's times answers at once, even when the
# LUN's extents take long to walk.  With the writeback cache the kernel
# sends the file's times (FUSE SETATTR) between the writes and the FSYNC
# of nearly every fsync, with the inode locked: a database on the file
# waits for that answer at each commit.  Here a thin LUN with many small
# extents takes more than 100 ms to walk, and each utime after a write
# took 100 ms (a stat's budget for walking) before setattr stopped
# walking: five took 1145 ms, now 4 ms.
# (That a stat still counts afresh is test-mount-du's.)
. "${srcdir:-.}/functions.sh"
require_lungate
require fusermount3 mountpoint python3
[ -c /dev/fuse ] || skip "no /dev/fuse"
tgt_start
t=iqn.2026-11.org.lungate:setattr
tgt_add_target 1 "$t"
tgt_add_lun 1 1 4G
tgt_lun_params 1 1 thin_provisioning=1
tgt_allow 1 ALL
url="iscsi://$TGT_PORTAL/$t/1"
mnt="$TGT_DIR/mnt"
mount_points "$mnt"
# Every other 4 KiB block of the first 2 GiB, written into the backing
# file before the mount: 262144 extents of data.
python3 - "$(tgt_lun_file 1 1)" <<'PY' || fail "writing the extents"
import os, sys
fd = os.open(sys.argv[1], os.O_WRONLY)
b = b"\xa5" * 4096
for i in range(0, 2 << 30, 8192):
    os.pwrite(fd, b, i)
os.close(fd)
PY
with_timeout 60 "$LUNGATE" mount "$url" "$mnt" || fail "mount"
f=$mnt/lun1

# How long a full walk takes here (a stat counts afresh, in 100 ms steps).
walk=$(python3 - "$f" <<'PY'
import os, sys, time
t = time.monotonic()
for _ in range(50):
    s = os.stat(sys.argv[1])
    if s.st_blocks * 512 < (4 << 30):
        break
    time.sleep(0.05)
print("%.0f" % ((time.monotonic() - t) * 1000))
PY
)
echo "test-mount-setattr: counting the extents took $walk ms"
[ "$walk" -ge 150 ] || skip "the extents walk in $walk ms here: too fast to tell"

# After each write (the count is then stale, and a second old), a utime:
# five of them in well under the 5 x 100 ms they took when each walked.
ms=$(python3 - "$f" <<'PY'
import os, sys, time
fd = os.open(sys.argv[1], os.O_WRONLY)
total = 0.0
for i in range(5):
    os.pwrite(fd, b"\x5a" * 4096, (3 << 30) + i * 8192)
    os.fsync(fd)
    time.sleep(1.2)
    t = time.monotonic()
    os.utime(fd)  # futimens: no lookup of the name (that one counts)
    total += time.monotonic() - t
os.close(fd)
print("%.0f" % (total * 1000))
PY
)
echo "test-mount-setattr: five utimes after writes took $ms ms"
[ "$ms" -lt 250 ] || fail "five utimes took $ms ms: a setattr walks the extents"

echo "test-mount-setattr: ok"
