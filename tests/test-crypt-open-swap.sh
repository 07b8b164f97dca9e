#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# An encrypted LUN is replaced by another volume under the same key while
# a gateway is opening it: after the header was read, before the crypt
# layer is over the LUN (a test hook waits there).  The session logs in
# again in that gap, when the reattach lifecycle reaches only the iSCSI
# device (tgt's default serial and designators: the same identity, and
# nothing written yet to compare).  The crypt layer must find the other
# header before it serves anything: no byte of the other volume may
# change, and a client's write must fail.
. "${srcdir:-.}/functions-nbd.sh"
require_lungate_plugin
require_test_hooks
require_nbd_python
require sha256sum sed
tgt_start
key=$TGT_DIR/key; head -c 32 /dev/urandom >"$key"
sock=$TGT_DIR/nbd.sock log=$TGT_DIR/nbdkit.log
t=iqn.2026-12.org.lungate:openswap
a=$TGT_DIR/a.img b=$TGT_DIR/b.img
truncate -s 16M "$a" "$b"
"$LUNGATE" format --key-file "$key" "$a" >/dev/null || fail "format A"
"$LUNGATE" format --key-file "$key" "$b" >/dev/null || fail "format B"
tgt_add_target 1 "$t"
tgtadm_ --mode logicalunit --op new --tid 1 --lun 1 --backing-store "$a" || fail "LUN 1"
tgt_allow 1 ALL
sum=$(sha256sum <"$b")

# nbdkit opens the LUN twice: to check it (get_ready), then to serve it.
LUNGATE_TEST_OPEN_NAP_MS=12000 "${NBDKIT[@]}" -f -U "$sock" "$LUNGATE_PLUGIN" \
  "url=iscsi://$TGT_PORTAL/$t/1" connections=1 timeout=60 "key-file=$key" \
  2>"$log" &
gw=$!
on_exit kill -9 "$gw"
naps ()
{
  grep -c "test hook: .* between the header's read" "$log"
}
for _ in $(seq 900); do
  [ "$(naps)" -ge 2 ] && break
  kill -0 "$gw" 2>/dev/null || break
  sleep 0.1
done
[ "$(naps)" -ge 2 ] || { cat "$log"; fail "nbdkit did not reach its second open"; }
tgt_stop
sed -i "s|$a|@A@|; s|$b|$a|; s|@A@|$b|" "$TGT_DIR/journal"
tgt_restart
for _ in $(seq 100); do
  grep -q "logged in again" "$log" && break
  sleep 0.1
done
grep -q "logged in again" "$log" || { cat "$log"; fail "no login during the open"; }
for _ in $(seq 600); do [ -S "$sock" ] && break; sleep 0.1; done
rc=0
env -u LD_PRELOAD "$NBD_PYTHON" - "$sock" <<'PY' || rc=$?
import nbd, sys
h = nbd.NBD(); h.connect_unix(sys.argv[1])
h.pwrite(b"\x22" * 65536, 0); h.flush(); h.shutdown()
PY
nbd_stop "$gw"
grep -v '^nbdkit: debug' "$log" | tail -8
[ "$(sha256sum <"$b")" = "$sum" ] || fail "the volume that replaced the LUN during the open was written to"
[ "$rc" != 0 ] || fail "a write to the replaced volume succeeded"
grep -q "holds another volume" "$log" || fail "the log does not say the LUN holds another volume"
echo "test-crypt-open-swap: ok"
