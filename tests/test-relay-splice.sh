#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# The relay splices the rest of a large data segment (Data-In, Data-Out,
# immediate data) from socket to pipe to socket rather than copy it
# (src/iscsi/relay.c), and looks at the next header where it waits
# (MSG_PEEK) while large PDUs pass.  Its framing must stay exact however
# the bytes arrive: random data (a misread header is garbage, not zeros)
# is copied in and out through the plugin with large requests, one
# connection and four, and must come back identical with no connection
# lost on the way (a relay that misframes closes the connection as a
# protocol violation and the session reissues, so the data alone would
# not tell), and the relay must say it spliced the reads.  (Writes to tgt
# go in Data-Out PDUs of its MaxRecvDataSegmentLength, 8 KiB, below what
# is worth a splice: they are copied.)
. "${srcdir:-.}/functions-nbd.sh"
require_lungate_plugin
require nbdkit nbdcopy cmp
tgt_start
t=iqn.2026-12.org.lungate:splice
tgt_add_target 1 "$t"
tgt_add_lun 1 1 128M
tgt_allow 1 ALL
img="$TGT_DIR/random.img"
log="$TGT_DIR/nbdkit.log"

# check WHAT [spliced]: the nbdkit log of one copy shows no lost
# connection (and with spliced, some bytes spliced).
check ()
{
  if grep -E 'connection lost|broke the protocol|reconnects=[1-9]' "$log" >&2; then
    fail "$1: the relay lost the connection"
  fi
  [ "${2:-}" = spliced ] || return 0
  grep -E 'relay: [0-9]+ bytes copied through, [1-9][0-9]* spliced' "$log" >/dev/null \
    || { grep 'relay:' "$log" >&2; fail "$1: nothing was spliced"; }
}

for conns in 1 4; do
  head -c 128M /dev/urandom >"$img"
  nbd_run -v "url=iscsi://$TGT_PORTAL/$t/1" connections=$conns -- \
    nbdcopy --flush --request-size=1048576 "$img" '$uri' 2>"$log" \
    || { tail -20 "$log" >&2; fail "nbdcopy in ($conns)"; }
  cmp "$img" "$(tgt_lun_file 1 1)" || fail "the LUN does not hold the image ($conns)"
  check "in, $conns connection(s)"
  nbd_run -v "url=iscsi://$TGT_PORTAL/$t/1" connections=$conns -- \
    nbdcopy --request-size=1048576 '$uri' "$TGT_DIR/out.img" 2>"$log" \
    || { tail -20 "$log" >&2; fail "nbdcopy out ($conns)"; }
  cmp "$img" "$TGT_DIR/out.img" || fail "the copy out differs ($conns)"
  check "out, $conns connection(s)" spliced
done
echo "test-relay-splice: ok"
