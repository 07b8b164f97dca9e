#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# Write-behind (src/dev/wb.h, issue 29): writes are acknowledged once
# buffered, and its promises hold against a target whose backing store
# stalls or fails chosen writes (faultio under tgtd):
#   1. a write returns before the target has it (it is buffered);
#   2. a read from another connection returns that write meanwhile;
#   3. a flush returns only once the write is in the target's backing file;
#   4. a newer write to the same bytes is not overtaken by the older,
#      stalled one;
#   5. a buffered write that fails makes the next flush of each client
#      fail once, and the log names the LUN and the range;
#   6. nbdkit stopped (SIGTERM) right after a buffered write writes it
#      before it exits, and a mount started meanwhile waits for its
#      release rather than being refused;
#   7. the mount: fsync returns only once the write is in the backing file,
#      and a failed buffered write fails the next fsync;
#   8. by default the plugin writes through (the write waits for the
#      target);
#   9. a FUA write after a failed buffered write succeeds, and the flush
#      after it reports the failure;
#  10. a read of the last of 2000 buffered writes does not wait for the
#      others;
#  11. nbdkit stopped with 2000 writes buffered for a stalled target
#      exits at once, saying so in one line;
#  12. a write the target answers with an error, however slowly, fails
#      alone (the 200 behind it are written);
#  13. a write that fails after its client left is reported to the next
#      client's flush;
#  14. a write waiting for a buffered write to the same block does not
#      hold other clients' writes.
. "${srcdir:-.}/functions-fault.sh"
require_lungate_plugin
require_nbd_python
fault_tgt_start
t=iqn.2026-12.org.lungate:wb
tgt_add_target 1 "$t"
tgt_add_lun 1 1 32M
for l in 2 3; do tgt_add_lun 1 "$l" 16M; done
tgt_allow 1 ALL
url="iscsi://$TGT_PORTAL/$t"
img=$(tgt_lun_file 1 1)
f=$(basename "$img")
MiB=$((1 << 20))

# byte_at FILE OFFSET: the byte there, as two hex digits.
byte_at () { od -An -tx1 -j "$2" -N1 "$1" | tr -d ' '; }

cat >"$TGT_DIR/wb.py" <<'PY'
import nbd, sys, os
sock, faultlog = sys.argv[1], sys.argv[2]
def conn():
    h = nbd.NBD()
    h.connect_uri(sock if "://" in sock else "nbd+unix:///?socket=" + sock)
    return h
def stalled_end():
    return any(l.startswith("stall-end ") for l in open(faultlog))
step = sys.argv[3]
if step == "buffered":
    # 1-3: a write the target stalls, read back from another connection,
    # then flushed.
    a, b = conn(), conn()
    a.pwrite(b"\x5a" * 65536, 1 << 20)
    print("ended-before-ack" if stalled_end() else "acked-first")
    d = b.pread(65536, 1 << 20)
    print("read-latest" if d == b"\x5a" * 65536 else "read-stale %r" % set(d))
    # The read waited for that write.  Five more, apart (not joined),
    # each stalled: more than the workers, so that one is still buffered
    # when the flush comes.
    for i in range(5):
        a.pwrite(b"\x5b" * 65536, (2 << 20) + i * 131072)
    a.flush()
    print("flushed")
elif step == "overtake":
    # 4: the older write stalls in the target; the newer one to the same
    # bytes must land after it.
    a = conn()
    a.pwrite(b"OLD!" * 16384, 3 << 20)
    a.pwrite(b"new!" * 16384, 3 << 20)
    a.flush()
    print("flushed")
elif step == "fail":
    # 5: two clients; the write fails in the background.
    a, b = conn(), conn()
    a.pwrite(b"\x77" * 4096, 5 << 20)
    print("acked")
    sys.stdout.flush()
    input()   # the test waits for the failure in the log
    for name, h in (("a", a), ("b", b), ("a", a), ("b", b)):
        try:
            h.flush(); print("flush", name, "ok")
        except nbd.Error as e:
            print("flush", name, "failed", e.errno)
