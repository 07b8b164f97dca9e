#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# Resilience: fio random writes with verify=crc32c and verify_backlog
# through the plugin while tgtd is killed with SIGKILL and restarted on the
# same LUN file five times at random moments: no I/O error, no verify
# error, then fio's final verify pass over all the data written.  Once
# plain, once on an encrypted LUN.  The gateway logs each reconnection.
. "${srcdir:-.}/functions-nbd.sh"
require_lungate_plugin
require fio
tgt_start
t=iqn.2026-11.org.lungate:restart
tgt_add_target 1 "$t"
tgt_add_lun 1 1 64M
tgt_add_lun 1 2 64M
tgt_allow 1 ALL
key="$TGT_DIR/key"; head -c 32 /dev/urandom >"$key"
"$LUNGATE" format --key-file "$key" "iscsi://$TGT_PORTAL/$t/2" >/dev/null 2>&1 \
  || fail "format"
sock="$TGT_DIR/nbd.sock"

run_round ()   # run_round NAME LUN [PLUGIN-PARAM...]
{
  local name=$1 lun=$2 log="$TGT_DIR/nbdkit-$1.log" gw fio_pid rc i n
  shift 2
  rm -f "$sock"
  "${NBDKIT[@]}" -f -U "$sock" "$LUNGATE_PLUGIN" \
    "url=iscsi://$TGT_PORTAL/$t/$lun" connections=2 timeout=60 "$@" \
    2>"$log" &
  gw=$!
  for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.1; done
  [ -S "$sock" ] || { cat "$log" >&2; fail "$name: the gateway did not start"; }

  # About 48 MiB of 4 KiB random writes at a bounded rate (so that the
  # restarts land in the write phase), each verified soon after
  # (verify_backlog) and all again at the end.
  timeout 300 fio --name="$name" --ioengine=nbd --uri="nbd+unix:///?socket=$sock" \
    --rw=randwrite --bs=4k --iodepth=16 --size=48m --rate_iops=2500 \
    --verify=crc32c --verify_state_save=0 --verify_backlog=512 --verify_fatal=1 \
    --output-format=json --output="$TGT_DIR/fio-$name.json" \
    >"$TGT_DIR/fio-$name.out" 2>&1 &
  fio_pid=$!

  for i in 1 2 3 4 5; do
    sleep "$(awk -v s="$RANDOM" 'BEGIN { srand(s); printf "%.2f", 0.8 + rand() * 1.5 }')"
    n=$(grep -c "logged in again" "$log" || true)
    tgt_kill
    sleep "$(awk -v s="$RANDOM" 'BEGIN { srand(s); printf "%.2f", 0.2 + rand() * 1.2 }')"
    tgt_restart
    # The next kill waits until the gateway is back on this target, so
    # that each restart interrupts a live session (two kills inside one
    # outage would count as one).
    for _ in $(seq 300); do
      [ "$(grep -c "logged in again" "$log" || true)" -gt "$n" ] && break
      sleep 0.1
    done
    [ "$(grep -c "logged in again" "$log" || true)" -gt "$n" ] \
      || { cat "$log" >&2; fail "$name: no new login 30 s after restart $i"; }
    echo "$name: restart $i done"
  done
  rc=0; wait "$fio_pid" || rc=$?
  if [ "$rc" != 0 ]; then
    cat "$TGT_DIR/fio-$name.out" "$log" >&2
    fail "$name: fio exit status $rc across tgtd restarts"
  fi
  python3 - "$TGT_DIR/fio-$name.json" <<'PY' || { cat "$log" >&2; fail "$name: fio reported errors"; }
import json, sys
j = json.load(open(sys.argv[1]))["jobs"][0]
assert j["error"] == 0, j["error"]
assert j.get("total_err", 0) == 0, j.get("total_err")
w = j["write"]["io_bytes"]; r = j["read"]["io_bytes"]
# Every byte written was read back and verified (backlog and final pass).
assert w >= 48 << 20, w
assert r >= w, (r, w)
print("writes %d MiB, verified %d MiB" % (w >> 20, r >> 20))
PY
  nbd_stop "$gw"
  cat "$log"
  n=$(grep -c "logged in again" "$log" || true)
  [ "$n" -ge 5 ] || fail "$name: $n reconnections logged, want at least 5"
  if grep -Eq "AddressSanitizer|runtime error:" "$log"; then
    fail "$name: sanitizer report"
  fi
}

run_round plain 1
run_round crypt 2 "key-file=$key"
echo "test-nbd-restart: ok"
