#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# The crypt layer end to end against tgtd: format (and its refusals), data
# through the plugin, ciphertext on the target, wrong and missing keys,
# verify, and tampering: flipped bits in data, nonce and tag, swapped
# units, a unit copied from another volume.  Each is detected for its own
# range only.
. "${srcdir:-.}/functions-nbd.sh"
require_lungate_plugin
require_nbd_python
require cmp od
tgt_start
t=iqn.2026-11.org.lungate:crypt
tgt_add_target 1 "$t"
tgt_add_lun 1 1 64M
tgt_add_lun 1 2 64M
tgt_add_lun 1 3 64M
tgt_allow 1 ALL
url="iscsi://$TGT_PORTAL/$t"
key="$TGT_DIR/key"; head -c 32 /dev/urandom >"$key"
bad="$TGT_DIR/badkey"; head -c 32 /dev/urandom >"$bad"
f1=$(tgt_lun_file 1 1)
f2=$(tgt_lun_file 1 2)

# Format, and the refusals.
"$LUNGATE" format --key-file "$key" "$url/1" || fail "format aead"
expect_fail_with "already holds a lungate header" \
  "$LUNGATE" format --key-file "$key" "$url/1"
printf 'not empty' | dd of="$f2" bs=1 seek=100000 conv=notrunc status=none
expect_fail_with "already holds data in its first MiB \\(not a signature lungate knows\\)" \
  "$LUNGATE" format --key-file "$key" "$url/2"
expect_fail_with "exactly 32 bytes" \
  "$LUNGATE" format --key-file /dev/null "$url/2"
"$LUNGATE" format --force --key-file "$key" "$url/2" || fail "format --force"

info=$("$LUNGATE" info "$url/1") || fail "info"
grep -qx "lungate-volume: yes" <<<"$info" || fail "info shows no volume"
grep -qx "volume-mode: aead" <<<"$info" || fail "info: mode"
grep -qx "volume-key-slots: 0:key-file" <<<"$info" || fail "info: key slots"
doff=$(sed -n 's/^volume-data-offset: //p' <<<"$info")
mdoff=$(sed -n 's/^volume-metadata: \([0-9]*\)+.*/\1/p' <<<"$info")
units=$(sed -n 's/^volume-size: .*(\([0-9]*\) units.*/\1/p' <<<"$info")
if [ -z "$doff" ] || [ -z "$mdoff" ] || [ -z "$units" ]; then fail "info: geometry"; fi
"$LUNGATE" info "$url/3" | grep -qx "lungate-volume: no" || fail "info on a plain LUN"

"$LUNGATE" verify --key-file "$key" "$url/1" >"$TGT_DIR/v" || { cat "$TGT_DIR/v"; fail "verify of a fresh volume"; }
grep -q "all $units units are authentic" "$TGT_DIR/v" || fail "verify: $(cat "$TGT_DIR/v")"

# Data through the plugin; a marker that must not appear on the target.
nbd_run "url=$url/1" "key-file=$key" -- "$NBD_PYTHON" - '$uri' "$TGT_DIR/model" <<'PY' || fail "write through the plugin"
import nbd, os, sys
h = nbd.NBD(); h.set_strict_mode(h.get_strict_mode() & ~nbd.STRICT_ALIGN)
h.connect_uri(sys.argv[1])
size = h.get_size()
model = bytearray(size)
blob = (b"LUNGATE-PLAINTEXT-MARKER-" * 400000)[:8 << 20]
h.pwrite(blob, 0); model[0:len(blob)] = blob
for off, n in [(12345, 777), (4095, 2), (9 << 20, 65536), (size - 4096, 4096), (100000, 1)]:
    d = os.urandom(n); h.pwrite(d, off); model[off:off + n] = d
h.zero(1 << 20, 2 << 20); model[2 << 20:3 << 20] = bytes(1 << 20)
h.trim(1 << 20, 4 << 20); model[4 << 20:5 << 20] = bytes(1 << 20)
h.flush()
got = h.pread(size, 0)
assert got == bytes(model), "read back differs"
open(sys.argv[2], "wb").write(model)
PY
if grep -q "LUNGATE-PLAINTEXT-MARKER" "$f1"; then fail "plaintext on the target in aead mode"; fi

