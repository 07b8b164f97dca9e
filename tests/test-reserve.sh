#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# One writer per LUN (issue 14), against tgt's persistent reservations:
# a second gateway on an encrypted LUN is refused before it writes and
# the first goes on; -r beside a writer; key add and verify --repair
# refused while a gateway holds the volume; --takeover after kill -9 of
# the holder; a preempted gateway fails writes with EPERM and loses
# nothing acknowledged; a target restart under a held reservation;
# shared=true on a plain LUN, and refused on an encrypted one; a claim
# after another gateway's crash sees the volume dirty; and what the
# hostile review found: an idle preempted holder (also across a target
# restart), a reader beside the writer, two gateways started at once.
. "${srcdir:-.}/functions-nbd.sh"
require_lungate_plugin
require_test_hooks
require_nbd_python
tgt_start
t=iqn.2026-11.org.lungate:reserve
tgt_add_target 1 "$t"
tgt_add_lun 1 1 16M
tgt_add_lun 1 2 16M
tgt_add_lun 1 3 16M
# LUN 3 writes through (WCE=0): a new login there is no sign of loss.
tgt_lun_params 1 3 mode_page=8:0:18:0x10:0:0xff:0xff:0:0:0xff:0xff:0xff:0xff:0x80:0x14:0:0:0:0:0:0
tgt_allow 1 ALL
url="iscsi://$TGT_PORTAL/$t/1"
plain="iscsi://$TGT_PORTAL/$t/2"
key=$TGT_DIR/key; head -c 32 /dev/urandom >"$key"
"$LUNGATE" format --lazy --key-file "$key" "$url" >/dev/null || fail "format"

gw () { nbd_gw "$@"; }
io () { nbd_io "$@"; }

# 1. A second gateway on the encrypted LUN is refused; the first goes on.
gw a "url=$url" "key-file=$key"
io a write 1 17 >/dev/null || fail "the first gateway cannot write"
gw b "url=$url" "key-file=$key"
r=$(io b write 1 99 2>/dev/null) && fail "a second gateway wrote to a held LUN"
grep -q "in use by a gateway on this host .* since .*(reservation key 0x4c" "$TGT_DIR/b.log" \
  || { cat "$TGT_DIR/b.log"; fail "the refusal does not name the holder"; }
# The holder runs on this host: named by its pid, and to be stopped
# first (--takeover is for a holder that is gone).
grep -q "pid ${NBD_GW[a]}.*stop that gateway first" "$TGT_DIR/b.log" \
  || { cat "$TGT_DIR/b.log"; fail "the refusal does not name the holder's pid and say what to do"; }
nbd_stop "${NBD_GW[b]}"
io a write 2 18 >/dev/null || fail "the first gateway was disturbed by the second"
[ "$(io a read 1)" = 17 ] || fail "unit 1 lost the first gateway's data"

# 2. Read-only beside the writer.
[ "$(nbd_run -r "url=$url" "key-file=$key" -- "$NBD_PYTHON" -c \
  'import nbd,sys; h=nbd.NBD(); h.connect_uri(sys.argv[1]); print(h.pread(4096, 4096)[0])' '$uri' \
  2>"$TGT_DIR/ro.log")" = 17 ] \
  || { cat "$TGT_DIR/ro.log"; fail "a read-only gateway beside the writer cannot read"; }
grep -q "read-only beside the writer, a gateway on this host .*may read as EIO" "$TGT_DIR/ro.log" \
  || { cat "$TGT_DIR/ro.log"; fail "the reader is not told what reading beside a writer means"; }
"$LUNGATE" verify --key-file "$key" "$url" >/dev/null 2>&1 || true

# 3. The writing commands are refused while the gateway holds the volume.
head -c 32 /dev/urandom >"$TGT_DIR/k2"
expect_fail_with "in use by a gateway" "$LUNGATE" key add --key-file "$key" \
  --new-key-file "$TGT_DIR/k2" "$url"
