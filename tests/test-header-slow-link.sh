#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# Header updates over a slow link (lungate-format(5), the timed scheme):
# tgt has no COMPARE AND WRITE, and the slow-link proxy puts 100 ms each
# way between lungate and tgtd, a 200 ms round trip.  Through it:
#  - `key add' adds a key slot;
#  - a gateway's first write marks the volume dirty and its close marks
#    it clean again, and the data is there;
#  - while a gateway on the fast path opens, writes and closes the volume
#    over and over, `key add' through the slow path adds two more slots,
#    and none of the updates of either is lost.
# A header update that had to finish within a fixed time of its read gave
# up every attempt here ("the header kept changing during 40 attempts").
# The last part needs several writers on one volume, which only a target
# without persistent reservations allows (test-header-race says why the
# two switches below).
. "${srcdir:-.}/functions-nbd.sh"
require_lungate_plugin
require_test_hooks
require_nbd_python
require tgtd tgtadm nbdkit

tgt_start
t=iqn.2026-12.org.lungate:slow-header
tgt_add_target 1 "$t"
tgt_add_lun 1 1 16M
tgt_allow 1 ALL
fast="iscsi://$TGT_PORTAL/$t/1"
for s in 0 1 2 3; do head -c 32 /dev/urandom >"$TGT_DIR/k$s"; done
"$LUNGATE" format --key-file "$TGT_DIR/k0" "$fast" >/dev/null || fail "format"

delay_proxy_start --delay-ms 100
slow="iscsi://127.0.0.1:$DELAY_PORT/$t/1"

state () { "$LUNGATE" info "$fast" | sed -n 's/^volume-state: //p'; }

# key add through the slow link.
with_timeout 300 "$LUNGATE" key add --key-file "$TGT_DIR/k0" \
  --new-key-file "$TGT_DIR/k1" --slot 1 "$slow" >"$TGT_DIR/add1.out" 2>&1 \
  || { cat "$TGT_DIR/add1.out" >&2; fail "key add through a 200 ms round trip"; }
"$LUNGATE" key list "$fast" | grep -qx 'slot 1: key-file' \
  || fail "key add through the slow link said yes and slot 1 is empty"

# A gateway through the slow link: dirty at its first write, clean at
# its close, the data there.
printf 'slow-link-data' >"$TGT_DIR/data"
nbd_run "url=$slow" "key-file=$TGT_DIR/k1" -- "$NBD_PYTHON" - '$uri' \
  <<'PY' >"$TGT_DIR/gw.out" 2>&1 || { cat "$TGT_DIR/gw.out" >&2; fail "a write through the slow link failed"; }
import nbd, sys
h = nbd.NBD(); h.connect_uri(sys.argv[1])
h.pwrite(b"slow-link-data" * 292 + b"\0" * 8, 8192); h.flush()
PY
[ "$(state)" = clean ] || fail "the gateway through the slow link left the volume $(state)"
[ "$(nbd_read_head "$fast" 8192 "key-file=$TGT_DIR/k0")" = slow ] \
  || fail "the data written through the slow link is not there"

# Both at once: a fast gateway in a loop, slow key adds beside it.
export LUNGATE_TEST_IGNORE_PR=1 LUNGATE_TEST_NO_OWNER=1
stop=$TGT_DIR/stop
on_exit touch "$stop"
(
  i=0
  while [ ! -e "$stop" ]; do
    nbd_run "url=$fast" "key-file=$TGT_DIR/k0" -- "$NBD_PYTHON" - '$uri' "$i" \
      <<'PY' || { echo "round $i failed" >"$TGT_DIR/gw-failed"; exit 1; }
import nbd, sys
h = nbd.NBD(); h.connect_uri(sys.argv[1])
i = int(sys.argv[2])
h.pwrite(bytes([i % 251]) * 4096, (16 + i % 16) * 4096); h.flush()
PY
    i=$((i + 1))
    sleep 1
  done
  echo "$i" >"$TGT_DIR/gw-rounds"
) &
gw=$!
for s in 2 3; do
  with_timeout 300 "$LUNGATE" -v key add --key-file "$TGT_DIR/k0" \
    --new-key-file "$TGT_DIR/k$s" --slot $s "$slow" >"$TGT_DIR/add$s.out" 2>&1 \
    || { cat "$TGT_DIR/add$s.out" >&2; fail "key add slot $s through the slow link, beside a gateway"; }
  echo "key add slot $s: started again $(grep -c 'changed during an update' "$TGT_DIR/add$s.out") times"
done
touch "$stop"
wait "$gw" || fail "the fast gateway failed: $(cat "$TGT_DIR/gw-failed" 2>/dev/null)"
echo "fast gateway: $(cat "$TGT_DIR/gw-rounds") open-write-close rounds beside the slow key adds"
[ "$(cat "$TGT_DIR/gw-rounds")" -ge 1 ] || fail "the fast gateway never ran"

"$LUNGATE" key list "$fast" >"$TGT_DIR/list"
for s in 0 1 2 3; do
  grep -qx "slot $s: key-file" "$TGT_DIR/list" \
    || { cat "$TGT_DIR/list" >&2; fail "key slot $s was added and is gone"; }
  "$LUNGATE" verify --key-file "$TGT_DIR/k$s" "$fast" >/dev/null \
    || fail "key slot $s does not open the volume"
done
[ "$(state)" = clean ] || fail "the volume is $(state) after every gateway closed"
echo "test-header-slow-link: ok"
