#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# A link that stalls for a moment (Wi-Fi) while a mount ends: the final
# flush waits for the target as a signalled mount's write-back does
# (LG_FS_STOP_BUDGET_S), and lungate umount exits 0.  It gave up after
# 1 s without an answer and reported "could not be written back or
# flushed at the end: data may be lost" (seen in test-flaky-link).  The
# stall here is tgtd stopped (SIGSTOP) for 3 s from just before the
# unmount; a target that stays away still fails the unmount, in bounded
# time, with that report.
. "${srcdir:-.}/functions.sh"
require_lungate
require fusermount3 mountpoint
[ -c /dev/fuse ] || skip "no /dev/fuse"
tgt_start
t=iqn.2026-12.org.lungate:umountstall
tgt_add_target 1 "$t"
tgt_add_lun 1 1 16M
tgt_allow 1 ALL
url="iscsi://$TGT_PORTAL/$t/1"
m=$TGT_DIR/m
mount_points "$m"
cont () { [ -z "$TGT_PID" ] || kill -CONT "$TGT_PID" 2>/dev/null || true; }
on_exit cont

# mount_write NAME SIZE: mounted, logging to mount-NAME.log, and SIZE
# random bytes written and synced (SIZE 0: read the LUN instead).
mount_write ()
{
  if ! "$LUNGATE" mount --log "$TGT_DIR/mount-$1.log" "$url" "$m"; then
    # What the gateways before it said at their end, and their runtime
    # files (CI run s45g: refused as "in use by a gateway on this host"
    # right after the previous step's daemon had exited).
    tail -n 15 "$TGT_DIR"/mount-*.log >&2
    ls -la "$XDG_RUNTIME_DIR/lungate" >&2 || true
    "$LUNGATE" info "$url" >&2 || true
    fail "mount"
  fi
  if [ "$2" = 0 ]; then
    dd if="$m/lun1" of=/dev/null bs=1M status=none || fail "read"
  else
    head -c "$2" /dev/urandom | dd of="$m/lun1" bs=1M conv=fsync,notrunc status=none \
      || fail "write"
  fi
}

for kind in written read; do
  if [ "$kind" = written ]; then mount_write "$kind" 4M; else mount_write "$kind" 0; fi
  kill -STOP "$TGT_PID"
  (sleep 3; kill -CONT "$TGT_PID") &
  sp=$!
  rc=0
  with_timeout 60 "$LUNGATE" umount "$m" >"$TGT_DIR/umount.out" 2>&1 || rc=$?
  wait "$sp"
  if [ "$rc" -ne 0 ]; then
    cat "$TGT_DIR/umount.out" "$TGT_DIR/mount-$kind.log"
    fail "$kind: a 3 s stall during the unmount failed it (exit $rc)"
  fi
  echo "$kind: unmounted across a 3 s stall: $(cat "$TGT_DIR/umount.out")"
done

# A signal to the daemon while its final flush waits for a stalled
# target: it stops waiting, and the unmount fails, saying so (the daemon
# was killed by the signal's default action, with nothing said, and
# lungate umount exited 0).
mount_write sig 1M
dpid=$(pgrep -f "lungate mount --log $TGT_DIR/mount-sig.log" | head -n 1)
[ -n "$dpid" ] || fail "no mount daemon found"
kill -STOP "$TGT_PID"
(sleep 2; kill -TERM "$dpid") &
sp=$!
rc=0
with_timeout 60 "$LUNGATE" umount "$m" >"$TGT_DIR/umount.out" 2>&1 || rc=$?
wait "$sp"
kill -CONT "$TGT_PID"
# The signal is meant to come during the final flush; on a loaded
# machine the daemon may not have seen the unmount yet, and takes it for
# the stop's first signal (then the final flush waits the stop's budget
# and fails): either way the unmount fails, saying so.  (CI run s45d's
# test-faults-wb, load average 19: only the second happened.)
if [ "$rc" -ne 1 ] || ! grep -q "could not be written back or flushed" "$TGT_DIR/umount.out" \
   || ! grep -Eq "during the final flush: no longer waiting|signalled \(SIGTERM\): writing back" \
        "$TGT_DIR/mount-sig.log"; then
  cat "$TGT_DIR/umount.out" "$TGT_DIR/mount-sig.log"
  fail "a signal during the final flush: exit $rc, or no report of it"
fi
echo "a signal during the final flush: the unmount failed, saying so"

# A target that does not come back: the unmount ends, reporting the
# failed flush, within the stop budget (not the 60 s outage budget).
mount_write gone 1M
kill -STOP "$TGT_PID"
s=$(date +%s)
rc=0
with_timeout 60 "$LUNGATE" umount "$m" >"$TGT_DIR/umount.out" 2>&1 || rc=$?
e=$(( $(date +%s) - s ))
kill -CONT "$TGT_PID"
[ "$rc" -eq 1 ] || { cat "$TGT_DIR/umount.out"; fail "a target gone at the unmount: exit $rc, not 1"; }
grep -q "could not be written back or flushed" "$TGT_DIR/umount.out" \
  || { cat "$TGT_DIR/umount.out"; fail "a target gone at the unmount: no report of the failed flush"; }
echo "target gone: the unmount failed after $e s, saying so"
echo "test-umount-stall: ok"
