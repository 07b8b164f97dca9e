#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# The outage budget is for outages.  A write the target's disk holds 8 s
# (faultio stall; the target keeps answering NOP-Outs), then, 7.5 s after
# the write was sent, a 2.5 s outage (tgtd stopped, the gateway's
# connections cut): with a 10 s budget the write must succeed, because
# the target was never out of touch for 10 s.  (The hostile review of
# 255a49b: counting the budget from the write's issue failed it with
# "waited past the outage budget (10 s)".)
. "${srcdir:-.}/functions-fault.sh"
require_lungate_plugin
require_nbd_python
require ss
fault_tgt_start
t=iqn.2026-12.org.lungate:blip
tgt_add_target 1 "$t"
tgt_add_lun 1 1 16M
tgt_allow 1 ALL
url="iscsi://$TGT_PORTAL/$t/1"
sock=$TGT_DIR/s.sock
"${NBDKIT[@]}" -f -U "$sock" "$LUNGATE_PLUGIN" "url=$url" timeout=10 \
  2>"$TGT_DIR/nbdkit.log" &
npid=$!
on_exit nbd_stop "$npid"
for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.1; done
[ -S "$sock" ] || { cat "$TGT_DIR/nbdkit.log"; fail "nbdkit did not start"; }
# A first write; then the sessions last past 10 s (a connection that
# lasted is logged in again at once, without backoff).
nbd_write_str "$sock" first 0 >/dev/null || fail "the first write"
sleep 11
fault_rule "op=write path=lun-1-1.img match=SLOW-BLIP action=stall:8000"
env -u LD_PRELOAD "$NBD_PYTHON" - "$sock" >"$TGT_DIR/client.out" 2>&1 <<'PY' &
import nbd, sys, time
h = nbd.NBD()
h.connect_unix(sys.argv[1])
t = time.monotonic()
try:
    h.pwrite(b"SLOW-BLIP-" * 409 + b"......", 1 << 20)
    print("write OK after %.1f s" % (time.monotonic() - t))
except nbd.Error as e:
    print("write FAILED after %.1f s: %s" % (time.monotonic() - t, e))
    sys.exit(1)
PY
cpid=$!
fault_wait_log '^stall-begin 1 ' 30
sleep 7.5
kill -STOP "$TGT_PID"
on_exit kill -CONT "$TGT_PID"
fault_cut_conns "$npid"
sleep 2.5
kill -CONT "$TGT_PID"
rc=0
wait "$cpid" || rc=$?
cat "$TGT_DIR/client.out"
if [ "$rc" -ne 0 ]; then
  grep -E 'budget|ABORT|lost|logged in|fenced|unknown' "$TGT_DIR/nbdkit.log" | tail -12
  fail "a 2.5 s outage within a 10 s budget failed a slow write"
fi
nbd_stop "$npid"

# The other side: a read the target never answers (it still answers
# NOP-Outs), its connection cut 8 s in.  From here a slow command and an
# ignored one look the same, and the budget counts from the target's last
# word (its last NOP-In), so the read may take up to about two budgets;
# never more (a close is no word from the target: the relay counts PDUs,
# not POLLIN; and an answer that makes the command go again, a unit
# attention, does not restart its budget either: the hostile review of
# 35d5979 saw 8 budgets).
tool=${srcdir:-.}/tools/hostile-target.py

# hostile_nbdkit MODE REPEAT LOG NBDKIT-PARAM...: the hostile target in
# MODE, armed by $TGT_DIR/arm, and the plugin serving it on $sock.
hostile_nbdkit ()
{
  local mode=$1 repeat=$2 log=$3
  shift 3
  rm -f "$TGT_DIR/arm" "$sock" "$TGT_DIR/h.out"
  python3 -B "$tool" --port 0 --mode "$mode" --repeat "$repeat" --armed-by "$TGT_DIR/arm" \
    >"$TGT_DIR/h.out" 2>"$TGT_DIR/h.err" &
  hpid=$!
  on_exit kill "$hpid"
  for _ in $(seq 100); do grep -q '^ready ' "$TGT_DIR/h.out" && break; sleep 0.05; done
  hport=$(awk '/^ready /{print $2}' "$TGT_DIR/h.out")
  [ -n "$hport" ] || fail "the hostile target did not start ($mode)"
  "${NBDKIT[@]}" -f -U "$sock" "$LUNGATE_PLUGIN" \
    "url=iscsi://127.0.0.1:$hport/iqn.2026-01.test.lungate:hostile/0" "$@" 2>"$log" &
  npid=$!
  on_exit nbd_stop "$npid"
  for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.1; done
  [ -S "$sock" ] || { cat "$log"; fail "nbdkit did not start ($mode)"; }
}

# timed_read: connects to $sock, arms the target, reads 4 KiB; prints
# "read OK" or "failed SECONDS".
timed_read ()
{
  env -u LD_PRELOAD timeout 120 "$NBD_PYTHON" - "$sock" "$TGT_DIR/arm" <<'PY'
import nbd, sys, time
h = nbd.NBD()
h.connect_unix(sys.argv[1])
open(sys.argv[2], "w").close()
t = time.monotonic()
try:
    h.pread(4096, 1 << 20)
    print("read OK")
except nbd.Error:
    print("failed %.1f" % (time.monotonic() - t))
PY
}

# within LOG BUDGET LIMIT WHAT: the read ($took) failed within LIMIT s
# (two budgets and a margin).
within ()
{
  case $took in
    "failed "*) ;;
    *) cat "$1"; fail "$4: the read ended with '$took'" ;;
  esac
  if ! awk -v t="${took#failed }" -v l="$3" 'BEGIN { exit !(t + 0 < l) }'; then
    tail -20 "$1"
    fail "$4: the read failed after ${took#failed } s: over two $2 s budgets and a margin"
  fi
  echo "$4: failed after ${took#failed } s (budget $2 s)"
}

hostile_nbdkit no-answer always "$TGT_DIR/nbdkit2.log" timeout=10
timed_read >"$TGT_DIR/client2.out" 2>&1 &
cpid=$!
for _ in $(seq 100); do [ -f "$TGT_DIR/arm" ] && break; sleep 0.05; done
sleep 8
ss -K state established "( dport = :$hport )" >/dev/null 2>&1 \
  || fail "ss -K cannot cut the connections"
wait "$cpid" || true
took=$(cat "$TGT_DIR/client2.out")
within "$TGT_DIR/nbdkit2.log" 10 25 "an unanswered read, its connection cut 8 s in"
nbd_stop "$npid"
kill "$hpid"; wait "$hpid" 2>/dev/null

# A target that answers each read with a unit attention, ignores the
# retry and drops the connection 3 s later, on every connection: with a
# 4 s budget the read fails within two budgets (it took 32.6 s when an
# answer restarted the budget).
hostile_nbdkit ua-then-stall conn "$TGT_DIR/nbdkit3.log" connections=1 timeout=4
took=$(timed_read) || true
within "$TGT_DIR/nbdkit3.log" 4 12 "ua-then-stall"
echo "test-budget-blip: ok"
