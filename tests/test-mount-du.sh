#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# lungate mount: a file's st_blocks is what the LUN has allocated (from
# GET LBA STATUS), so du of an empty 15 TiB thin LUN is small, grows after
# a write and shrinks after a punched hole; a thick LUN and an encrypted
# volume (no extents) show their whole size.  (4096-byte blocks: tgt
# 1.0.85 cuts the length of a GET LBA STATUS descriptor to 32 bits, so a
# hole of 2^32 blocks or more comes back shorter, or empty; lungate then
# counts the rest as data, which is safe but not what this test is about.)
. "${srcdir:-.}/functions.sh"
require_lungate
require fusermount3 du dd fallocate mountpoint
[ -c /dev/fuse ] || skip "no /dev/fuse"
tgt_start
t=iqn.2026-11.org.lungate:du
tgt_add_target 1 "$t"
tgt_add_lun 1 1 15T 4096
tgt_lun_params 1 1 thin_provisioning=1
tgt_add_lun 1 2 64M
tgt_add_lun 1 3 64M
tgt_lun_params 1 3 thin_provisioning=1
tgt_allow 1 ALL
url="iscsi://$TGT_PORTAL/$t"
key="$TGT_DIR/key"; head -c 32 /dev/urandom >"$key"
"$LUNGATE" format --key-file "$key" "$url/3" >/dev/null 2>&1 || fail "format"
mnt="$TGT_DIR/mnt"
mount_points "$mnt"
with_timeout 60 "$LUNGATE" mount --key-file "$key" "$url" "$mnt" || fail "mount"

kib () { du -k "$1" | cut -f1; }
# until_kib FILE below|atleast KIB: du -k FILE is below / at least KIB
# within 10 s (the kernel keeps attributes for 1 s, the gateway its count
# for a second or more after a write).
until_kib ()
{
  local k
  for _ in $(seq 50); do
    k=$(kib "$1")
    case $2 in
      below) [ "$k" -lt "$3" ] && return 0 ;;
      atleast) [ "$k" -ge "$3" ] && return 0 ;;
    esac
    sleep 0.2
  done
  fail "du -k $1: $k KiB, not $2 $3 within 10 s"
}

k=$(kib "$mnt/lun1")
echo "empty 15 TiB thin LUN: $k KiB"
[ "$k" -lt 1024 ] || fail "du -k of an empty thin LUN: $k KiB"
stat -c %s "$mnt/lun1" | grep -qx 16492674416640 || fail "size of lun1"

dd if=/dev/urandom of="$mnt/lun1" bs=1M count=16 seek=1000 conv=notrunc,fsync \
  status=none || fail "write 16 MiB"
until_kib "$mnt/lun1" atleast 16384
k=$(kib "$mnt/lun1")
echo "after 16 MiB written: $k KiB"
[ "$k" -lt $((16384 + 1024)) ] || fail "du -k after 16 MiB written: $k KiB"

fallocate -p -o $((1000 << 20)) -l $((16 << 20)) "$mnt/lun1" || fail "punch hole"
until_kib "$mnt/lun1" below 1024

# No extents to count: the whole size.
[ "$(kib "$mnt/lun2")" -eq 65536 ] || fail "du -k of a thick LUN: $(kib "$mnt/lun2")"
k=$(kib "$mnt/lun3")
[ "$k" -eq $(($(stat -c %s "$mnt/lun3") / 1024)) ] \
  || fail "du -k of an encrypted volume: $k KiB"
echo "test-mount-du: ok"
