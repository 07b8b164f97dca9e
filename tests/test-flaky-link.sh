#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# A flaky link (issue 29): tests/tools/delay-proxy between the gateway
# and tgtd adds what a Wi-Fi link does besides its delay: jitter, a
# stall of 1.5 s every 6 s, a connection reset every 5 s, a rate that
# drops tenfold half of the time.  Copies in and out, through the mount
# and through the plugin, plain (written with write-behind) and
# encrypted (written through), end byte-identical, and
# the throughput is printed.  The faults must really have happened
# (the proxy counts them), or the test proves nothing.
#
# FLAKY_MB (default 24) sets the size of each copy; FLAKY_SEED the
# proxy's seed (default: the test's pid, printed).
. "${srcdir:-.}/functions-nbd.sh"
require_lungate_plugin
require fusermount3 nbdcopy cmp
[ -c /dev/fuse ] || skip "no /dev/fuse"
mb=${FLAKY_MB:-24}
seed=${FLAKY_SEED:-$$}
echo "test-flaky-link: seed $seed, $mb MiB each way"

tgt_start
t=iqn.2026-12.org.lungate:flaky
tgt_add_target 1 "$t"
tgt_add_lun 1 1 $((mb + 8))M
# The volume keeps 2 slots of metadata per 4 KiB unit: room for them.
tgt_add_lun 1 2 $((mb + mb / 16 + 16))M
tgt_allow 1 ALL
key="$TGT_DIR/key"; head -c 32 /dev/urandom >"$key"
"$LUNGATE" format --lazy --key-file "$key" "iscsi://$TGT_PORTAL/$t/2" >/dev/null \
  || fail "format LUN 2"

delay_proxy_start --delay-ms 2 --jitter-ms 4 --stall-every 6 --stall-ms 1500 \
  --reset-every 5 --rate 400M --rate-low 40M --rate-period 4 --seed "$seed"
url="iscsi://127.0.0.1:$DELAY_PORT/$t"
m="$TGT_DIR/m"; mkdir "$m"
on_exit fusermount3 -u -z "$m"

# rate LABEL SECONDS_START: prints LABEL and the rate since the start.
rate ()
{
  local ms=$(( $(date +%s%N) / 1000000 - $2 ))
  [ "$ms" -gt 0 ] || ms=1
  echo "  $1: $mb MiB in $((ms / 1000)).$(( (ms % 1000) / 100 )) s, $((mb * 1000 / ms)) MiB/s"
}
now_ms () { echo $(( $(date +%s%N) / 1000000 )); }

for lun in 1 2; do
  # The plain LUN is written in with write-behind (src/dev/wb.h), the
  # volume without.
  kind=plain; k=(); kp=(); wb=(--write-behind 8M); wbp=(writebehind=8M)
  [ $lun = 2 ] && { kind=encrypted; k=(--key-file "$key"); kp=("key-file=$key"); wb=(); wbp=(); }
  # The mount: in, then out after a new mount (nothing from the cache).
  head -c $((mb << 20)) /dev/urandom >"$TGT_DIR/in"
  with_timeout 120 "$LUNGATE" mount --connections 2 --log "$TGT_DIR/mount-$lun-in.log" \
    "${k[@]}" "${wb[@]}" "$url/$lun" "$m" || { cat "$TGT_DIR/mount-$lun-in.log"; fail "mount LUN $lun"; }
  s=$(now_ms)
  dd if="$TGT_DIR/in" of="$m/lun$lun" bs=1M conv=fsync,notrunc status=none \
    || { cat "$TGT_DIR/mount-$lun-in.log"; fail "$kind copy into the mount failed"; }
  rate "mount, $kind, in" "$s"
  with_timeout 120 "$LUNGATE" umount "$m" >/dev/null || { cat "$TGT_DIR/mount-$lun-in.log"; fail "umount"; }
  with_timeout 120 "$LUNGATE" mount --connections 2 --log "$TGT_DIR/mount-$lun-out.log" \
    "${k[@]}" "$url/$lun" "$m" || { cat "$TGT_DIR/mount-$lun-out.log"; fail "mount LUN $lun again"; }
  s=$(now_ms)
  dd if="$m/lun$lun" of="$TGT_DIR/out" bs=1M count="$mb" status=none \
    || { cat "$TGT_DIR/mount-$lun-out.log"; fail "$kind copy out of the mount failed"; }
  rate "mount, $kind, out" "$s"
  with_timeout 120 "$LUNGATE" umount "$m" >/dev/null || { cat "$TGT_DIR/mount-$lun-out.log"; fail "umount"; }
  cmp "$TGT_DIR/in" "$TGT_DIR/out" || { cat "$TGT_DIR/mount-$lun-out.log"; fail "the $kind copy through the mount changed on the way"; }

  # The plugin: in with nbdcopy, out with nbdcopy through a new nbdkit.
  head -c $((mb << 20)) /dev/urandom >"$TGT_DIR/in"
  s=$(now_ms)
  nbd_run "url=$url/$lun" connections=2 "${kp[@]}" "${wbp[@]}" -- \
    nbdcopy --flush "$TGT_DIR/in" '$uri' 2>"$TGT_DIR/nbd.err" \
    || { cat "$TGT_DIR/nbd.err"; fail "$kind copy into the plugin failed"; }
  rate "plugin, $kind, in" "$s"
  s=$(now_ms)
  rm -f "$TGT_DIR/out"
  nbd_run "url=$url/$lun" connections=2 "${kp[@]}" -- \
    nbdcopy '$uri' "$TGT_DIR/out" 2>"$TGT_DIR/nbd.err" \
    || { cat "$TGT_DIR/nbd.err"; fail "$kind copy out of the plugin failed"; }
  rate "plugin, $kind, out" "$s"
  cmp -n $((mb << 20)) "$TGT_DIR/in" "$TGT_DIR/out" \
    || { cat "$TGT_DIR/nbd.err"; fail "the $kind copy through the plugin changed on the way"; }
done

stalls=$(grep -c ': stall ' "$TGT_DIR/proxy.log")
resets=$(grep -c ': reset ' "$TGT_DIR/proxy.log")
echo "  the link stalled $stalls times and reset $resets connections"
if [ "$stalls" -lt 2 ] || [ "$resets" -lt 2 ]; then
  fail "the link's faults did not happen (stalls $stalls, resets $resets): the test proves nothing"
fi
echo "test-flaky-link: ok"
