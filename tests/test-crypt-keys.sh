#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# Passphrases and key slots: format with a passphrase, list, add a key
# file, open with either, wrong passphrase, remove a slot, the last slot
# refused unless forced; and mac mode (plaintext with tags) end to end.
. "${srcdir:-.}/functions-nbd.sh"
require_lungate_plugin
require_test_hooks
require_nbd_python
tgt_start
t=iqn.2026-11.org.lungate:keys
tgt_add_target 1 "$t"
tgt_add_lun 1 1 32M
tgt_add_lun 1 2 32M
tgt_allow 1 ALL
url="iscsi://$TGT_PORTAL/$t"
pass=$(secret_file "correct horse battery staple")
wrong=$(secret_file "correct horse battery stapler")
key="$TGT_DIR/key"; head -c 32 /dev/urandom >"$key"

"$LUNGATE" format --argon2 interactive --passphrase-file "$pass" "$url/1" \
  >/dev/null || fail "format with a passphrase"
"$LUNGATE" key list "$url/1" >"$TGT_DIR/l" || fail "key list"
grep -q "^slot 0: passphrase (Argon2id" "$TGT_DIR/l" || fail "list: slot 0"
grep -q "^slot 1: empty" "$TGT_DIR/l" || fail "list: slot 1"
expect_fail_with "wrong passphrase: no key slot of volume [0-9a-f]{32} opens" \
  "$LUNGATE" verify --passphrase-file "$wrong" "$url/1"
"$LUNGATE" verify --passphrase-file "$pass" "$url/1" >/dev/null || fail "verify with the passphrase"
# The passphrase from standard input.
"$LUNGATE" verify --passphrase-file - "$url/1" <"$pass" >/dev/null || fail "passphrase from stdin"

"$LUNGATE" key add --passphrase-file "$pass" --new-key-file "$key" "$url/1" \
  || fail "key add"
"$LUNGATE" key list "$url/1" | grep -q "^slot 1: key-file" || fail "list after add"
# Testing a key short of a full verify (issue 30, item 15): key test
# names the slot it opens; key list with a key marks it, and a wrong key
# fails both (key list --key-file WRONG exited 0).
"$LUNGATE" key test --key-file "$key" "$url/1" | grep -q "the key opens key slot 1" \
  || fail "key test: not slot 1"
"$LUNGATE" key test --passphrase-file "$pass" "$url/1" \
  | grep -q "the passphrase opens key slot 0" || fail "key test: passphrase not slot 0"
"$LUNGATE" key list --key-file "$key" "$url/1" \
  | grep -qx "slot 1: key-file (opens with the key given)" || fail "key list --key-file: slot 1 not marked"
head -c 32 /dev/urandom >"$TGT_DIR/wrong.key"
expect_exit 1 "wrong key: no key slot of volume [0-9a-f]{32} opens" \
  "$LUNGATE" key test --key-file "$TGT_DIR/wrong.key" "$url/1"
expect_exit 1 "wrong key" "$LUNGATE" key list --key-file "$TGT_DIR/wrong.key" "$url/1"
expect_exit 2 "give a key" "$LUNGATE" key test "$url/1"
expect_exit 1 "key file /nonexistent/k: No such file" \
  "$LUNGATE" key test --key-file /nonexistent/k "$url/1"
expect_fail_with "wrong passphrase" \
  "$LUNGATE" key add --passphrase-file "$wrong" --new-key-file "$key" "$url/1"

# Data written with the passphrase reads with the key file, and back.
nbd_run "url=$url/1" "passphrase=+$pass" -- "$NBD_PYTHON" - '$uri' <<'PY' || fail "write with the passphrase"
import nbd, sys
h = nbd.NBD(); h.connect_uri(sys.argv[1]); h.pwrite(b"\x31" * 65536, 8192); h.flush()
PY
nbd_run "url=$url/1" "key-file=$key" -- "$NBD_PYTHON" - '$uri' <<'PY' || fail "read with the key file"
import nbd, sys
h = nbd.NBD(); h.connect_uri(sys.argv[1])
assert h.pread(65536, 8192) == b"\x31" * 65536
PY
expect_fail_with "wrong passphrase" \
  "${NBDKIT[@]}" -U - "$LUNGATE_PLUGIN" "url=$url/1" "passphrase=+$wrong" --run true

