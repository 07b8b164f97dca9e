#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# Crash consistency of the crypt layer: random unit writes through the
# plugin while the gateway is killed with SIGKILL at random moments, ten
# times.  After each kill every unit must read back (no EIO) as the content
# of its last acknowledged write or of the write in flight, never anything
# else; the next round writes over that state (which exercises the choice
# of slot after an unclean stop).
. "${srcdir:-.}/functions-nbd.sh"
require_lungate_plugin
require_nbd_python
tgt_start
t=iqn.2026-11.org.lungate:crash
tgt_add_target 1 "$t"
tgt_add_lun 1 1 32M
tgt_allow 1 ALL
url="iscsi://$TGT_PORTAL/$t/1"
key="$TGT_DIR/key"; head -c 32 /dev/urandom >"$key"
"$LUNGATE" format --key-file "$key" "$url" >/dev/null 2>&1 || fail "format"
state="$TGT_DIR/state"     # "unit gen" lines: what each unit holds now
: >"$state"
sock="$TGT_DIR/nbd.sock"

cat >"$TGT_DIR/lib.py" <<'PY'
import hashlib
UNITS = 256
def content(unit, gen):
    if gen == 0:
        return bytes(4096)
    return hashlib.sha256(b"%d:%d" % (unit, gen)).digest() * 128
def load(path):
    g = [0] * UNITS
    for line in open(path):
        u, n = map(int, line.split())
        g[u] = n
    return g
PY

start_gateway ()
{
  rm -f "$sock"
  # takeover=true: the gateway killed in the round before still holds
  # the LUN's reservation.
  "${NBDKIT[@]}" -f -U "$sock" "$LUNGATE_PLUGIN" "url=$url" "key-file=$key" \
    takeover=true 2>>"$TGT_DIR/nbdkit.log" &
  gw=$!
  for _ in $(seq 100); do [ -S "$sock" ] && return 0; sleep 0.1; done
  fail "the gateway did not start"
}

for round in $(seq 10); do
  start_gateway
  # The writer: QD1, logs its intent before each write and the ack after.
  env -u LD_PRELOAD "$NBD_PYTHON" - "$sock" "$state" "$TGT_DIR/log.$round" "$TGT_DIR" \
    <<'PY' &
import nbd, random, sys
sys.path.insert(0, sys.argv[4]); import lib
gen = lib.load(sys.argv[2])
log = open(sys.argv[3], "w", buffering=1)
h = nbd.NBD(); h.connect_uri("nbd+unix:///?socket=" + sys.argv[1])
try:
    n = 0
    while True:
        u = random.randrange(lib.UNITS)
        g = gen[u] + 1
        log.write("intent %d %d\n" % (u, g))
        h.pwrite(lib.content(u, g), u * 4096)
        log.write("ack %d %d\n" % (u, g))
        gen[u] = g
        n += 1
        if n % 16 == 0:
            h.flush()
            log.write("flushed 0 0\n")
except nbd.Error:
    pass
PY
  writer=$!
  # The first write waits for the header's dirty mark (a second on tgt,
  # which has no COMPARE AND WRITE: lungate-format(5)); kill after it.
  for _ in $(seq 200); do grep -q '^ack' "$TGT_DIR/log.$round" 2>/dev/null && break; sleep 0.05; done
  sleep "$(awk -v r="$RANDOM" 'BEGIN { printf "%.2f", 0.3 + (r % 120) / 100 }')"
  kill -KILL "$gw"
  wait "$gw" 2>/dev/null || true
  wait "$writer" || fail "round $round: the writer failed"
  writes=$(grep -c '^ack' "$TGT_DIR/log.$round" || true)
  [ "$writes" -gt 0 ] || fail "round $round: no write acknowledged before the kill"

  # Check: every unit is its acked content or the one in flight.  With
  # write-behind (the suite's second pass, test-faults-wb.sh), what was
  # acknowledged since the last flush may be lost, as from a disk's
  # volatile cache: a unit may then hold any of its contents since that
  # flush, and still nothing else.
  start_gateway
  env -u LD_PRELOAD "$NBD_PYTHON" - "$sock" "$state" "$TGT_DIR/log.$round" "$TGT_DIR" \
    <<'PY' || fail "round $round: a unit is neither old nor new"
import nbd, sys
sys.path.insert(0, sys.argv[4]); import lib
import os
gen = lib.load(sys.argv[2])
floor = list(gen)
wb = bool(os.environ.get("LUNGATE_TEST_WRITE_BEHIND"))
pending = {}
for line in open(sys.argv[3]):
    kind, u, g = line.split(); u = int(u); g = int(g)
    if kind == "intent":
        pending[u] = g
    elif kind == "flushed":
        floor = list(gen)
    else:
        gen[u] = g; pending.pop(u, None)
h = nbd.NBD(); h.connect_uri("nbd+unix:///?socket=" + sys.argv[1])
now = []
for u in range(lib.UNITS):
    try:
        d = h.pread(4096, u * 4096)
    except nbd.Error as e:
        sys.exit("unit %d: read failed: %s" % (u, e))
    if d == lib.content(u, gen[u]):
        now.append(gen[u])
    elif u in pending and d == lib.content(u, pending[u]):
        now.append(pending[u])
    else:
        old = [g for g in range(floor[u], gen[u]) if wb and d == lib.content(u, g)]
        if not old:
            sys.exit("unit %d holds neither gen %d nor %s (nor, with write-behind, "
                     "one since the last flush, gen %d)" % (u, gen[u], pending.get(u), floor[u]))
        now.append(old[0])
with open(sys.argv[2], "w") as f:
    for u, g in enumerate(now):
        f.write("%d %d\n" % (u, g))
print("round ok: %d writes, %d in flight at the kill" % (sum(1 for l in open(sys.argv[3]) if l.startswith("ack")), len(pending)))
PY
  kill "$gw"; wait "$gw" 2>/dev/null || true
done
"$LUNGATE" verify --key-file "$key" "$url" >"$TGT_DIR/v" 2>/dev/null \
  || { cat "$TGT_DIR/v"; fail "verify after the crashes"; }
grep -q "are authentic" "$TGT_DIR/v" || fail "verify: $(cat "$TGT_DIR/v")"
# Killed: the volume is dirty; --repair makes it clean again, and a
# clean stop keeps it clean.
"$LUNGATE" info "$url" | grep -q "^volume-state: dirty" || fail "not dirty after kill -9"
"$LUNGATE" verify --repair --key-file "$key" "$url" >"$TGT_DIR/v" 2>/dev/null \
  || { cat "$TGT_DIR/v"; fail "verify --repair"; }
"$LUNGATE" info "$url" | grep -qx "volume-state: clean" || fail "not clean after --repair"
start_gateway
nbd_run_cmd=(env -u LD_PRELOAD "$NBD_PYTHON" -c "
import nbd; h = nbd.NBD(); h.connect_uri('nbd+unix:///?socket=$sock')
h.pwrite(b'z' * 4096, 0); h.flush()")
"${nbd_run_cmd[@]}" || fail "write after repair"
"$LUNGATE" info "$url" | grep -q "^volume-state: dirty" || fail "not dirty while open"
kill "$gw"; wait "$gw" 2>/dev/null || true
"$LUNGATE" info "$url" | grep -qx "volume-state: clean" || fail "not clean after a clean stop"
if grep -q "fail authentication" "$TGT_DIR/nbdkit.log"; then
  cat "$TGT_DIR/nbdkit.log" >&2; fail "an authentication failure was logged"
fi
echo "test-crypt-crash: ok"
