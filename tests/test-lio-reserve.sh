#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# One writer per LUN on the kernel's own target (LIO, booted by
# functions-lio.sh), with nothing but the URL: the plugin and the mount
# write with the default pool of 4 sessions (LIO refuses writes from every
# session of the holder's initiator name but the nexus that reserved: the
# pool sends writes there); a second gateway is refused, naming the
# holder; -r reads beside the writer; close releases everything; a
# gateway of this host killed with -9 is taken over with takeover=true
# (LIO refuses PREEMPT from the other sessions of its name: the new
# gateway clears the reservation as the dead one's own nexus), and by
# one of two gateways at once without disturbing the winner; a LIO
# whose db_root has no writable pr/ (PR OUT fails with NOT READY) serves
# writes with a warning, as a target without reservations.
. "${srcdir:-.}/functions-nbd.sh"
. "${srcdir:-.}/functions-lio.sh"
lio_enter_netns "$@"
require_lungate_plugin
require_nbd_python
require fusermount3 mountpoint
[ -c /dev/fuse ] || skip "no /dev/fuse"
lio_start
# nbd_gw and nbd_io keep their sockets and logs in TGT_DIR.
TGT_DIR=$(scratch_dir)
url="iscsi://$LIO_PORTAL/$LIO_PLAIN/0"
mnt=$TGT_DIR/mnt
mount_points "$mnt"

# reservation: what info says of LUN 0's reservation.
reservation ()
{
  "$LUNGATE" info "$url" | sed -n 's/^reservation: //p'
}

# 1. The plugin with the default pool writes, and says why only some
# sessions write.
nbd_gw a "url=$url"
nbd_io a write 1 17 >/dev/null \
  || { cat "$TGT_DIR/a.log"; fail "the plugin cannot write to LIO with the default pool"; }
nbd_io a write 2 18 >/dev/null || fail "the plugin's second write"
# Many writes at once (a lone write goes to the least loaded session,
# the first, which happens to hold the reservation).
head -c 8M /dev/urandom >"$TGT_DIR/data8"
with_timeout 120 env -u LD_PRELOAD nbdcopy --requests=32 --request-size=65536 \
  "$TGT_DIR/data8" "nbd+unix:///?socket=$TGT_DIR/a.sock" 2>"$TGT_DIR/copy.err" \
  || { cat "$TGT_DIR/copy.err" "$TGT_DIR/a.log"; fail "8 MiB copied in with 32 requests at once failed"; }
with_timeout 120 env -u LD_PRELOAD nbdcopy "nbd+unix:///?socket=$TGT_DIR/a.sock" - \
  | head -c 8M | cmp -s - "$TGT_DIR/data8" || fail "the 8 MiB copied in do not read back"
nbd_io a write 1 17 >/dev/null || fail "the plugin's third write"
nbd_io a write 2 18 >/dev/null || fail "the plugin's fourth write"
grep -q "the target lets 1 of the 4 sessions write under the reservation" "$TGT_DIR/a.log" \
  || { cat "$TGT_DIR/a.log"; fail "the plugin does not say that one session writes"; }
echo "lio: plugin writes with 4 sessions       ok"

# 2. A second gateway is refused, naming the holder.
nbd_gw b "url=$url"
r=$(nbd_io b write 3 1 2>/dev/null) && fail "a second gateway wrote beside the holder"
grep -q "in use by a gateway on this host" "$TGT_DIR/b.log" \
  || { cat "$TGT_DIR/b.log"; fail "the refusal does not name the holder"; }
nbd_stop "${NBD_GW[b]}"
echo "lio: second gateway refused ($r)         ok"

# 3. Read-only beside the writer.
NBD_GW_RO=1 nbd_gw ro "url=$url"
[ "$(nbd_io ro read 1)" = 17 ] || fail "a read-only gateway does not read the writer's data"
grep -q "read-only beside the writer" "$TGT_DIR/ro.log" \
  || { cat "$TGT_DIR/ro.log"; fail "the reader is not warned"; }