expect_fail_with "in use by a gateway" "$LUNGATE" verify --repair --key-file "$key" "$url"
expect_fail_with "in use by a gateway" "$LUNGATE" format --force --key-file "$key" "$url"
# They have no read-only mode: the refusal offers none (it offered
# "-r, -o ro" to format).
for c in "format --force" "verify --repair" "key add --new-key-file $TGT_DIR/k2"; do
  # shellcheck disable=SC2086 # the command's words
  if "$LUNGATE" $c --key-file "$key" "$url" 2>&1 | grep -q "read-only"; then
    fail "lungate $c, refused, offers a read-only open it does not have"
  fi
done
"$LUNGATE" info "$url" >"$TGT_DIR/info"
grep -q "^reservation: Write Exclusive, Registrants Only by a gateway on this host" "$TGT_DIR/info" \
  || { cat "$TGT_DIR/info"; fail "info does not show the holder"; }
"$LUNGATE" info --json "$url" | grep -q '"reservation": {"type": "Write Exclusive, Registrants Only", "holder": "0x4c' \
  || fail "info --json does not carry the holder"

# 4. kill -9 of a holder that cannot be proven dead (its runtime file
# gone, as for another user's or container's gateway: test-crash-takeover
# has the one that can): refused without --takeover, served with it;
# what was acknowledged is there, and verify is clean after a repair.
kill -9 "${NBD_GW[a]}"; wait "${NBD_GW[a]}" 2>/dev/null
rm -f "$XDG_RUNTIME_DIR"/lungate/lungate-*.alive
gw c "url=$url" "key-file=$key"
io c write 3 1 >/dev/null 2>&1 && fail "a dead holder's LUN was opened without --takeover"
nbd_stop "${NBD_GW[c]}"
gw d "url=$url" "key-file=$key" takeover=true
{ [ "$(io d read 1)" = 17 ] && [ "$(io d read 2)" = 18 ]; } || fail "acknowledged data lost at the takeover"
io d write 3 19 >/dev/null || fail "the gateway that took over cannot write"
grep -q "took it over from a gateway on this host" "$TGT_DIR/d.log" \
  || { cat "$TGT_DIR/d.log"; fail "the takeover does not say whom it preempted"; }

# 5. Preempted while it runs: writes fail with EPERM, reads go on, and
# what it acknowledged is there.
gw e "url=$url" "key-file=$key" takeover=true
[ "$(io e read 3)" = 19 ] || fail "the preempting gateway lost unit 3"
r=$(io d write 4 20 2>/dev/null) && fail "a preempted gateway still writes"
[ "$r" = EPERM ] || fail "a preempted gateway's write failed with $r, not EPERM"
grep -q "lost its reservation" "$TGT_DIR/d.log" || fail "the preempted gateway does not say it lost the LUN"
# The next write is refused without going out, naming who holds it now.
r=$(io d write 4 20 2>/dev/null) && fail "a preempted gateway wrote the second time"
[ "$r" = EPERM ] || fail "a preempted gateway's second write failed with $r, not EPERM"
grep -q "held now: .*reservation key 0x4c" "$TGT_DIR/d.log" \
  || { cat "$TGT_DIR/d.log"; fail "the preempted gateway does not name the holder now"; }
[ "$(io d read 3)" = 19 ] || fail "a preempted gateway cannot read"
io e write 4 21 >/dev/null || fail "the new holder cannot write"
nbd_stop "${NBD_GW[d]}"

# 6. The target restarts and forgets every reservation: the holder takes
# it again before it writes, and a second gateway is still refused.
tgt_restart
# (Over tgt's volatile cache the first flush after the sessions log in
# again may report EIO once, when a login came while a write was in
# flight: lungate-format(5), "Target power loss".  Then it is written
# again.)
io e write 5 22 >/dev/null || io e write 5 22 >/dev/null \
  || { grep -v "stats (exit)" "$TGT_DIR/e.log"; fail "the holder cannot write after the target restarted"; }
