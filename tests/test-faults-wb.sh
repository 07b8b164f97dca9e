#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# The crash, power-cut and fault tests again with write-behind on (issue
# 29: "every existing crash, power-cut and fault test passes with
# read-ahead and write-behind on"; read-ahead is on by default in the
# mount and the plugin).  LUNGATE_TEST_WRITE_BEHIND (a test-hook build
# only: src/util/hooks.h) gives every mount and plugin device that asked
# for none an 8 MiB write-behind.  Each test keeps its own promises; three
# say what write-behind changes, as for a disk's volatile write cache
# (and test-cache-cut waits for the buffer to drain before each cut that
# is meant to lose a write from the target's cache: CI run s44fin-b
# failed without, "the flush after the second power cut succeeded"):
# test-crypt-crash accepts the loss of what was acknowledged since the
# last flush (never anything else), fault-stall.py waits for the
# buffered write's stall after its acknowledgement and takes its failure
# from the next flush, test-nbd-outage takes a write's failure from the
# flush after it, test-reserve a preempted gateway's EPERM from the flush
# after its burst, and test-mount-signals waits for a detached mount's
# exit (not its file's close) before it looks at the LUN; test-stats
# accepts its first writes joined.  The tests run at once (each has its own target).
. "${srcdir:-.}/functions.sh"
require_lungate
require_test_hooks
require fusermount3 mountpoint
[ -c /dev/fuse ] || skip "no /dev/fuse"
export LUNGATE_TEST_WRITE_BEHIND=8M

# First, that the switch works: a mount that asked for no write-behind
# has it (.stats counts wb_writes).  Else every test below would pass
# without it.
tgt_start
t=iqn.2026-12.org.lungate:faults-wb
tgt_add_target 1 "$t"
tgt_add_lun 1 1 16M
tgt_allow 1 ALL
mkdir "$TGT_DIR/m"
on_exit fusermount3 -u -z "$TGT_DIR/m"
with_timeout 60 "$LUNGATE" mount "iscsi://$TGT_PORTAL/$t/1" "$TGT_DIR/m" || fail "mount"
grep -q " wb_writes=0 " "$TGT_DIR/m/.stats" \
  || { cat "$TGT_DIR/m/.stats"; fail "LUNGATE_TEST_WRITE_BEHIND did not turn write-behind on"; }
with_timeout 120 "$LUNGATE" umount "$TGT_DIR/m" >/dev/null || fail "umount"
tgt_stop

tests=(test-cache-cut test-crash-takeover test-crypt-crash test-fault-stall
       test-fault-stall-mount test-mount-stop-slow test-stop-stuck-write
       test-umount-stall test-nbd-outage test-owner test-target-full
       test-reserve test-mount-signals test-nbd-errors test-mount-tree
       test-mount-resize test-stats)
declare -A pid
for t in "${tests[@]}"; do
  bash "${srcdir:-.}/$t.sh" >"$TGT_DIR/$t.log" 2>&1 &
  pid[$t]=$!
done
failed=()
for t in "${tests[@]}"; do
  wait "${pid[$t]}" || failed+=("$t")
done
for t in "${failed[@]}"; do
  echo "--- $t with write-behind (last lines) ---" >&2
  tail -n 40 "$TGT_DIR/$t.log" >&2
done
[ "${#failed[@]}" -eq 0 ] || fail "with write-behind on: ${failed[*]}"
for t in "${tests[@]}"; do
  grep -q "^$t: ok" "$TGT_DIR/$t.log" || { tail -n 20 "$TGT_DIR/$t.log"; fail "$t did not say ok"; }
done
echo "test-faults-wb: ok"
