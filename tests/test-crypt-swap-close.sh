#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# An encrypted LUN is replaced during an outage by another lungate volume
# of the same size (tgt's default serial and designators: the same SCSI
# identity; only the header UUID differs).  The session logs in again with
# nothing held, and the gateway is stopped before any new request: the
# other volume must be byte for byte what it was, and still open with its
# own key.  (Found by a hostile review: closing marked "our" header clean
# over both copies of the other volume's header.)
. "${srcdir:-.}/functions-nbd.sh"
require_lungate_plugin
require_nbd_python
require sha256sum sed
tgt_start
key="$TGT_DIR/key"; head -c 32 /dev/urandom >"$key"
key2="$TGT_DIR/key2"; head -c 32 /dev/urandom >"$key2"
sock="$TGT_DIR/nbd.sock"
log="$TGT_DIR/nbdkit.log"
t=iqn.2026-12.org.lungate:swapclose
a="$TGT_DIR/a.img"; b="$TGT_DIR/b.img"
truncate -s 16M "$a" "$b"
tgt_add_target 1 "$t"
tgtadm_ --mode logicalunit --op new --tid 1 --lun 1 --backing-store "$a" || fail "LUN 1"
tgtadm_ --mode logicalunit --op new --tid 1 --lun 2 --backing-store "$b" || fail "LUN 2"
tgt_allow 1 ALL
"$LUNGATE" format --key-file "$key" "iscsi://$TGT_PORTAL/$t/1" >/dev/null 2>&1 || fail "format A"
"$LUNGATE" format --key-file "$key2" "iscsi://$TGT_PORTAL/$t/2" >/dev/null 2>&1 || fail "format B"
sum=$(sha256sum <"$b")
"${NBDKIT[@]}" -f -U "$sock" "$LUNGATE_PLUGIN" "url=iscsi://$TGT_PORTAL/$t/1" \
  connections=1 timeout=60 "key-file=$key" 2>"$log" &
gw=$!
on_exit kill -9 "$gw"
for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.1; done
env -u LD_PRELOAD "$NBD_PYTHON" - "$sock" <<'PY' || fail "first write"
import nbd, sys
h = nbd.NBD(); h.connect_unix(sys.argv[1])
h.pwrite(b"\x11" * 65536, 0); h.flush(); h.shutdown()
PY
tgt_stop
sed -i "s|$a|@A@|; s|$b|$a|; s|@A@|$b|" "$TGT_DIR/journal"
tgt_restart
for _ in $(seq 300); do grep -q "logged in again" "$log" && break; sleep 0.1; done
grep -q "logged in again" "$log" || { cat "$log"; fail "no relogin"; }
sleep 1
nbd_stop "$gw"
grep -v "stats (exit)" "$log" | tail -8
new=$(sha256sum <"$b")
"$LUNGATE" info "iscsi://$TGT_PORTAL/$t/1" | grep -i "volume\|uuid"
[ "$new" = "$sum" ] || fail "the volume that replaced the LUN was written to at close"
"$LUNGATE" verify --key-file "$key2" "iscsi://$TGT_PORTAL/$t/1" >"$TGT_DIR/v" 2>&1 \
  || { cat "$TGT_DIR/v"; fail "the other volume no longer opens with its own key"; }
echo "test-crypt-swap-close: ok"