grep -q "reserved it again" "$TGT_DIR/e.log" || { cat "$TGT_DIR/e.log"; fail "the holder did not reserve again"; }
gw f "url=$url" "key-file=$key"
io f write 6 1 >/dev/null 2>&1 && fail "a second gateway wrote after the target restarted"
nbd_stop "${NBD_GW[f]}"
nbd_stop "${NBD_GW[e]}"
for u in 1:17 2:18 3:19 4:21 5:22; do
  [ "$(nbd_run -r "url=$url" "key-file=$key" -- "$NBD_PYTHON" -c \
    "import nbd,sys; h=nbd.NBD(); h.connect_uri(sys.argv[1]); print(h.pread(4096, ${u%:*} * 4096)[0])" '$uri')" = "${u#*:}" ] \
    || fail "unit ${u%:*} does not hold ${u#*:}"
done
"$LUNGATE" verify --repair --key-file "$key" "$url" >/dev/null || fail "verify --repair"
"$LUNGATE" verify --key-file "$key" "$url" >/dev/null || fail "verify after the repair is not clean"
"$LUNGATE" info "$url" | grep -q "^reservation: not reserved" || fail "the reservation was not released"

# 7. shared=true: two writers on a plain LUN; refused for a volume.
gw s1 "url=$plain" shared=true
gw s2 "url=$plain" shared=true
{ io s1 write 1 5 >/dev/null && io s2 write 2 6 >/dev/null; } || fail "shared gateways cannot both write"
[ "$(io s1 read 2)" = 6 ] || fail "a shared gateway does not see the other's write"
nbd_stop "${NBD_GW[s1]}"; nbd_stop "${NBD_GW[s2]}"
gw s3 "url=$url" "key-file=$key" shared=true
io s3 write 1 1 >/dev/null 2>&1 && fail "shared=true wrote to a lungate volume"
grep -q "cannot be shared: it has one writer" "$TGT_DIR/s3.log" || { cat "$TGT_DIR/s3.log"; fail "no reason for refusing shared=true"; }
nbd_stop "${NBD_GW[s3]}"
# 8. A plugin started (the volume read clean) before another gateway
# wrote and was killed, and the target then restarted (forgetting that
# reservation): its first writable connection claims the LUN and must
# take the volume as the killed one left it, dirty, not as it was at its
# start; else its clean stop marks a crashed volume clean.  (On a
# write-through LUN: over a volatile cache the restart alone keeps the
# volume dirty.)
wt="iscsi://$TGT_PORTAL/$t/3"
"$LUNGATE" format --lazy --key-file "$key" "$wt" >/dev/null || fail "format LUN 3"
gw p0 "url=$wt" "key-file=$key"
gw p1 "url=$wt" "key-file=$key"
io p1 write 7 23 >/dev/null || fail "p1 cannot write"
kill -9 "${NBD_GW[p1]}"; wait "${NBD_GW[p1]}" 2>/dev/null
"$LUNGATE" info "$wt" | grep -q "^volume-state: dirty" || fail "not dirty after kill -9 of p1"
tgt_restart
io p0 write 8 24 >/dev/null || fail "p0 cannot write after the restart"
grep -q "left dirty since it was opened" "$TGT_DIR/p0.log" \
  || { cat "$TGT_DIR/p0.log"; fail "p0 did not see the volume dirty at its claim"; }
nbd_stop "${NBD_GW[p0]}"
"$LUNGATE" info "$wt" | grep -q "^volume-state: dirty" \
  || fail "p0's clean stop marked a volume clean that p1 left dirty"
