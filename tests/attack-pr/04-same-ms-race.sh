#!/usr/bin/env bash
# Two plugins on one host started at the same moment, then a writable
# connection to each at the same moment: at most one may write.  (The key
# is the host hash and the millisecond of the device's open, so two
# opened in the same millisecond share it, and the second then finds the
# LUN "ours already", reserve.c:claim_held.  Also exercises the
# READ RESERVATION / RESERVE window.)
. /work/main/tests/attack-pr/common.sh
tgt_start
t=iqn.2026-11.org.lungate:atk4
tgt_add_target 1 "$t"
tgt_add_lun 1 1 16M
tgt_allow 1 ALL
url="iscsi://$TGT_PORTAL/$t/1"
ROUNDS=${ROUNDS:-30}
both=0; same=0
for i in $(seq "$ROUNDS"); do
  rm -f "$TGT_DIR"/x.sock "$TGT_DIR"/y.sock
  : >"$TGT_DIR/x.log"; : >"$TGT_DIR/y.log"
  nbdkit -v -D lungate.verbose=1 -f -U "$TGT_DIR/x.sock" "$LUNGATE_PLUGIN" "url=$url" 2>"$TGT_DIR/x.log" &
  px=$!
  nbdkit -v -D lungate.verbose=1 -f -U "$TGT_DIR/y.sock" "$LUNGATE_PLUGIN" "url=$url" 2>"$TGT_DIR/y.log" &
  py=$!
  for _ in $(seq 100); do [ -S "$TGT_DIR/x.sock" ] && [ -S "$TGT_DIR/y.sock" ] && break; sleep 0.05; done
  io x write 1 $i >"$TGT_DIR/x.r" 2>/dev/null &
  a=$!
  io y write 2 $i >"$TGT_DIR/y.r" 2>/dev/null &
  b=$!
  wait $a $b
  rx=$(cat "$TGT_DIR/x.r"); ry=$(cat "$TGT_DIR/y.r")
  kx=$(grep -o "reserved (key 0x[0-9a-f]*" "$TGT_DIR/x.log" | head -1)
  ky=$(grep -o "reserved (key 0x[0-9a-f]*" "$TGT_DIR/y.log" | head -1)
  echo "round $i: x=$rx y=$ry  x:$kx y:$ky"
  if [ "$rx" = ok ] && [ "$ry" = ok ]; then
    both=$((both+1))
    mkdir -p /tmp/atk4; cp "$TGT_DIR/x.log" /tmp/atk4/both-x-$i.log; cp "$TGT_DIR/y.log" /tmp/atk4/both-y-$i.log
    "$LUNGATE" info "$url" | grep reservation
  fi
  kill $px $py; wait $px $py 2>/dev/null
done
echo "rounds: $ROUNDS, both wrote while both running: $both"
[ "$both" = 0 ] || fail "BROKEN: two gateways wrote one LUN at once"
