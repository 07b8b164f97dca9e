#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# A write held inside the target's backing store (faultio under tgtd:
# the target keeps answering NOP-Outs) for longer than the gateway's
# command timeout, then a newer write to the same range: the newer data,
# once acknowledged and flushed, must be what the range holds after the
# stalled write has landed (invariant 1 of DESIGN.md: no acknowledged
# write is ever overwritten by an older one).  Four scenarios at once,
# each with its own LUN, gateway (nbdkit with the plugin) and rule:
#   p75   plain LUN, the write stalled 75 s (default outage budget: the
#         stalled write may succeed or fail with EIO);
#   p150  plain LUN, stalled 150 s with timeout=-1 (wait for ever): the
#         stalled write must succeed;
#   cut   plain LUN, stalled 75 s, and the gateway's TCP connections to
#         the target reset (ss -K) 10 s into the stall;
#   c75   encrypted (aead) LUN, the data of one unit stalled 75 s (by
#         offset: the target sees ciphertext); the unit must read as the
#         newer plaintext, not fail.
# The client side of each is tests/tools/fault-stall.py.
. "${srcdir:-.}/functions-fault.sh"
require_lungate_plugin
require_nbd_python
require ss
fault_tgt_start
t=iqn.2026-11.org.lungate:stall
tgt_add_target 1 "$t"
for lun in 1 2 3 4; do tgt_add_lun 1 "$lun" 16M; done
tgt_allow 1 ALL
url="iscsi://$TGT_PORTAL/$t"
key="$TGT_DIR/key"; head -c 32 /dev/urandom >"$key"
"$LUNGATE" format --mode aead --key-file "$key" "$url/4" >/dev/null 2>&1 \
  || fail "format"
data_off=$("$LUNGATE" info "$url/4" | sed -n 's/^volume-data-offset: //p')
[ -n "$data_off" ] || fail "lungate info shows no volume-data-offset"

off=$((1 << 20))               # plain LUNs: the range written
unit=100                       # encrypted LUN: the unit written
coff=$((unit * 4096))
cboff=$((data_off + coff))     # ... and where its ciphertext lives

# Rules 1-4, one per scenario.
fault_rule "op=write path=lun-1-1.img match=OLD-p75- action=stall:75000"
fault_rule "op=write path=lun-1-2.img match=OLD-p150- action=stall:150000"
fault_rule "op=write path=lun-1-3.img match=OLD-cut- action=stall:75000"
fault_rule "op=write path=lun-1-4.img off=$cboff-$((cboff + 4096)) action=stall:75000"

declare -A gw
start_gw () # NAME LUN PARAM...
{
  local name=$1 lun=$2 sock="$TGT_DIR/$1.sock"
  shift 2
  "${NBDKIT[@]}" -f -U "$sock" "$LUNGATE_PLUGIN" "url=$url/$lun" "$@" \
    2>"$TGT_DIR/$name.nbdkit.log" &
  gw[$name]=$!
  on_exit nbd_stop "${gw[$name]}"
  for _ in $(seq 100); do [ -S "$sock" ] && return 0; sleep 0.1; done
  cat "$TGT_DIR/$name.nbdkit.log" >&2
  fail "gateway $name did not start"
}
start_gw p75 1
start_gw p150 2 timeout=-1
start_gw cut 3
start_gw c75 4 "key-file=$key"

declare -A job
run () # NAME LINE ARGS...
{
  local name=$1 line=$2
  shift 2
  timeout --kill-after=5 480 env -u LD_PRELOAD "$NBD_PYTHON" \
    "$srcdir/tools/fault-stall.py" --nbd "$TGT_DIR/$name.sock" --tag "$name" \
    --log "$FAULT_LOG" --line "$line" "$@" >"$TGT_DIR/$name.out" 2>&1 &
  job[$name]=$!
}
run p75 1 --off "$off" --backing "$(tgt_lun_file 1 1)"
run p150 2 --off "$off" --backing "$(tgt_lun_file 1 2)" --expect-old success
run cut 3 --off "$off" --backing "$(tgt_lun_file 1 3)"
run c75 4 --off "$coff"

# The cut: 10 s into the stall of rule 3.
fault_wait_log '^stall-begin 3 ' 60
sleep 10
fault_log_has '^stall-end 3 ' && fail "the cut scenario's stall ended early"
fault_cut_conns "${gw[cut]}"

failed=()
for name in p75 p150 cut c75; do
  rc=0; wait "${job[$name]}" || rc=$?
  cat "$TGT_DIR/$name.out"
  if [ "$rc" -ne 0 ]; then
    failed+=("$name (status $rc)")
  fi
done
for name in p75 p150 cut c75; do
  _lg_alive "${gw[$name]}" || failed+=("$name: the gateway died")
done
echo "--- faultio.log ---"; cat "$FAULT_LOG"
if [ "${#failed[@]}" -gt 0 ]; then
  for name in p75 p150 cut c75; do
    echo "--- $name.nbdkit.log (last lines) ---"; tail -n 15 "$TGT_DIR/$name.nbdkit.log"
  done
  fail "scenarios failed: ${failed[*]}"
fi
echo "test-fault-stall: ok"
