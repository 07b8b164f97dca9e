#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# Interop with a second target, istgt: the core of the suite against it --
# discover, info, an NBD copy-verify and a FUSE file-system round trip
# (mkfs.ext4, fuse2fs, a tree in, remount, compare, e2fsck -fn) -- plain,
# with one-way CHAP, with mutual CHAP, an initiator refused by the ACL,
# and the header digest on.  Each cell of the matrix prints a line.
. "${srcdir:-.}/functions-nbd.sh"
require_lungate_plugin
require_nbd_python
require istgt nbdcopy fusermount3 fuse2fs mkfs.ext4 e2fsck mountpoint python3
[ -c /dev/fuse ] || skip "no /dev/fuse"
dir=$(mktemp -d "$(_lg_tmproot)/lungate-istgt.XXXXXX") || fail "mktemp"
port='' ucport=''
_tgt_pick_port port || fail "no port"
_tgt_pick_port ucport || fail "no port"
base=iqn.2026-11.org.lungate.istgt
cat >"$dir/istgt.conf" <<CONF
[Global]
  NodeBase "$base"
  PidFile $dir/istgt.pid
  AuthFile $dir/auth.conf
  MediaDirectory $dir
  LogFacility "local7"
  Timeout 30
  NopInInterval 20
  DiscoveryAuthMethod Auto
  DiscoveryAuthGroup AuthGroup1
  MaxSessions 16
  MaxConnections 4
  FirstBurstLength 262144
  MaxBurstLength 1048576
  MaxRecvDataSegmentLength 262144
[UnitControl]
  AuthMethod None
  Portal UC1 127.0.0.1:$ucport
  Netmask 127.0.0.1
[PortalGroup1]
  Portal DA1 127.0.0.1:$port
[InitiatorGroup1]
  InitiatorName "!iqn.2026-11.org.lungate:denied"
  InitiatorName "ALL"
  Netmask 127.0.0.0/8
[LogicalUnit1]
  TargetName plain
  Mapping PortalGroup1 InitiatorGroup1
  AuthMethod None
  UseDigest Auto
  UnitType Disk
  LUN0 Storage $dir/plain.img 64MB
[LogicalUnit2]
  TargetName chap
  Mapping PortalGroup1 InitiatorGroup1
  AuthMethod CHAP
  AuthGroup AuthGroup1
  UseDigest Auto
  UnitType Disk
  LUN0 Storage $dir/chap.img 64MB
[LogicalUnit3]
  TargetName mutual
  Mapping PortalGroup1 InitiatorGroup1
  AuthMethod CHAP Mutual
  AuthGroup AuthGroup2
  UseDigest Auto
  UnitType Disk
  LUN0 Storage $dir/mutual.img 64MB
CONF
cat >"$dir/auth.conf" <<CONF
[AuthGroup1]
  Auth "gwuser" "secret-01234567"
[AuthGroup2]
  Auth "gwuser" "secret-01234567" "istgt" "mutual-0123456"
