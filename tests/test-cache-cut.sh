#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# A flush after a login, over a volatile write cache (tgtd under
# faultio's cache), plain and on a volume, through the plugin:
#  - the connection cut, the target still up (a Wi-Fi reset): the
#    target kept its cache, and this gateway's reservation shows it; the
#    flush succeeds and the write is there.  (On a volume the flush
#    failed with EIO after every such cut: "the target logged in again
#    before writes it had acknowledged were flushed", which made every
#    fsync over a flaky link fail.)
#  - the target killed and started again (a power cut): the unflushed
#    write is gone, and the next flush must not say it is stable.  On a
#    plain LUN also when the lost write kept the first 512 bytes of what
#    it overwrote (the read-back of known.h sees only those): the flush
#    said ok, and the unit was back to its old data (helper-26).
#  - the mount: a write written back to the gateway (sync_file_range, no
#    fsync), a power cut, then lungate umount: the daemon's final flush
#    fails, and lungate umount must say so and exit 1 (it said
#    "unmounted; the daemon has exited" and exited 0: helper-26).
#  - every client hears of the loss, not only the first to flush: two NBD
#    connections, and two files open on the mount, each with a write not
#    yet flushed; a power cut; each flushes.  (The loss was told once per
#    LUN: the second client's flush said ok and its write was gone:
#    helper-27.)
FAULTIO_CACHE=lun-
export FAULTIO_CACHE
. "${srcdir:-.}/functions-fault.sh"
require_lungate_plugin
require_nbd_python
require fusermount3
[ -c /dev/fuse ] || skip "no /dev/fuse"
fault_tgt_start
t=iqn.2026-12.org.lungate:cachecut
tgt_add_target 1 "$t"
tgt_add_lun 1 1 16M
tgt_add_lun 1 2 16M
tgt_allow 1 ALL
url="iscsi://$TGT_PORTAL/$t"
key="$TGT_DIR/key"; head -c 32 /dev/urandom >"$key"
"$LUNGATE" format --lazy --key-file "$key" "$url/2" >/dev/null || fail "format LUN 2"

# io GW OPS...: through gateway GW, each of wUNIT:BYTE (write 4 KiB),
# hUNIT:BYTE (write 4 KiB: 512 zero bytes, then BYTE), f (flush, printing
# ok or its errno), rUNIT (print the first byte), RUNIT (print byte 1024),
# G (create $TGT_DIR/ready, wait for $TGT_DIR/go: see across).
io ()
{
  env -u LD_PRELOAD "$NBD_PYTHON" - "$TGT_DIR/$1.sock" "${@:2}" <<'PY'
import nbd, sys
h = nbd.NBD(); h.connect_uri("nbd+unix:///?socket=" + sys.argv[1])
out = []
for op in sys.argv[2:]:
    try:
        if op[0] in "wh":
            u, b = op[1:].split(":")
            d = bytes([int(b)]) * 4096
            if op[0] == "h":
                d = bytes(512) + d[512:]
            h.pwrite(d, int(u) * 4096)
        elif op == "f":
            h.flush(); out.append("ok")
        elif op == "G":
            import os, time
            d = os.path.dirname(sys.argv[1])
            open(d + "/ready", "w").close()
            while not os.path.exists(d + "/go"):
                time.sleep(0.05)
        elif op[0] == "R":
            out.append(str(h.pread(4096, int(op[1:]) * 4096)[1024]))
        else:
            out.append(str(h.pread(4096, int(op[1:]) * 4096)[0]))
    except nbd.Error as e:
        out.append("errno%s" % e.errno)
print(" ".join(out))
PY
}

# across GW FAULT OPS...: io GW OPS on one connection, which stays open
# while FAULT (a command of this shell) runs at the G among OPS; what it
# printed in $got.
across ()
{
  local p
  rm -f "$TGT_DIR/ready" "$TGT_DIR/go"
  io "$1" "${@:3}" >"$TGT_DIR/across.out" &
  p=$!
  for _ in $(seq 300); do [ -e "$TGT_DIR/ready" ] && break; sleep 0.1; done
  [ -e "$TGT_DIR/ready" ] || fail "across: the client did not get to G"
  "$2"
  touch "$TGT_DIR/go"
  wait "$p" || fail "across: the client failed"
  got=$(cat "$TGT_DIR/across.out")
}
power_cut () { tgt_kill; tgt_restart; }