nbd_stop "${NBD_GW[ro]}"
nbd_io a write 3 19 >/dev/null || fail "the writer cannot write after the reader left"
echo "lio: -r beside the writer                ok"

# 4. Close releases the reservation and every registration.
nbd_stop "${NBD_GW[a]}"
res=$(reservation)
[ "$res" = "not reserved" ] || fail "after close: '$res', not 'not reserved'"
echo "lio: released at close                   ok"

# 5. kill -9 of the holder: taken back without takeover (proven dead: its
# runtime file's lock is free), as its own nexus, and LIO answers the
# LUN RESET; a holder that cannot be proven dead (its runtime file
# removed) is refused without takeover, taken over from this host with
# it; what was acknowledged is there; then taken over from another host.
nbd_gw b2 "url=$url"
nbd_io b2 write 4 19 >/dev/null || fail "gateway b2 cannot write"
kill -9 "${NBD_GW[b2]}"; wait "${NBD_GW[b2]}" 2>/dev/null
nbd_gw c "url=$url"
nbd_io c write 4 20 >/dev/null || { cat "$TGT_DIR/c.log"; fail "a dead holder of this host was not taken back"; }
grep -q "LUN RESET complete" "$TGT_DIR/c.log" || { cat "$TGT_DIR/c.log"; fail "LIO: no LUN RESET confirmed"; }
kill -9 "${NBD_GW[c]}"; wait "${NBD_GW[c]}" 2>/dev/null
rm -f "$XDG_RUNTIME_DIR"/lungate/lungate-*.alive
nbd_gw d "url=$url"
nbd_io d write 5 1 >/dev/null 2>&1 && fail "a dead holder's LUN was written without takeover"
nbd_stop "${NBD_GW[d]}"
nbd_gw e "url=$url" takeover=true
nbd_io e write 5 21 >/dev/null \
  || { cat "$TGT_DIR/e.log"; fail "takeover from this host failed"; }
grep -q "took it over from a gateway on this host" "$TGT_DIR/e.log" \
  || { cat "$TGT_DIR/e.log"; fail "the takeover does not say whom it took the LUN from"; }
for u in 1:17 2:18 3:19 4:20; do
  [ "$(nbd_io e read "${u%:*}")" = "${u#*:}" ] || fail "unit ${u%:*} lost at the takeover"
done
# Taken over in turn by a gateway of another initiator name (another
# host): PREEMPT works there; the preempted one fails its writes.
nbd_gw other "url=$url" initiator=iqn.2026-12.org.lungate:otherhost takeover=true
nbd_io other write 6 23 >/dev/null || { cat "$TGT_DIR/other.log"; fail "takeover from another host"; }
r=$(nbd_io e write 7 1 2>/dev/null) && fail "the preempted gateway still writes"
[ "$r" = EPERM ] || fail "the preempted gateway's write failed with $r, not EPERM"
nbd_stop "${NBD_GW[other]}"
nbd_stop "${NBD_GW[e]}"
res=$(reservation)
[ "$res" = "not reserved" ] || fail "after the takeover's close: '$res'"
echo "lio: takeover from this host, another   ok"

# 5b. Two gateways of this host take a dead holder's LUN back at once:
# each finds PREEMPT refused and clears it as the dead one's nexus.  The
# one that comes second must see that the LUN changed hands and must not
# log in as the holder's nexus then, which is now the winner's live
# session (LIO would reinstate it).  LUNGATE_TEST_TAKEOVER_NAP_MS holds
# the slow one just before the clear while the other takes it and writes.
nbd_gw dead "url=$url"
nbd_io dead write 9 1 >/dev/null || fail "gateway dead cannot write"
kill -9 "${NBD_GW[dead]}"; wait "${NBD_GW[dead]}" 2>/dev/null
LUNGATE_TEST_TAKEOVER_NAP_MS=8000 nbd_gw slow "url=$url"
nbd_io slow write 9 2 >"$TGT_DIR/slow.out" 2>&1 &
spid=$!
for _ in $(seq 300); do
  grep -q "test hook: .* before clearing it" "$TGT_DIR/slow.log" && break
  sleep 0.1
