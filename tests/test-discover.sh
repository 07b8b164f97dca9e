#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# Discovery of two targets, one with a 512-byte and a 4096-byte LUN.
. "${srcdir:-.}/functions.sh"
require_lungate
require python3
tgt_start
t1=iqn.2026-11.org.lungate:disc-one
t2=iqn.2026-11.org.lungate:disc-two
tgt_add_target 1 "$t1"
tgt_add_lun 1 1 64M
tgt_add_lun 1 2 128M 4096
tgt_allow 1 ALL
tgt_add_target 2 "$t2"
tgt_add_lun 2 1 32M
tgt_allow 2 ALL
# A target named "..": tgt accepts it; lungate must not list it (or make
# a directory of it in a mount), and says it left one out.
tgtadm_ --mode target --op new --tid 3 -T ".." || fail "tgtadm: target '..'"
tgt_add_lun 3 1 16M
tgt_allow 3 ALL

out=$(with_timeout 60 "$LUNGATE" discover "iscsi://$TGT_PORTAL" 2>"$TGT_DIR/d.err") \
  || { cat "$TGT_DIR/d.err" >&2; fail "discover failed"; }
printf '%s\n' "$out"
cat "$TGT_DIR/d.err"
grep -q "SendTargets: 1 target(s) left out (a name that is not" "$TGT_DIR/d.err" \
  || fail "no warning for the target named '..'"
! grep -qx ".." <<<"$out" || fail "the target named '..' was listed"
grep -qx "$t1" <<<"$out" || fail "target one not listed"
grep -qx "$t2" <<<"$out" || fail "target two not listed"
grep -q "portal $TGT_PORTAL," <<<"$out" || fail "portal not listed"
grep -Eq '^  lun 0  controller' <<<"$out" || fail "LUN 0 not listed"
grep -Eq '^  lun 1  disk  64.00 MiB \(67108864 bytes, 131072 x 512-byte blocks\)' <<<"$out" \
  || fail "LUN 1 of target one wrong"
grep -Eq '^  lun 2  disk  128.00 MiB \(134217728 bytes, 32768 x 4096-byte blocks\)' <<<"$out" \
  || fail "LUN 2 (4096-byte blocks) wrong"
grep -Eq '^  lun 1  disk  32.00 MiB' <<<"$out" || fail "LUN 1 of target two wrong"

# JSON: parse it, check the same facts.
with_timeout 60 "$LUNGATE" discover --json "iscsi://$TGT_PORTAL" >"$TGT_DIR/d.json" \
  || fail "discover --json failed"
python3 - "$TGT_DIR/d.json" "$t1" "$t2" <<'PY' || fail "discover --json content wrong"
import json, sys
d = json.load(open(sys.argv[1]))
t = {x["name"]: x for x in d["targets"]}
assert set(t) == {sys.argv[2], sys.argv[3]}, t
luns = {l["lun"]: l for l in t[sys.argv[2]]["luns"]}
assert luns[0]["type"] == "controller"
assert luns[1]["size"] == 64 << 20 and luns[1]["block_size"] == 512
assert luns[2]["size"] == 128 << 20 and luns[2]["block_size"] == 4096
assert luns[2]["blocks"] == 32768
PY

# A target URL lists that target only.
out=$(with_timeout 60 "$LUNGATE" discover "iscsi://$TGT_PORTAL/$t2") \
  || fail "discover of one target failed"
grep -qx "$t2" <<<"$out" || fail "target two missing"
if grep -qx "$t1" <<<"$out"; then fail "target one listed for a target URL"; fi
expect_fail_with "target not found" \
  "$LUNGATE" discover "iscsi://$TGT_PORTAL/iqn.2026-11.org.lungate:none"
echo "test-discover: ok"
