#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# A thin-provisioned LUN out of space: LIO answers a write it cannot
# allocate with DATA PROTECT, SPACE ALLOCATION FAILED WRITE PROTECT
# (tests/tools/hostile-target.py --mode thin-full, for the second half of
# its LUN).  The program that writes sees ENOSPC ("No space left on
# device"), as from a full local disk, not a bare EIO: from the write
# itself when writing through, and from fsync or the NBD flush when the
# write was acknowledged into the write-behind buffer, through the mount
# and through the plugin.  (Before: write-behind turned it into EIO.)
. "${srcdir:-.}/functions-nbd.sh"
require_lungate_plugin
require_nbd_python
require python3 fusermount3
[ -c /dev/fuse ] || skip "no /dev/fuse"
d=$(scratch_dir)
iqn=iqn.2026-01.test.lungate:hostile
hostile_start "$d" --mode thin-full --size $((16 << 20))
url="iscsi://127.0.0.1:$HOSTILE_PORT/$iqn/0"
head -c $((16 << 20)) /dev/urandom >"$d/data"

mnt=$d/mnt
mkdir "$mnt"
mount_gone () { fusermount3 -u -z "$mnt" 2>/dev/null || true; }
on_exit mount_gone

# case NAME MOUNT-OPTION... -- DD-OPTION...: 16 MiB through a mount must
# fail with ENOSPC.
case_mount ()
{
  local name=$1 m=() o=()
  shift
  while [ "$1" != -- ]; do m+=("$1"); shift; done
  shift
  o=("$@")
  with_timeout 60 "$LUNGATE" mount --io-timeout 5 --log "$d/$name.log" \
    "${m[@]}" "$url" "$mnt" || fail "$name: mount"
  if with_timeout 120 dd if="$d/data" of="$mnt/lun0" bs=1M "${o[@]}" \
    2>"$d/$name.err"; then
    fail "$name: 16 MiB written to a LUN with room for 8"
  fi
  grep -q "No space left on device" "$d/$name.err" \
    || { cat "$d/$name.err"; tail -n 5 "$d/$name.log"; fail "$name: not ENOSPC"; }
  grep -q "lun0\|/0" "$d/$name.log" || fail "$name: the log does not name the LUN"
  with_timeout 60 "$LUNGATE" umount "$mnt" >/dev/null 2>&1 || mount_gone
  # The unmount's account names what happened: buffered writes that
  # failed, not a target restart that did not happen.
  if [ "$name" != direct ]; then
    grep -q "could not be written back or flushed at the end" "$d/$name.log" \
      || { tail -n 5 "$d/$name.log"; fail "$name: the unmount did not say data may be lost"; }
    ! grep -q "may have restarted while mounted" "$d/$name.log" \
      || fail "$name: the unmount blamed a target restart for failed buffered writes"
    grep -q "buffered writes\? failed while mounted" "$d/$name.log" \
      || { tail -n 5 "$d/$name.log"; fail "$name: the unmount did not name the failed buffered writes"; }
  fi
}
case_mount direct -o direct_io -- oflag=direct conv=notrunc
case_mount wb-direct -o direct_io --write-behind 4M -- oflag=direct conv=notrunc,fsync
case_mount wb-cache --write-behind 4M -- conv=notrunc,fsync

# The latest loss is what fsync says: after the ENOSPC (told), the
# target restarts and may have lost a buffered write it had acknowledged
# and not flushed: EIO, not the stale ENOSPC (the hostile review found
# ENOSPC there).
with_timeout 60 "$LUNGATE" mount --io-timeout 5 -o direct_io --write-behind 4M \
  --log "$d/restart.log" "$url" "$mnt" || fail "restart: mount"
mkfifo "$d/go"
: >"$d/restart.out"
python3 - "$mnt/lun0" "$d/go" >"$d/restart.out" 2>&1 <<'PY' &
import errno, os, sys
f, go = sys.argv[1], sys.argv[2]
def res(fn, *a):
    try:
        fn(*a)
        return "ok"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))