# While a gateway serves the volume, key add is refused (one writer per
# LUN: test-reserve has the rest).  Where nothing keeps a second writer
# out (LUNGATE_TEST_IGNORE_PR: no persistent reservations;
# LUNGATE_TEST_NO_OWNER: no owner record) it goes through, and the key
# survives the gateway's clean stop (which rewrites
# the header to mark the volume clean).
key2="$TGT_DIR/key2"; head -c 32 /dev/urandom >"$key2"
nbd_run "url=$url/1" "key-file=$key" -- sh -c \
  'nbdinfo "$1" >/dev/null && ! "$2" key add --key-file "$3" --new-key-file "$4" "$5" 2>"$6" && grep -q "in use by a gateway" "$6"' \
  sh '$uri' "$LUNGATE" "$key" "$key2" "$url/1" "$TGT_DIR/refused" \
  || { cat "$TGT_DIR/refused"; fail "key add while served was not refused"; }
# (nbdinfo first: the gateway has opened the volume once it answers.)
LUNGATE_TEST_IGNORE_PR=1 LUNGATE_TEST_NO_OWNER=1 nbd_run "url=$url/1" "key-file=$key" -- sh -c \
  'nbdinfo "$1" >/dev/null && "$2" key add --key-file "$3" --new-key-file "$4" "$5"' \
  sh '$uri' "$LUNGATE" "$key" "$key2" "$url/1" \
  || fail "key add while served"
"$LUNGATE" key list "$url/1" | grep -q "^slot 2: key-file" \
  || fail "a key added while the volume was served was lost"
"$LUNGATE" verify --key-file "$key2" "$url/1" >/dev/null || fail "the added key does not open"
"$LUNGATE" key remove --key-file "$key" --slot 2 "$url/1" >/dev/null || fail "remove slot 2"

# Remove the passphrase slot: the passphrase no longer opens, the key does.
"$LUNGATE" key remove --key-file "$key" --slot 0 "$url/1" || fail "key remove"
expect_fail_with "wrong passphrase" "$LUNGATE" verify --passphrase-file "$pass" "$url/1"
"$LUNGATE" verify --key-file "$key" "$url/1" >/dev/null || fail "verify with the remaining key"
expect_fail_with "last key slot" "$LUNGATE" key remove --key-file "$key" --slot 1 "$url/1"
expect_fail_with "already empty" "$LUNGATE" key remove --key-file "$key" --slot 0 "$url/1"
"$LUNGATE" key list "$url/1" | grep -q "^slot 1: key-file" || fail "the last slot was removed"

# mac mode: plaintext on the target, every change detected.
"$LUNGATE" format --mode mac --key-file "$key" "$url/2" >/dev/null || fail "format mac"
"$LUNGATE" info "$url/2" | grep -qx "volume-mode: mac" || fail "info: mac"
nbd_run "url=$url/2" "key-file=$key" -- "$NBD_PYTHON" - '$uri' <<'PY' || fail "write mac"
import nbd, sys
h = nbd.NBD(); h.connect_uri(sys.argv[1])
h.pwrite((b"MAC-MODE-PLAINTEXT-" * 300)[:4096] * 4, 0); h.flush()
PY
f2=$(tgt_lun_file 1 2)
grep -q "MAC-MODE-PLAINTEXT-" "$f2" || fail "mac mode does not store plaintext"
off=$(grep -boa "MAC-MODE-PLAINTEXT-" "$f2" | head -n 1 | cut -d: -f1)
printf 'X' | dd of="$f2" bs=1 seek=$((off + 4096 * 2 + 10)) conv=notrunc status=none
"$LUNGATE" verify --key-file "$key" "$url/2" >"$TGT_DIR/v" && fail "mac: a changed byte passed verify"
grep -q "^bad: units 2-2 " "$TGT_DIR/v" || { cat "$TGT_DIR/v"; fail "mac: the changed unit was not named"; }
echo "test-crypt-keys: ok"
