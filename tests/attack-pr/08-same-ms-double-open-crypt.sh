#!/usr/bin/env bash
# The issue's double-open run, with two plugins started at the same
# moment on one encrypted LUN: start pairs until both are admitted (they
# made the same key in the same millisecond), then both write random 4K
# units under load; lungate verify must say every unit is authentic.
. /work/main/tests/attack-pr/common.sh
tgt_start
t=iqn.2026-11.org.lungate:atk8
tgt_add_target 1 "$t"
tgt_add_lun 1 1 16M
tgt_allow 1 ALL
url="iscsi://$TGT_PORTAL/$t/1"
key=$TGT_DIR/key; head -c 32 /dev/urandom >"$key"
"$LUNGATE" format --lazy --key-file "$key" "$url" >/dev/null || fail "format"
load ()
{
  env -u LD_PRELOAD "$NBD_PYTHON" - "$TGT_DIR/$1.sock" "$2" <<'PY'
import nbd, sys, random, time
h = nbd.NBD(); h.connect_uri("nbd+unix:///?socket=" + sys.argv[1])
n = h.get_size() // 4096; ok = bad = 0; t0 = time.time()
while time.time() - t0 < 5:
    u = random.randrange(0, 200)
    try:
        h.pwrite(bytes([int(sys.argv[2])]) * 4096, u * 4096); ok += 1
    except nbd.Error as e:
        bad += 1
        if bad == 1: print("write error", e.string)
h.flush()
print(sys.argv[1].split("/")[-1], "writes ok", ok, "failed", bad)
PY
}
got=
for i in $(seq ${ROUNDS:-60}); do
  rm -f "$TGT_DIR"/x.sock "$TGT_DIR"/y.sock
  nbdkit -f -U "$TGT_DIR/x.sock" "$LUNGATE_PLUGIN" "url=$url" "key-file=$key" 2>"$TGT_DIR/x.log" &
  px=$!
  nbdkit -f -U "$TGT_DIR/y.sock" "$LUNGATE_PLUGIN" "url=$url" "key-file=$key" 2>"$TGT_DIR/y.log" &
  py=$!
  for _ in $(seq 100); do [ -S "$TGT_DIR/x.sock" ] && [ -S "$TGT_DIR/y.sock" ] && break; sleep 0.05; done
  io x write 3000 1 >"$TGT_DIR/x.r" 2>/dev/null & a=$!
  io y write 3001 1 >"$TGT_DIR/y.r" 2>/dev/null & b=$!
  wait $a $b
  if [ "$(cat "$TGT_DIR/x.r")" = ok ] && [ "$(cat "$TGT_DIR/y.r")" = ok ]; then
    got=$i; break
  fi
  kill $px $py; wait $px $py 2>/dev/null
done
[ -n "$got" ] || { echo "no collision in ${ROUNDS:-60} rounds"; exit 0; }
echo "round $got: both gateways admitted; $("$LUNGATE" info "$url" | grep reservation)"
load x 11 & a=$!
load y 22 & b=$!
wait $a $b
kill $px $py; wait $px $py 2>/dev/null
"$LUNGATE" verify --key-file "$key" "$url" 2>&1 | tail -3
"$LUNGATE" verify --key-file "$key" "$url" >/dev/null 2>&1 || fail "BROKEN: two gateways wrote one encrypted LUN at once; verify finds units that are not authentic"
echo ok
