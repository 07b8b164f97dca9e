#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# The target dies under a gateway with a zero outage budget (timeout=0):
# requests fail at once (no hang) and the gateway, which keeps trying to
# log in again, does not spin (libiscsi's own tools were seen at 100% CPU
# against a dead port): over 3 s it must use well under a core and wake
# up a bounded number of times.
. "${srcdir:-.}/functions-nbd.sh"
require_lungate_plugin
require_nbd_python
tgt_start
t=iqn.2026-11.org.lungate:gone2
tgt_add_target 1 "$t"
tgt_add_lun 1 1 16M
tgt_allow 1 ALL
sock="$TGT_DIR/s"
"${NBDKIT[@]}" -f -U "$sock" "$LUNGATE_PLUGIN" "url=iscsi://$TGT_PORTAL/$t/1" \
  connections=2 timeout=0 2>"$TGT_DIR/nbdkit.log" &
gw=$!
on_exit nbd_stop "$gw"
for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.1; done
[ -S "$sock" ] || fail "nbdkit did not start"
# nbdkit listens before its pool is open: one read first, so that the
# target dies under a gateway that is serving, not one still starting.
env -u LD_PRELOAD "$NBD_PYTHON" - "$sock" <<'PY' || fail "the gateway does not serve"
import nbd, sys
h = nbd.NBD(); h.connect_uri("nbd+unix:///?socket=" + sys.argv[1])
h.pread(4096, 0)
PY
tgt_kill
sleep 1
timeout 30 env -u LD_PRELOAD "$NBD_PYTHON" - "$sock" <<'PY' || fail "a request after the target died"
import errno, nbd, sys, time
h = nbd.NBD(); h.connect_uri("nbd+unix:///?socket=" + sys.argv[1])
t0 = time.monotonic()
try:
    h.pread(4096, 0)
    sys.exit("a read succeeded with the target dead")
except nbd.Error as e:
    print("read failed as expected:", e)
    assert e.errnum == errno.EIO, e
assert time.monotonic() - t0 < 5, time.monotonic() - t0
PY
# A spin shows as CPU time near the wall time (a core's worth, even on a
# busy machine), or as a storm of wake-ups; an idle gateway, even under
# valgrind (which costs hundreds of ms here), shows neither.  So the
# bounds are half the wall time and 300 wake-ups a second, not a
# measure of how cheap idling is (issue 15, item 12).
ticks ()
{
  awk '{ print $14 + $15 }' "/proc/$gw/stat"
}
wakeups ()
{
  cat /proc/"$gw"/task/*/status 2>/dev/null \
    | awk '/^voluntary_ctxt_switches/ { n += $2 } END { print n + 0 }'
}
t0=$(ticks); w0=$(wakeups); sleep 3; t1=$(ticks); w1=$(wakeups)
hz=$(getconf CLK_TCK)
cpu=$(( (t1 - t0) * 1000 / hz )); wake=$(( w1 - w0 ))
echo "gateway over 3 s with the target gone: $cpu ms of CPU, $wake wake-ups"
[ "$cpu" -le 1500 ] || fail "the gateway spins with the target gone ($cpu ms of CPU in 3 s)"
[ "$wake" -le 900 ] || fail "the gateway wakes up $wake times in 3 s with the target gone"
echo "test-target-gone: ok"
