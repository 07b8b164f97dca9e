#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# A slow link is not a dead one.  Through a 1 Mbit/s link (delay-proxy),
# a 2 MiB read takes about 17 s, and the target's answers to lungate's
# keepalive NOP-Outs queue behind its Data-In.  The target is heard from
# all along (a Data-In PDU every second or two): the connection must not
# be declared dead for want of a NOP-In, and the read must return the
# LUN's bytes.  Found in a CI run beside two others and a CPU hog: the
# LIO VM, starved, was still sending a 1 MiB Data-In (its console logged
# tcp_sendpage failures) when lungate dropped the connection, nine times,
# until the outage budget failed the read.
. "${srcdir:-.}/functions-nbd.sh"
require_lungate_plugin
require_nbd_python
require sha256sum

tgt_start
t=iqn.2026-12.org.lungate:slowlink
tgt_add_target 1 "$t"
tgt_add_lun 1 1 16M
tgt_allow 1 ALL
head -c 2M /dev/urandom >"$TGT_DIR/data"
dd if="$TGT_DIR/data" of="$TGT_DIR/lun-1-1.img" conv=notrunc status=none
want=$(sha256sum <"$TGT_DIR/data")

delay_proxy_start --delay-ms 5 --rate 1Mbit
port=$DELAY_PORT

nbd_run "url=iscsi://127.0.0.1:$port/$t/1" connections=1 timeout=40 -- \
  "$NBD_PYTHON" - '$uri' "$TGT_DIR/got" <<'PY' 2>"$TGT_DIR/nbd.err" \
  || { cat "$TGT_DIR/nbd.err"; fail "a 2 MiB read through a 1 Mbit/s link failed"; }
import nbd, sys
h = nbd.NBD(); h.connect_uri(sys.argv[1])
open(sys.argv[2], "wb").write(h.pread(2 * 1024 * 1024, 0))
PY
cat "$TGT_DIR/nbd.err"
[ "$(sha256sum <"$TGT_DIR/got")" = "$want" ] || fail "the read returned other bytes"
! grep -q "no answer to keepalive" "$TGT_DIR/nbd.err" \
  || fail "a connection that kept sending was taken for dead"
echo "test-slow-link-keepalive: ok"
