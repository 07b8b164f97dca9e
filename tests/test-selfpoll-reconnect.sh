#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# A request held across a lost connection is answered as soon as the new
# connection is checked, not at the loop thread's next nap timeout: sync
# reads at QD1 (tests/tools/latprobe.c) while the connection is cut three
# times; the slowest request must stay well under the 1 s nap
# (SERVICE_INTERVAL_MS).  Before the fix, the held read was issued again
# from the identity check's thread while the loop napped on its eventfd
# (selfpoll.c), and every cut cost a request ~1.1 s against ~0.1-0.35 s.
. "${srcdir:-.}/functions-fault.sh"
require_lungate
latprobe=${top_builddir:-..}/tests/tools/latprobe
[ -x "$latprobe" ] || fail "$latprobe not built"
fault_tgt_start
t=iqn.2026-11.org.lungate:selfpoll
tgt_add_target 1 "$t"
tgt_add_lun 1 1 64M
tgt_allow 1 ALL
url="iscsi://$TGT_PORTAL/$t/1"

out=$TGT_DIR/latprobe.out
LATPROBE_MAX_MS=700 "$latprobe" "$url" 1 sync 500 10 4096 >"$out" 2>&1 &
pid=$!
for i in 1 2 3; do
  sleep 1.2
  fault_cut_conns "$pid" >/dev/null
done
wait "$pid"
rc=$?
sed 's/^/  /' "$out"
grep -c "logged in again" "$out" | grep -qx 3 || fail "expected 3 reconnections"
[ "$rc" = 0 ] || fail "a request held across a reconnection took over 700 ms"
