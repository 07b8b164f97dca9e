#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# A request held across a lost connection is answered as soon as the new
# connection is checked, not at the loop thread's next nap timeout: sync
# reads at QD1 (tests/tools/latprobe.c) while the connection is cut three
# times; the loop's nap is stretched to 6 s (LUNGATE_TEST_NAP_MS) and the
# slowest request must stay under 3 s (it takes 0.1-0.4 s here).  Before
# the fix, the held read was issued again from the identity check's
# thread while the loop napped on its eventfd (selfpoll.c), and every cut
# cost a request the whole nap (~1.1 s with the default nap of 1 s).
. "${srcdir:-.}/functions-fault.sh"
require_lungate
require_test_hooks
latprobe=${top_builddir:-..}/tests/tools/latprobe
[ -x "$latprobe" ] || fail "$latprobe not built"
fault_tgt_start
t=iqn.2026-11.org.lungate:selfpoll
tgt_add_target 1 "$t"
tgt_add_lun 1 1 64M
tgt_allow 1 ALL
url="iscsi://$TGT_PORTAL/$t/1"

# probe NAME ARGS...: latprobe while the connection is cut three times.
probe ()
{
  local name=$1 out=$TGT_DIR/latprobe-$1.out pid rc i
  shift
  LUNGATE_TEST_NAP_MS=6000 LATPROBE_MAX_MS=3000 "$latprobe" "$url" "$@" >"$out" 2>&1 &
  pid=$!
  for i in 1 2 3; do
    sleep 1.2
    # (A cut while nothing is connected is no cut: counted below.)
    (fault_cut_conns "$pid") >/dev/null 2>&1 || true
  done
  wait "$pid"
  rc=$?
  sed "s/^/  $name: /" "$out"
  [ "$(grep -c "logged in again" "$out")" = 3 ] \
    || fail "$name: expected 3 reconnections"
  [ "$rc" = 0 ] || fail "$name: a request held across a reconnection took over 3 s"
}

# Reads: what was held is issued again after the identity check.
probe reads 1 sync 500 10 4096
# Writes: the writes in doubt make the check's thread send a LUN RESET
# first (the held writes go when it is answered).
probe writes 1 syncw 400 10 262144
