#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# Read-ahead (src/dev/ra.h, issue 29): a reader that goes forward is
# read ahead of, and what is read ahead is never older than the device:
#  1. the mount and the plugin, plain and on a volume: a sequential copy
#     out is byte-identical and .stats shows the read-ahead used;
#  2. random reads read nothing ahead;
#  3. a write through another connection (NBD) or another open file
#     (a -o direct_io mount) into the window already read ahead: the
#     reader gets the new bytes;
#  4. a reattach (the connection cut, a new login) drops what was read
#     ahead: bytes changed on the target behind the gateway's back
#     (another writer) are read after it (the chunks' age limit is
#     stretched to 60 s here, LUNGATE_TEST_RA_AGE_MS, so that only the
#     reattach can drop them);
#  5. without that stretch, a reader beside another writer sees its
#     bytes once the age limit (2 s) passed;
#  6. through the plugin, random 1 MiB reads and a reader going
#     backwards read nothing ahead (a single read of 256 KiB or more
#     started read-ahead: helper-29);
#  7. a flipped bit in a volume's unit: every read of it fails, the
#     others are served, and the failed chunk is not read again for
#     nothing (auth_failures grew with every read near it: helper-29);
#  8. a LUN replaced under a -o direct_io mount: once the gateway says
#     so, nothing read ahead of the old disk is served (the async path
#     served hits without the identity check: helper-29; the age limit
#     stretched again).
. "${srcdir:-.}/functions-fault.sh"
require_lungate_plugin
require_nbd_python
require fusermount3 cmp mountpoint tgtadm
[ -c /dev/fuse ] || skip "no /dev/fuse"
fault_tgt_start
t=iqn.2026-12.org.lungate:ra
tgt_add_target 1 "$t"
tgt_add_lun 1 1 64M
tgt_add_lun 1 2 64M
tgt_allow 1 ALL
url="iscsi://$TGT_PORTAL/$t"
key=$TGT_DIR/key; head -c 32 /dev/urandom >"$key"
"$LUNGATE" format --lazy --key-file "$key" "$url/2" >/dev/null || fail "format LUN 2"
m=$TGT_DIR/m
mount_points "$m"
stat_of () { grep "^file=lun$1 " "$m/.stats" | grep -o " $2=[0-9]*" | cut -d= -f2; }

# ---- 1, 2: the mount, plain and volume ----
for lun in 1 2; do
  k=(); [ $lun = 2 ] && k=(--key-file "$key")
  head -c 24M /dev/urandom >"$TGT_DIR/in"
  "$LUNGATE" mount "${k[@]}" "$url/$lun" "$m" || fail "mount LUN $lun"
  dd if="$TGT_DIR/in" of="$m/lun$lun" bs=1M conv=fsync,notrunc status=none || fail "write LUN $lun"
  "$LUNGATE" umount "$m" >/dev/null || fail "umount"
  "$LUNGATE" mount "${k[@]}" "$url/$lun" "$m" || fail "mount LUN $lun again"
  # Random 4 KiB reads, each its own page (direct), far apart.
  python3 - "$m/lun$lun" <<'PY' || fail "random reads"
import os, random, sys
fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECT)
import mmap
buf = mmap.mmap(-1, 4096)
r = random.Random(7)
for _ in range(64):
    os.preadv(fd, [buf], r.randrange(0, 64 << 20, 4 << 20) + r.randrange(0, 16) * 4096)
PY
  [ "$(stat_of $lun ra_read_bytes)" = 0 ] \
    || { cat "$m/.stats"; fail "LUN $lun: random reads were read ahead of"; }
  dd if="$m/lun$lun" of="$TGT_DIR/out" bs=1M count=24 status=none || fail "read LUN $lun"
  cmp "$TGT_DIR/in" "$TGT_DIR/out" || fail "LUN $lun: the copy out through the read-ahead differs"
  used=$(stat_of $lun ra_used_bytes)
  echo "mount LUN $lun: 24 MiB out, $used bytes of it read ahead"
  [ "${used:-0}" -gt $((8 << 20)) ] || { cat "$m/.stats"; fail "LUN $lun: the sequential copy was not read ahead of"; }
  "$LUNGATE" umount "$m" >/dev/null || fail "umount"
