#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# Read-ahead on a link slower than its window (src/dev/ra.c, issue 29):
# what is read ahead is dropped 2 s after its read was sent, so a window
# larger than what the link carries in that time is read for nothing (at
# 50 ms and 100 Mbit/s a 32 MiB window read at 1.8 MB/s where 8 MiB read
# at 9.5: contrib/bench/NOTES.md).  The window is bounded by what the
# stream reads in a second.  Through tests/tools/delay-proxy at 40 Mbit/s
# (5 MB/s) a reader of a mount with --read-ahead 32M, and one of the
# plugin with readahead=32M, get the bytes read ahead, not read twice:
# .stats and the plugin's stats show at most a quarter of what was read
# ahead wasted (dropped unread), and most of the copy served from it.
# The copies are byte-identical.
. "${srcdir:-.}/functions-nbd.sh"
require_lungate_plugin
require fusermount3 nbdcopy cmp
[ -c /dev/fuse ] || skip "no /dev/fuse"
mb=24
tgt_start
t=iqn.2026-12.org.lungate:raslow
tgt_add_target 1 "$t"
tgt_add_lun 1 1 40M
tgt_allow 1 ALL
head -c 40M /dev/urandom >"$TGT_DIR/in"
dd if="$TGT_DIR/in" of="$(tgt_lun_file 1 1)" bs=1M conv=notrunc status=none \
  || fail "fill the LUN's file"
delay_proxy_start --delay-ms 10 --rate 40Mbit
url="iscsi://127.0.0.1:$DELAY_PORT/$t/1"
head -c ${mb}M "$TGT_DIR/in" >"$TGT_DIR/want"

# judge WHERE READ USED WASTED: at most a quarter wasted, and at least
# half the copy served from what was read ahead.
judge ()
{
  echo "$1: ${mb} MiB read: ra_read_bytes=$2 ra_used_bytes=$3 ra_wasted_bytes=$4"
  [ "${3:-0}" -ge $((mb << 19)) ] || fail "$1: the copy was not read ahead of"
  [ "$(( ${4:-0} * 4 ))" -le "${2:-0}" ] \
    || fail "$1: more than a quarter of what was read ahead was dropped unread (window larger than the link carries before it expires)"
}

# ---- the mount ----
m="$TGT_DIR/m"; mkdir "$m"
on_exit fusermount3 -u -z "$m"
"$LUNGATE" mount --read-ahead 32M "$url" "$m" || fail "mount"
dd if="$m/lun1" of="$TGT_DIR/out" bs=1M count=$mb status=none || fail "read through the mount"
cmp "$TGT_DIR/want" "$TGT_DIR/out" || fail "mount: the copy differs"
st=$(grep "^file=lun1 " "$m/.stats")
v () { printf '%s\n' "$st" | grep -o " $1=[0-9]*" | cut -d= -f2; }
judge mount "$(v ra_read_bytes)" "$(v ra_used_bytes)" "$(v ra_wasted_bytes)"
"$LUNGATE" umount "$m" >/dev/null || fail "umount"

# ---- the plugin (nbdcopy, one 1 MiB request at a time) ----
rm -f "$TGT_DIR/out"
nbd_run -v "url=$url" readahead=32M -- \
  nbdcopy --requests=1 --request-size=1048576 '$uri' "$TGT_DIR/out" 2>"$TGT_DIR/nbdkit.log" \
  || { tail -20 "$TGT_DIR/nbdkit.log" >&2; fail "nbdcopy out"; }
head -c ${mb}M "$TGT_DIR/out" >"$TGT_DIR/out.head"
st=$(grep 'stats (exit)' "$TGT_DIR/nbdkit.log" | tail -1)
[ -n "$st" ] || { tail -20 "$TGT_DIR/nbdkit.log" >&2; fail "no stats at the plugin's exit"; }
cmp "$TGT_DIR/in" "$TGT_DIR/out" || fail "plugin: the copy differs"
mb=40
judge plugin "$(v ra_read_bytes)" "$(v ra_used_bytes)" "$(v ra_wasted_bytes)"
echo "test-ra-slow-link: ok"