# 9. (From the hostile review.)  A holder that sits idle while another
# takes the LUN over, writes and closes (releasing everything): its next
# write fails (tgt's unit attention RESERVATIONS PREEMPTED says so; with
# nothing reserved any more the write itself would be accepted), and
# what the other acknowledged stays.
gw i1 "url=$plain"
io i1 write 1 31 >/dev/null || fail "i1 cannot write"
gw i2 "url=$plain" takeover=true
io i2 write 1 32 >/dev/null || fail "i2 cannot write"
nbd_stop "${NBD_GW[i2]}"
# i1 idle past its 3 s poll of the reservation (PR_POLL_MS): the poll's
# own PERSISTENT RESERVE IN meets the unit attention, and finds nothing
# reserved.  (Under ASan beside a CPU hog, starting i2 took that long
# and i1's write went through: the poll took the LUN back.)
sleep 4
if r=$(io i1 write 1 33 2>/dev/null); then
  for g in i1 i2; do echo "--- $g.log ---"; cat "$TGT_DIR/$g.log"; done
  "$LUNGATE" info "$plain" | grep "^reservation" || true
  fail "a preempted gateway wrote after its preempter closed"
fi
[ "$r" = EPERM ] || fail "the preempted gateway's write failed with $r, not EPERM"
[ "$(io i1 read 1)" = 32 ] || fail "the preempter's acknowledged write was lost"
nbd_stop "${NBD_GW[i1]}"

# 9b. The same, but the idle holder's connection is lost while the other
# takes the LUN over, and it logs in again only after the other closed:
# its new nexus gets no unit attention, and the target holds no
# reservation, as after a restart.  The PR generation tells the two
# apart (a restart resets it; the other's registration, preempt and
# release raised it): the LUN is not taken back.
fault_proxy_start hold
# (One connection: the cut takes all of j1's.)
gw j1 "url=iscsi://127.0.0.1:$FAULT_PORT/$t/2" connections=1
io j1 write 1 34 >/dev/null || fail "j1 cannot write"
echo cut >"$TGT_DIR/proxy.rules"
# The next PDU from the target (a keepalive's answer) closes j1's
# connection; new ones are refused until the hold file is removed.
for _ in $(seq 100); do [ -e "$TGT_DIR/hold" ] && break; sleep 0.1; done
[ -e "$TGT_DIR/hold" ] || fail "the proxy did not cut j1's connection"
gw j2 "url=$plain" takeover=true
# (Unit 2: the blocks j1 last wrote stay as they were, so the check of
# those after j1's login finds nothing amiss.)
io j2 write 2 35 >/dev/null || fail "j2 cannot write"
nbd_stop "${NBD_GW[j2]}"
: >"$TGT_DIR/proxy.rules"
# A write j1 holds through the outage (it passed the refusal check
# before the loss was known) fails after the login, unsent.
io j1 write 1 36 >"$TGT_DIR/j1.held" 2>&1 &
held=$!
sleep 1
rm -f "$TGT_DIR/hold"
wait "$held" && { for g in j1 j2; do echo "--- $g.log ---"; cat "$TGT_DIR/$g.log"; done
  fail "a preempted gateway that logged in again after its preempter closed took the LUN back"; }
grep -q "EPERM\|EIO" "$TGT_DIR/j1.held" \
  || { cat "$TGT_DIR/j1.held" "$TGT_DIR/j1.log"; fail "j1's held write failed, but not with EPERM or EIO"; }
r=$(io j1 write 1 37 2>/dev/null) && fail "a preempted gateway wrote after its login"
[ "$r" = EPERM ] || { cat "$TGT_DIR/j1.log"
  fail "the preempted gateway's write after its login failed with $r, not EPERM"; }
grep -q "lost its reservation" "$TGT_DIR/j1.log" \
  || { cat "$TGT_DIR/j1.log" "$TGT_DIR/proxy.log"; fail "j1 does not say it lost the LUN"; }
[ "$(io j1 read 2)" = 35 ] || fail "the preempter's acknowledged write was lost (after j1's login)"
[ "$(io j1 read 1)" = 34 ] || fail "j1's refused writes changed unit 1"
nbd_stop "${NBD_GW[j1]}"

