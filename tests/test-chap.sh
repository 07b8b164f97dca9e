#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# One-way and mutual CHAP: right secrets log in, wrong ones are refused
# with a clear message, and secrets come from files, fds, or the URL.
. "${srcdir:-.}/functions.sh"
require_lungate
require python3
tgt_start
t1=iqn.2026-11.org.lungate:chap-one
t2=iqn.2026-11.org.lungate:chap-mutual
tgt_add_target 1 "$t1"
tgt_add_lun 1 1 16M
tgt_allow 1 ALL
tgt_chap 1 alice alice-secret-12
tgt_add_target 2 "$t2"
tgt_add_lun 2 1 16M
tgt_allow 2 ALL
tgt_chap 2 bob bob-secret-1234
tgt_chap_mutual 2 tgtuser target-secret-12

good=$(secret_file alice-secret-12)
wrong=$(secret_file alice-secret-99)
bobpw=$(secret_file bob-secret-1234)
tpw=$(secret_file target-secret-12)
tbad=$(secret_file target-secret-00)

# One-way.
with_timeout 60 "$LUNGATE" info --user alice --password-file "$good" \
  "iscsi://$TGT_PORTAL/$t1/1" | grep -q "^size: 16777216 " \
  || fail "one-way CHAP with the right secret"
expect_fail_with "authentication failed" \
  "$LUNGATE" info --user alice --password-file "$wrong" "iscsi://$TGT_PORTAL/$t1/1"
expect_fail_with "authentication failed" \
  "$LUNGATE" info --user mallory --password-file "$good" "iscsi://$TGT_PORTAL/$t1/1"
expect_fail_with "authentication failed: the target requires CHAP, and no user was given" \
  "$LUNGATE" info "iscsi://$TGT_PORTAL/$t1/1"
expect_fail_with "authentication failed \(wrong CHAP user or secret\?\)" \
  "$LUNGATE" info --user alice --password-file "$wrong" "iscsi://$TGT_PORTAL/$t1/1"
# The secret from a file descriptor, and from standard input.
with_timeout 60 "$LUNGATE" info --user alice --password-fd 3 \
  "iscsi://$TGT_PORTAL/$t1/1" 3<"$good" | grep -q "^size: 16777216 " \
  || fail "secret from a file descriptor"
with_timeout 60 "$LUNGATE" info --user alice --password-file - \
  "iscsi://$TGT_PORTAL/$t1/1" <"$good" | grep -q "^size: 16777216 " \
  || fail "secret from standard input"
# In the URL it works, with a warning.
with_timeout 60 "$LUNGATE" info "iscsi://alice%alice-secret-12@$TGT_PORTAL/$t1/1" \
  2>"$TGT_DIR/warn" | grep -q "^size: 16777216 " || fail "secret in the URL"
grep -q "prefer --password-file" "$TGT_DIR/warn" || fail "no warning for a URL secret"

# A passphrase prompt names the LUN, never the URL's secret (the hostile
# review saw "Passphrase for iscsi://gw%SECRET@..." on the terminal); and
# --password-file - on a terminal asks without echo.
pty=${srcdir:-.}/tools/pty-run.py
python3 -B "$pty" --timeout 60 --answer 'Passphrase for ' 'whatever' \
  -- "$LUNGATE" key test --passphrase-prompt \
  "iscsi://alice%alice-secret-12@$TGT_PORTAL/$t1/1" >"$TGT_DIR/pty" 2>&1 || true
grep -q "Passphrase for $t1/1: " "$TGT_DIR/pty" || { cat "$TGT_DIR/pty"; fail "no prompt naming the LUN"; }
grep -q "alice-secret-12" "$TGT_DIR/pty" && { cat "$TGT_DIR/pty"; fail "the prompt showed the URL's CHAP secret"; }
python3 -B "$pty" --timeout 60 --answer 'CHAP secret: ' 'alice-secret-12' \
  -- "$LUNGATE" info --user alice --password-file - "iscsi://$TGT_PORTAL/$t1/1" \
  >"$TGT_DIR/pty" 2>&1 || { cat "$TGT_DIR/pty"; fail "--password-file - on a terminal"; }
grep -q "alice-secret-12" "$TGT_DIR/pty" && { cat "$TGT_DIR/pty"; fail "--password-file - echoed the secret"; }

# Mutual.
with_timeout 60 "$LUNGATE" info --user bob --password-file "$bobpw" \
  --target-user tgtuser --target-password-file "$tpw" \
  "iscsi://$TGT_PORTAL/$t2/1" | grep -q "^size: 16777216 " \
  || fail "mutual CHAP with the right secrets"
expect_fail_with "mutual CHAP authentication failed: the target did not prove" \
  "$LUNGATE" info --user bob --password-file "$bobpw" \
  --target-user tgtuser --target-password-file "$tbad" "iscsi://$TGT_PORTAL/$t2/1"
expect_fail_with "authentication failed" \
  "$LUNGATE" info --user bob --password-file "$wrong" \
  --target-user tgtuser --target-password-file "$tpw" "iscsi://$TGT_PORTAL/$t2/1"

# Discovery with CHAP targets: listed, LUNs shown with the right secret.
out=$(with_timeout 60 "$LUNGATE" discover --user alice --password-file "$good" \
  "iscsi://$TGT_PORTAL/$t1") || fail "discover with CHAP"
grep -q "lun 1  disk  16.00 MiB" <<<"$out" || fail "discover with CHAP: no LUN"
# A target whose login is refused is listed with the reason in --json,
# not as an empty list of LUNs (issue 15, item 10).
with_timeout 60 "$LUNGATE" discover --json "iscsi://$TGT_PORTAL" >"$TGT_DIR/d.json" 2>/dev/null
python3 - "$TGT_DIR/d.json" "$t1" <<'PY' || { cat "$TGT_DIR/d.json"; fail "discover --json: no error for a refused target"; }
import json, sys
d = json.load(open(sys.argv[1]))
t = [x for x in d["targets"] if x["name"] == sys.argv[2]][0]
assert t["luns"] == [] and "requires CHAP" in t["error"], t
PY

# No secret ever in the process list: checked on a slow login.
echo "test-chap: ok"
