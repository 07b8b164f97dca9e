#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# The block-device interface against tgtd: unaligned reads and writes,
# concurrent read-modify-writes, requests split at the transfer limit,
# zero, trim and extents, checked through the device and in the backing
# file (tests/tools/iotest.c).
. "${srcdir:-.}/functions.sh"
require_lungate
iotest="${top_builddir:-..}/tests/tools/iotest"
[ -x "$iotest" ] || fail "$iotest not built"
tgt_start
t=iqn.2026-11.org.lungate:io
tgt_add_target 1 "$t"
tgt_add_lun 1 1 64M
tgt_lun_params 1 1 thin_provisioning=1
tgt_add_lun 1 2 64M 4096
tgt_allow 1 ALL

with_timeout 300 "$iotest" "iscsi://$TGT_PORTAL/$t/1" "$(tgt_lun_file 1 1)" 4 \
  || fail "iotest on the 512-byte thin LUN"
with_timeout 300 "$iotest" "iscsi://$TGT_PORTAL/$t/2" "$(tgt_lun_file 1 2)" 2 \
  || fail "iotest on the 4096-byte LUN"
echo "test-io: ok"
