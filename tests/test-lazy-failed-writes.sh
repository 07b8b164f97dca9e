#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# A lazy volume's never-written unit whose writes fail (EIO from the
# target on the data write, faultio under tgtd) between their metadata and
# their data, twice: it reads as its old content (zeroes) all along, and
# verify passes once the target is well again.  (Found by a hostile
# review: the second failed write overwrote the empty slot that stood for
# "never written", and the unit read as EIO.)
. "${srcdir:-.}/functions-fault.sh"
require_lungate_plugin
require_nbd_python
fault_tgt_start
key="$TGT_DIR/key"; head -c 32 /dev/urandom >"$key"
t=iqn.2026-12.org.lungate:lazyfail
tgt_add_target 1 "$t"; tgt_add_lun 1 1 32M; tgt_allow 1 ALL
url="iscsi://$TGT_PORTAL/$t/1"
f=$(basename "$(tgt_lun_file 1 1)")
"$LUNGATE" format --lazy --key-file "$key" "$url" >/dev/null 2>&1 || fail format
doff=$("$LUNGATE" info "$url" | sed -n 's/^volume-data-offset: \([0-9]*\).*/\1/p')
u=$((8 << 20)); start=$((doff + u)); end=$((start + 4096))
echo "data offset $doff, unit at $start"
PY='import nbd, sys
h = nbd.NBD(); h.connect_uri(sys.argv[1])
op = sys.argv[2]
try:
    if op == "w":
        h.pwrite(bytes([int(sys.argv[3])]) * 4096, 8 << 20); h.flush(); print("write ok")
    else:
        d = h.pread(4096, 8 << 20); print("read:", set(d))
except nbd.Error as e:
    print(op, "failed:", e); sys.exit(3)'
printf '%s\n' "$PY" >"$TGT_DIR/io.py"
io () { nbd_run "url=$url" "key-file=$key" -- "$NBD_PYTHON" "$TGT_DIR/io.py" '$uri' "$@" 2>/dev/null; }
zeroes ()
{
  io r >"$TGT_DIR/r.out" || { cat "$TGT_DIR/r.out"; fail "$1: the unit does not read"; }
  grep -qx "read: {0}" "$TGT_DIR/r.out" || { cat "$TGT_DIR/r.out"; fail "$1: not zeroes"; }
}
zeroes "before"
fault_rule "op=write path=$f off=$start-$end action=fail:5 count=0"
for n in 17 34; do
  if io w "$n" >/dev/null; then fail "a data write the target failed was acknowledged"; fi
  zeroes "after failed write $n"
done
fault_clear
zeroes "with the target well again"
"$LUNGATE" verify --key-file "$key" "$url" >"$TGT_DIR/v" 2>&1 \
  || { cat "$TGT_DIR/v"; fail "verify after the failed writes"; }
io w 51 >/dev/null || fail "a write after the failures"
echo "test-lazy-failed-writes: ok"