# With write-behind (test-faults-wb.sh) a write is acknowledged once
# buffered, and may reach the target only after a cut that was meant to
# lose it from the target's cache.  drained GW: wait until gateway GW (a
# plugin's name, with its stats-file, or a mount's directory) has
# nothing buffered (wb_depth_bytes=0 on every LUN).  Without it, a
# no-op.
wb=()
[ -n "${LUNGATE_TEST_WRITE_BEHIND:-}" ] && wb=(stats-file="$TGT_DIR/gw.stats")
drained ()
{
  local f
  [ "${#wb[@]}" -gt 0 ] || return 0
  for _ in $(seq 300); do
    if [ -d "$1" ]; then
      f=$1/.stats
    else
      f=$TGT_DIR/gw.stats
      rm -f "$f"
      kill -USR1 "${NBD_GW[$1]}"
      for _ in $(seq 50); do [ -s "$f" ] && break; sleep 0.02; done
    fi
    if grep -q "wb_depth_bytes=" "$f" 2>/dev/null \
       && ! grep -q "wb_depth_bytes=[1-9]" "$f"; then
      return 0
    fi
    sleep 0.1
  done
  fail "$1: the buffered writes did not reach the target within 30 s"
}
# cut_when_written NAME WHAT GW: once the background client (pid cpid)
# printed "written" in NAME.out, a power cut, then NAME.go lets it go on;
# its last line is left in got.
cut_when_written ()
{
  for _ in $(seq 100); do grep -q written "$TGT_DIR/$1.out" && break; sleep 0.1; done
  drained "$3"
  power_cut
  touch "$TGT_DIR/$1.go"
  wait "$cpid" || fail "$2"
  got=$(tail -n 1 "$TGT_DIR/$1.out")
}

for lun in 1 2; do
  kind=plain; k=(); [ $lun = 2 ] && { kind=volume; k=("key-file=$key"); }
  nbd_gw "g$lun" "url=$url/$lun" connections=1 timeout=60 "${k[@]}" "${wb[@]}"
  # The cut: written, not flushed, the connection reset.
  gwpid=${NBD_GW[g$lun]}
  gw=g$lun
  cut () { drained "$gw"; fault_cut_conns "$gwpid"; }
  cut_power () { drained "$gw"; power_cut; }
  across "g$lun" cut w6:102 f w7:103 G f r7 f
  echo "$kind, write, cut: flush, read, flush: $got"
  [ "$got" = "ok ok 103 ok" ] || { cat "$TGT_DIR/g$lun.log"
    fail "$kind: after a connection cut with the target up: '$got', expected 'ok ok 103 ok'"; }
  grep -q "may be lost" "$TGT_DIR/g$lun.log" && { cat "$TGT_DIR/g$lun.log"
    fail "$kind: a connection cut was taken for a lost cache"; }

  # The power cut: written, not flushed, the target killed; unit 9's
  # first 512 bytes the same before and after.
  across "g$lun" cut_power h9:50 f h9:105 G f
  echo "$kind, write, power cut: flush: $got"
  [ "$got" = "ok ok" ] && { cat "$TGT_DIR/g$lun.log"
    fail "$kind: the flush after a power cut succeeded: a lost write was taken for stable"; }
  if [ $lun = 1 ]; then
    # The first flush said so; the LUN is readable (not refused).
    got=$(io "g$lun" f R9)
    [ "$got" = "ok 50" ] || { cat "$TGT_DIR/g$lun.log"
      fail "$kind: after the failed flush: '$got', expected 'ok 50' (the old unit 9)"; }
    # A lost write whose first block the read-back sees: the LUN is
    # refused, and the log says the lost cache may be why, not only
    # another disk.
    across "g$lun" cut_power w10:106 G f
    [ "$got" = ok ] && fail "$kind: the flush after the second power cut succeeded"
    grep -q "lost them with its volatile write cache" "$TGT_DIR/g$lun.log" \
      || { cat "$TGT_DIR/g$lun.log"; fail "$kind: a power cut is told as another disk only"; }
  fi
  kill "${NBD_GW[g$lun]}"
done
# Two clients of one gateway, each with a write not yet flushed, a power
# cut, then each flushes: both must hear of it (a fresh gateway: the one
# above may have refused the LUN after its power cuts).
kill "${NBD_GW[g1]}" 2>/dev/null || true
nbd_gw two "url=$url/1" connections=1 timeout=60 "${wb[@]}"
env -u LD_PRELOAD "$NBD_PYTHON" - "$TGT_DIR/two.sock" "$TGT_DIR/two.go" >"$TGT_DIR/two.out" <<'PY' &
import nbd, os, sys, time
sock, go = sys.argv[1], sys.argv[2]
x = nbd.NBD(); x.connect_uri("nbd+unix:///?socket=" + sock)
y = nbd.NBD(); y.connect_uri("nbd+unix:///?socket=" + sock)
x.pwrite(bytes(512) + b"\x14" * 3584, 20 * 4096)
y.pwrite(bytes(512) + b"\x15" * 3584, 21 * 4096)
print("written", flush=True)
while not os.path.exists(go):
    time.sleep(0.1)
