#!/usr/bin/env bash
# lungate mount on a lungate volume: --shared refused with nothing
# mounted; SIGTERM of a read-write mount releases the reservation and
# leaves the volume clean; --takeover from a live plugin: the plugin's
# writes fail EPERM; a read-only mount beside the writer reads what the
# writer wrote later; a mount beside a mount; verify at the end.
. /work/main/tests/attack-pr/common.sh
require fusermount3 mountpoint
tgt_start
t=iqn.2026-11.org.lungate:atk10
tgt_add_target 1 "$t"
tgt_add_lun 1 1 16M
tgt_allow 1 ALL
url="iscsi://$TGT_PORTAL/$t/1"
key=$TGT_DIR/key; head -c 32 /dev/urandom >"$key"
"$LUNGATE" format --lazy --key-file "$key" "$url" >/dev/null || fail "format"
mnt=$TGT_DIR/mnt; mnt2=$TGT_DIR/mnt2; mkdir -p "$mnt" "$mnt2"
umount_all () { fusermount3 -u -z "$mnt" 2>/dev/null; fusermount3 -u -z "$mnt2" 2>/dev/null; true; }
on_exit umount_all
state () { "$LUNGATE" info "$url" | grep "^reservation\|^volume-state"; }

echo "== --shared on a volume"
"$LUNGATE" mount --shared --key-file "$key" "$url" "$mnt" 2>"$TGT_DIR/sh.err"; rc=$?
echo "rc=$rc: $(cat "$TGT_DIR/sh.err")"
mountpoint -q "$mnt" && fail "BROKEN: --shared on a volume left it mounted"
[ $rc != 0 ] || fail "BROKEN: --shared on a volume exited 0"

echo "== SIGTERM of a read-write mount"
with_timeout 60 "$LUNGATE" mount --key-file "$key" "$url" "$mnt" || fail "mount"
printf 'M%.0s' $(seq 4096) | dd of="$mnt/lun1" bs=4096 seek=5 conv=notrunc status=none || fail "write"
state
mpid=$(pgrep -f "lungate mount --key-file $key $url $mnt" | head -1)
echo "mount pid $mpid"; kill -TERM "$mpid"
for _ in $(seq 100); do kill -0 "$mpid" 2>/dev/null || break; sleep 0.1; done
kill -0 "$mpid" 2>/dev/null && fail "the mount did not exit on SIGTERM"
mountpoint -q "$mnt" && { echo "still mounted after SIGTERM"; fusermount3 -u -z "$mnt"; }
s=$(state); echo "$s"
echo "$s" | grep -q "^reservation: not reserved" || fail "BROKEN: SIGTERM of a mount left its reservation"
echo "$s" | grep -q "volume-state: clean" || echo "NOTE: SIGTERM left the volume dirty"

echo "== ro mount beside a writing plugin"
gw w "url=$url" "key-file=$key"
io w write 1 17 >/dev/null || fail "w write"
with_timeout 60 "$LUNGATE" mount -o ro --key-file "$key" "$url" "$mnt" || fail "ro mount"
a=$(dd if="$mnt/lun1" bs=4096 skip=1 count=1 iflag=direct status=none | head -c1 | od -An -tu1 | tr -d ' ')
echo "ro mount reads unit 1: $a (want 17)"
io w write 1 18 >/dev/null; io w write 2 19 >/dev/null
a=$(dd if="$mnt/lun1" bs=4096 skip=1 count=1 iflag=direct status=none | head -c1 | od -An -tu1 | tr -d ' ')
b=$(dd if="$mnt/lun1" bs=4096 skip=2 count=1 iflag=direct status=none | head -c1 | od -An -tu1 | tr -d ' ')
echo "after the writer rewrote them, the ro mount reads unit 1: $a (want 18), unit 2: $b (want 19)"
[ "$a" = 18 ] && [ "$b" = 19 ] || echo "BROKEN: a read-only mount beside the writer reads stale or zeroed units"
fusermount3 -u "$mnt"

echo "== --takeover from the live plugin"
sleep 1
with_timeout 60 "$LUNGATE" mount --takeover --key-file "$key" "$url" "$mnt" || fail "takeover mount"
r=$(io w write 3 20 2>/dev/null); echo "the preempted plugin's write: $r"
[ "$r" = EPERM ] || fail "BROKEN: the preempted plugin's write gave $r"
printf 'T%.0s' $(seq 4096) | dd of="$mnt/lun1" bs=4096 seek=4 conv=notrunc status=none || fail "write via takeover mount"
echo "== a second rw mount beside it (other dir)"
"$LUNGATE" mount --key-file "$key" "$url" "$mnt2" 2>"$TGT_DIR/m2.err"; rc=$?
echo "rc=$rc $(head -c 300 "$TGT_DIR/m2.err")"
mountpoint -q "$mnt2" && fail "BROKEN: a second rw mount was mounted"
fusermount3 -u "$mnt"
sleep 1
nbd_stop "$pid_w"
state
"$LUNGATE" verify --key-file "$key" "$url" 2>&1 | tail -1
echo done
