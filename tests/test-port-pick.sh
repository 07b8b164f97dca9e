#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# A test's port stays its own while its target is down: another test of
# this machine that picks a port meanwhile does not get it
# (_tgt_pick_port's lock).  CI run beside another found
# test-mount-signals' tgtd unable to restart after 15 s down: "unable to
# bind server socket, Address already in use".  LG_TEST_PORT_RANGE
# narrows the other test's choice to this one port.
. "${srcdir:-.}/functions.sh"
require tgtd tgtadm flock ss
tgt_start
p=$TGT_PORT
tgt_kill
if q=$(LG_TEST_PORT_RANGE="$p $((p + 1))" bash -c '. "$1"; _tgt_pick_port q && echo "$q"' \
         _ "${srcdir:-.}/functions.sh" 2>"$TGT_DIR/pick.err"); then
  fail "another test got port $q, this test's, while its target was down"
fi
grep -q "no free port from $p to $p" "$TGT_DIR/pick.err" \
  || { cat "$TGT_DIR/pick.err"; fail "the other test's pick did not say why it failed"; }
tgt_restart
[ "$TGT_PORT" = "$p" ] || fail "restarted on $TGT_PORT, not $p"
echo "test-port-pick: ok"