# 9c. (From the hostile review.)  As 9b, but the target also restarts
# while the holder is cut off: the other then takes the LUN without a
# preempt, writes and closes.  The generation starts again from 0 at
# the restart, and their registration and release raise it, yet not
# past what the holder saw before: still not a target that only forgot.
gw k1 "url=iscsi://127.0.0.1:$FAULT_PORT/$t/2" connections=1
io k1 write 1 38 >/dev/null || fail "k1 cannot write"
# (The cases before left the generation well above what k2's commands
# alone bring it to.  Line 2: 9b's cut on line 1 fired already.)
printf '\ncut\n' >"$TGT_DIR/proxy.rules"
for _ in $(seq 100); do [ -e "$TGT_DIR/hold" ] && break; sleep 0.1; done
[ -e "$TGT_DIR/hold" ] || fail "the proxy did not cut k1's connection"
# k1 sees the close within a second or two (its idle loop services the
# socket once a second), before the target restarts.
for _ in $(seq 100); do grep -q "connection lost" "$TGT_DIR/k1.log" && break; sleep 0.1; done
grep -q "connection lost" "$TGT_DIR/k1.log" \
  || { cat "$TGT_DIR/k1.log"; fail "k1 did not see its connection closed within 10 s"; }
: >"$TGT_DIR/proxy.rules"
tgt_restart
gw k2 "url=$plain"
io k2 write 3 39 >/dev/null || fail "k2 cannot write after the restart"
nbd_stop "${NBD_GW[k2]}"
rm -f "$TGT_DIR/hold"
if r=$(io k1 write 1 40 2>/dev/null); then
  for g in k1 k2; do echo "--- $g.log ---"; cat "$TGT_DIR/$g.log"; done
  fail "a holder cut off across a restart took the LUN back after another gateway used and released it"
fi
[ "$r" = EPERM ] || { cat "$TGT_DIR/k1.log" "$TGT_DIR/proxy.log"
  fail "the cut-off holder's write failed with $r, not EPERM"; }
[ "$(io k1 read 3)" = 39 ] || fail "k2's acknowledged write was lost"
[ "$(io k1 read 1)" = 38 ] || { cat "$TGT_DIR/k1.log"; fail "k1's refused write changed unit 1"; }
nbd_stop "${NBD_GW[k1]}"

# 9d. (From the hostile review.)  As 9, but the idle holder's next
# writes come as a burst, all at once: the first to find the poll of the
# reservation due reads it (and meets the unit attention); the others
# must wait for that read, not go out meanwhile and land on a LUN that
# nobody holds any more.
gw m1 "url=$plain"
io m1 write 1 41 >/dev/null || fail "m1 cannot write"
gw m2 "url=$plain" takeover=true
io m2 write 1 42 >/dev/null || fail "m2 cannot write"
nbd_stop "${NBD_GW[m2]}"
sleep 4
# With write-behind (test-faults-wb) the writes are acknowledged once
# buffered: the flush after them must fail, with EPERM.
read -r ok flushed after < <(env -u LD_PRELOAD "$NBD_PYTHON" - "$TGT_DIR/m1.sock" <<'PY'
import nbd, sys
h = nbd.NBD(); h.connect_uri("nbd+unix:///?socket=" + sys.argv[1])
cs = [h.aio_pwrite(bytes([43]) * 4096, u * 4096) for u in range(4, 20)]
while h.aio_in_flight() > 0:
    h.poll(-1)
ok = 0
for c in cs:
    try:
        h.aio_command_completed(c)
        ok += 1
    except nbd.Error:
        pass
try:
    h.flush()
    flushed = "ok"
except nbd.Error as e:
    flushed = e.errno or "error"
try:
    h.pwrite(bytes([44]) * 4096, 20 * 4096)
    after = "ok"
except nbd.Error as e:
    after = e.errno or "error"
print(ok, flushed, after)
PY
) || fail "the burst of writes could not be sent"
# The write after that fails at once, write-behind or not.
[ "$after" = EPERM ] || { cat "$TGT_DIR/m1.log"
  fail "a preempted gateway's write after its refused burst: $after, not EPERM"; }
