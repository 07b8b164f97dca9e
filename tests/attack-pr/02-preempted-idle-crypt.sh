#!/usr/bin/env bash
# Encrypted variant of 01: A holds a lungate volume and has written unit 1
# (its metadata block 0 is cached).  B takes over, writes unit 2 (same
# metadata block), closes cleanly.  A writes unit 3: it rewrites
# metadata block 0 from its cache.  lungate verify afterwards.
. /work/main/tests/attack-pr/common.sh
tgt_start
t=iqn.2026-11.org.lungate:atk2
tgt_add_target 1 "$t"
tgt_add_lun 1 1 16M
tgt_allow 1 ALL
url="iscsi://$TGT_PORTAL/$t/1"
key=$TGT_DIR/key; head -c 32 /dev/urandom >"$key"
"$LUNGATE" format --lazy --key-file "$key" "$url" >/dev/null || fail "format"
gw a "url=$url" "key-file=$key"
io a write 1 17 >/dev/null || fail "a cannot write"
gw b "url=$url" "key-file=$key" takeover=true
io b write 2 99 >/dev/null || fail "b cannot write after takeover"
nbd_stop "$pid_b"
r=$(io a write 3 18 2>&1)
echo "A's write after being preempted and B closed: $r"
nbd_stop "$pid_a"
"$LUNGATE" verify --key-file "$key" "$url"; echo "verify rc=$?"
gw c "url=$url" "key-file=$key"
echo "unit 2 (B acknowledged 99) reads: $(io c read 2 2>&1)"
[ "$r" = ok ] && fail "BROKEN: the preempted gateway A wrote after B closed"
echo ok
