#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# A gateway stopped (SIGTERM: systemctl stop) while one of its writes is
# held inside the target (faultio under tgtd) must not give the LUN up:
# the next gateway would be admitted without --takeover, write and flush
# NEW, and then the held OLD write would land over it (issue 26, case 1).
# So the stopping gateway says it is not releasing, and the LUN stays
# reserved to it.  The next gateway of this host takes it back (its
# holder is proven gone: test-crash-takeover), but writes only after the
# target answered its LUN RESET, which tgt does once the held write has
# landed: NEW stays.  Through the plugin and through lungate mount.
. "${srcdir:-.}/functions-fault.sh"
require_lungate_plugin
require_test_hooks
require_nbd_python
require fusermount3 mountpoint
[ -c /dev/fuse ] || skip "no /dev/fuse"
fault_tgt_start
t=iqn.2026-11.org.lungate:stopstuck
tgt_add_target 1 "$t"
tgt_add_lun 1 1 16M
tgt_add_lun 1 2 16M
tgt_add_lun 1 3 16M
tgt_allow 1 ALL
off=$((1 << 20))
mnt=$TGT_DIR/mnt
mount_points "$mnt"

nbd_write () { nbd_write_str "$1" "$2" "$off"; }

reservation ()
{
  "$LUNGATE" info "$1" | sed -n 's/^reservation: //p'
}

# gateway_gone NAME PID: the stopped gateway exits within 60 s (else its
# threads and its log are shown).  Under the sanitizer runtime nbdkit
# may hang in exit itself, its one thread left in p11-kit's destructor
# waiting for glibc's setlocale lock (functions-nbd.sh, nbd_stop; seen
# here with write-behind on, test-faults-wb): then it is killed, with a
# note; what the tests check is the LUN.
gateway_gone ()
{
  if [ "$1" != mount ] && [ -n "$(_nbd_preload)" ] \
     && ! with_timeout 60 tail --pid="$2" -f /dev/null 2>/dev/null; then
    echo "$1: nbdkit $2 (AddressSanitizer runtime) did not exit: killed" >&2
    kill -9 "$2"
  fi
  wait_exit "$2" 60 "$1: the stopping gateway" "$TGT_DIR/$1.log"
}

# check NAME URL PID LINE: the held write's gateway (PID) was stopped,
# the LUN stays reserved; the next gateway's NEW is acknowledged only
# after the held write (faultio rule LINE) landed, and stays.
check ()
{
  local name=$1 url=$2 pid=$3 res
  gateway_gone "$name" "$pid"
  res=$(reservation "$url")
  case $res in
    "Write Exclusive, Registrants Only by a gateway on this host"*) ;;
    *) fail "$name: the LUN was given up with a write held in the target: '$res'" ;;
  esac
  grep -q "not releasing the reservation: 1 write of unknown outcome" "$TGT_DIR/$name.log" \
    || { cat "$TGT_DIR/$name.log"; fail "$name: the stop does not say it keeps the reservation"; }
  nbd_gw "$name-2" "url=$url"
  nbd_write "$TGT_DIR/$name-2.sock" "NEW-$name-" \
    || { cat "$TGT_DIR/$name-2.log"; fail "$name: the next gateway cannot write"; }
  fault_log_has "^stall-end $4 " \
    || fail "$name: the next gateway's write was acknowledged while the first one's was held"
  grep -q "LUN RESET complete" "$TGT_DIR/$name-2.log" \
    || { cat "$TGT_DIR/$name-2.log"; fail "$name: no LUN RESET before the next gateway wrote"; }
  nbd_stop "${NBD_GW[$name-2]}"
  head -c 4 < <(tail -c +$((off + 1)) "$(tgt_lun_file 1 "${url##*/}")") \
    | grep -q "^NEW-" || fail "$name: the LUN does not hold NEW"
  echo "$name: ok"
}

# The plugin: the held write, then SIGTERM.
url="iscsi://$TGT_PORTAL/$t/1"
fault_rule "op=write path=lun-1-1.img match=OLD-plugin- action=stall:20000"
nbd_gw plugin "url=$url"
nbd_write "$TGT_DIR/plugin.sock" "OLD-plugin-" >/dev/null 2>&1 &
fault_wait_log '^stall-begin 1 ' 30
kill -TERM "${NBD_GW[plugin]}"
check plugin "$url" "${NBD_GW[plugin]}" 1

# The mount: a write held (its fsync waiting), then SIGTERM.
url="iscsi://$TGT_PORTAL/$t/2"
fault_rule "op=write path=lun-1-2.img match=OLD-mount- action=stall:20000"
"$LUNGATE" mount -f "$url" "$mnt" 2>"$TGT_DIR/mount.log" &
mpid=$!
on_exit kill -9 "$mpid"
for _ in $(seq 100); do [ -e "$mnt/lun2" ] && break; sleep 0.1; done
[ -e "$mnt/lun2" ] || { cat "$TGT_DIR/mount.log"; fail "the mount did not come up"; }
printf 'OLD-mount-%.0s' $(seq 410) | head -c 4096 >"$TGT_DIR/old"
dd if="$TGT_DIR/old" of="$mnt/lun2" bs=4096 seek=$((off / 4096)) \
  conv=notrunc,fsync status=none 2>/dev/null &
fault_wait_log '^stall-begin 2 ' 30
kill -TERM "$mpid"
check mount "$url" "$mpid" 2

# A volume through the owner record (no persistent reservations): the
# stop must not clear the record either.  (On a 16 MiB LUN a volume's
# data area starts at 2 MiB.)
url="iscsi://$TGT_PORTAL/$t/3"
key=$TGT_DIR/key; head -c 32 /dev/urandom >"$key"
export LUNGATE_TEST_IGNORE_PR=1
"$LUNGATE" format --lazy --key-file "$key" "$url" >/dev/null || fail "format LUN 3"
fault_rule "op=write path=lun-1-3.img off=$((2 * 1048576 + off))-$((2 * 1048576 + off + 4096)) action=stall:20000"
nbd_gw owner "url=$url" "key-file=$key"
nbd_write "$TGT_DIR/owner.sock" "OLD-owner-" >/dev/null 2>&1 &
fault_wait_log '^stall-begin 3 ' 30
kill -TERM "${NBD_GW[owner]}"
gateway_gone owner "${NBD_GW[owner]}"
grep -q "not clearing the owner record: 1 write of unknown outcome" "$TGT_DIR/owner.log" \
  || { cat "$TGT_DIR/owner.log"; fail "owner: the stop does not say it keeps the owner record"; }
"$LUNGATE" info "$url" | grep -q "^volume-owner: a gateway on host" \
  || fail "owner: the owner record was cleared with a write held in the target"
nbd_gw owner-2 "url=$url" "key-file=$key"
nbd_write "$TGT_DIR/owner-2.sock" "NEW-owner-" \
  || { cat "$TGT_DIR/owner-2.log"; fail "owner: the next gateway cannot write"; }
fault_log_has "^stall-end 3 " \
  || fail "owner: the next gateway's write was acknowledged while the first one's was held"
nbd_stop "${NBD_GW[owner-2]}"
got=$(nbd_read_head "$url" "$off" "key-file=$key")
[ "$got" = NEW- ] || fail "owner: the volume does not hold NEW ('$got')"
"$LUNGATE" verify --key-file "$key" "$url" >"$TGT_DIR/v3" 2>&1 \
  || { cat "$TGT_DIR/v3"; fail "owner: a unit fails authentication"; }
echo "owner: ok"
echo "test-stop-stuck-write: ok"
