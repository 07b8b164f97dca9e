#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# A connection lost while `lungate format` writes (the answer to one of
# its WRITEs lost with the connection: tests/tools/fault-proxy.py between
# lungate and tgtd) is an outage like any other: format logs in again,
# finds the LUN it was formatting, and finishes; the volume then verifies
# and is clean.  Until the header is written, copy 0 holds what format
# found there or its mark (lungate-format(5)), and the check after the
# login took that for "another volume" and failed the format, leaving its
# reservation behind (seen in CI: test-key-hygiene, a WRITE stuck 39 s
# under load).  Cases: the first WRITE (the zeroing of the rest of the
# first MiB, before the mark), and the 21st.
# And the other side: while format is cut off, the LUN number comes to
# hold another disk of the same size (tgtd restarted with the backing
# files swapped; tgt's default identity cannot tell them apart), holding
# someone's volume.  format must stop and that disk must be untouched
# and not left reserved (an attack on the first fix found format wrote
# its volume over it: nothing else it had written was there to compare).
. "${srcdir:-.}/functions.sh"
require_lungate
require python3
tgt_start
t=iqn.2026-12.org.lungate:fmtoutage
tgt_add_target 1 "$t"
tgt_add_lun 1 1 64M
tgt_add_lun 1 2 64M
tgt_allow 1 ALL
fault_proxy_start hold
port=$FAULT_PORT rules=$TGT_DIR/proxy.rules plog=$TGT_DIR/proxy.log hold=$TGT_DIR/hold
url="iscsi://127.0.0.1:$port/$t/1"
direct="iscsi://$TGT_PORTAL/$t/1"
key=$TGT_DIR/key; head -c 32 /dev/urandom >"$key"

# format_cut N RULE: format LUN 1 through the proxy with RULE in force,
# in the background ($fmt); waits until the rule fired (the proxy then
# holds new connections off until $hold is removed).
format_cut ()
{
  rm -f "$hold"
  : >"$plog"
  printf '%s\n' "$2" >"$rules"
  with_timeout 120 "$LUNGATE" format --batch --force --key-file "$key" "$url" \
    >"$TGT_DIR/f$1" 2>&1 &
  fmt=$!
  for _ in $(seq 600); do [ -e "$hold" ] && break; _lg_alive "$fmt" || break; sleep 0.1; done
  : >"$rules"
  [ -e "$hold" ] || { cat "$TGT_DIR/f$1"; fail "the proxy dropped nothing ('$2')"; }
}

n=0
for rule in "drop-response op=0x8a count=1" "drop-response op=0x8a skip=20 count=1"; do
  n=$((n + 1))
  format_cut "$n" "$rule"
  rm -f "$hold"
  wait "$fmt" || { cat "$TGT_DIR/f$n"; fail "format with '$rule' failed"; }
  grep -q "logged in again" "$TGT_DIR/f$n" || { cat "$TGT_DIR/f$n"; fail "format did not log in again ('$rule')"; }
  "$LUNGATE" verify --key-file "$key" "$direct" >"$TGT_DIR/v$n" 2>&1 \
    || { cat "$TGT_DIR/f$n" "$TGT_DIR/v$n"; fail "the volume formatted across an outage ('$rule') does not verify"; }
  "$LUNGATE" info "$direct" >"$TGT_DIR/i$n" 2>&1 || fail "info"
  grep -q "^reservation: not reserved" "$TGT_DIR/i$n" \
    || { cat "$TGT_DIR/i$n"; fail "format left the LUN reserved ('$rule')"; }
  grep -q "^volume-state: clean$" "$TGT_DIR/i$n" \
    || { cat "$TGT_DIR/i$n"; fail "the volume is not clean after the format ('$rule')"; }
done

# The swap.  LUN 2 holds another volume, under another key; LUN 1 is
# blank again.
key2=$TGT_DIR/key2; head -c 32 /dev/urandom >"$key2"
"$LUNGATE" format --batch --key-file "$key2" "iscsi://$TGT_PORTAL/$t/2" >/dev/null 2>&1 \
  || fail "format of LUN 2"
a=$(tgt_lun_file 1 1) b=$(tgt_lun_file 1 2)
dd if=/dev/zero of="$a" bs=1M count=4 conv=notrunc status=none
sumb=$(sha256sum <"$b")
# (Another text: a rule fires once per line and text.)
format_cut 3 "drop-response count=1 op=0x8a"
tgt_stop
sed -i "s|$a|@A@|; s|$b|$a|; s|@A@|$b|" "$TGT_DIR/journal"
tgt_restart
rm -f "$hold"
wait "$fmt" && { cat "$TGT_DIR/f3"; fail "format went on over another disk"; }
[ "$(sha256sum <"$b")" = "$sumb" ] \
  || { cat "$TGT_DIR/f3"; fail "format wrote on the disk that replaced its LUN"; }
grep -q "neither what format found there" "$TGT_DIR/f3" \
  || { cat "$TGT_DIR/f3"; fail "format did not say the LUN holds another disk"; }
"$LUNGATE" verify --key-file "$key2" "$direct" >"$TGT_DIR/v3" 2>&1 \
  || { cat "$TGT_DIR/v3"; fail "the other volume no longer verifies"; }
"$LUNGATE" info "$direct" | grep -q "^reservation: not reserved" \
  || fail "format left the other disk reserved"
# (Nor does it say the LUN stays reserved: the target forgot the
# reservation with its restart, and the other disk was never reserved.)
grep -q "stays reserved" "$TGT_DIR/f3" \
  && { cat "$TGT_DIR/f3"; fail "format says a LUN it does not hold stays reserved"; }
echo "test-format-outage: ok"
