#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# lungate mount: setting a file's times answers at once, even when the
# LUN's extents take long to walk.  With the writeback cache the kernel
# sends the file's times (FUSE SETATTR) between the writes and the FSYNC
# of nearly every fsync, with the inode locked: a database on the file
# waits for that answer at each commit.  Here a thin LUN with many small
# extents takes more than 100 ms to walk, and each utime after a write
# took 100 ms (a stat's budget for walking) before setattr stopped
# walking: five took 1145 ms, now 4 ms.  The test looks for walks in the
# mount's debug log, not at the clock.
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
log=$TGT_DIR/mount.log
with_timeout 60 "$LUNGATE" mount -v --log "$log" "$url" "$mnt" || fail "mount"
f=$mnt/lun1

# A stat walks the extents (its debug line says so; a stat counts
# afresh, in 100 ms steps).
python3 - "$f" <<'PY'
import os, sys, time
for _ in range(50):
    s = os.stat(sys.argv[1])
    if s.st_blocks * 512 < (4 << 30):
        break
    time.sleep(0.05)
PY
grep -q "counting the allocated blocks" "$log" || { tail "$log"; fail "a stat did not count the extents"; }

# After each write (the count is then stale, and a second old), a utime
# (futimens: no lookup of the name, which would count).  No utime may
# walk: no walk is logged between its start and its end.  (This test
# timed the utimes once; on a loaded machine that failed with nothing
# wrong: "five utimes took 368 ms".)
python3 - "$f" >"$TGT_DIR/windows" <<'PY'
import os, sys, time
fd = os.open(sys.argv[1], os.O_WRONLY)
for i in range(5):
    os.pwrite(fd, b"\x5a" * 4096, (3 << 30) + i * 8192)
    os.fsync(fd)
    time.sleep(1.2)
    t0 = time.time()
    os.utime(fd)
    t1 = time.time()
    print("%.3f %.3f" % (t0 - 0.002, t1 + 0.002))
os.close(fd)
PY
python3 - "$log" "$TGT_DIR/windows" <<'PY' || fail "a setattr walks the extents"
import sys, time, datetime
wins = [tuple(map(float, l.split())) for l in open(sys.argv[2])]
assert len(wins) == 5, wins
for line in open(sys.argv[1]):
    if "counting the allocated blocks" not in line:
        continue
    when = datetime.datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S.%f").timestamp()
    for t0, t1 in wins:
        if t0 <= when <= t1:
            print("a walk during a utime (%.3f-%.3f): %s" % (t0, t1, line.strip()))
            sys.exit(1)
PY
echo "test-mount-setattr: five utimes after writes, none walked the extents"
echo "test-mount-setattr: ok"
