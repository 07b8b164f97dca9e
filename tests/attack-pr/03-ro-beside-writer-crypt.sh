#!/usr/bin/env bash
# "Read-only opens work beside the writer": a read-only plugin (-r) on a
# lungate volume reads unit 1 and keeps running; the writer then rewrites
# unit 1 (and unit 2); the read-only gateway reads them again.
. /work/main/tests/attack-pr/common.sh
tgt_start
t=iqn.2026-11.org.lungate:atk3
tgt_add_target 1 "$t"
tgt_add_lun 1 1 16M
tgt_allow 1 ALL
url="iscsi://$TGT_PORTAL/$t/1"
key=$TGT_DIR/key; head -c 32 /dev/urandom >"$key"
"$LUNGATE" format --lazy --key-file "$key" "$url" >/dev/null || fail "format"
gw w "url=$url" "key-file=$key"
io w write 1 17 >/dev/null || fail "w cannot write"
NBDKIT=("${NBDKIT[@]}" -r)
gw r "url=$url" "key-file=$key"
echo "ro reads unit 1: $(io r read 1 2>&1)  unit 2: $(io r read 2 2>&1)"
io w write 1 18 >/dev/null || fail "w cannot write"
io w write 2 19 >/dev/null || fail "w cannot write"
a=$(io r read 1 2>&1); b=$(io r read 2 2>&1)
echo "after the writer's writes, ro reads unit 1: $a (want 18)  unit 2: $b (want 19)"
sleep 2; echo "read again, 2 s later: unit 1: $(io r read 1 2>&1) unit 2: $(io r read 2 2>&1)"
grep -i "authentic\|bad\|EIO" "$TGT_DIR/r.log" | head
[ "$a" = 18 ] && [ "$b" = 19 ] || fail "BROKEN: the read-only gateway beside the writer does not read the writer's data"
echo ok