done

# ---- 3: a write into the window, from another connection ----
# reader_writer SOCKET_A SOCKET_B: A reads 0-4 MiB in 128 KiB requests
# (the window ahead is read), B writes 5-6 MiB and flushes, A reads on to
# 8 MiB: prints "new" when A got B's bytes.
reader_writer ()
{
  env -u LD_PRELOAD "$NBD_PYTHON" - "$1" "$2" <<'PY'
import nbd, sys, time
a = nbd.NBD(); a.connect_uri("nbd+unix:///?socket=" + sys.argv[1])
b = nbd.NBD(); b.connect_uri("nbd+unix:///?socket=" + sys.argv[2])
K = 128 << 10
for o in range(0, 4 << 20, K):
    a.pread(K, o)
time.sleep(0.5)              # the window read ahead
new = bytes([0x5a]) * (1 << 20)
b.pwrite(new, 5 << 20); b.flush()
got = b"".join(a.pread(K, o) for o in range(4 << 20, 8 << 20, K))
print("new" if got[1 << 20:2 << 20] == new else "stale")
PY
}
for lun in 1 2; do
  k=(); [ $lun = 2 ] && k=("key-file=$key")
  nbd_gw "g$lun" "url=$url/$lun" "${k[@]}"
  got=$(reader_writer "$TGT_DIR/g$lun.sock" "$TGT_DIR/g$lun.sock")
  echo "plugin LUN $lun, a write into the window from another connection: $got"
  [ "$got" = new ] || { cat "$TGT_DIR/g$lun.log"; fail "plugin LUN $lun: a reader got bytes older than a flushed write"; }
  kill "${NBD_GW[g$lun]}"; wait "${NBD_GW[g$lun]}" 2>/dev/null
done
# The same through a -o direct_io mount: two open files.
"$LUNGATE" mount -o direct_io "$url/1" "$m" || fail "mount -o direct_io"
got=$(python3 - "$m/lun1" <<'PY'
import os, sys, time
a = os.open(sys.argv[1], os.O_RDONLY); b = os.open(sys.argv[1], os.O_RDWR)
K = 128 << 10
for o in range(0, 4 << 20, K):
    os.pread(a, K, o)
time.sleep(0.5)
new = bytes([0x6b]) * (1 << 20)
os.pwrite(b, new, 5 << 20); os.fsync(b)
got = b"".join(os.pread(a, K, o) for o in range(4 << 20, 8 << 20, K))
print("new" if got[1 << 20:2 << 20] == new else "stale")
PY
)
echo "mount -o direct_io, a write into the window from another file: $got"
[ "$got" = new ] || fail "mount: a reader got bytes older than a completed write"
"$LUNGATE" umount "$m" >/dev/null || fail "umount"

