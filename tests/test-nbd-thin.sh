#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# Trim and zero deallocate on a thin-provisioned LUN, read back zeroes,
# and nbdinfo --map shows the holes, on a 15 TiB LUN too (tgt counts runs
# of 2^32 blocks as 0).  Fast zero is offered where it deallocates, and on
# a lungate volume only then (its stored bytes are zeroed too).
. "${srcdir:-.}/functions-nbd.sh"
require_lungate_plugin
require nbdkit nbdinfo du
require_nbd_python
tgt_start
t=iqn.2026-11.org.lungate:thin
tgt_add_target 1 "$t"
tgt_add_lun 1 1 64M
tgt_lun_params 1 1 thin_provisioning=1
tgt_add_lun 1 2 15T
tgt_lun_params 1 2 thin_provisioning=1
tgt_add_lun 1 3 64M
tgt_lun_params 1 3 thin_provisioning=1
tgt_add_lun 1 4 64M
tgt_allow 1 ALL
f=$(tgt_lun_file 1 1)

nbd_run "url=iscsi://$TGT_PORTAL/$t/1" -- "$NBD_PYTHON" - '$uri' <<'PY' || fail "fill"
import nbd, sys
h = nbd.NBD(); h.connect_uri(sys.argv[1])
h.pwrite(b"\xab" * (16 << 20), 0)
h.flush()
PY
used=$(du -k "$f" | cut -f1)
[ "$used" -ge 16000 ] || fail "the LUN file holds only $used KiB after 16 MiB"

nbd_run "url=iscsi://$TGT_PORTAL/$t/1" -- "$NBD_PYTHON" - '$uri' <<'PY' || fail "trim and zero"
import nbd, sys
h = nbd.NBD(); h.connect_uri(sys.argv[1])
assert h.can_trim() and h.can_zero() and h.can_fast_zero()
h.trim(4 << 20, 0)
h.zero(4 << 20, 4 << 20, nbd.CMD_FLAG_FAST_ZERO)    # may trim: default
h.zero(4 << 20, 8 << 20, nbd.CMD_FLAG_NO_HOLE)      # writes zeroes
h.flush()
z = bytes(4 << 20)
assert h.pread(4 << 20, 0) == z, "trimmed range is not zero"
assert h.pread(4 << 20, 4 << 20) == z, "zeroed range is not zero"
assert h.pread(4 << 20, 8 << 20) == z, "zeroed (no hole) range is not zero"
assert h.pread(4 << 20, 12 << 20) == b"\xab" * (4 << 20), "data lost"
PY
used2=$(du -k "$f" | cut -f1)
[ "$used2" -le $((used - 7000)) ] \
  || fail "trim/zero did not deallocate: $used KiB before, $used2 KiB after"

nbd_run "url=iscsi://$TGT_PORTAL/$t/1" -- nbdinfo --map '$uri' >"$TGT_DIR/map" \
  || fail "nbdinfo --map"
cat "$TGT_DIR/map"
grep -Eq '^ +0 +8388608 +3 +hole,zero' "$TGT_DIR/map" \
  || fail "nbdinfo --map does not show the first 8 MiB as a hole"
grep -Eq '^ +8388608 +8388608 +0 +data' "$TGT_DIR/map" \
  || fail "nbdinfo --map does not show data (written zeroes, then 0xab) at 8 MiB"

# An empty 15 TiB LUN is one hole: no data at the 2 TiB boundaries.
nbd_run "url=iscsi://$TGT_PORTAL/$t/2" -- nbdinfo --map '$uri' >"$TGT_DIR/map2" \
  || fail "nbdinfo --map of 15 TiB"
cat "$TGT_DIR/map2"
if grep -q data "$TGT_DIR/map2"; then
  fail "nbdinfo --map of an empty 15 TiB LUN shows data extents"
fi
grep -Eq '^ +0 +16492674416640 +3 +hole,zero' "$TGT_DIR/map2" \
  || fail "nbdinfo --map of an empty 15 TiB LUN is not one hole"

# Fast zero on lungate volumes: offered on the thin LUN (3), where it
# deallocates, and not on the thick one (4), where it would write.
key="$TGT_DIR/key"; head -c 32 /dev/urandom >"$key"
for l in 3 4; do
  "$LUNGATE" format --key-file "$key" "iscsi://$TGT_PORTAL/$t/$l" >/dev/null \
    || fail "format LUN $l"
done
nbd_run "url=iscsi://$TGT_PORTAL/$t/3" "key-file=$key" -- "$NBD_PYTHON" - '$uri' <<'PY' || fail "fast zero on a thin volume"
import nbd, sys
h = nbd.NBD(); h.connect_uri(sys.argv[1])
assert h.can_fast_zero(), "fast zero not offered on a thin volume"
h.pwrite(b"\xcd" * (8 << 20), 0)
h.zero(4 << 20, 0, nbd.CMD_FLAG_FAST_ZERO)
assert h.pread(4 << 20, 0) == bytes(4 << 20), "fast-zeroed range is not zero"
assert h.pread(4 << 20, 4 << 20) == b"\xcd" * (4 << 20), "data lost"
PY
nbd_run "url=iscsi://$TGT_PORTAL/$t/4" "key-file=$key" -- "$NBD_PYTHON" - '$uri' <<'PY' || fail "fast zero on a thick volume"
import nbd, sys
h = nbd.NBD(); h.connect_uri(sys.argv[1])
assert not h.can_fast_zero(), "fast zero offered where zeroing writes"
h.pwrite(b"\xcd" * (1 << 20), 0)
h.zero(1 << 20, 0)
assert h.pread(1 << 20, 0) == bytes(1 << 20)
PY
"$LUNGATE" verify --key-file "$key" "iscsi://$TGT_PORTAL/$t/3" >/dev/null \
  || fail "verify after fast zero"
echo "test-nbd-thin: ok"
