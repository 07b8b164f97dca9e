#!/usr/bin/env bash
# The plugin opens the volume (reads its header) at startup but claims
# the LUN only at the first writable connection, and does not look at
# the header again then.  Between the two, another gateway may legally
# hold the LUN and change the volume (here: lungate format --force with
# another key).  The plugin then writes with the old volume's key.
. /work/main/tests/attack-pr/common.sh
tgt_start
t=iqn.2026-11.org.lungate:atk6
tgt_add_target 1 "$t"
tgt_add_lun 1 1 16M
tgt_allow 1 ALL
url="iscsi://$TGT_PORTAL/$t/1"
k1=$TGT_DIR/k1; head -c 32 /dev/urandom >"$k1"
k2=$TGT_DIR/k2; head -c 32 /dev/urandom >"$k2"
"$LUNGATE" format --lazy --key-file "$k1" "$url" >/dev/null || fail "format"
gw p "url=$url" "key-file=$k1"
# Nobody holds the LUN now: format is allowed.
"$LUNGATE" format --lazy --force --key-file "$k2" "$url" >/dev/null 2>&1 || fail "the second format was refused"
r=$(io p write 1 17 2>&1)
echo "the plugin opened on the old volume writes unit 1: $r"
nbd_stop "$pid_p"; grep -v stats "$TGT_DIR/p.log" | tail -5
"$LUNGATE" verify --key-file "$k2" "$url" 2>&1 | tail -2
"$LUNGATE" info "$url" 2>&1 | grep -i "dirty\|uuid" | head -3
[ "$r" = ok ] && fail "BROKEN: a gateway wrote to a volume that was reformatted between its open and its claim"
echo ok
