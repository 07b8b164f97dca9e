#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# A gateway stopped while it reads ahead (src/dev/ra.c): the reads of
# its read-ahead workers that the stop cuts short were asked for by no
# client, and fail no client's request.  They are not errors: nothing in
# the log may say "error" (contrib/bench/link's summary of the
# gateways' errors showed one such read, "READ(16) LBA 395264+2048:
# transport error: ... no answer within the outage budget (0 s)", at
# the end of a copy at 50 ms and 100 Mbit/s).  A client's read that
# fails still says so: the read-ahead chunk that failed is not served,
# and the client's own read goes to the target (tests/test-read-ahead.sh).
# Here: through tests/tools/delay-proxy at 4 Mbit/s, a client reads 1
# MiB in order from the plugin (readahead=8M), goes, and nbdkit is told
# to stop (SIGTERM) while the next MiBs are still on their way.
. "${srcdir:-.}/functions-nbd.sh"
require_lungate_plugin
require_nbd_python
tgt_start
t=iqn.2026-12.org.lungate:rastop
tgt_add_target 1 "$t"
tgt_add_lun 1 1 16M
tgt_allow 1 ALL
head -c 16M /dev/urandom >"$(tgt_lun_file 1 1)"
delay_proxy_start --delay-ms 20 --rate 4Mbit
sock=$TGT_DIR/gw.sock
nbd_start "$sock" "$TGT_DIR/nbdkit.log" \
  "url=iscsi://127.0.0.1:$DELAY_PORT/$t/1" readahead=8M
env -u LD_PRELOAD "$NBD_PYTHON" - "$sock" <<'PY' || fail "the client's reads failed"
import nbd, sys
h = nbd.NBD()
h.connect_unix(sys.argv[1])
for i in range(8):
    h.pread(128 * 1024, i * 128 * 1024)
h.shutdown()
PY
nbd_stop "$NBD_PID"
grep "stats (exit)" "$TGT_DIR/nbdkit.log" | grep -o "ra_[a-z_]*=[0-9]*" | tr '\n' ' '; echo
# nbdkit's level names the line: "nbdkit: error: ..." or "nbdkit:
# lungate[1]: error: ..."; a debug line may quote a "transport error".
if grep -E "^nbdkit:( [^ ]+:)? error: " "$TGT_DIR/nbdkit.log"; then
  fail "a read ahead that the stop cut short was logged as an error"
fi
echo "test-ra-stop: ok"
