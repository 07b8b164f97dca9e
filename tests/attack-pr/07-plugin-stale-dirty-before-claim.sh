#!/usr/bin/env bash
# Promised: after a takeover "a lungate volume is marked dirty first, so
# the slot rule of an unclean stop applies until lungate verify --repair".
# P opens the clean volume at startup (no connection, so no claim).  Q
# holds and is killed -9; R takes it over (marks it dirty), closes
# cleanly.  P's first writable connection claims (nobody holds it now)
# with the state it read at startup: the volume counts as clean, and P's
# clean close marks it clean, without any verify --repair.
. /work/main/tests/attack-pr/common.sh
tgt_start
t=iqn.2026-11.org.lungate:atk7
tgt_add_target 1 "$t"
tgt_add_lun 1 1 16M
tgt_allow 1 ALL
url="iscsi://$TGT_PORTAL/$t/1"
key=$TGT_DIR/key; head -c 32 /dev/urandom >"$key"
"$LUNGATE" format --lazy --key-file "$key" "$url" >/dev/null || fail "format"
flags () { "$LUNGATE" info "$url" 2>&1 | grep "^volume-state"; }
gw p "url=$url" "key-file=$key"
gw q "url=$url" "key-file=$key"
io q write 1 17 >/dev/null || fail "q cannot write"
kill -9 "$pid_q"; wait "$pid_q" 2>/dev/null
echo "after kill -9 of q: $(flags)"
gw r "url=$url" "key-file=$key" takeover=true
io r write 2 18 >/dev/null || fail "r cannot write"
nbd_stop "$pid_r"
before=$(flags); echo "after r's takeover and close: $before"
io p write 3 19 >/dev/null || fail "p cannot write"
grep -i "not closed cleanly\|took" "$TGT_DIR/p.log"
nbd_stop "$pid_p"
after=$(flags); echo "after p's close: $after"
[ "$before" != "$after" ] && fail "BROKEN: the volume left dirty by a takeover was marked clean by a gateway opened before it, without verify --repair"
echo ok
