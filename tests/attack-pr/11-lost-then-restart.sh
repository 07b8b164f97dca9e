#!/usr/bin/env bash
# A gateway that lost its reservation (preempted; it noticed on a write)
# and then the target restarts (forgetting every reservation), with and
# without the new holder still running: A must not take the LUN back.
# Also: the holder that took over is stopped, target restarts, A writes.
. /work/main/tests/attack-pr/common.sh
tgt_start
t=iqn.2026-11.org.lungate:atk11
tgt_add_target 1 "$t"
tgt_add_lun 1 1 16M
tgt_allow 1 ALL
url="iscsi://$TGT_PORTAL/$t/1"
gw a "url=$url" connections=2
io a write 1 1 >/dev/null || fail "a"
gw b "url=$url" takeover=true connections=2
io b write 1 2 >/dev/null || fail "b"
echo "a after preempt: $(io a write 2 3 2>/dev/null)"
tgt_restart
sleep 2
echo "a after restart (b alive): $(io a write 2 3 2>/dev/null)"
echo "b after restart: $(io b write 3 4 2>/dev/null)"
"$LUNGATE" info "$url" | grep reservation
nbd_stop "$pid_b"
tgt_restart
sleep 2
r=$(io a write 2 5 2>/dev/null); echo "a after b left and another restart: $r"
[ "$r" = EPERM ] || fail "BROKEN: a gateway that lost its reservation wrote again"
"$LUNGATE" info "$url" | grep reservation
# Now A idle-preempted, not noticed, then target restart: see 01.
echo ok