CONF
for f in plain chap mutual; do truncate -s 64M "$dir/$f.img"; done
istgt -c "$dir/istgt.conf" -D -q >"$dir/istgt.log" 2>&1 &
ipid=$!
stop_istgt () { kill "$ipid" 2>/dev/null; wait "$ipid" 2>/dev/null; rm -rf "$dir"; }
on_exit stop_istgt
for _ in $(seq 100); do
  (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
  sleep 0.1
done
portal="iscsi://127.0.0.1:$port"
good=$(secret_file secret-01234567)
bad=$(secret_file secret-99999999)
mutual=$(secret_file mutual-0123456)
chap=(--user gwuser --password-file "$good")
mchap=("${chap[@]}" --target-user istgt --target-password-file "$mutual")

# NBD copy-verify: 16 MiB of random data in through the plugin, back out,
# compared, and compared with the backing file.
nbd_copy_verify ()   # nbd_copy_verify LUN-URL IMG [PLUGIN-PARAM...]
{
  local url=$1 img=$2
  shift 2
  head -c 16M /dev/urandom >"$dir/in"
  nbd_run "url=$url" "$@" -- nbdcopy "$dir/in" '$uri' || return 1
  nbd_run "url=$url" "$@" -- nbdcopy --requests=4 '$uri' "$dir/out" || return 1
  cmp -n 16777216 "$dir/in" "$dir/out" && cmp -n 16777216 "$dir/in" "$img"
}

cell () { printf 'istgt: %-28s %s\n' "$1" "$2"; }

# plain
# One-way CHAP for discovery: every target is listed; the LUNs of the one
# that demands mutual CHAP cannot be (its login is refused, and said so).
"$LUNGATE" discover "${chap[@]}" "$portal" >"$dir/disc" 2>&1 || true
for t in plain chap mutual; do grep -q "^$base:$t\$" "$dir/disc" || { cat "$dir/disc"; fail "discover: $t missing"; }; done
grep -q "lun 0  disk  64.00 MiB" "$dir/disc" || { cat "$dir/disc"; fail "discover: LUN of plain"; }
grep -q "$base:mutual: authentication failed" "$dir/disc" || { cat "$dir/disc"; fail "discover: the mutual target's refusal"; }
cell "plain: discover" ok
"$LUNGATE" info "$portal/$base:plain/0" >"$dir/info" || fail "info plain"
# What istgt offers, for the README's compatibility table.
grep "^supports\|^refused\|^volatile\|^reservation" "$dir/info"
grep -q "^size: 67108864 bytes" "$dir/info" || fail "info plain"
cell "plain: info" ok
nbd_copy_verify "$portal/$base:plain/0" "$dir/plain.img" || fail "plain: NBD copy-verify"
cell "plain: NBD copy-verify" ok
fuse_fsck "$dir" "$portal/$base:plain/0" || fail "plain: FUSE fsck round trip"
cell "plain: FUSE fsck round trip" ok

# header digest
"$LUNGATE" info --header-digest crc32c "$portal/$base:plain/0" >/dev/null || fail "info with header digest"
nbd_copy_verify "$portal/$base:plain/0" "$dir/plain.img" header-digest=crc32c \
  || fail "header digest: NBD copy-verify"
cell "header digest: info, NBD copy" ok

# one-way CHAP
"$LUNGATE" info "${chap[@]}" "$portal/$base:chap/0" >/dev/null || fail "CHAP: info"
expect_fail_with "authentication failed" \
  "$LUNGATE" info --user gwuser --password-file "$bad" "$portal/$base:chap/0"
expect_fail_with "authentication failed" "$LUNGATE" info "$portal/$base:chap/0"
nbd_copy_verify "$portal/$base:chap/0" "$dir/chap.img" user=gwuser "password=+$good" \
  || fail "CHAP: NBD copy-verify"
fuse_fsck "$dir" "$portal/$base:chap/0" "${chap[@]}" || fail "CHAP: FUSE fsck round trip"
cell "one-way CHAP: right/wrong/none" "ok (wrong and missing secret refused)"

# mutual CHAP
"$LUNGATE" info "${mchap[@]}" "$portal/$base:mutual/0" >/dev/null || fail "mutual CHAP: info"
expect_fail_with "mutual CHAP" \
  "$LUNGATE" info "${chap[@]}" --target-user istgt --target-password-file "$bad" \
  "$portal/$base:mutual/0"
nbd_copy_verify "$portal/$base:mutual/0" "$dir/mutual.img" user=gwuser "password=+$good" \
  target-user=istgt "target-password=+$mutual" || fail "mutual CHAP: NBD copy-verify"
fuse_fsck "$dir" "$portal/$base:mutual/0" "${mchap[@]}" || fail "mutual CHAP: FUSE fsck round trip"
cell "mutual CHAP" "ok (a wrong target secret refused)"

# the ACL
expect_fail_with "not authorized|not found" \
  "$LUNGATE" info --initiator-name iqn.2026-11.org.lungate:denied "$portal/$base:plain/0"
"$LUNGATE" info --initiator-name iqn.2026-11.org.lungate:allowed "$portal/$base:plain/0" >/dev/null \
  || fail "ACL: an allowed name"
cell "initiator ACL: allow/deny" ok

# istgt has COMPARE AND WRITE (under a lock): header updates use it, not
# the timed scheme tgt needs (lungate-format(5)).
k0=$dir/k0; k1=$dir/k1
head -c 32 /dev/urandom >"$k0"; head -c 32 /dev/urandom >"$k1"
"$LUNGATE" format --force --key-file "$k0" "$portal/$base:plain/0" >/dev/null 2>&1 \
  || fail "format on istgt"
"$LUNGATE" -v key add --key-file "$k0" --new-key-file "$k1" "$portal/$base:plain/0" \
  >"$dir/keyadd.out" 2>"$dir/keyadd.err" || { cat "$dir/keyadd.err"; fail "key add on istgt"; }
if grep -q "COMPARE AND WRITE" "$dir/keyadd.err"; then
  grep "COMPARE AND WRITE" "$dir/keyadd.err"; fail "istgt: COMPARE AND WRITE not used"
fi
"$LUNGATE" verify --key-file "$k1" "$portal/$base:plain/0" >/dev/null || fail "istgt: the added key does not open"
cell "header update: COMPARE AND WRITE" ok

# istgt has persistent reservations: a second writer is refused, a
# reader goes on, the holder is shown, and a clean stop releases.
sock=$dir/gw.sock
"${NBDKIT[@]}" -f -U "$sock" "$LUNGATE_PLUGIN" "url=$portal/$base:plain/0" \
  "key-file=$k0" 2>>"$dir/gw.log" &
gw=$!
on_exit kill -9 "$gw"
for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.1; done
env -u LD_PRELOAD "$NBD_PYTHON" -c "
import nbd; h = nbd.NBD(); h.connect_uri('nbd+unix:///?socket=$sock')
h.pwrite(b'R' * 4096, 0); h.flush()" || fail "istgt: the holder cannot write"
"$LUNGATE" info "$portal/$base:plain/0" | grep -q "^reservation: Write Exclusive, Registrants Only by a gateway on this host" \
  || { "$LUNGATE" info "$portal/$base:plain/0"; fail "istgt: info does not show the holder"; }
expect_fail_with "in use by a gateway on this host" \
  "$LUNGATE" key add --key-file "$k0" --new-key-file "$k0" "$portal/$base:plain/0"
nbd_run "url=$portal/$base:plain/0" "key-file=$k0" -- "$NBD_PYTHON" -c \
  'import nbd,sys; h=nbd.NBD(); h.connect_uri(sys.argv[1]); h.pwrite(b"W"*4096, 0)' '$uri' \
  2>"$dir/second.log" && fail "istgt: a second gateway wrote"
grep -q "in use by a gateway" "$dir/second.log" || { cat "$dir/second.log"; fail "istgt: no refusal"; }
[ "$(nbd_run -r "url=$portal/$base:plain/0" "key-file=$k0" -- "$NBD_PYTHON" -c \
  'import nbd,sys; h=nbd.NBD(); h.connect_uri(sys.argv[1]); print(h.pread(4096, 0)[:1].decode())' '$uri')" = R ] \
  || fail "istgt: a reader beside the writer"
nbd_stop "$gw"
"$LUNGATE" info "$portal/$base:plain/0" | grep -q "^reservation: not reserved" \
  || { "$LUNGATE" info "$portal/$base:plain/0"; fail "istgt: not released at the clean stop"; }
cell "one writer: reservations" "ok (second writer refused, reader served)"
echo "test-interop-istgt: ok"