if [ -n "${LUNGATE_TEST_WRITE_BEHIND:-}" ]; then
  [ "$flushed" = EPERM ] || { cat "$TGT_DIR/m1.log"
    fail "the flush after a preempted gateway's buffered burst: $flushed, not EPERM"; }
else
  [ "$ok" = 0 ] || { cat "$TGT_DIR/m1.log"
    fail "$ok of 16 writes of a preempted gateway, sent at once, were acknowledged"; }
fi
for u in $(seq 4 19); do
  b=$(od -An -tu1 -N1 -j $((u * 4096)) "$(tgt_lun_file 1 2)" | tr -d ' ')
  [ "$b" != 43 ] || fail "a refused write of the burst reached unit $u"
done
[ "$(io m1 read 1)" = 42 ] || fail "the preempter's acknowledged write was lost (9d)"
nbd_stop "${NBD_GW[m1]}"

# 10. A reader (nbdkit -r) beside the writer of a volume reads what the
# writer wrote after the reader had read the unit (not zeroes from its
# cached metadata).
gw w "url=$url" "key-file=$key"
io w write 1 41 >/dev/null || fail "w cannot write"
NBD_GW_RO=1 gw r "url=$url" "key-file=$key"
[ "$(io r read 1)" = 41 ] || fail "the reader does not read unit 1"
{ io w write 1 42 >/dev/null && io w write 2 43 >/dev/null; } || fail "w cannot write again"
{ [ "$(io r read 1)" = 42 ] && [ "$(io r read 2)" = 43 ]; } \
  || fail "a reader beside the writer does not read the writer's new data"
nbd_stop "${NBD_GW[r]}"; nbd_stop "${NBD_GW[w]}"

# 11. Two gateways that made the same key (started in the same second
# with the same random bits: LUNGATE_TEST_PR_KEY forces it): the second
# does not take the first's reservation for its own.
LUNGATE_TEST_PR_KEY=0x4c00000000001234 gw k1 "url=$plain"
io k1 write 1 51 >/dev/null || fail "k1 cannot write"
LUNGATE_TEST_PR_KEY=0x4c00000000001234 gw k2 "url=$plain"
io k2 write 2 52 >/dev/null 2>&1 && fail "a gateway with the holder's key wrote beside it"
nbd_stop "${NBD_GW[k2]}"; nbd_stop "${NBD_GW[k1]}"
# And started at the same moment, a writable connection to each at once:
# one writes, the other is refused, every round.
for i in 1 2 3; do
  rm -f "$TGT_DIR/x.sock" "$TGT_DIR/y.sock"
  "${NBDKIT[@]}" -f -U "$TGT_DIR/x.sock" "$LUNGATE_PLUGIN" "url=$plain" 2>>"$TGT_DIR/x.log" &
  pid_x=$!
  "${NBDKIT[@]}" -f -U "$TGT_DIR/y.sock" "$LUNGATE_PLUGIN" "url=$plain" 2>>"$TGT_DIR/y.log" &
  pid_y=$!
  on_exit kill -9 "$pid_x" "$pid_y"
  for _ in $(seq 100); do [ -S "$TGT_DIR/x.sock" ] && [ -S "$TGT_DIR/y.sock" ] && break; sleep 0.1; done
  io x write 1 $i >"$TGT_DIR/x.r" 2>/dev/null & a=$!
  io y write 2 $i >"$TGT_DIR/y.r" 2>/dev/null & b=$!
  wait $a; ra=$?; wait $b; rb=$?
  [ $ra = 0 ] && [ $rb = 0 ] && fail "round $i: two gateways started together both wrote"
  [ $ra = 0 ] || [ $rb = 0 ] || fail "round $i: neither of two gateways could write"
  kill "$pid_x" "$pid_y"
  for p in "$pid_x" "$pid_y"; do while kill -0 "$p" 2>/dev/null; do sleep 0.1; done; done
done
echo "test-reserve: ok"
