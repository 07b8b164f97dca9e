#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# One bit flipped on the wire in a metadata block of an encrypted volume
# (tests/tools/fault-proxy.py between the gateway and tgtd: plain TCP has
# no data digest), in the slot of a unit nobody reads or writes: a later
# write to another unit of that block must not write the flipped slot
# back (issue 26, case 5: the untouched unit then failed authentication
# for good).  Metadata is read twice in one batch and again until two
# reads agree; a unit that fails authentication is read again before it
# is reported.
. "${srcdir:-.}/functions-nbd.sh"
require_lungate_plugin
require_nbd_python
require python3
tgt_start
t=iqn.2026-11.org.lungate:mdflip
tgt_add_target 1 "$t"
tgt_add_lun 1 1 16M
tgt_allow 1 ALL
fault_proxy_start plain
port=$FAULT_PORT rules=$TGT_DIR/proxy.rules plog=$TGT_DIR/proxy.log
direct="iscsi://$TGT_PORTAL/$t/1"
url="iscsi://127.0.0.1:$port/$t/1"
key=$TGT_DIR/key; head -c 32 /dev/urandom >"$key"
"$LUNGATE" format --key-file "$key" "$direct" >/dev/null || fail "format"
md=$("$LUNGATE" info "$direct" | sed -n 's/^volume-metadata: \([0-9]*\)+.*/\1/p')
[ -n "$md" ] || fail "info shows no volume-metadata"

# Units 1 and 2 written by a first gateway, which then stops.
nbd_gw a "url=$direct" "key-file=$key"
nbd_io a write 1 17 >/dev/null || fail "gateway a"
nbd_io a write 2 18 >/dev/null || fail "gateway a"
nbd_stop "${NBD_GW[a]}"

# A second gateway through the proxy: the first answer to a READ of the
# first metadata block has a bit of unit 1's second slot flipped (the one
# its last write used; its tag: byte 2 * 48 + 48 + 30 of the block) while
# unit 3 is read; then unit 2 is written, which rewrites that block.
echo "flip-datain op=0x88 lba=$((md / 512)) bit=$(((2 * 48 + 48 + 30) * 8)) count=1" >"$rules"
nbd_gw b "url=$url" "key-file=$key"
[ "$(nbd_io b read 3)" = 0 ] || { cat "$TGT_DIR/b.log"; fail "unit 3"; }
grep -q "^fire 1 flip-datain" "$plog" || fail "the proxy flipped nothing"
nbd_io b write 2 19 >/dev/null || { cat "$TGT_DIR/b.log"; fail "writing unit 2"; }
nbd_stop "${NBD_GW[b]}"

"$LUNGATE" verify --key-file "$key" "$direct" >"$TGT_DIR/verify" 2>&1 \
  || { cat "$TGT_DIR/verify" "$TGT_DIR/b.log"; fail "a unit nobody wrote fails authentication after one flipped bit"; }
nbd_gw c "url=$direct" "key-file=$key"
[ "$(nbd_io c read 1)" = 17 ] || fail "unit 1 lost"
[ "$(nbd_io c read 2)" = 19 ] || fail "unit 2"
nbd_stop "${NBD_GW[c]}"
grep -q "read twice differently" "$TGT_DIR/b.log" \
  || { cat "$TGT_DIR/b.log"; fail "the gateway does not say it read the metadata again"; }
# A bit flipped in a unit's data on the wire: the read fails
# authentication once, is read again from the target, and succeeds; it
# is not reported as tampering.
data=$("$LUNGATE" info "$direct" | sed -n 's/^volume-data-offset: //p')
echo "flip-datain op=0x88 lba=$(((data + 4096) / 512)) bit=100 count=1" >"$rules"
: >"$plog"
nbd_gw d "url=$url" "key-file=$key"
r=$(nbd_io d read 1 2>/dev/null)
grep -q "^fire 1 flip-datain" "$plog" || fail "the proxy flipped no data"
[ "$r" = 17 ] || { cat "$TGT_DIR/d.log"; fail "one flipped bit in a unit's data: the read gave '$r'"; }
nbd_stop "${NBD_GW[d]}"
grep -q "failed authentication: reading them again" "$TGT_DIR/d.log" \
  || { cat "$TGT_DIR/d.log"; fail "the gateway does not say it read the unit again"; }
grep -q "fail authentication under both slots" "$TGT_DIR/d.log" \
  && { cat "$TGT_DIR/d.log"; fail "a flipped bit was reported as a bad unit"; }
echo "test-md-flip: ok"