elif step == "write":
    a = conn()
    a.pwrite(b"\x6b" * 65536, 7 << 20)
    print("acked")
elif step == "fua":
    # 9: a FUA write after a failed buffered write succeeds (its data is
    # durable), and the flush after it reports the loss.
    a = conn()
    a.pwrite(b"\x77" * 4096, 5 << 20)
    sys.stdout.write("acked\n"); sys.stdout.flush()
    input()
    try:
        a.pwrite(b"\x11" * 4096, 9 << 20, nbd.CMD_FLAG_FUA); print("fua ok")
    except nbd.Error as e:
        print("fua failed", e.errno)
    for i in range(2):
        try:
            a.flush(); print("flush ok")
        except nbd.Error as e:
            print("flush failed", e.errno)
elif step == "many":
    # 10: 2000 writes apart, each slowed by the target; a read of the last
    # one from another connection returns it without waiting for the
    # writes ahead of it.
    a, b = conn(), conn()
    for i in range(2000):
        a.aio_pwrite(nbd.Buffer.from_bytearray(bytearray([i % 251 + 1]) * 4096),
                     (8 << 20) + i * 8192)
    while a.aio_in_flight() > 0:
        a.poll(-1)
    d = b.pread(4096, (8 << 20) + 1999 * 8192)
    done = sum(1 for l in open(faultlog) if l.startswith("delay-end"))
    print("read-latest" if d == bytes([1999 % 251 + 1]) * 4096 else "read-stale")
    print("written-before-read", done)
    a.flush()
    print("flushed")
elif step == "slowerr":
    # 12: one write the target fails slowly (a bad sector), 200 others
    # behind it: they are written, and the flush reports the one.
    a = conn()
    a.pwrite(b"B" * 4096, 24 << 20)
    for i in range(1, 201):
        a.aio_pwrite(nbd.Buffer.from_bytearray(bytearray(b"g") * 4096),
                     (24 << 20) + i * 8192)
    while a.aio_in_flight() > 0:
        a.poll(-1)
    try:
        a.flush(); print("flush ok")
    except nbd.Error as e:
        print("flush failed", e.errno)
elif step == "leave":
    # 13: a client writes and leaves before the write fails.
    a = conn()
    a.pwrite(b"L" * 4096, 26 << 20)
    a.shutdown()
    print("left")
elif step == "later":
    b = conn()
    for i in range(2):
        try:
            b.flush(); print("flush ok")
        except nbd.Error as e:
            print("flush failed", e.errno)
elif step == "hol":
    # 14: a rewrite of a block the target holds waits; another client's
    # write elsewhere does not wait behind it.
    import time
    ends = lambda: sum(1 for l in open(faultlog) if l.startswith("stall-end"))
    before = ends()
    a, b = conn(), conn()
    a.pwrite(b"1" * 4096, 28 << 20)
    time.sleep(0.5)
    a.aio_pwrite(nbd.Buffer.from_bytearray(bytearray(b"2") * 4096), 28 << 20)
    time.sleep(0.5)
    b.pwrite(b"3" * 4096, 29 << 20)
    print("ended-before-other" if ends() > before else "other-first")
    while a.aio_in_flight() > 0:
        a.poll(-1)
    a.flush()
PY

gw_log () { cat "$TGT_DIR/$1.log" >&2; }
# wait_line LOG REGEX TENTHS [COUNT]: until LOG has COUNT (1) lines that
# match, for at most TENTHS/10 s (the checks after it say what is
# missing).
wait_line ()
{
  for _ in $(seq "$3"); do
    [ "$(grep -c -- "$2" "$1")" -ge "${4:-1}" ] && return 0
    sleep 0.1
  done
  return 0
}

