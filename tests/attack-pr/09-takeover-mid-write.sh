#!/usr/bin/env bash
# Takeover while the old holder is mid-write (plain LUN, QD 32 through
# the NBD client).  B preempts A and then writes every unit of the range;
# afterwards every unit must hold B's data (no acknowledged write of B
# overwritten by A), and A must have no write acknowledged after B's
# takeover finished (B's first write started).
. /work/main/tests/attack-pr/common.sh
tgt_start
t=iqn.2026-11.org.lungate:atk9
tgt_add_target 1 "$t"
tgt_add_lun 1 1 16M
tgt_allow 1 ALL
url="iscsi://$TGT_PORTAL/$t/1"
for round in $(seq ${ROUNDS:-5}); do
gw a "url=$url" connections=4
io a write 0 1 >/dev/null || fail "a cannot write"
env -u LD_PRELOAD "$NBD_PYTHON" - "$TGT_DIR/a.sock" >"$TGT_DIR/a.out" 2>&1 <<'PY' &
import nbd, sys, time
h = nbd.NBD(); h.connect_uri("nbd+unix:///?socket=" + sys.argv[1])
BS = int(__import__("os").environ.get("ABS", "4096"))
buf = nbd.Buffer.from_bytearray(bytearray(b"A" * BS))
last_ok = 0.0; first_fail = None; ok = 0; t0 = time.time()
def cb(err):
    global last_ok, first_fail, ok
    if err.value == 0:
        last_ok = time.time(); ok += 1
    elif first_fail is None:
        first_fail = time.time()
    return 1
i = 0
while time.time() - t0 < 4:
    while h.aio_in_flight() < int(__import__("os").environ.get("AQD", "32")):
        h.aio_pwrite(buf, (i % (1048576 // BS)) * BS, completion=cb); i += 1
    h.poll(-1)
while h.aio_in_flight() > 0:
    h.poll(-1)
print("last_ok %.6f first_fail %s ok %d" % (last_ok, first_fail, ok))
PY
wl=$!
sleep 1.5
gw b "url=$url" takeover=true connections=4
env -u LD_PRELOAD "$NBD_PYTHON" - "$TGT_DIR/b.sock" >"$TGT_DIR/b.out" 2>&1 <<'PY'
import nbd, sys, time
h = nbd.NBD(); h.connect_uri("nbd+unix:///?socket=" + sys.argv[1])
t = time.time()
for u in range(256):
    h.pwrite(b"B" * 4096, u * 4096)
h.flush()
print("b_start %.6f" % t)
PY
wait $wl
cat "$TGT_DIR/a.out" "$TGT_DIR/b.out"
la=$(awk '{print $2}' "$TGT_DIR/a.out"); bs=$(awk '{print $2}' "$TGT_DIR/b.out")
awk -v a="$la" -v b="$bs" 'BEGIN { exit !(a > b) }' && echo "BROKEN? A had a write acknowledged $(awk -v a="$la" -v b="$bs" 'BEGIN{print a-b}') s after B began writing"
env -u LD_PRELOAD "$NBD_PYTHON" - "$TGT_DIR/b.sock" <<'PY' || fail "BROKEN: an acknowledged write of the new holder was overwritten"
import nbd, sys
h = nbd.NBD(); h.connect_uri("nbd+unix:///?socket=" + sys.argv[1])
bad = [u for u in range(256) if h.pread(4096, u * 4096) != b"B" * 4096]
print("units not B:", len(bad)); sys.exit(1 if bad else 0)
PY
nbd_stop "$pid_a"; nbd_stop "$pid_b"
done
echo ok
