#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# A failed unit is reported once, not at each read of it (issue 30, item
# 12: "mount -f prints each EIO twice": the kernel reads a page again
# after a failed read-ahead, and each read logged its failure).  One
# flipped byte in each of two units of a volume; a direct and a cached
# read of the first, then the second, then the first again, all fail
# with EIO; the log names each unit once (all are counted in .stats).
. "${srcdir:-.}/functions.sh"
require_lungate
require fusermount3
[ -c /dev/fuse ] || skip "no /dev/fuse"
tgt_start
iqn=iqn.2026-12.org.lungate:eio
tgt_add_target 1 "$iqn"
tgt_add_lun 1 1 64M
tgt_allow 1 ALL
key=$TGT_DIR/key
head -c 32 /dev/urandom >"$key"
u="iscsi://$TGT_PORTAL/$iqn/1"
"$LUNGATE" format --key-file "$key" "$u" >/dev/null 2>&1 || fail "format"
doff=$("$LUNGATE" info "$u" | sed -n 's/^volume-data-offset: //p')
[ -n "$doff" ] || fail "no data offset"
printf 'X' | dd of="$(tgt_lun_file 1 1)" bs=1 seek=$((doff + 100)) conv=notrunc status=none
printf 'X' | dd of="$(tgt_lun_file 1 1)" bs=1 seek=$((doff + 5 * 4096 + 100)) conv=notrunc status=none
mnt=$TGT_DIR/m
mkdir "$mnt"
on_exit fusermount3 -u -z "$mnt"
with_timeout 60 "$LUNGATE" mount --log "$TGT_DIR/log" --key-file "$key" "$u" "$mnt" \
  || fail "mount"
dd if="$mnt/lun1" of=/dev/null bs=4k count=1 iflag=direct 2>/dev/null \
  && fail "a direct read of the flipped unit succeeded"
dd if="$mnt/lun1" of=/dev/null bs=4k count=1 2>/dev/null \
  && fail "a cached read of the flipped unit succeeded"
# Another unit between, then the first again: each is named once (the
# second hostile review: one remembered range named unit 0 again).
dd if="$mnt/lun1" of=/dev/null bs=4k skip=5 count=1 iflag=direct 2>/dev/null \
  && fail "a direct read of the second flipped unit succeeded"
dd if="$mnt/lun1" of=/dev/null bs=4k count=1 iflag=direct 2>/dev/null \
  && fail "the first flipped unit read well at last"
grep "auth_failures" "$mnt/.stats" | grep -Eq "auth_failures=([2-9]|[1-9][0-9])" \
  || { cat "$mnt/.stats"; fail ".stats does not count both failures"; }
fusermount3 -u "$mnt"
n=$(grep -c "units 0-0 (exported bytes 0-4095.*fail authentication under both slots" "$TGT_DIR/log")
[ "$n" -eq 1 ] || { cat "$TGT_DIR/log"; fail "the failed unit was reported $n times"; }
n=$(grep -c "units 5-5 (exported bytes 20480-24575.*fail authentication under both slots" "$TGT_DIR/log")
[ "$n" -eq 1 ] || { cat "$TGT_DIR/log"; fail "the second failed unit was reported $n times"; }
n=$(grep -c "reading them again from the target" "$TGT_DIR/log")
[ "$n" -eq 2 ] || { cat "$TGT_DIR/log"; fail "the re-reads were announced $n times (2: one per unit)"; }
echo "test-eio-once: ok"