done
grep -q "test hook: .* before clearing it" "$TGT_DIR/slow.log" \
  || { cat "$TGT_DIR/slow.log"; fail "the slow gateway never came to the clear"; }
nbd_gw fast "url=$url"
nbd_io fast write 9 24 >/dev/null \
  || { cat "$TGT_DIR/fast.log"; fail "the dead holder's LUN was not taken back"; }
wait "$spid" && { cat "$TGT_DIR/slow.log"; fail "the slow gateway wrote beside the one that took the LUN"; }
# LIO closes a reinstated session's connection a moment after the new
# login (about a second in the VM): time for that before looking.
sleep 5
if grep -E "connection lost|logged in again" "$TGT_DIR/fast.log"; then
  fail "the other gateway's clear reinstated the winner's session"
fi
grep -q "changed hands meanwhile: a gateway on this host" "$TGT_DIR/slow.log" \
  || { cat "$TGT_DIR/slow.log"; fail "the slow gateway does not say that the LUN changed hands"; }
nbd_io fast write 10 25 >/dev/null \
  || { cat "$TGT_DIR/fast.log"; fail "the winner cannot write once the other gave up"; }
[ "$(nbd_io fast read 9)" = 24 ] || fail "the winner's write is not there"
nbd_stop "${NBD_GW[slow]}"
nbd_stop "${NBD_GW[fast]}"
res=$(reservation)
[ "$res" = "not reserved" ] || fail "after the race: '$res'"
echo "lio: two take a dead holder's LUN back   ok"

# 6. lungate mount with the default pool writes and flushes.
"$LUNGATE" mount -f "$url" "$mnt" 2>"$TGT_DIR/mount.log" &
mpid=$!
on_exit kill -9 "$mpid"
for _ in $(seq 100); do [ -e "$mnt/lun0" ] && break; sleep 0.1; done
[ -e "$mnt/lun0" ] || { cat "$TGT_DIR/mount.log"; fail "the mount did not come up"; }
head -c 1M /dev/urandom >"$TGT_DIR/data"
dd if="$TGT_DIR/data" of="$mnt/lun0" bs=64k seek=16 conv=fsync,notrunc status=none \
  || { cat "$TGT_DIR/mount.log"; fail "writing through the mount failed"; }
fusermount3 -u "$mnt" || fail "unmount"
wait_exit "$mpid" 30 "the mount"
nbd_run -r "url=$url" -- "$NBD_PYTHON" -c \
  "import nbd,sys; h=nbd.NBD(); h.connect_uri(sys.argv[1]); sys.stdout.buffer.write(h.pread(1048576, 1048576))" '$uri' \
  >"$TGT_DIR/back" || fail "reading back"
cmp -s "$TGT_DIR/data" "$TGT_DIR/back" || fail "the mount's write did not reach the LUN"
echo "lio: mount writes with 4 sessions        ok"

# 7. No writable db_root/pr: PR OUT fails with NOT READY; writes go on
# with a warning naming the cause.
lio_ctl prdir off >/dev/null || fail "lio_ctl prdir off"
nbd_gw nopr "url=$url"
nbd_io nopr write 8 22 >/dev/null \
  || { cat "$TGT_DIR/nopr.log"; fail "no writes when LIO cannot keep reservations"; }
grep -q "the target refuses persistent reservations (.*communication failure" "$TGT_DIR/nopr.log" \
  || { cat "$TGT_DIR/nopr.log"; fail "no warning naming why reservations are not used"; }
nbd_stop "${NBD_GW[nopr]}"
lio_ctl prdir on >/dev/null || fail "lio_ctl prdir on"
res=$(reservation)
[ "$res" = "not reserved" ] || fail "after the fallback: '$res'"
echo "lio: no db_root/pr: writes, warned       ok"