# 1-3.
fault_rule "op=write path=$f off=$MiB-$((MiB + 65536)) action=stall:4000"
fault_rule "op=write path=$f off=$((2 * MiB))-$((2 * MiB + 5 * 131072)) action=stall:3000 count=5"
nbd_gw g "url=$url/1" writebehind=8M
env -u LD_PRELOAD "$NBD_PYTHON" "$TGT_DIR/wb.py" "$TGT_DIR/g.sock" "$FAULT_LOG" buffered \
  >"$TGT_DIR/buffered.out" || { gw_log g; cat "$TGT_DIR/buffered.out"; fail "the buffered-write client"; }
cat "$TGT_DIR/buffered.out"
grep -qx acked-first "$TGT_DIR/buffered.out" \
  || fail "the write was acknowledged only after the target had it (not buffered)"
grep -qx read-latest "$TGT_DIR/buffered.out" \
  || fail "a read beside a buffered write did not return it"
[ "$(grep -c "^stall-end 2 " "$FAULT_LOG")" = 5 ] \
  || { cat "$FAULT_LOG"; fail "the flush returned before the buffered writes reached the target"; }
for i in 0 1 2 3 4; do
  [ "$(byte_at "$img" $((2 * MiB + i * 131072)))" = 5b ] \
    || fail "after the flush, the backing file does not hold write $i"
done

# 4.
fault_rule "op=write path=$f match=OLD! action=stall:3000"
env -u LD_PRELOAD "$NBD_PYTHON" "$TGT_DIR/wb.py" "$TGT_DIR/g.sock" "$FAULT_LOG" overtake \
  >"$TGT_DIR/overtake.out" || { gw_log g; fail "the overtake client"; }
fault_log_has "^stall-end $(fault_lines) " || fail "the older write never reached the target"
[ "$(head -c 4 <(tail -c +$((3 * MiB + 1)) "$img"))" = "new!" ] \
  || fail "an older buffered write overtook the newer one to the same bytes"

# 5.
fault_rule "op=write path=$f off=$((5 * MiB))-$((5 * MiB + 4096)) action=fail:5 count=0"
coproc WB { env -u LD_PRELOAD "$NBD_PYTHON" "$TGT_DIR/wb.py" "$TGT_DIR/g.sock" "$FAULT_LOG" fail 2>&1; }
read -r -t 60 line <&"${WB[0]}" || fail "the failing-write client did not start"
[ "$line" = acked ] || fail "the failing-write client: $line"
wait_line "$TGT_DIR/g.log" "(write-behind) failed, bytes $((5 * MiB))-$((5 * MiB + 4095))" 300
grep -q "$t/1: writes acknowledged before they reached the device (write-behind) failed, bytes $((5 * MiB))-" \
  "$TGT_DIR/g.log" || { gw_log g; fail "a failed buffered write is not logged with its LUN and range"; }
echo go >&"${WB[1]}"
out=$(cat <&"${WB[0]}")
wait "$WB_PID" 2>/dev/null || true
echo "$out"
[ "$(echo "$out" | grep -Ec '^flush . failed (5|EIO)$')" = 2 ] \
  || fail "a failed buffered write did not fail the next flush of each of two clients once"
[ "$(echo "$out" | sed -n 3,4p | grep -c 'ok$')" = 2 ] \
  || fail "after each client heard of the failure, its flushes fail still"
fault_clear

# 6.  And a mount of the LUN started at once waits for the closing
# gateway's release (util/alive.h, lg_alive_closing) instead of being
# refused after 3 s.
fault_rule "op=write path=$f off=$((7 * MiB))-$((7 * MiB + 65536)) action=stall:6000 # stop"
env -u LD_PRELOAD "$NBD_PYTHON" "$TGT_DIR/wb.py" "$TGT_DIR/g.sock" "$FAULT_LOG" write \
  >/dev/null || fail "the write before the stop"
