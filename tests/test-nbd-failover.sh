#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# Portal failover: the target listens on two loopback addresses, the
# plugin is given both (url= twice); while fio writes and verifies, the
# first path is taken down (its portal removed, its connections killed):
# the requests move to the other path with no error.
. "${srcdir:-.}/functions-nbd.sh"
require_lungate_plugin
require fio ss
tgt_start
t=iqn.2026-11.org.lungate:failover
tgt_add_target 1 "$t"
tgt_add_lun 1 1 32M
tgt_allow 1 ALL
tgtadm_ --mode portal --op new --param "portal=127.0.0.2:$TGT_PORT" \
  || skip "tgtd cannot listen on 127.0.0.2"
sock="$TGT_DIR/nbd.sock"
log="$TGT_DIR/nbdkit.log"
"${NBDKIT[@]}" -f -U "$sock" "$LUNGATE_PLUGIN" \
  "url=iscsi://127.0.0.2:$TGT_PORT/$t/1" "url=iscsi://127.0.0.1:$TGT_PORT/$t/1" \
  connections=2 2>"$log" &
gw=$!
on_exit nbd_stop "$gw"
for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.1; done
[ -S "$sock" ] || { cat "$log" >&2; fail "the gateway did not start"; }
# The plugin logs in after nbdkit made the socket (after_fork): wait for
# its sessions.  (CI run s45a, beside another and a CPU hog, looked once,
# at once, and failed.)
for _ in $(seq 300); do
  [ "$(ss -Htn state established "dst 127.0.0.2:$TGT_PORT" | wc -l)" -ge 2 ] && break
  sleep 0.1
done
ss -tn state established "dst 127.0.0.2:$TGT_PORT" | grep -q 127.0.0.2 \
  || { cat "$log" >&2; fail "the gateway did not use the first portal"; }

timeout 120 fio --name=failover --ioengine=nbd --uri="nbd+unix:///?socket=$sock" \
  --rw=randwrite --bs=4k --iodepth=16 --size=24m --rate_iops=2500 \
  --verify=crc32c --verify_state_save=0 --verify_backlog=512 --verify_fatal=1 \
  --output-format=json --output="$TGT_DIR/fio.json" >"$TGT_DIR/fio.out" 2>&1 &
fio_pid=$!
sleep 2
# The path goes away: no new connections, and the established ones die.
tgtadm_ --mode portal --op delete --param "portal=127.0.0.2:$TGT_PORT" \
  || fail "cannot remove the portal"
ss -K dst 127.0.0.2 dport = "$TGT_PORT" >/dev/null 2>&1 || true
rc=0; wait "$fio_pid" || rc=$?
cat "$log"
[ "$rc" = 0 ] || { cat "$TGT_DIR/fio.out" >&2; fail "fio exit status $rc across the failover"; }
python3 - "$TGT_DIR/fio.json" <<'PY' || fail "fio reported errors"
import json, sys
j = json.load(open(sys.argv[1]))["jobs"][0]
assert j["error"] == 0 and j.get("total_err", 0) == 0
assert j["read"]["io_bytes"] >= j["write"]["io_bytes"] >= 24 << 20
PY
grep -q "logged in again at 127.0.0.1:$TGT_PORT" "$log" \
  || fail "no reconnection to the second portal in the log"
if ss -tn state established "dst 127.0.0.2:$TGT_PORT" | grep -q 127.0.0.2; then
  fail "a connection to the removed path is still up"
fi
echo "test-nbd-failover: ok"
