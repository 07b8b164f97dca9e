#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# Opening an encrypted volume without writing to it changes no byte of the
# LUN, even when one header copy is damaged: lungate info, verify without
# --repair, nbdkit -r, and key add with a wrong key.  (lg_header_read
# used to rewrite the damaged copy before any key check.)  A write open
# with the key then repairs it.
. "${srcdir:-.}/functions-nbd.sh"
require_lungate_plugin
require nbdinfo sha256sum
tgt_start
t=iqn.2026-12.org.lungate:untouched
tgt_add_target 1 "$t"
tgt_add_lun 1 1 32M
tgt_allow 1 ALL
url="iscsi://$TGT_PORTAL/$t/1"
key="$TGT_DIR/key"; head -c 32 /dev/urandom >"$key"
wrong="$TGT_DIR/wrong"; head -c 32 /dev/urandom >"$wrong"
new="$TGT_DIR/new"; head -c 32 /dev/urandom >"$new"
file=$(tgt_lun_file 1 1)
"$LUNGATE" format --key-file "$key" "$url" >/dev/null || fail "format"
# Damage header copy 1, at 64 KiB (lungate-format(5)).
copy1=$((64 * 1024))
printf '\xff' | dd of="$file" bs=1 seek=$((copy1 + 200)) conv=notrunc status=none
sum=$(sha256sum <"$file")
unchanged ()
{
  [ "$(sha256sum <"$file")" = "$sum" ] || fail "$1 wrote to the LUN"
}
"$LUNGATE" info "$url" >/dev/null 2>&1 || fail "info"
unchanged "lungate info"
"$LUNGATE" verify --key-file "$key" "$url" >/dev/null 2>&1 || fail "verify"
unchanged "lungate verify (no --repair)"
nbd_run -r "url=$url" "key-file=$key" -- nbdinfo '$uri' >/dev/null \
  || fail "nbdkit -r"
unchanged "nbdkit -r"
expect_fail_with "wrong key" \
  "$LUNGATE" key add --key-file "$wrong" --new-key-file "$new" "$url"
unchanged "key add with a wrong key"
# With the key, a write open repairs the copy.
"$LUNGATE" key add --key-file "$key" --new-key-file "$new" "$url" \
  || fail "key add"
"$LUNGATE" info "$url" 2>"$TGT_DIR/info.err" >/dev/null || fail "info after"
if grep -q "damaged" "$TGT_DIR/info.err"; then
  cat "$TGT_DIR/info.err"; fail "the damaged copy was not repaired by key add"
fi
echo "test-readonly-untouched: ok"
