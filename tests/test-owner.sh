#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# The owner record of an encrypted volume, where the target has no
# persistent reservations (issue 14): LUNGATE_TEST_IGNORE_PR makes
# lungate treat tgt as such a target.  A second gateway is refused
# (naming host, pid, since when), key add too; a live holder is not
# taken over; a stale record (the holder killed, its heartbeat aged on
# the LUN) refuses without --takeover and is taken over with it; a
# gateway whose record another takes fails writes with EPERM; a clean
# close clears the record.
. "${srcdir:-.}/functions-nbd.sh"
require_lungate_plugin
require_test_hooks
require_nbd_python
export LUNGATE_TEST_IGNORE_PR=1
tgt_start
t=iqn.2026-11.org.lungate:owner
tgt_add_target 1 "$t"
tgt_add_lun 1 1 16M
tgt_allow 1 ALL
url="iscsi://$TGT_PORTAL/$t/1"
img=$(tgt_lun_file 1 1)
key=$TGT_DIR/key; head -c 32 /dev/urandom >"$key"
"$LUNGATE" format --lazy --key-file "$key" "$url" >/dev/null || fail "format"

gw () { nbd_gw "$1" "url=$url" "key-file=$key" "${@:2}"; }
io () { nbd_io "$@"; }
# edit KEY|AGE VALUE: rewrite the owner record in the backing file (the
# record at 128 KiB, BLAKE2b-256 checksum over its first 4064 bytes).
edit ()
{
  python3 - "$img" "$1" "$2" <<'PY'
import hashlib, struct, sys, time
path, what, val = sys.argv[1], sys.argv[2], int(sys.argv[3])
with open(path, "r+b") as f:
    f.seek(128 * 1024); b = bytearray(f.read(4096))
    assert b[:8] == b"LGOWNER\0", "no owner record"
    if what == "key":
        b[16:24] = struct.pack(">Q", val)
    else:
        b[40:48] = struct.pack(">Q", int(time.time()) - val)
    b[4064:] = hashlib.blake2b(bytes(b[:4064]), digest_size=32).digest()
    f.seek(128 * 1024); f.write(b)
PY
}

# 1. The holder writes its record; a second gateway and key add are refused.
gw a
io a write 1 11 >/dev/null || fail "the holder cannot write"
"$LUNGATE" info "$url" >"$TGT_DIR/info"
grep -q "^volume-owner: a gateway on host $(hostname) (pid ${NBD_GW[a]}) since .* UTC, heartbeat [0-9]* s ago" "$TGT_DIR/info" \
  || { cat "$TGT_DIR/info"; fail "info does not show the owner"; }
grep -q "^reservation: no persistent reservations\|^reservation: not reserved" "$TGT_DIR/info" \
  || { cat "$TGT_DIR/info"; fail "a reservation was taken under LUNGATE_TEST_IGNORE_PR"; }
gw b
io b write 2 1 >/dev/null 2>&1 && fail "a second gateway wrote beside the owner"
grep -q "in use by a gateway on host $(hostname) (pid ${NBD_GW[a]}) since .*(owner record)" "$TGT_DIR/b.log" \
  || { cat "$TGT_DIR/b.log"; fail "the refusal does not name the owner"; }
# Its second and third connections are refused too (issue 26, case 3:
# the second claim found the reservation layer 'claimed' and skipped the
# owner record).
io b write 2 1 >/dev/null 2>&1 && fail "a second gateway wrote on its second connection"
io b write 2 1 >/dev/null 2>&1 && fail "a second gateway wrote on its third connection"
[ "$(io a read 2)" = 0 ] || fail "the second gateway's write reached the LUN"
nbd_stop "${NBD_GW[b]}"
expect_fail_with "in use by a gateway on host .*owner record" \
  "$LUNGATE" key add --key-file "$key" --new-key-file "$key" "$url"
# 2. A live owner is not taken over.
gw c takeover=true
io c write 2 1 >/dev/null 2>&1 && fail "a live owner was taken over"
grep -q "it is alive, not taken over" "$TGT_DIR/c.log" || { cat "$TGT_DIR/c.log"; fail "no reason given"; }
nbd_stop "${NBD_GW[c]}"
io a write 2 12 >/dev/null || fail "the owner was disturbed"

# 3. The owner is killed and its heartbeat ages: refused without
# --takeover, taken over with it, nothing acknowledged lost.  (Its
# runtime file removed, as for another user's gateway: one of this host
# proven dead comes back without --takeover, test-crash-takeover.)
kill -9 "${NBD_GW[a]}"; wait "${NBD_GW[a]}" 2>/dev/null
rm -f "$XDG_RUNTIME_DIR"/lungate/lungate-*.alive
edit age 100
gw d
io d write 3 1 >/dev/null 2>&1 && fail "a stale owner record was taken over without takeover=true"
grep -q "its heartbeat stopped.*--takeover" "$TGT_DIR/d.log" || { cat "$TGT_DIR/d.log"; fail "no hint"; }
nbd_stop "${NBD_GW[d]}"
gw e takeover=true
{ [ "$(io e read 1)" = 11 ] && [ "$(io e read 2)" = 12 ]; } || fail "acknowledged data lost at the takeover"
io e write 3 13 >/dev/null || fail "the new owner cannot write"
grep -q "took over the volume" "$TGT_DIR/e.log" || fail "the takeover was not said"

# 4. Another takes the record: within a heartbeat, writes fail with EPERM.
edit key 1234
for _ in $(seq 40); do grep -q "lost the volume" "$TGT_DIR/e.log" && break; sleep 0.5; done
grep -q "lost the volume: the owner record names" "$TGT_DIR/e.log" || { cat "$TGT_DIR/e.log"; fail "the loss was not noticed"; }
r=$(io e write 4 1 2>/dev/null) && fail "a gateway whose record was taken still writes"
[ "$r" = EPERM ] || fail "its write failed with $r, not EPERM"
[ "$(io e read 3)" = 13 ] || fail "it cannot read any more"
nbd_stop "${NBD_GW[e]}"

# 5. A clean close clears the record.
edit key "$(printf '%d' 0x4c00000000000001)"
edit age 100
gw f takeover=true
io f write 4 14 >/dev/null || fail "take over again"
nbd_stop "${NBD_GW[f]}"
"$LUNGATE" info "$url" | grep -qx "volume-owner: none" || fail "a clean close did not clear the record"
"$LUNGATE" verify --repair --key-file "$key" "$url" >/dev/null || fail "verify --repair"
"$LUNGATE" verify --key-file "$key" "$url" >/dev/null || fail "verify"
echo "test-owner: ok"
