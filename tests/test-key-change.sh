#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# lungate key change (issue 30: what cryptsetup luksChangeKey users
# expect): the slot the old key opens gets the new key in one header
# update; the old key opens nothing after, the other slots are as they
# were, and a wrong old key changes nothing.  (Before: "unknown action
# 'change'".)  A volume in a file needs no target.
. "${srcdir:-.}/functions.sh"
require_lungate
d=$(scratch_dir)
vol=$d/v.img
truncate -s 16M "$vol"
k1=$d/k1; k2=$d/k2; k3=$d/k3
head -c 32 /dev/urandom >"$k1"
head -c 32 /dev/urandom >"$k2"
head -c 32 /dev/urandom >"$k3"
p1=$(secret_file "first passphrase")
p2=$(secret_file "second passphrase")
"$LUNGATE" format --key-file "$k1" "$vol" >/dev/null || fail "format"
"$LUNGATE" key add --key-file "$k1" --new-passphrase-file "$p1" "$vol" >/dev/null \
  || fail "key add"
before=$("$LUNGATE" key list "$vol") || fail "key list"

# The passphrase of slot 1 becomes another.
out=$("$LUNGATE" key change --passphrase-file "$p1" --new-passphrase-file "$p2" "$vol") \
  || fail "key change"
grep -q "key slot 1 changed" <<<"$out" || fail "key change said: $out"
"$LUNGATE" key test --passphrase-file "$p2" "$vol" | grep -q "opens key slot 1" \
  || fail "the new passphrase does not open slot 1"
expect_exit 1 "no key slot opens|wrong" "$LUNGATE" key test --passphrase-file "$p1" "$vol"
"$LUNGATE" key test --key-file "$k1" "$vol" | grep -q "opens key slot 0" \
  || fail "slot 0 no longer opens with its key"
[ "$("$LUNGATE" key list "$vol")" = "$before" ] \
  || fail "key list changed beyond the slot's bytes: $("$LUNGATE" key list "$vol")"

# A key file becomes another; then a passphrase becomes a key file.
"$LUNGATE" key change --key-file "$k1" --new-key-file "$k2" "$vol" >/dev/null \
  || fail "key change of a key file"
"$LUNGATE" key test --key-file "$k2" "$vol" | grep -q "opens key slot 0" \
  || fail "the new key file does not open slot 0"
expect_exit 1 "" "$LUNGATE" key test --key-file "$k1" "$vol"
"$LUNGATE" key change --passphrase-file "$p2" --new-key-file "$k3" "$vol" >/dev/null \
  || fail "key change of a passphrase to a key file"
"$LUNGATE" key list "$vol" | grep -q "^slot 1: key-file" || fail "slot 1 is not a key file now"

# A wrong old key, or --slot: nothing changes.
sum=$(md5sum <"$vol")
expect_exit 1 "" "$LUNGATE" key change --key-file "$k1" --new-key-file "$k1" "$vol"
expect_exit 2 "change: no --slot" \
  "$LUNGATE" key change --slot 1 --key-file "$k2" --new-key-file "$k1" "$vol"
expect_exit 2 "change: give one of --new-key-file" \
  "$LUNGATE" key change --key-file "$k2" "$vol"
[ "$(md5sum <"$vol")" = "$sum" ] || fail "a refused key change wrote"
# A key that opens two slots (added twice): the change says the old key
# still opens the other (the second hostile review: it said the old key
# no longer opened the volume).
v2=$d/v2.img
truncate -s 16M "$v2"
"$LUNGATE" format --key-file "$k1" "$v2" >/dev/null || fail "format v2"
"$LUNGATE" key add --key-file "$k1" --new-key-file "$k1" "$v2" >/dev/null || fail "key add twice"
out=$("$LUNGATE" key change --key-file "$k1" --new-key-file "$k2" "$v2" 2>&1) \
  || { echo "$out"; fail "key change of a key in two slots"; }
grep -q "the old key still opens slot 1" <<<"$out" || fail "key change said: $out"
grep -q "no longer opens" <<<"$out" && fail "key change said the old key no longer opens it: $out"

# key list --json (issue 30: JSON for key list): the slots' kinds, the
# slot the key given opens, the UUID info shows.
"$LUNGATE" key list --json --key-file "$k3" "$vol" >"$d/list.json" || fail "key list --json"
uuid=$("$LUNGATE" info "$vol" | sed -n 's/^volume-uuid: //p')
python3 - "$d/list.json" "$uuid" <<'PY' || fail "key list --json: $(cat "$d/list.json")"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["uuid"] == sys.argv[2].replace("-", ""), j["uuid"]
kinds = [s["kind"] for s in j["slots"]]
assert kinds == ["key-file", "key-file"] + ["empty"] * 6, kinds
assert j["opens"] == 1, j["opens"]
PY
echo "test-key-change: ok"