# ---- 4, 5: bytes changed behind the gateway's back ----
# behind GW STRETCH: reads 0-4 MiB through gateway GW, changes 6-7 MiB
# of the backing file, then (cut) cuts its connections, or (wait)
# waits out the age limit; reads 4-8 MiB: prints new or stale.
behind ()
{
  env -u LD_PRELOAD "$NBD_PYTHON" - "$TGT_DIR/$1.sock" "$(tgt_lun_file 1 1)" \
    "$TGT_DIR/$1.go" "$TGT_DIR/$1.state" <<'PY'
import nbd, os, sys, time
h = nbd.NBD(); h.connect_uri("nbd+unix:///?socket=" + sys.argv[1])
K = 128 << 10
for o in range(0, 4 << 20, K):
    h.pread(K, o)
time.sleep(0.5)
new = os.urandom(1 << 20)
fd = os.open(sys.argv[2], os.O_WRONLY); os.pwrite(fd, new, 6 << 20); os.fsync(fd); os.close(fd)
open(sys.argv[4], "w").write("changed\n")
while not os.path.exists(sys.argv[3]):
    time.sleep(0.05)
got = b"".join(h.pread(K, o) for o in range(4 << 20, 8 << 20, K))
print("new" if got[2 << 20:3 << 20] == new else "stale")
PY
}
export LUNGATE_TEST_RA_AGE_MS=60000
nbd_gw cut "url=$url/1" connections=1
behind cut >"$TGT_DIR/cut.out" &
bp=$!
for _ in $(seq 100); do [ -s "$TGT_DIR/cut.state" ] && break; sleep 0.1; done
fault_cut_conns "${NBD_GW[cut]}"
for _ in $(seq 100); do grep -q "logged in again" "$TGT_DIR/cut.log" && break; sleep 0.1; done
touch "$TGT_DIR/cut.go"
wait "$bp" || fail "the reader across the cut"
got=$(cat "$TGT_DIR/cut.out")
echo "plugin, changed behind its back, then a reattach: $got"
[ "$got" = new ] || { cat "$TGT_DIR/cut.log"; fail "what was read ahead before a reattach was served after it"; }
kill "${NBD_GW[cut]}"; wait "${NBD_GW[cut]}" 2>/dev/null
unset LUNGATE_TEST_RA_AGE_MS
NBD_GW_RO=1 nbd_gw age "url=$url/1" connections=1
behind age >"$TGT_DIR/age.out" &
bp=$!
for _ in $(seq 100); do [ -s "$TGT_DIR/age.state" ] && break; sleep 0.1; done
sleep 2.5
touch "$TGT_DIR/age.go"
wait "$bp" || fail "the reader beside another writer"
got=$(cat "$TGT_DIR/age.out")
echo "plugin -r, changed behind its back, read 2.5 s later: $got"
[ "$got" = new ] || fail "a reader beside another writer got read-ahead older than 2 s"

# ---- 6: random and backward reads through the plugin ----
nbd_gw rnd "url=$url/1" "stats-file=$TGT_DIR/rnd.st"
env -u LD_PRELOAD "$NBD_PYTHON" - "$TGT_DIR/rnd.sock" <<'PY' || fail "random reads"
import nbd, random, sys
h = nbd.NBD(); h.connect_uri("nbd+unix:///?socket=" + sys.argv[1])
# 1 MiB at every third MiB, in a random order: no read starts where
# another ended.
offs = [i * (3 << 20) for i in range(21)]
random.Random(11).shuffle(offs)
for o in offs:
    h.pread(1 << 20, o)
for o in range(40 << 20, 32 << 20, -(128 << 10)):
    h.pread(128 << 10, o)
PY
kill -USR1 "${NBD_GW[rnd]}"
for _ in $(seq 50); do grep -q ra_read_bytes "$TGT_DIR/rnd.st" 2>/dev/null && break; sleep 0.1; done
got=$(grep -o "ra_read_bytes=[0-9]*" "$TGT_DIR/rnd.st" | tail -n 1)
echo "plugin, random 1 MiB and backward 128 KiB reads: $got"
[ "$got" = ra_read_bytes=0 ] || fail "random or backward reads were read ahead of ($got)"
kill "${NBD_GW[rnd]}"; wait "${NBD_GW[rnd]}" 2>/dev/null

# ---- 7: a unit that fails authentication ----
head -c 16M /dev/urandom >"$TGT_DIR/model"
nbd_run "url=$url/2" "key-file=$key" -- "$NBD_PYTHON" -c 'import nbd,sys; h=nbd.NBD(); h.connect_uri(sys.argv[1]); h.pwrite(open(sys.argv[2],"rb").read(), 0); h.flush()' '$uri' "$TGT_DIR/model" \
  || fail "write the model"
