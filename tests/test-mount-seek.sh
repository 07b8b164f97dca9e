#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# SEEK_DATA and SEEK_HOLE on a mounted thin LUN (tgt thin_provisioning=1).  Under -o direct_io
# they follow the LUN's extents (data at 4 MiB only).  Through the page
# cache (the default) a buffered write not yet written back is data the
# LUN's map does not show (issue 27, item 8: SEEK_DATA from 0 gave ENXIO
# after a buffered write with no fsync, and a sparse copy would have
# skipped it): there the whole file is data.
. "${srcdir:-.}/functions.sh"
require_lungate
require fusermount3 mountpoint python3
[ -c /dev/fuse ] || skip "no /dev/fuse"
tgt_start
t=iqn.2026-12.org.lungate:seek
tgt_add_target 1 "$t"
tgt_add_lun 1 1 8M
tgt_lun_params 1 1 thin_provisioning=1
tgt_add_lun 1 2 8M
tgt_lun_params 1 2 thin_provisioning=1
tgt_allow 1 ALL
m1=$TGT_DIR/m1 m2=$TGT_DIR/m2
mount_points "$m1" "$m2"
"$LUNGATE" mount "iscsi://$TGT_PORTAL/$t/1" "$m1" || fail "mount LUN 1"
"$LUNGATE" mount -o direct_io "iscsi://$TGT_PORTAL/$t/2" "$m2" || fail "mount LUN 2"

# The page cache: a buffered write at 4 MiB, no fsync, then SEEK_DATA.
python3 - "$m1/lun1" <<'PY' || fail "page cache: SEEK_DATA misses a buffered write"
import os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
os.pwrite(fd, b"\xa5" * 65536, 4 << 20)
d = os.lseek(fd, 0, os.SEEK_DATA)
assert d <= 4 << 20, d
h = os.lseek(fd, 4 << 20, os.SEEK_HOLE)
assert h >= (4 << 20) + 65536, h
PY

# direct_io: the LUN's extents.
head -c 1M /dev/urandom | dd of="$m2/lun2" bs=1M seek=4 conv=notrunc,fsync status=none
python3 - "$m2/lun2" <<'PY' || fail "direct_io: SEEK_DATA/SEEK_HOLE do not follow the extents"
import os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
d = os.lseek(fd, 0, os.SEEK_DATA)
h = os.lseek(fd, d, os.SEEK_HOLE)
assert d == 4 << 20, d
assert h == 5 << 20, h
PY
echo "test-mount-seek: ok"
