#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# A target that freezes (SIGSTOP: its sockets stay open and say nothing)
# for 9 s under a writer: the keepalive finds the connection dead, the
# gateway logs in again once the target answers, and the writer sees a
# delay, not an error; every write reads back.
. "${srcdir:-.}/functions-nbd.sh"
require_lungate_plugin
require_nbd_python
tgt_start
t=iqn.2026-11.org.lungate:freeze
tgt_add_target 1 "$t"
tgt_add_lun 1 1 16M
tgt_allow 1 ALL
sock="$TGT_DIR/nbd.sock"
log="$TGT_DIR/nbdkit.log"
"${NBDKIT[@]}" -f -U "$sock" "$LUNGATE_PLUGIN" "url=iscsi://$TGT_PORTAL/$t/1" \
  connections=2 timeout=60 2>"$log" &
gw=$!
on_exit nbd_stop "$gw"
for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.1; done
[ -S "$sock" ] || { cat "$log" >&2; fail "the gateway did not start"; }
tgtd_pid=${TGT_PID:-}
[ -n "$tgtd_pid" ] || fail "cannot find tgtd"
thaw () { kill -CONT "$tgtd_pid" 2>/dev/null || true; }
on_exit thaw

timeout 120 env -u LD_PRELOAD "$NBD_PYTHON" - "$sock" >"$TGT_DIR/writer.out" 2>&1 <<'PY' &
import nbd, sys, time
h = nbd.NBD(); h.connect_uri("nbd+unix:///?socket=" + sys.argv[1])
end = time.monotonic() + 22
i = 0
longest = 0
while time.monotonic() < end:
    off = (i % 1024) * 8192
    data = (b"%08d" % i) * 512
    t0 = time.monotonic()
    h.pwrite(data, off)
    assert h.pread(4096, off) == data, i
    longest = max(longest, time.monotonic() - t0)
    i += 1
    time.sleep(0.01)
print("%d writes, longest wait %.1f s" % (i, longest))
assert longest > 5, "the freeze was not felt"
PY
writer=$!
sleep 4
kill -STOP "$tgtd_pid"
sleep 9
kill -CONT "$tgtd_pid"
rc=0; wait "$writer" || rc=$?
cat "$TGT_DIR/writer.out"
[ "$rc" = 0 ] || { cat "$log" >&2; fail "the writer failed across the freeze (status $rc)"; }
grep -q "no answer to keepalive" "$log" || { cat "$log" >&2; fail "the keepalive did not notice the freeze"; }
grep -q "logged in again" "$log" || { cat "$log" >&2; fail "no new login after the freeze"; }
echo "test-nbd-freeze: ok"
