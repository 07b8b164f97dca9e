#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# A session that is down gets no new requests while another is up.  The
# plugin runs two sessions with an outage budget of 1 s; new logins are
# refused (ACL unbound: tgt keeps the sessions it has) and one session's
# connection is cut, so it stays down and fails what it gets; the other
# stays up.  Every request must succeed.  Each session is cut in turn:
# the old pool gave every request to the first session whenever its load
# was 0, down or not, so one of the two rounds failed there.
. "${srcdir:-.}/functions-nbd.sh"
require_lungate_plugin
require_nbd_python
require ss
tgt_start
t=iqn.2026-11.org.lungate:pooldown
tgt_add_target 1 "$t"
tgt_add_lun 1 1 16M
tgt_allow 1 ALL
sock="$TGT_DIR/nbd.sock"
log="$TGT_DIR/nbdkit.log"
"${NBDKIT[@]}" -f -U "$sock" "$LUNGATE_PLUGIN" "url=iscsi://$TGT_PORTAL/$t/1" \
  connections=2 timeout=1 2>"$log" &
gw=$!
on_exit nbd_stop "$gw"
for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.1; done
[ -S "$sock" ] || { cat "$log" >&2; fail "the gateway did not start"; }

# The gateway's local ports of its connections to tgtd, one a line.
gw_ports ()
{
  ss -Htn state established dst 127.0.0.1 "dport = :$TGT_PORT" \
    | awk '{ n = split($3, a, ":"); print a[n] }' | sort -n
}

wait_sessions ()
{
  local n
  for _ in $(seq 300); do
    n=$(gw_ports | wc -l)
    [ "$n" -ge "$1" ] && return 0
    sleep 0.1
  done
  cat "$log" >&2
  fail "$1 sessions expected, $n there"
}

round ()
{
  local victim=$1 ports
  wait_sessions 2
  mapfile -t ports < <(gw_ports)
  tgt_disallow 1 ALL
  ss -K dst 127.0.0.1 "dport = :$TGT_PORT" "sport = :${ports[victim]}" \
    >/dev/null
  # Past the budget: the cut session fails what it is given.
  sleep 3
  env -u LD_PRELOAD "$NBD_PYTHON" - "$sock" "$victim" <<'PY' \
    || { cat "$log" >&2; fail "round $victim: requests failed while one session was up"; }
import nbd, sys
h = nbd.NBD(); h.connect_uri("nbd+unix:///?socket=" + sys.argv[1])
for i in range(200):
    data = (b"%d:%06d" % (int(sys.argv[2]), i)).ljust(4096, b".")
    h.pwrite(data, (i % 64) * 4096)
    assert h.pread(4096, (i % 64) * 4096) == data, i
print("200 writes and reads, all good")
PY
  tgt_allow 1 ALL
}

round 0
round 1
grep -q "connection lost" "$log" || { cat "$log" >&2; fail "no connection was cut"; }
echo "test-pool-down: ok"
