#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# key backup and key restore (issue 30: cryptsetup's luksHeaderBackup and
# luksHeaderRestore): a backup is a new 0600 file, never written over; a
# header wiped on the LUN comes back from it with the key, and the data
# with it, marked dirty until verify --repair; a wrong key, an altered
# backup, and another volume's LUN (without --force) are refused.
. "${srcdir:-.}/functions-nbd.sh"
require_lungate_plugin
require_nbd_python
tgt_start
t=iqn.2026-11.org.lungate:backup
tgt_add_target 1 "$t"
tgt_add_lun 1 1 16M
tgt_add_lun 1 2 16M
tgt_allow 1 ALL
url="iscsi://$TGT_PORTAL/$t"
key=$TGT_DIR/key; head -c 32 /dev/urandom >"$key"
other=$TGT_DIR/other; head -c 32 /dev/urandom >"$other"
b=$TGT_DIR/hdr.backup

"$LUNGATE" format --lazy --key-file "$key" "$url/1" >/dev/null || fail "format"
"$LUNGATE" key backup --file "$b" "$url/1" >"$TGT_DIR/b.out" \
  || fail "key backup"
grep -q "header of volume [0-9a-f]\{32\} (1 key slot) backed up to $b" "$TGT_DIR/b.out" \
  || { cat "$TGT_DIR/b.out"; fail "key backup does not say what it wrote"; }
[ "$(stat -c %s "$b")" = 4096 ] || fail "the backup is not one 4096-byte header"
[ "$(stat -c %a "$b")" = 600 ] || fail "the backup is readable by others"
expect_fail_with "never written over" "$LUNGATE" key backup --file "$b" "$url/1"
expect_exit 2 "give --file" "$LUNGATE" key restore --key-file "$key" "$url/1"

# Data written after the backup stays readable once the header is back.
nbd_run "url=$url/1" "key-file=$key" -- "$NBD_PYTHON" -c \
  "import nbd,sys; h=nbd.NBD(); h.connect_uri(sys.argv[1]); h.pwrite(b'B'*65536, 5*4096); h.flush()" '$uri' \
  || fail "writing through the volume"
# The header area wiped, as by a stray mkfs or dd.
dd if=/dev/zero of="$(tgt_lun_file 1 1)" bs=64K count=2 conv=notrunc status=none
"$LUNGATE" info "$url/1" | grep -q "^volume-state" && fail "the wiped header still reads as a volume"

expect_fail_with "the key given does not open the backup \(volume [0-9a-f]{32}\)" \
  "$LUNGATE" key restore --file "$b" --key-file "$other" "$url/1"
cp "$b" "$TGT_DIR/altered"
printf 'X' | dd of="$TGT_DIR/altered" bs=1 seek=700 conv=notrunc status=none
expect_fail_with "not a lungate header backup: bad checksum" \
  "$LUNGATE" key restore --file "$TGT_DIR/altered" --key-file "$key" "$url/1"
# What is no backup is refused before the LUN is opened: a FIFO there
# used to hang the restore while it held the LUN's reservation.
mkfifo "$TGT_DIR/fifo"
expect_fail_with "the backup file: not a regular file" \
  "$LUNGATE" key restore --file "$TGT_DIR/fifo" --key-file "$key" "$url/1"
expect_exit 2 "--file: give a file name" "$LUNGATE" key restore --file "" --key-file "$key" "$url/1"
"$LUNGATE" key restore --file "$b" --key-file "$key" "$url/1" >"$TGT_DIR/r.out" \
  || fail "key restore"
grep -q "restored from $b .*marked dirty" "$TGT_DIR/r.out" || { cat "$TGT_DIR/r.out"; fail "key restore does not say what it did"; }
"$LUNGATE" info "$url/1" | grep -q "^volume-state: dirty" || fail "the restored volume is not marked dirty"
got=$(nbd_run -r "url=$url/1" "key-file=$key" -- "$NBD_PYTHON" -c \
  "import nbd,sys; h=nbd.NBD(); h.connect_uri(sys.argv[1]); print(h.pread(65536, 5*4096) == b'B'*65536)" '$uri') \
  || fail "reading the restored volume"
