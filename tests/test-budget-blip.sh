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
echo "test-budget-blip: ok"
