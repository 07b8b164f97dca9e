#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# Read-ahead on a link too slow for its chunks (src/dev/ra.c): a chunk
# is dropped 2 s after its read was sent (the bound on how stale a
# reader beside another gateway's writer may be), and at 4 Mbit/s a 1
# MiB chunk takes 2.1 s to arrive: it is dropped as it comes.  The
# window's bound by the stream's rate keeps two chunks at least, so each
# of the reader's requests sent those chunks' reads again: a 2 MiB copy
# read 15 MiB and more ahead, every byte of it dropped, on a link
# already too slow.  Once a chunk comes after its 2 s the
# stream is not read ahead for 8 s.  The copy must be right, and what
# was read ahead at most the first window (the chunk the reader is in,
# and two more: 3 MiB, sent before any came back) and one chunk more.
. "${srcdir:-.}/functions-nbd.sh"
require_lungate_plugin
require_nbd_python
require cmp
tgt_start
t=iqn.2026-12.org.lungate:ratooslow
tgt_add_target 1 "$t"
tgt_add_lun 1 1 16M
tgt_allow 1 ALL
head -c 16M /dev/urandom >"$TGT_DIR/in"
cp "$TGT_DIR/in" "$(tgt_lun_file 1 1)"
delay_proxy_start --delay-ms 20 --rate 4Mbit
sock=$TGT_DIR/gw.sock
nbd_start "$sock" "$TGT_DIR/nbdkit.log" \
  "url=iscsi://127.0.0.1:$DELAY_PORT/$t/1" readahead=8M
s=$(date +%s)
env -u LD_PRELOAD "$NBD_PYTHON" - "$sock" "$TGT_DIR/out" <<'PY' || fail "the client's reads failed"
import nbd, sys
h = nbd.NBD()
h.connect_unix(sys.argv[1])
with open(sys.argv[2], "wb") as f:
    for i in range(16):
        f.write(h.pread(128 * 1024, i * 128 * 1024))
h.shutdown()
PY
echo "2 MiB read in 128 KiB requests in $(($(date +%s) - s)) s"
nbd_stop "$NBD_PID"
cmp "$TGT_DIR/out" <(head -c 2M "$TGT_DIR/in") || fail "the copy differs"
st=$(grep "stats (exit)" "$TGT_DIR/nbdkit.log" | tail -n 1)
[ -n "$st" ] || { tail -20 "$TGT_DIR/nbdkit.log"; fail "no stats at exit"; }
v () { printf '%s\n' "$st" | grep -o " $1=[0-9]*" | cut -d= -f2; }
echo "ra_read_bytes=$(v ra_read_bytes) ra_used_bytes=$(v ra_used_bytes) ra_wasted_bytes=$(v ra_wasted_bytes)"
[ "$(v ra_read_bytes)" -le $((4 << 20)) ] \
  || fail "read ahead $(v ra_read_bytes) bytes for a 2 MiB copy, on a link too slow to bring a chunk before it expires"
echo "test-ra-too-slow: ok"
