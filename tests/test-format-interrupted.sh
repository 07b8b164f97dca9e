#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# A format interrupted after it wiped the header area and sealed some
# units (what is left: sealed metadata under a UUID no header names, and a
# first MiB of zeroes).  format --lazy must refuse that LUN without
# --force (it used to accept it, and its units then read as EIO:
# "tampered with"), and with --force --lazy leave no unit that fails
# authentication.
. "${srcdir:-.}/functions.sh"
require_lungate
tgt_start
t=iqn.2026-12.org.lungate:interrupted
tgt_add_target 1 "$t"
tgt_add_lun 1 1 32M
tgt_allow 1 ALL
url="iscsi://$TGT_PORTAL/$t/1"
key="$TGT_DIR/key"; head -c 32 /dev/urandom >"$key"
file=$(tgt_lun_file 1 1)

"$LUNGATE" format --key-file "$key" "$url" >/dev/null || fail "format"
# The interruption: the header area (the first MiB) is zeroes again, the
# sealed metadata stays.
dd if=/dev/zero of="$file" bs=1M count=1 conv=notrunc status=none
expect_fail_with "interrupted lungate format.*--force" \
  "$LUNGATE" format --lazy --key-file "$key" "$url"
expect_fail_with "interrupted lungate format.*--force" \
  "$LUNGATE" format --key-file "$key" "$url"
"$LUNGATE" format --lazy --force --key-file "$key" "$url" >/dev/null \
  || fail "format --lazy --force"
"$LUNGATE" verify --key-file "$key" "$url" >"$TGT_DIR/v" 2>&1 \
  || { cat "$TGT_DIR/v"; fail "units fail authentication after format --lazy --force"; }
echo "test-format-interrupted: ok"
