#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# Writes that ask to be durable on a -o direct_io mount are on the
# target's medium when they return (issue 27, item 6): O_DSYNC, O_SYNC
# and pwritev2 RWF_DSYNC, plain and on a volume.  tgtd runs with a
# volatile write cache (faultio's FAULTIO_CACHE: writes reach the backing
# file only at a SYNCHRONIZE CACHE or a FUA write) and is then killed,
# which loses that cache as a power cut would: every such write must be
# in the backing file.  A plain write (no flag) is not: it shows that the
# cache does lose what was not flushed, so that the test can fail.
FAULTIO_CACHE=lun-
export FAULTIO_CACHE
. "${srcdir:-.}/functions-fault.sh"
require_lungate_plugin
require_nbd_python
require fusermount3 mountpoint
[ -c /dev/fuse ] || skip "no /dev/fuse"
fault_tgt_start
t=iqn.2026-12.org.lungate:dsync
tgt_add_target 1 "$t"
tgt_add_lun 1 1 16M
tgt_add_lun 1 2 16M
tgt_allow 1 ALL
key=$TGT_DIR/key; head -c 32 /dev/urandom >"$key"
"$LUNGATE" format --lazy --key-file "$key" "iscsi://$TGT_PORTAL/$t/2" >/dev/null \
  || fail "format LUN 2"
m1=$TGT_DIR/m1 m2=$TGT_DIR/m2
mount_points "$m1" "$m2"
"$LUNGATE" mount -o direct_io "iscsi://$TGT_PORTAL/$t/1" "$m1" \
  || fail "mount LUN 1"
"$LUNGATE" mount -o direct_io --key-file "$key" "iscsi://$TGT_PORTAL/$t/2" "$m2" \
  || fail "mount LUN 2"

# writes FILE: unit 10 O_DSYNC, 11 O_SYNC, 12 RWF_DSYNC, 13 plain, each
# 4 KiB of its own byte.
writes ()
{
  python3 - "$1" <<'PY'
import os, sys
f = sys.argv[1]
def w(flags, u, rwf=0):
    fd = os.open(f, os.O_WRONLY | flags)
    if rwf:
        os.pwritev(fd, [bytes([0x40 + u]) * 4096], u * 4096, rwf)
    else:
        os.pwrite(fd, bytes([0x40 + u]) * 4096, u * 4096)
    os.close(fd)
w(os.O_DSYNC, 10)
w(os.O_SYNC, 11)
w(0, 12, os.RWF_DSYNC)
w(0, 13)
PY
}
writes "$m1/lun1" || fail "writing the plain LUN"
writes "$m2/lun2" || fail "writing the volume"
tgt_kill

# The plain LUN: its backing file.
img=$(tgt_lun_file 1 1)
for u in 10 11 12; do
  got=$(od -An -tx1 -j $((u * 4096)) -N1 "$img" | tr -d ' ')
  [ "$got" = "$(printf '%02x' $((0x40 + u)))" ] \
    || fail "plain: the durable write to unit $u was lost with the target's cache"
done
got=$(od -An -tx1 -j $((13 * 4096)) -N1 "$img" | tr -d ' ')
[ "$got" = 00 ] || fail "plain: the volatile cache kept a write that was never flushed"

# The volume: read back through a fresh gateway after a restart.
tgt_restart
fusermount3 -u "$m1"
fusermount3 -u "$m2"
for u in 10 11 12; do
  got=$(nbd_run -r "url=iscsi://$TGT_PORTAL/$t/2" "key-file=$key" -- "$NBD_PYTHON" -c \
    "import nbd,sys; h=nbd.NBD(); h.connect_uri(sys.argv[1]); print(h.pread(4096, $u * 4096)[0])" '$uri') \
    || fail "volume: unit $u cannot be read"
  [ "$got" = $((0x40 + u)) ] \
    || fail "volume: the durable write to unit $u was lost with the target's cache ($got)"
done
echo "test-mount-dsync: ok"
