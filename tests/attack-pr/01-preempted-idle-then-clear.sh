#!/usr/bin/env bash
# Gateway A holds a plain LUN and is idle (connected).  B takes over
# (takeover=true), writes, and closes cleanly (CLEAR).  A then writes:
# promised "a live one fails its writes from then on".
. /work/main/tests/attack-pr/common.sh
tgt_start
t=iqn.2026-11.org.lungate:atk1
tgt_add_target 1 "$t"
tgt_add_lun 1 1 16M
tgt_allow 1 ALL
url="iscsi://$TGT_PORTAL/$t/1"
gw a "url=$url"
io a write 1 17 >/dev/null || fail "a cannot write"
gw b "url=$url" takeover=true
io b write 1 99 >/dev/null || fail "b cannot write after takeover"
nbd_stop "$pid_b"
"$LUNGATE" info "$url" | grep reservation
r=$(io a write 1 18 2>&1)
echo "A's write after being preempted: $r"
grep -i "lost\|reserv" "$TGT_DIR/a.log"
io a read 1
[ "$r" = ok ] && fail "BROKEN: the preempted gateway A wrote successfully after B closed"
echo ok
