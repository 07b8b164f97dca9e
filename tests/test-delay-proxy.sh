#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# The slow-link proxy (tests/tools/delay-proxy.c) between lungate and a
# private tgtd, 50 ms each way: the data goes through intact (random data
# written through the plugin, read back with two connections, compared
# with the LUN's backing file), and the delay is really there.  Timings
# are checked only as lower bounds: a loaded machine or valgrind makes
# everything slower, never faster.
. "${srcdir:-.}/functions-nbd.sh"
require_lungate_plugin
require tgtd tgtadm nbdkit nbdcopy cmp
proxy="${top_builddir:-..}/tests/tools/delay-proxy"
[ -x "$proxy" ] || fail "$proxy not built"

# Its options: help, and clear errors on bad values.
"$proxy" --help | grep -q -- '--delay-ms' || fail "--help does not list --delay-ms"
expect_fail_with "upstream HOST:PORT is required" "$proxy" --delay-ms 5
expect_fail_with "--rate: '3 furlongs'" "$proxy" -u 127.0.0.1:1 --rate '3 furlongs'
expect_fail_with "--delay-ms: '-1'" "$proxy" -u 127.0.0.1:1 --delay-ms -1
expect_fail_with "--upstream: 'nowhere'" "$proxy" -u nowhere

tgt_start
t=iqn.2026-11.org.lungate:delay-proxy
tgt_add_target 1 "$t"
tgt_add_lun 1 1 64M
tgt_allow 1 ALL

delay_ms=50
delay_proxy_start --delay-ms "$delay_ms" --rate 1G
url="iscsi://127.0.0.1:$DELAY_PORT/$t/1"

ms_now () { echo $(($(date +%s%N) / 1000000)); }

# The delay: lungate info logs in (at least one round trip for the login,
# one per command after it: INQUIRY, READ CAPACITY, ...), so at least
# four round trips of 2 x 50 ms.  Without the proxy's delay it takes a
# few milliseconds.
t0=$(ms_now)
with_timeout 120 "$LUNGATE" info "$url" >"$TGT_DIR/info.out" \
  || fail "lungate info through the proxy"
t1=$(ms_now)
grep -q . "$TGT_DIR/info.out" || fail "lungate info printed nothing"
min=$((4 * 2 * delay_ms))
echo "lungate info through the proxy: $((t1 - t0)) ms (at least $min expected)"
[ $((t1 - t0)) -ge "$min" ] \
  || fail "lungate info took $((t1 - t0)) ms through a ${delay_ms} ms proxy: the delay is not applied"

# The data: 8 MiB of random bytes in through the plugin, out with two
# connections, compared with the image and the LUN's backing file.
img=$TGT_DIR/random.img
head -c 8M /dev/urandom >"$img"
t0=$(ms_now)
nbd_run "url=$url" -- nbdcopy --flush "$img" '$uri' || fail "nbdcopy in"
t1=$(ms_now)
echo "8 MiB in through the proxy: $((t1 - t0)) ms"
cmp -n 8M "$img" "$(tgt_lun_file 1 1)" || fail "the LUN does not hold the image"
nbd_run "url=$url" connections=2 -- nbdcopy '$uri' "$TGT_DIR/out.img" \
  || fail "nbdcopy out"
cmp -n 8M "$img" "$TGT_DIR/out.img" || fail "the copy out differs"
# The write path went through the proxy too: a login and the writes, so
# at least two round trips.
[ $((t1 - t0)) -ge $((2 * 2 * delay_ms)) ] \
  || fail "8 MiB in took $((t1 - t0)) ms through a ${delay_ms} ms proxy"

kill -0 "$DELAY_PID" 2>/dev/null || fail "the proxy died"
[ ! -s "$TGT_DIR/proxy.log" ] || { cat "$TGT_DIR/proxy.log" >&2; fail "the proxy logged errors"; }
echo "test-delay-proxy: ok"