a = os.open(f, os.O_RDWR)
os.pwrite(a, os.urandom(1 << 20), 12 << 20)
print("full", res(os.fsync, a), res(os.fsync, a), flush=True)
os.pwrite(a, bytes(1 << 20), 1 << 20)
print("ready", flush=True)
open(go).readline()
os.pread(a, 4096, 1 << 20)
print("restart", res(os.fsync, a), res(os.fsync, a), flush=True)
PY
py=$!
for _ in $(seq 300); do grep -q '^ready' "$d/restart.out" && break; sleep 0.1; done
grep -q '^ready' "$d/restart.out" || { cat "$d/restart.out"; fail "restart: the writer did not get ready"; }
sleep 1 # the buffered write reaches the target's cache
hostile_start "$d" --port "$HOSTILE_PORT" --mode thin-full --size $((16 << 20))
# Opened read-write, the FIFO never blocks the test, even if the writer
# died.
exec 8<>"$d/go"
echo go >&8
exec 8>&-
wait "$py" || { cat "$d/restart.out"; fail "restart: the writer failed"; }
grep -qx "full ENOSPC ok" "$d/restart.out" || { cat "$d/restart.out"; fail "restart: the full LUN was not ENOSPC once"; }
grep -qx "restart EIO ok" "$d/restart.out" \
  || { cat "$d/restart.out"; tail -n 5 "$d/restart.log"; fail "restart: a restart after ENOSPC was not EIO once"; }
with_timeout 60 "$LUNGATE" umount "$mnt" >/dev/null 2>&1 || mount_gone

# The unmount's account holds when its own last flush fails too (the
# target gone): the failed buffered writes are still counted (the
# hostile review found only "flush at unmount failed").
hostile_start "$d" --port "$HOSTILE_PORT" --mode thin-full --size $((16 << 20))
with_timeout 60 "$LUNGATE" mount --io-timeout 3 -o direct_io --write-behind 4M \
  --log "$d/gone.log" "$url" "$mnt" || fail "gone: mount"
dd if="$d/data" of="$mnt/lun0" bs=1M seek=12 skip=12 count=1 oflag=direct \
  conv=notrunc status=none || fail "gone: the buffered write was not acknowledged"
sleep 1 # written behind, and failed
hostile_stop
with_timeout 60 "$LUNGATE" umount "$mnt" >/dev/null 2>&1 || mount_gone
grep -q "flush at unmount failed" "$d/gone.log" || { tail -n 5 "$d/gone.log"; fail "gone: the last flush did not fail"; }
grep -q "1 buffered write failed while mounted" "$d/gone.log" \
  || { tail -n 5 "$d/gone.log"; fail "gone: the unmount did not count the failed buffered write"; }
hostile_start "$d" --port "$HOSTILE_PORT" --mode thin-full --size $((16 << 20))

# The plugin, with write-behind: the writes are acknowledged, the flush
# fails with ENOSPC.
cat >"$d/flush.py" <<'PY'
import nbd, sys
h = nbd.NBD(); h.connect_uri(sys.argv[1])
d = open(sys.argv[2], "rb").read()
try:
    for off in range(0, len(d), 1 << 20):
        h.pwrite(d[off:off + (1 << 20)], off)
    h.flush()
    print("flushed")
except nbd.Error as e:
    print("errno", e.errno)
PY
out=$(nbd_run "url=$url" writebehind=4M timeout=5 -- "$NBD_PYTHON" "$d/flush.py" \
  '$uri' "$d/data" 2>"$d/plugin.err") || true
case $out in "errno ENOSPC" | "errno 28") ;; *) cat "$d/plugin.err"; fail "plugin: flush gave '$out', not ENOSPC" ;; esac
grep -q 'fired thin-full' "$d/h.log" || fail "the target never refused a write"
echo "test-thin-full: ok"
