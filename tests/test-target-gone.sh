#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# The target dies under a gateway with a zero outage budget (timeout=0):
# requests fail at once (no hang) and the gateway, which keeps trying to
# log in again, does not spin (libiscsi's own tools were seen at 100% CPU
# against a dead port): its CPU time over 3 s must stay small.
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
ticks ()
{
  awk '{ print $14 + $15 }' "/proc/$gw/stat"
}
t0=$(ticks); sleep 3; t1=$(ticks)
hz=$(getconf CLK_TCK)
echo "gateway CPU over 3 s with the target gone: $(( (t1 - t0) * 1000 / hz )) ms"
[ $(( (t1 - t0) * 1000 / hz )) -le 300 ] || fail "the gateway spins with the target gone"
echo "test-target-gone: ok"
