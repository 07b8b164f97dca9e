#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# Header updates from several writers at once (issue 13, case 6): `key
# add' and `key remove' in a loop while three gateways open the volume,
# write (marking it dirty) and close it (marking it clean), over and over.
# At the end every slot added is there and opens the volume, every slot
# removed is gone, and the volume is clean.  tgt refuses COMPARE AND
# WRITE, so this is the timed scheme of lungate-format(5); test-hdrupdate
# has the COMPARE AND WRITE path.  Several writers on one volume happen
# only where nothing keeps them out (test-reserve and test-owner refuse
# the second writer): LUNGATE_TEST_IGNORE_PR makes lungate behave as on
# a target without persistent reservations, LUNGATE_TEST_NO_OWNER leaves
# out the owner record that would refuse it there.
. "${srcdir:-.}/functions-nbd.sh"
require_lungate_plugin
require_test_hooks
require_nbd_python
export LUNGATE_TEST_IGNORE_PR=1 LUNGATE_TEST_NO_OWNER=1
tgt_start
t=iqn.2026-11.org.lungate:hdrrace
tgt_add_target 1 "$t"
tgt_add_lun 1 1 16M
tgt_allow 1 ALL
url="iscsi://$TGT_PORTAL/$t/1"
k0=$TGT_DIR/k0; head -c 32 /dev/urandom >"$k0"
for s in 1 2 3 4 5 6 7; do head -c 32 /dev/urandom >"$TGT_DIR/k$s"; done
"$LUNGATE" format --key-file "$k0" "$url" >/dev/null || fail "format"

stop=$TGT_DIR/stop
cat >"$TGT_DIR/gw.py" <<'PY'
import nbd, sys
h = nbd.NBD(); h.connect_uri(sys.argv[1])
n, i = int(sys.argv[2]), int(sys.argv[3])
h.pwrite(bytes([n * 16 + i % 16]) * 4096, (n * 64 + i % 64) * 4096)
h.flush()
PY
gateway_failed ()   # gateway_failed N ROUND START
{
  local log=$TGT_DIR/gw-$1.log
  {
    echo "gateway $1 round $2 failed after $(($(date +%s) - $3)) s:"
    grep -v ': debug: ' "$log" | tail -20
    echo "header updates: $(grep -c 'the header changed during an update' "$log") attempts started again, $(grep -c 'a header check took' "$log") checks too slow; the last:"
    grep -E 'header (check took|changed during)|no answer|abort' "$log" | tail -10
  } >>"$TGT_DIR/gw-failed"
}
gateway ()   # gateway N: open, write, close until $stop exists
{
  local i=0 t0
  while [ ! -e "$stop" ]; do
    # Each round's debug log is kept until the next: it shows how many
    # attempts each header update took and how long a check ran, which
    # is what a round that ran out of time needs to be explained.
    t0=$(date +%s)
    # Two header updates a round, each up to 40 attempts of a second's
    # wait and eight round trips: the scheme's own end comes before this.
    if ! NBD_RUN_TIMEOUT=400 nbd_run -v "url=$url" "key-file=$k0" -- \
      "$NBD_PYTHON" "$TGT_DIR/gw.py" '$uri' "$1" "$i" 2>"$TGT_DIR/gw-$1.log"; then
      # The one failure allowed: the timed scheme gave up after its
      # attempts because its checks ran slower than it allows (a machine
      # this loaded; lungate-format(5)), with the clear error.  It never
      # counts as a round, and every gateway needs rounds that passed.
      if grep -q 'the header kept changing during' "$TGT_DIR/gw-$1.log" \
        && grep -q 'a header check took' "$TGT_DIR/gw-$1.log"; then
        echo "gateway $1 round $i: a header update gave up, its checks too slow" >&2
        grep -E 'kept changing|cannot mark' "$TGT_DIR/gw-$1.log" >&2
        continue
      fi
      gateway_failed "$1" "$i" "$t0"
      return 1
    fi
    i=$((i + 1))
  done
  echo "$i" >"$TGT_DIR/gw-$1-rounds"
}
pids=()
for g in 1 2 3; do gateway $g & pids+=($!); done
on_exit touch "$stop"

for round in 1 2; do
  for s in 1 2 3 4 5 6 7; do
    "$LUNGATE" key add --key-file "$k0" --new-key-file "$TGT_DIR/k$s" \
      --slot $s "$url" >/dev/null || fail "round $round: key add slot $s"
  done
  [ "$round" = 2 ] && break
  for s in 1 2 3 4 5 6 7; do
    "$LUNGATE" key remove --key-file "$k0" --slot $s "$url" >/dev/null \
      || fail "round $round: key remove slot $s"
  done
  # Every removal made it: all seven free again.
  "$LUNGATE" key list "$url" >"$TGT_DIR/list"
  [ "$(grep -c ': empty$' "$TGT_DIR/list")" = 7 ] \
    || { cat "$TGT_DIR/list"; fail "round $round: a removed key slot came back"; }
done
touch "$stop"
for p in "${pids[@]}"; do wait "$p" || fail "a gateway failed: $(cat "$TGT_DIR/gw-failed" 2>/dev/null)"; done
for g in 1 2 3; do
  r=$(cat "$TGT_DIR/gw-$g-rounds")
  echo "gateway $g: $r open-write-close rounds"
  [ "$r" -ge 1 ] || fail "gateway $g never ran"
done

"$LUNGATE" key list "$url" >"$TGT_DIR/list"
cat "$TGT_DIR/list"
for s in 1 2 3 4 5 6 7; do
  grep -qx "slot $s: key-file" "$TGT_DIR/list" || fail "key slot $s was added and is gone"
done
# Each slot opens with its own key (key list showed them all there).
for s in 0 3 7; do
  "$LUNGATE" verify --key-file "$TGT_DIR/k$s" "$url" >/dev/null \
    || fail "key $s does not open the volume"
done
"$LUNGATE" info "$url" | grep -qx "volume-state: clean" || { "$LUNGATE" info "$url"; fail "the volume is not clean"; }
echo "every key slot added survived"