kill "${NBD_GW[g]}"
fault_wait_log "^stall-begin $(fault_lines) " 10
mnt=$TGT_DIR/m6
mount_points "$mnt"
with_timeout 60 "$LUNGATE" mount --log "$TGT_DIR/m6.log" "$url/1" "$mnt" 2>"$TGT_DIR/m6.err" \
  || { cat "$TGT_DIR/m6.err"; fail "a mount while nbdkit was closing (writing its buffer) was refused"; }
nbd_stop "${NBD_GW[g]}"
[ "$(byte_at "$img" $((7 * MiB)))" = 6b ] \
  || { gw_log g; fail "nbdkit stopped without writing what it had buffered"; }
"$LUNGATE" umount "$mnt" >/dev/null \
  || { cat "$TGT_DIR/m6.log" "$TGT_DIR/m6.err"; grep "$mnt" /proc/mounts; fail "umount m6"; }
fault_clear

# 9. A FUA write does not take the loss report the next flush owes.
nbd_gw g "url=$url/1" writebehind=8M
fault_rule "op=write path=$f off=$((5 * MiB))-$((5 * MiB + 4096)) action=fail:5 count=0"
coproc FUA { env -u LD_PRELOAD "$NBD_PYTHON" "$TGT_DIR/wb.py" "$TGT_DIR/g.sock" "$FAULT_LOG" fua 2>&1; }
read -r -t 60 line <&"${FUA[0]}" || fail "the FUA client did not start"
wait_line "$TGT_DIR/g.log" "(write-behind) failed, bytes $((5 * MiB))-" 300 2
echo go >&"${FUA[1]}"
out=$(cat <&"${FUA[0]}")
echo "$out"
[ "$(echo "$out" | sed -n 1p)" = "fua ok" ] \
  || fail "a FUA write after a failed buffered write failed (its own data is durable)"
echo "$out" | sed -n 2p | grep -Eq "^flush failed (5|EIO)$" \
  || fail "the flush after a FUA write did not report the failed buffered write"
[ "$(echo "$out" | sed -n 3p)" = "flush ok" ] || fail "the second flush failed too"
fault_clear

# 10. A read does not wait for the buffered writes ahead of what it reads.
fault_rule "op=write path=$f off=$((8 * MiB))-$((8 * MiB + 2000 * 8192)) action=delay:50 count=0"
env -u LD_PRELOAD "$NBD_PYTHON" "$TGT_DIR/wb.py" "$TGT_DIR/g.sock" "$FAULT_LOG" many \
  >"$TGT_DIR/many.out" || { cat "$TGT_DIR/many.out"; gw_log g; fail "the many-writes client"; }
cat "$TGT_DIR/many.out"
grep -qx read-latest "$TGT_DIR/many.out" || fail "a read of a buffered write did not return it"
n=$(sed -n 's/^written-before-read //p' "$TGT_DIR/many.out")
[ "$n" -lt 1500 ] \
  || fail "a read of the last of 2000 buffered writes waited for the others ($n written first)"
fault_clear

# 11. nbdkit stopped while the target holds every write: the first write
# that fails after a long wait fails the rest at once, in one line (each
# waited for the abort, about 1 s, before).
fault_rule "op=write path=$f off=$((8 * MiB))-$((8 * MiB + 2000 * 8192)) action=stall:60000 count=0"
env -u LD_PRELOAD "$NBD_PYTHON" - "$TGT_DIR/g.sock" <<'PY' || fail "the writes before the stop"
import nbd, sys
h = nbd.NBD(); h.connect_uri("nbd+unix:///?socket=" + sys.argv[1])
for i in range(2000):
    h.aio_pwrite(nbd.Buffer.from_bytearray(bytearray(b"s") * 4096), (8 << 20) + i * 8192)
while h.aio_in_flight() > 0:
    h.poll(-1)
