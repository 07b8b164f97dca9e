#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# A target that drops every connection right after the login (here:
# ss -K in a tight loop for 10 s).  The promise (recovery.c
# lg_s_connection_lost): a login that does not last 10 s does not reset the
# backoff, so there is no login storm.  Counts the logins in those 10 s
# (413 before the backoff grew on short logins).
. "${srcdir:-.}/functions-nbd.sh"
require_lungate_plugin
require ss
tgt_start
t=iqn.2026-11.org.lungate:storm
tgt_add_target 1 "$t"
tgt_add_lun 1 1 16M
tgt_allow 1 ALL
"${NBDKIT[@]}" -f -v -U "$TGT_DIR/s.sock" "$LUNGATE_PLUGIN" "url=iscsi://$TGT_PORTAL/$t/1" connections=1 \
  2>"$TGT_DIR/s.log" &
gw=$!
on_exit nbd_stop "$gw"
for _ in $(seq 100); do [ -S "$TGT_DIR/s.sock" ] && break; sleep 0.1; done
sleep 1
end=$((SECONDS + 10)); cuts=0
while [ $SECONDS -lt $end ]; do
  ss -K state established "( dport = :$TGT_PORT )" >/dev/null 2>&1 && cuts=$((cuts + 1))
  sleep 0.02
done
sleep 1
n=$(grep -c "logged in again" "$TGT_DIR/s.log")
echo "ss -K runs: $cuts; logins in 10 s: $n"
grep "logged in again" "$TGT_DIR/s.log" | head -5
grep "logged in again" "$TGT_DIR/s.log" | sed 's/.*after //' | sort | uniq -c | sort -rn | head
[ "$n" -le 20 ] || fail "login storm: $n logins in 10 s (the backoff never grows while logins succeed)"
echo "test-login-storm: ok"