[ "$got" = True ] || fail "the data written after the backup does not read back"
"$LUNGATE" verify --repair --key-file "$key" "$url/1" >/dev/null || fail "verify --repair"
"$LUNGATE" verify --key-file "$key" "$url/1" >/dev/null || fail "verify after the restore"
"$LUNGATE" info "$url/1" | grep -q "^volume-state: clean" || fail "not clean after the repair"
# Restoring over the same volume says which key slots it changes (a key
# added since the backup is emptied; one removed would come back).
head -c 32 /dev/urandom >"$TGT_DIR/key2"
"$LUNGATE" key add --key-file "$key" --new-key-file "$TGT_DIR/key2" "$url/1" >/dev/null || fail "key add"
"$LUNGATE" key restore --file "$b" --key-file "$key" "$url/1" >/dev/null 2>"$TGT_DIR/r2.err" \
  || { cat "$TGT_DIR/r2.err"; fail "key restore over the same volume"; }
grep -q "key slot 1 (key-file) is emptied" "$TGT_DIR/r2.err" \
  || { cat "$TGT_DIR/r2.err"; fail "the restore does not say it empties slot 1"; }
expect_fail_with "no key slot .* opens" "$LUNGATE" key test --key-file "$TGT_DIR/key2" "$url/1"

# Another volume's LUN: refused without --force, and left as it was.
"$LUNGATE" format --lazy --key-file "$other" "$url/2" >/dev/null || fail "format LUN 2"
expect_fail_with "the LUN holds another volume \([0-9a-f]{32}\): --force" \
  "$LUNGATE" key restore --file "$b" --key-file "$key" "$url/2"
"$LUNGATE" key test --key-file "$other" "$url/2" >/dev/null \
  || fail "a refused restore changed the other volume"

# The two copies differ (copy 0 made newest, its MAC broken, its
# checksum right): a backup without the key is refused; with it, the
# copy the key opens is backed up (the newest that parses would never
# restore).
python3 - "$(tgt_lun_file 1 2)" <<'PY'
import hashlib, struct, sys
with open(sys.argv[1], "r+b") as f:
    c = bytearray(f.read(4096))
    seq = struct.unpack_from("<Q", c, 40)[0]
    struct.pack_into("<Q", c, 40, seq + 5)
    c[4032] ^= 1
    c[4064:4096] = hashlib.blake2b(bytes(c[:4064]), digest_size=32).digest()
    f.seek(0); f.write(c)
PY
expect_fail_with "the two header copies differ" "$LUNGATE" key backup --file "$TGT_DIR/b2" "$url/2"
[ -e "$TGT_DIR/b2" ] && fail "a refused backup left a file"
"$LUNGATE" key backup --key-file "$other" --file "$TGT_DIR/b2" "$url/2" >/dev/null 2>&1 \
  || fail "key backup with the key"
cmp -s "$TGT_DIR/b2" <(dd if="$(tgt_lun_file 1 2)" bs=64K skip=1 count=1 status=none | head -c 4096) \
  || fail "the backup is not the copy the key opens"

# Both copies damaged but still headers (their magic there: damaged, or
# a newer lungate's, of another volume maybe): refused without --force.
python3 - "$(tgt_lun_file 1 2)" <<'PY'
import sys
with open(sys.argv[1], "r+b") as f:
    for off in (0, 65536):
        f.seek(off + 200); b = f.read(1); f.seek(off + 200); f.write(bytes([b[0] ^ 1]))
PY
expect_fail_with "a lungate header this lungate cannot read .*--force" \
  "$LUNGATE" key restore --file "$b" --key-file "$key" "$url/2"
"$LUNGATE" key restore --force --file "$b" --key-file "$key" "$url/2" >/dev/null \
  || fail "key restore --force over a damaged header"
"$LUNGATE" key test --key-file "$key" "$url/2" >/dev/null || fail "the forced restore does not open"
echo "test-key-backup: ok"
