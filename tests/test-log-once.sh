#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# Lines about the link come once for a pool of sessions (f6b5b28), and
# that hides nothing (the hostile review of it): the same session's
# second outage a few seconds after the first is logged again, and a
# login failure whose reason changes is logged again even behind a long
# (legal) target name, where the reason lies past the first 255 bytes.
. "${srcdir:-.}/functions-nbd.sh"
require_lungate_plugin
require_nbd_python
require ss
tgt_start
t=iqn.2026-11.org.lungate:logonce
long=iqn.2026-11.org.lungate:$(printf 'x%.0s' $(seq 130))
tgt_add_target 1 "$t"
tgt_add_target 2 "$long"
for i in 1 2; do
  tgt_add_lun "$i" 1 16M
  tgt_allow "$i" ALL
done
tgt_chap 2 gwuser gwsecret-0123456789
_tgt_account other other-secret-0123456789
secret="$(secret_file gwsecret-0123456789)"

# 1. One session, two outages a few seconds apart: two lines (the second
# was taken for the first's repeat).
nbd_gw g "url=iscsi://$TGT_PORTAL/$t/1" connections=1
log=$TGT_DIR/g.log
nbd_io g write 1 7 >/dev/null || fail "write"
logins () { grep -c "logged in again" "$log" || true; }
wait_login ()
{
  for _ in $(seq 200); do [ "$(logins)" -ge "$1" ] && return 0; sleep 0.1; done
  cat "$log"; fail "no login $1"
}
for n in 1 2; do
  tgt_kill; sleep 0.5; tgt_restart; wait_login "$n"
  nbd_io g write 2 "$n" >/dev/null || fail "write after outage $n"
done
# "logged in again" is news, not an error (issue 30, item 10).
grep "logged in again" "$log" | grep -q "^nbdkit: lungate: warning: " \
  || { cat "$log"; fail "'logged in again' is not tagged 'warning:'"; }
if grep -q "error: .*logged in again" "$log"; then
  cat "$log"; fail "'logged in again' is tagged 'error:'"
fi
n=$(grep -c "connection lost: .*; reconnecting" "$log" || true)
[ "$n" -eq 2 ] || { cat "$log"; fail "two outages of one session gave $n 'connection lost' lines"; }
nbd_stop "${NBD_GW[g]}"

# 1b. A pool of four sessions and one outage: "logged in again" once (the
# other sessions' logins are debug lines), and the refused reconnection
# is a warning, not an error (issue 30, item 10: one line per session,
# and "error:" for what the gateway rides out).
nbd_gw p "url=iscsi://$TGT_PORTAL/$t/1" connections=4
plog=$TGT_DIR/p.log
nbd_io p write 3 7 >/dev/null || fail "write through the pool"
tgt_kill
for _ in $(seq 100); do grep -q "reconnecting: " "$plog" && break; sleep 0.1; done
tgt_restart
for _ in $(seq 200); do grep -q "logged in again" "$plog" && break; sleep 0.1; done
nbd_io p write 4 8 >/dev/null || fail "write after the outage"
sleep 3 # the other sessions' logins
n=$(grep -c "logged in again" "$plog" || true)
[ "$n" -eq 1 ] || { cat "$plog"; fail "one outage of a pool of 4 sessions gave $n 'logged in again' lines"; }
grep "reconnecting: " "$plog" | grep -q "^nbdkit: lungate: warning: " \
  || { cat "$plog"; fail "a refused reconnection is not a warning"; }
if grep -q "error: .*reconnecting: " "$plog"; then
  cat "$plog"; fail "a refused reconnection is tagged 'error:'"
fi
nbd_stop "${NBD_GW[p]}"

# 2. A long target name: the ACL refuses, then within seconds CHAP
# fails instead; both reasons are logged.
nbd_gw l "url=iscsi://$TGT_PORTAL/$long/1" user=gwuser "password=+$secret" \
  connections=1 timeout=3
nbd_io l write 1 7 >/dev/null || fail "write through the long name"
tgt_disallow 2 ALL
ss -K dst 127.0.0.1 dport = "$TGT_PORT" >/dev/null 2>&1 || fail "ss -K"
nbd_io l read 1 >/dev/null 2>&1
sleep 2
# (The account first: admitted with its old account still bound, the
# gateway may log in at once, on a loaded machine.)
tgtadm_ --mode account --op unbind --tid 2 --user gwuser || fail "unbind"
tgtadm_ --mode account --op bind --tid 2 --user other || fail "bind"
tgt_allow 2 ALL
for _ in $(seq 150); do
  grep -q "reconnecting: .*authentication failed" "$TGT_DIR/l.log" && break
  sleep 0.1
done
grep -q "reconnecting: .*not authorized" "$TGT_DIR/l.log" \
  || { cat "$TGT_DIR/l.log"; fail "the ACL refusal is not logged"; }
grep -q "reconnecting: .*authentication failed" "$TGT_DIR/l.log" \
  || { cat "$TGT_DIR/l.log"; fail "behind a long target name, the changed login failure is not logged"; }
echo "test-log-once: ok"
