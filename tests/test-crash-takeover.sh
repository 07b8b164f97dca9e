#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# A gateway killed (kill -9: a crash, the OOM killer) while one of its
# writes is held inside the target (faultio under tgtd), then the next
# gateway of this host (issue 26, case 2):
#  - it gets the LUN back without --takeover: the holder is proven dead
#    (its runtime file's lock is free), and says so;
#  - before its first write the target confirms (LUN RESET answered) that
#    the dead gateway's write can no longer execute, so the old write
#    cannot land over the new one: the LUN holds NEW, every unit of a
#    volume is authentic;
#  - a holder that cannot be proven dead (no runtime file: another
#    user's or container's gateway) still needs --takeover, and the
#    takeover fences the same way.
# Through the plugin (plain LUN, reservation), lungate mount (a volume,
# reservation) and the plugin on a volume through the owner record (a
# target without persistent reservations: LUNGATE_TEST_IGNORE_PR), there
# also with the dead one's last heartbeat held.
. "${srcdir:-.}/functions-fault.sh"
require_lungate_plugin
require_test_hooks
require_nbd_python
require fusermount3 mountpoint
[ -c /dev/fuse ] || skip "no /dev/fuse"
fault_tgt_start
t=iqn.2026-11.org.lungate:crashtake
tgt_add_target 1 "$t"
for l in 1 2 3 4 5; do tgt_add_lun 1 "$l" 16M; done
tgt_allow 1 ALL
off=$((1 << 20))
stall=15000
mnt=$TGT_DIR/mnt
mount_points "$mnt"
key=$TGT_DIR/key; head -c 32 /dev/urandom >"$key"

write_unit () { nbd_write_str "$1" "$2" "$off"; }

# read_unit URL [PARAM...]: the first 4 bytes at off, through a fresh
# read-only gateway.
read_unit () { nbd_read_head "$1" "$off" "${@:2}"; }

# held_then_killed NAME LINE PID: the write is held in tgtd (rule LINE):
# kill -9 the gateway.
held_then_killed ()
{
  fault_wait_log "^stall-begin $2 " 30
  kill -9 "$3"
  wait "$3" 2>/dev/null
}

# settled NAME URL LINE [PARAM...]: after the held write ended, the LUN
# holds NEW and the takeover was fenced.
settled ()
{
  local name=$1 url=$2 line=$3 got
  shift 3
  fault_wait_log "^stall-end $line " 60
  got=$(read_unit "$url" "$@") || fail "$name: cannot read the LUN back"
  [ "$got" = NEW- ] \
    || fail "$name: the killed gateway's held write landed over the acknowledged one ('$got')"
  echo "$name: ok"
}

# fenced LOG: the next gateway said it took the LUN back and waited for
# the LUN RESET.
fenced ()
{
  grep -q "LUN RESET complete" "$1" \
    || { cat "$1"; fail "no LUN RESET confirmed before the first write"; }
}

# 1. The plugin, a plain LUN: back without takeover, fenced.
url="iscsi://$TGT_PORTAL/$t/1"
fault_rule "op=write path=lun-1-1.img match=OLD- action=stall:$stall"
nbd_gw a1 "url=$url"
write_unit "$TGT_DIR/a1.sock" "OLD-" >/dev/null 2>&1 &
held_then_killed a1 1 "${NBD_GW[a1]}"
nbd_gw b1 "url=$url"
write_unit "$TGT_DIR/b1.sock" "NEW-" \
  || { cat "$TGT_DIR/b1.log"; fail "plugin: the dead holder's LUN was not taken back"; }
grep -q "which is no longer running: taking it back" "$TGT_DIR/b1.log" \
  || { cat "$TGT_DIR/b1.log"; fail "plugin: the taking back is not said"; }
fenced "$TGT_DIR/b1.log"
nbd_stop "${NBD_GW[b1]}"
settled plugin "$url" 1
"$LUNGATE" info "$url" | grep -q "^reservation: not reserved" \
  || fail "plugin: the reservation was not released at the clean stop"

# 2. The same with the proof gone (another user's gateway): refused
# without takeover, naming the holder; takeover=true fences too.
url="iscsi://$TGT_PORTAL/$t/2"
fault_rule "op=write path=lun-1-2.img match=OLD- action=stall:$stall"
XDG_RUNTIME_DIR=$TGT_DIR/other nbd_gw a2 "url=$url"
mkdir -m 0700 "$TGT_DIR/other"
write_unit "$TGT_DIR/a2.sock" "OLD-" >/dev/null 2>&1 &
held_then_killed a2 2 "${NBD_GW[a2]}"
nbd_gw b2 "url=$url"
write_unit "$TGT_DIR/b2.sock" "NEW-" 2>/dev/null \
  && fail "takeover: a holder not proven dead was taken over without takeover"
grep -q "in use by a gateway on this host" "$TGT_DIR/b2.log" \
  || { cat "$TGT_DIR/b2.log"; fail "takeover: the refusal does not name the holder"; }
nbd_stop "${NBD_GW[b2]}"
nbd_gw c2 "url=$url" takeover=true
write_unit "$TGT_DIR/c2.sock" "NEW-" \
  || { cat "$TGT_DIR/c2.log"; fail "takeover: cannot write"; }
fenced "$TGT_DIR/c2.log"
nbd_stop "${NBD_GW[c2]}"
settled takeover "$url" 2

