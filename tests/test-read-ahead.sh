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
#     bytes once the age limit (2 s) passed.
. "${srcdir:-.}/functions-fault.sh"
require_lungate_plugin
require_nbd_python
require fusermount3 cmp
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
echo "test-read-ahead: ok"