PY
kill "${NBD_GW[g]}"
# What is buffered fails at once, said in one line (nbd_stop then allows
# for the sanitizer runtime's own hang in exit).
wait_line "$TGT_DIR/g.log" \
  "more writes acknowledged before they reached the device (write-behind), [0-9]* bytes" 600
grep -q "more writes acknowledged before they reached the device (write-behind), [0-9]* bytes" \
  "$TGT_DIR/g.log" || { gw_log g; kill -9 "${NBD_GW[g]}"
    fail "2000 writes buffered for a stalled target were not failed at once within 60 s of SIGTERM"; }
nbd_stop "${NBD_GW[g]}"
[ "$(grep -c "(write-behind) failed, bytes" "$TGT_DIR/g.log")" -lt 100 ] \
  || fail "a line for each write failed at the stop"
fault_clear
tgt_kill; tgt_restart

# 12. A write the target answers with an error, however slowly, fails
# alone: the 200 behind it are written (they were all dropped, as if the
# target had not answered).
nbd_gw g2 "url=$url/1" writebehind=8M
fault_rule "op=write path=$f off=$((24 * MiB))-$((24 * MiB + 4096)) action=slowfail:1500 count=0"
fault_rule "op=write path=$f off=$((24 * MiB + 4096))-$((26 * MiB)) action=delay:300 count=0"
env -u LD_PRELOAD "$NBD_PYTHON" "$TGT_DIR/wb.py" "$TGT_DIR/g2.sock" "$FAULT_LOG" slowerr \
  >"$TGT_DIR/slowerr.out" 2>&1 || { cat "$TGT_DIR/slowerr.out"; fail "the slow-error client"; }
cat "$TGT_DIR/slowerr.out"
grep -Eq "^flush failed (5|EIO)$" "$TGT_DIR/slowerr.out" \
  || fail "the flush after a write the target failed did not fail"
good=0
for i in $(seq 200); do
  [ "$(byte_at "$img" $((24 * MiB + i * 8192)))" = 67 ] && good=$((good + 1))
done
[ "$good" = 200 ] || { gw_log g2; fail "a slow error on one write dropped others: $good of 200 written"; }
fault_clear

# 13. A client that leaves before its buffered write fails: the next
# client's flush reports it (nobody was told).
fault_rule "op=write path=$f off=$((26 * MiB))-$((26 * MiB + 4096)) action=fail:5 count=0"
env -u LD_PRELOAD "$NBD_PYTHON" "$TGT_DIR/wb.py" "$TGT_DIR/g2.sock" "$FAULT_LOG" leave \
  >/dev/null || fail "the leaving client"
wait_line "$TGT_DIR/g2.log" "(write-behind) failed, bytes $((26 * MiB))-" 300
out=$(env -u LD_PRELOAD "$NBD_PYTHON" "$TGT_DIR/wb.py" "$TGT_DIR/g2.sock" "$FAULT_LOG" later 2>&1)
echo "$out"
echo "$out" | sed -n 1p | grep -Eq "^flush failed (5|EIO)$" \
  || fail "a write that failed after its client left was reported to nobody"
[ "$(echo "$out" | sed -n 2p)" = "flush ok" ] || fail "reported twice to the later client"
fault_clear

# 14. A write waiting for a buffered write to the same block does not
# hold other clients' writes.
fault_rule "op=write path=$f off=$((28 * MiB))-$((28 * MiB + 4096)) action=stall:6000"
env -u LD_PRELOAD "$NBD_PYTHON" "$TGT_DIR/wb.py" "$TGT_DIR/g2.sock" "$FAULT_LOG" hol \
  >"$TGT_DIR/hol.out" 2>&1 || { cat "$TGT_DIR/hol.out"; fail "the rewrite client"; }
cat "$TGT_DIR/hol.out"
grep -qx other-first "$TGT_DIR/hol.out" \
  || fail "a write elsewhere waited behind a rewrite of a block the target held"