# 3. lungate mount of a volume: killed with its fsync held, mounted
# again without --takeover.
url="iscsi://$TGT_PORTAL/$t/3"
"$LUNGATE" format --lazy --key-file "$key" "$url" >/dev/null || fail "format LUN 3"
# (On a 16 MiB LUN a volume's data area starts at 2 MiB.)
fault_rule "op=write path=lun-1-3.img off=$((2 * 1048576 + off))-$((2 * 1048576 + off + 4096)) action=stall:$stall"
"$LUNGATE" mount -f --key-file "$key" "$url" "$mnt" 2>"$TGT_DIR/m1.log" &
mpid=$!
on_exit kill -9 "$mpid"
for _ in $(seq 100); do [ -e "$mnt/lun3" ] && break; sleep 0.1; done
[ -e "$mnt/lun3" ] || { cat "$TGT_DIR/m1.log"; fail "the mount did not come up"; }
printf 'OLD-%.0s' $(seq 1024) >"$TGT_DIR/old"
printf 'NEW-%.0s' $(seq 1024) >"$TGT_DIR/new"
dd if="$TGT_DIR/old" of="$mnt/lun3" bs=4096 seek=$((off / 4096)) \
  conv=notrunc,fsync status=none 2>/dev/null &
held_then_killed m1 3 "$mpid"
fusermount3 -u -z "$mnt" 2>/dev/null
"$LUNGATE" mount -f --key-file "$key" "$url" "$mnt" 2>"$TGT_DIR/m2.log" &
mpid=$!
on_exit kill -9 "$mpid"
for _ in $(seq 300); do [ -e "$mnt/lun3" ] && break; sleep 0.1; done
[ -e "$mnt/lun3" ] || { cat "$TGT_DIR/m2.log"; fail "mount: the dead holder's volume was not taken back"; }
dd if="$TGT_DIR/new" of="$mnt/lun3" bs=4096 seek=$((off / 4096)) \
  conv=notrunc,fsync status=none || { cat "$TGT_DIR/m2.log"; fail "mount: cannot write NEW"; }
# lungate umount: a file just closed may hold the mount a moment longer
# (with write-behind its close drains the buffer first: CI run s44fin3-a
# failed here with "Device or resource busy").
with_timeout 60 "$LUNGATE" umount "$mnt" >/dev/null || fail "mount: cannot unmount"
wait_exit "$mpid" 60 "mount"
fenced "$TGT_DIR/m2.log"
settled mount "$url" 3 "key-file=$key"
"$LUNGATE" verify --key-file "$key" "$url" >"$TGT_DIR/v3" 2>&1 \
  || { cat "$TGT_DIR/v3"; fail "mount: a unit fails authentication"; }

# 4. The owner record (no persistent reservations): the plugin on a
# volume, killed with a write held; the next one takes the record back.
url="iscsi://$TGT_PORTAL/$t/4"
export LUNGATE_TEST_IGNORE_PR=1
"$LUNGATE" format --lazy --key-file "$key" "$url" >/dev/null || fail "format LUN 4"
fault_rule "op=write path=lun-1-4.img off=$((2 * 1048576 + off))-$((2 * 1048576 + off + 4096)) action=stall:$stall"
nbd_gw a4 "url=$url" "key-file=$key"
write_unit "$TGT_DIR/a4.sock" "OLD-" >/dev/null 2>&1 &
held_then_killed a4 4 "${NBD_GW[a4]}"
nbd_gw b4 "url=$url" "key-file=$key"
write_unit "$TGT_DIR/b4.sock" "NEW-" \
  || { cat "$TGT_DIR/b4.log"; fail "owner: the dead holder's volume was not taken back"; }
grep -q "which is no longer running: taking the volume back" "$TGT_DIR/b4.log" \
  || { cat "$TGT_DIR/b4.log"; fail "owner: the taking back is not said"; }
fenced "$TGT_DIR/b4.log"
nbd_stop "${NBD_GW[b4]}"
settled owner "$url" 4 "key-file=$key"
"$LUNGATE" verify --key-file "$key" "$url" >"$TGT_DIR/v4" 2>&1 \
  || { cat "$TGT_DIR/v4"; fail "owner: a unit fails authentication"; }

# 5. The same, with the dead gateway's heartbeat (the owner record at
# 128 KiB) held in tgtd: the next gateway's record must not be written
# before the fence, or the late heartbeat lands over it and the new
# owner loses the volume (the hostile review).
url="iscsi://$TGT_PORTAL/$t/5"
"$LUNGATE" format --lazy --key-file "$key" "$url" >/dev/null || fail "format LUN 5"
nbd_gw a5 "url=$url" "key-file=$key"
nbd_io a5 write 1 65 >/dev/null || fail "heartbeat: the first gateway cannot write"
fault_rule "op=write path=lun-1-5.img off=131072-135168 action=stall:$stall"
held_then_killed a5 5 "${NBD_GW[a5]}"
nbd_gw b5 "url=$url" "key-file=$key"
nbd_io b5 write 2 66 >/dev/null \
  || { cat "$TGT_DIR/b5.log"; fail "heartbeat: the dead holder's volume was not taken back"; }
fault_wait_log "^stall-end 5 " 60
sleep 7 # more than a heartbeat (5 s): the new owner has looked at its record
r=$(nbd_io b5 write 3 67 2>/dev/null) \
  || { cat "$TGT_DIR/b5.log"; fail "heartbeat: the new owner lost the volume to the dead one's late heartbeat ($r)"; }
nbd_stop "${NBD_GW[b5]}"
"$LUNGATE" info "$url" | grep -qx "volume-owner: none" \
  || fail "heartbeat: the record was not cleared at the clean stop"
echo "heartbeat: ok"
echo "test-crash-takeover: ok"
