#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# Trim and zero deallocate on a thin-provisioned LUN, read back zeroes,
# and nbdinfo --map shows the holes.
. "${srcdir:-.}/functions-nbd.sh"
require_lungate_plugin
require nbdkit nbdinfo du
require_nbd_python
tgt_start
t=iqn.2026-11.org.lungate:thin
tgt_add_target 1 "$t"
tgt_add_lun 1 1 64M
tgt_lun_params 1 1 thin_provisioning=1
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
echo "test-nbd-thin: ok"