[ "$(byte_at "$img" $((28 * MiB)))" = 32 ] || fail "the rewrite did not land last"
nbd_stop "${NBD_GW[g2]}"
fault_clear

# 8. By default (and with writebehind=0) the write returns only after
# the target has it.
img3=$(tgt_lun_file 1 3)
fault_rule "op=write path=$(basename "$img3") off=$MiB-$((MiB + 65536)) action=stall:2000"
nbd_run "url=$url/3" -- "$NBD_PYTHON" "$TGT_DIR/wb.py" '$uri' "$FAULT_LOG" buffered \
  >"$TGT_DIR/through.out" 2>&1 || true
sed -i 's/^/  /' "$TGT_DIR/through.out"
grep -q ended-before-ack "$TGT_DIR/through.out" \
  || { cat "$TGT_DIR/through.out"; fail "by default, a write returned before the target had it"; }
fault_clear

# 7. The mount.
if [ -c /dev/fuse ] && command -v fusermount3 >/dev/null; then
  img2=$(tgt_lun_file 1 2)
  f2=$(basename "$img2")
  m=$TGT_DIR/m
  mount_points "$m"
  "$LUNGATE" mount --write-behind 4M --log "$TGT_DIR/m.log" "$url/2" "$m" || fail "mount"
  fault_rule "op=write path=$f2 off=$MiB-$((MiB + 65536)) action=stall:3000"
  fault_rule "op=write path=$f2 off=$((9 * MiB))-$((9 * MiB + 4096)) action=fail:5 count=0"
  python3 - "$m/lun2" <<'PY' || fail "mount: write and fsync"
import os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
os.pwrite(fd, b"\x3c" * 65536, 1 << 20)
os.fsync(fd)
os.close(fd)
PY
  fault_log_has "^stall-end [0-9]+ write $MiB " \
    || fail "mount: fsync returned before the buffered write reached the target"
  [ "$(byte_at "$img2" "$MiB")" = 3c ] || fail "mount: after fsync, the backing file does not hold the write"
  python3 - "$m/lun2" <<'PY' >"$TGT_DIR/mfail.out" 2>&1
import os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
os.pwrite(fd, b"\x3d" * 4096, 9 << 20)
try:
    os.fsync(fd); print("fsync ok")
except OSError as e:
    print("fsync failed", e.errno)
PY
  cat "$TGT_DIR/mfail.out"
  grep -qx "fsync failed 5" "$TGT_DIR/mfail.out" \
    || fail "mount: a failed buffered write did not fail the next fsync"
  # A write that fails after its file was closed: the next file opened
  # hears of it at its fsync, once.
  python3 - "$m/lun2" "$TGT_DIR/m.log" <<'PY' >"$TGT_DIR/mreopen.out" 2>&1
import os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_DIRECT)
import mmap
buf = mmap.mmap(-1, 4096); buf.write(b"\x3e" * 4096)
os.pwrite(fd, buf, 9 << 20)
os.close(fd)
for _ in range(300):
    if open(sys.argv[2]).read().count("(write-behind) failed, bytes 9437184") >= 2: break
    time.sleep(0.1)
fd = os.open(sys.argv[1], os.O_RDWR)
for i in range(2):
    try:
        os.fsync(fd); print("fsync ok")
    except OSError as e:
        print("fsync failed", e.errno)
PY
  cat "$TGT_DIR/mreopen.out"
  [ "$(sed -n 1p "$TGT_DIR/mreopen.out")" = "fsync failed 5" ] \
    || fail "mount: a write that failed after its file was closed was not reported to the next opener"
  [ "$(sed -n 2p "$TGT_DIR/mreopen.out")" = "fsync ok" ] || fail "mount: reported twice"
  fault_clear
  fusermount3 -u "$m" 2>/dev/null || "$LUNGATE" umount "$m" || true
fi
echo "test-write-behind: ok"