# Reopen: the same data with the key; wrong and missing keys refused.
nbd_run "url=$url/1" "key-file=$key" -- nbdcopy '$uri' "$TGT_DIR/out" || fail "copy out"
cmp "$TGT_DIR/model" "$TGT_DIR/out" || fail "data differs after reopening"
# Both name the volume's UUID (issue 30, item 15: --key-dir needs it).
uuid=$("$LUNGATE" info "$url/1" | sed -n 's/^volume-uuid: //p')
[ ${#uuid} = 32 ] || fail "info: no volume UUID"
expect_fail_with "wrong key: no key slot of volume $uuid opens" \
  "${NBDKIT[@]}" -U - "$LUNGATE_PLUGIN" "url=$url/1" "key-file=$bad" --run true
expect_fail_with "formatted by lungate \\(volume $uuid\\): give its key.*--key-dir DIR with the key in DIR/$uuid" \
  "${NBDKIT[@]}" -U - "$LUNGATE_PLUGIN" "url=$url/1" --run true
expect_fail_with "holds no lungate header" \
  "$LUNGATE" verify --key-file "$key" "$url/3"
expect_fail_with "wrong key" "$LUNGATE" verify --key-file "$bad" "$url/1"

# Tampering, with the gateway stopped.
flip ()   # flip FILE OFFSET: invert one byte
{
  local b
  b=$(od -An -tu1 -j "$2" -N1 "$1" | tr -d ' ')
  # shellcheck disable=SC2059 # the format is an octal escape, on purpose
  printf "$(printf '\\%03o' $((b ^ 0x01)))" | dd of="$1" bs=1 seek="$2" conv=notrunc status=none
}
unit_off () { echo $((doff + $1 * 4096)); }
slot_off () { echo $((mdoff + ($1 / 42) * 4096 + ($1 % 42) * 96 + $2)); }
flip "$f1" $(( $(unit_off 10) + 100 ))          # ciphertext of unit 10
flip "$f1" "$(slot_off 500 3)"                   # a nonce byte of unit 500 slot 0
flip "$f1" "$(slot_off 500 51)"                  # and of slot 1
flip "$f1" "$(slot_off 700 30)"                  # a tag byte of unit 700 slot 0
flip "$f1" "$(slot_off 700 78)"                  # and of slot 1
flip "$f1" $(( $(unit_off 600) + 5 ))           # a zeroed unit: not zero any more
# Units 2687 and 2688, on either side of the boundary between two of
# verify's reads (64 metadata blocks of 42 units): one range, not two.
[ "$units" -gt 2689 ] || fail "the volume is too small for a read boundary"
flip "$f1" $(( $(unit_off 2687) + 7 ))
flip "$f1" $(( $(unit_off 2688) + 7 ))
# Swap units 1300 and 1301 (data only).
dd if="$f1" of="$TGT_DIR/u" bs=4096 skip=$(( doff / 4096 + 1300 )) count=2 status=none
dd if="$TGT_DIR/u" of="$f1" bs=4096 seek=$(( doff / 4096 + 1301 )) count=1 conv=notrunc status=none
dd if="$TGT_DIR/u" of="$f1" bs=4096 skip=1 seek=$(( doff / 4096 + 1300 )) count=1 conv=notrunc status=none

expect_exit 1 "" "$LUNGATE" verify --key-file "$key" "$url/1"
"$LUNGATE" verify --key-file "$key" "$url/1" >"$TGT_DIR/v" 2>"$TGT_DIR/verr" && fail "verify passed a tampered volume"
cat "$TGT_DIR/v"
for r in "10-10" "500-500" "600-600" "700-700" "1300-1301" "2687-2688"; do
  grep -q "^bad: units $r " "$TGT_DIR/v" || fail "verify did not name units $r"
done
[ "$(grep -c '^bad:' "$TGT_DIR/v")" -eq 6 ] || fail "verify named other ranges too"
grep -q "8 of $units units failed authentication, in 6 ranges" "$TGT_DIR/v" || fail "verify summary"

nbd_run "url=$url/1" "key-file=$key" -- "$NBD_PYTHON" - '$uri' "$TGT_DIR/model" \
  2>"$TGT_DIR/nbdkit.log" <<'PY' || { cat "$TGT_DIR/nbdkit.log"; fail "reads after tampering"; }
import errno, nbd, sys
h = nbd.NBD(); h.connect_uri(sys.argv[1])
model = open(sys.argv[2], "rb").read()
for u in (10, 500, 600, 700, 1300, 1301, 2687, 2688):
    try:
        h.pread(4096, u * 4096)
        sys.exit("unit %d read despite tampering" % u)
    except nbd.Error as e:
        assert e.errnum == errno.EIO, e
for u in (9, 11, 499, 501, 599, 601, 1299, 1302, 2000, 2686, 2689):
    assert h.pread(4096, u * 4096) == model[u * 4096:(u + 1) * 4096], u
PY
grep -q "units 10-10 .* fail authentication under both slots" "$TGT_DIR/nbdkit.log" \
  || fail "the log does not name the failed unit"

# A unit copied from another volume (same key, other UUID) fails.
"$LUNGATE" format --force --key-file "$key" "$url/2" >/dev/null || fail "format 2"
nbd_run "url=$url/2" "key-file=$key" -- "$NBD_PYTHON" - '$uri' <<'PY' || fail "write volume 2"
import nbd, sys
h = nbd.NBD(); h.connect_uri(sys.argv[1]); h.pwrite(b"\x42" * 8192, 30 * 4096); h.flush()
PY
dd if="$f1" of="$f2" bs=4096 skip=$(( doff / 4096 + 30 )) seek=$(( doff / 4096 + 30 )) count=1 conv=notrunc status=none
dd if="$f1" of="$f2" bs=1 skip="$(slot_off 30 0)" seek="$(slot_off 30 0)" count=96 conv=notrunc status=none
"$LUNGATE" verify --key-file "$key" "$url/2" >"$TGT_DIR/v2" && fail "a unit from another volume passed"
grep -q "^bad: units 30-30 " "$TGT_DIR/v2" || { cat "$TGT_DIR/v2"; fail "the copied unit was not named"; }
echo "test-crypt: ok"
