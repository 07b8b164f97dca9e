#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# nbdcopy a random 256 MiB image into a LUN through the plugin, back out,
# and compare; then qemu-img convert / compare through the same path.
. "${srcdir:-.}/functions-nbd.sh"
require_lungate_plugin
require nbdkit nbdcopy qemu-img cmp
tgt_start
t=iqn.2026-11.org.lungate:copy
tgt_add_target 1 "$t"
tgt_add_lun 1 1 256M
tgt_allow 1 ALL
img="$TGT_DIR/random.img"
head -c 256M /dev/urandom >"$img"

nbd_run "url=iscsi://$TGT_PORTAL/$t/1" -- \
  nbdcopy --flush "$img" '$uri' || fail "nbdcopy in"
cmp "$img" "$(tgt_lun_file 1 1)" || fail "the LUN does not hold the image"
nbd_run "url=iscsi://$TGT_PORTAL/$t/1" connections=2 -- \
  nbdcopy '$uri' "$TGT_DIR/out.img" || fail "nbdcopy out"
cmp "$img" "$TGT_DIR/out.img" || fail "the copy out differs"

# qemu-img: convert a different image in, compare it through NBD.
head -c 256M /dev/urandom >"$img"
nbd_run "url=iscsi://$TGT_PORTAL/$t/1" -- \
  qemu-img convert -n -f raw -O raw "$img" '$uri' || fail "qemu-img convert"
nbd_run "url=iscsi://$TGT_PORTAL/$t/1" -- \
  qemu-img compare -f raw -F raw "$img" '$uri' || fail "qemu-img compare"
cmp "$img" "$(tgt_lun_file 1 1)" || fail "qemu-img: the LUN differs"
echo "test-nbd-copy: ok"
