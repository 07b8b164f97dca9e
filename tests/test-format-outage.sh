#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# A connection lost while `lungate format` writes (the answer to one of
# its WRITEs lost with the connection: tests/tools/fault-proxy.py between
# lungate and tgtd) is an outage like any other: format logs in again,
# finds the LUN it was formatting, and finishes; the volume then verifies
# and is clean.  Until the header is written, copy 0 holds the format
# mark (lungate-format(5)), and the check after the login took that for
# "another volume" and failed the format, leaving its reservation
# behind (seen in CI: test-key-hygiene, a WRITE stuck 39 s under load).
# Cases: the first WRITE (the mark itself), and one in the sealing of the
# units.
. "${srcdir:-.}/functions.sh"
require_lungate
require python3
tgt_start
t=iqn.2026-12.org.lungate:fmtoutage
tgt_add_target 1 "$t"
tgt_add_lun 1 1 64M
tgt_allow 1 ALL
port=$(_tgt_pick_port)
rules=$TGT_DIR/proxy.rules; plog=$TGT_DIR/proxy.log
: >"$rules"; : >"$plog"
python3 "$srcdir/tools/fault-proxy.py" --listen "$port" --target "$TGT_PORTAL" \
  --rules "$rules" --log "$plog" >"$TGT_DIR/proxy.out" 2>&1 &
on_exit kill "$!"
for _ in $(seq 50); do grep -q listening "$TGT_DIR/proxy.out" && break; sleep 0.1; done
url="iscsi://127.0.0.1:$port/$t/1"
direct="iscsi://$TGT_PORTAL/$t/1"
key=$TGT_DIR/key; head -c 32 /dev/urandom >"$key"

n=0
for rule in "drop-response op=0x8a count=1" "drop-response op=0x8a skip=20 count=1"; do
  n=$((n + 1))
  : >"$plog"
  printf '%s\n' "$rule" >"$rules"
  with_timeout 120 "$LUNGATE" format --batch --force --key-file "$key" "$url" \
    >"$TGT_DIR/f$n" 2>&1 || { cat "$TGT_DIR/f$n"; fail "format with '$rule' failed"; }
  : >"$rules"
  grep -q "drop-response" "$plog" || fail "the proxy dropped nothing ('$rule')"
  grep -q "logged in again" "$TGT_DIR/f$n" || { cat "$TGT_DIR/f$n"; fail "format did not log in again ('$rule')"; }
  "$LUNGATE" verify --key-file "$key" "$direct" >"$TGT_DIR/v$n" 2>&1 \
    || { cat "$TGT_DIR/f$n" "$TGT_DIR/v$n"; fail "the volume formatted across an outage ('$rule') does not verify"; }
  "$LUNGATE" info "$direct" >"$TGT_DIR/i$n" 2>&1 || fail "info"
  grep -q "^reservation: not reserved" "$TGT_DIR/i$n" \
    || { cat "$TGT_DIR/i$n"; fail "format left the LUN reserved ('$rule')"; }
  grep -q "^volume-state: clean$" "$TGT_DIR/i$n" \
    || { cat "$TGT_DIR/i$n"; fail "the volume is not clean after the format ('$rule')"; }
done
echo "test-format-outage: ok"