out = []
# A client that connects after the power cut lost nothing: its flush,
# first of all, is ok (helper-28: it took the LUN's one-time EIO).
time.sleep(3)
z = nbd.NBD(); z.connect_uri("nbd+unix:///?socket=" + sock)
z.pwrite(b"\x16" * 4096, 22 * 4096)
try:
    z.flush(); out.append("ok")
except nbd.Error as e:
    out.append("errno%s" % e.errno)
for h in (y, x):
    try:
        h.flush(); out.append("ok")
    except nbd.Error as e:
        out.append("errno%s" % e.errno)
print(" ".join(out), flush=True)
PY
cpid=$!
cut_when_written two "the two clients" two
echo "clients after a power cut: flush Z (new), flush Y, flush X: $got"
case $got in
  "ok errnoEIO errnoEIO") ;;
  ok*) cat "$TGT_DIR/two.log"; fail "a client's flush after a power cut said ok: its lost write was taken for stable" ;;
  *) cat "$TGT_DIR/two.log"; fail "a client that connected after the power cut got '$got': it lost nothing" ;;
esac

nbd_stop "${NBD_GW[two]}"

# Two files open on the mount, each written back (no fsync), a power
# cut, then each fsyncs: both must fail.
m2="$TGT_DIR/m2"; mkdir "$m2"
on_exit fusermount3 -u -z "$m2"
with_timeout 60 "$LUNGATE" mount --log "$TGT_DIR/m2.log" "$url/1" "$m2" \
  || { cat "$TGT_DIR/m2.log"; fail "mount"; }
python3 - "$m2/lun1" "$TGT_DIR/m2.go" >"$TGT_DIR/m2.out" <<'PY' &
import ctypes, os, sys, time
f, go = sys.argv[1], sys.argv[2]
libc = ctypes.CDLL(None, use_errno=True)
fds = [os.open(f, os.O_RDWR), os.open(f, os.O_RDWR)]
for i, fd in enumerate(fds):
    off = (30 + i) * 4096
    os.pwrite(fd, bytes(512) + bytes([0x30 + i]) * 3584, off)
    libc.sync_file_range(fd, ctypes.c_longlong(off), ctypes.c_longlong(4096), 7)
print("written", flush=True)
while not os.path.exists(go):
    time.sleep(0.1)
out = []
for fd in reversed(fds):
    try:
        os.fsync(fd); out.append("ok")
    except OSError as e:
        out.append(e.strerror.replace(" ", "_"))
print(" ".join(out), flush=True)
PY
cpid=$!
cut_when_written m2 "the two files" "$m2"
echo "two open files after a power cut: fsync B, fsync A: $got"
case $got in
  *ok*) cat "$TGT_DIR/m2.log"; fail "an open file's fsync after a power cut said ok: its lost write was taken for stable" ;;
esac
# Its daemon gone before the LUN is mounted again (a lazy unmount does
# not wait for it: CI run s45e, ASan and write-behind, found it still
# holding the LUN).  The unmount reports the loss (exit 1).
wait "$cpid" || true
with_timeout 120 "$LUNGATE" umount "$m2" >/dev/null 2>&1 || true

# The mount, plain LUN 1.
m="$TGT_DIR/m"; mkdir "$m"
on_exit fusermount3 -u -z "$m"
with_timeout 60 "$LUNGATE" mount --log "$TGT_DIR/mount.log" "$url/1" "$m" \
  || { cat "$TGT_DIR/mount.log"; fail "mount"; }
python3 - "$m/lun1" <<'PY' || fail "the write through the mount"
import ctypes, os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
os.pwrite(fd, b"\x6b" * 4096, 12 * 4096)
libc = ctypes.CDLL(None, use_errno=True)
# SYNC_FILE_RANGE_WAIT_BEFORE | WRITE | WAIT_AFTER: to the gateway, no fsync
if libc.sync_file_range(fd, ctypes.c_longlong(12 * 4096), ctypes.c_longlong(4096), 7) != 0:
    sys.exit("sync_file_range: " + os.strerror(ctypes.get_errno()))
os.close(fd)
PY
drained "$m"
power_cut
if with_timeout 120 "$LUNGATE" umount "$m" >"$TGT_DIR/umount.out" 2>&1; then
  cat "$TGT_DIR/umount.out" "$TGT_DIR/mount.log"
  fail "lungate umount exited 0 although the mount's final flush failed after a power cut"
fi
grep -q "reported at its end" "$TGT_DIR/umount.out" \
  || { cat "$TGT_DIR/umount.out"; fail "lungate umount does not say what the daemon reported"; }
cat "$TGT_DIR/umount.out"
echo "test-cache-cut: ok"