doff=$("$LUNGATE" info "$url/2" | sed -n 's/^volume-data-offset: //p')
[ -n "$doff" ] || fail "no volume-data-offset in lungate info"
f=$(tgt_lun_file 1 2); o=$((doff + 1536 * 4096 + 100))
python3 -c 'import os,sys; fd=os.open(sys.argv[1],os.O_RDWR); o=int(sys.argv[2]); b=os.pread(fd,1,o); os.pwrite(fd,bytes([b[0]^1]),o)' "$f" "$o"
nbd_gw bad "url=$url/2" "key-file=$key" "stats-file=$TGT_DIR/bad.st"
got=$(env -u LD_PRELOAD "$NBD_PYTHON" - "$TGT_DIR/bad.sock" "$TGT_DIR/model" <<'PY'
import nbd, sys
h = nbd.NBD(); h.connect_uri("nbd+unix:///?socket=" + sys.argv[1])
m = open(sys.argv[2], "rb").read()
K = 128 << 10; failed = set(); wrong = 0
for _ in range(2):
    for o in range(0, 16 << 20, K):
        try:
            wrong += h.pread(K, o) != m[o:o + K]
        except nbd.Error:
            failed.add(o)
print("failed=%s wrong=%d" % (",".join(str(o) for o in sorted(failed)), wrong))
PY
)
kill -USR1 "${NBD_GW[bad]}"
for _ in $(seq 50); do grep -q auth_failures "$TGT_DIR/bad.st" 2>/dev/null && break; sleep 0.1; done
af=$(grep -o "auth_failures=[0-9]*" "$TGT_DIR/bad.st" | tail -n 1 | cut -d= -f2)
echo "plugin, a flipped bit at 6 MiB, two passes: $got, auth_failures=$af"
[ "$got" = "failed=6291456 wrong=0" ] || fail "a flipped bit: '$got', not only the read of its unit failing"
[ "${af:-99}" -le 4 ] || fail "a flipped bit: $af authentication failures for two passes (the chunk read again for nothing)"
kill "${NBD_GW[bad]}"; wait "${NBD_GW[bad]}" 2>/dev/null

# ---- 8: a LUN replaced under a -o direct_io mount ----
truncate -s 64M "$TGT_DIR/other.img"
# The age limit stretched, so that the chunks are still there when the
# gateway notices (its check runs at most every 3 s).
LUNGATE_TEST_RA_AGE_MS=60000 "$LUNGATE" mount -f -o direct_io "$url/1" "$m" \
  2>"$TGT_DIR/swap.log" &
for _ in $(seq 100); do mountpoint -q "$m" && break; sleep 0.1; done
mountpoint -q "$m" || { cat "$TGT_DIR/swap.log"; fail "mount for the swap"; }
got=$(python3 - "$m/lun1" "$TGT_DIR/other.img" "$TGT_DIR/sock" "$TGT_DIR/swap.log" <<'PY'
import os, subprocess, sys, time
f, b, sock, log = sys.argv[1:5]
fd = os.open(f, os.O_RDONLY)
K = 128 << 10
for o in range(0, 4 << 20, K):
    os.pread(fd, K, o)
env = dict(os.environ, TGT_IPC_SOCKET=sock)
tg = ["tgtadm", "--lld", "iscsi", "--mode", "logicalunit", "--tid", "1", "--lun", "1"]
for _ in range(50):
    if subprocess.run(tg + ["--op", "delete"], env=env).returncode == 0:
        break
    time.sleep(0.02)
subprocess.run(tg + ["--op", "new", "--backing-store", b, "--blocksize", "4096"], env=env, check=True)
t0 = time.time()
said = lambda: any("changed under" in l for l in open(log))
while not said() and time.time() - t0 < 10:
    os.stat(f)
    time.sleep(0.05)
served = 0
for o in range(4 << 20, 8 << 20, K):
    try:
        os.pread(fd, K, o); served += 1
    except OSError:
        pass
print("said=%s served=%d" % (said(), served))
PY
)
echo "a LUN replaced under a -o direct_io mount, reads after the gateway noticed: $got"
[ "$got" = "said=True served=0" ] || { cat "$TGT_DIR/swap.log"; fail "a replaced LUN: '$got' (reads of the old disk served from read-ahead)"; }
fusermount3 -u "$m" 2>/dev/null
echo "test-read-ahead: ok"
