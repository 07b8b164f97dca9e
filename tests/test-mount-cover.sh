#!/bin/bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# A signalled mount writes back by its path only while the path reaches
# its own mount, asked at each stop request, not once (the hostile
# review of dc88759/b964dc8):
#  1. another mount over the *parent* directory, with a mount of its own
#     at the same path: the daemon wrote back into that mount's file,
#     exited with its own file still open, and its unmount took the
#     other mount;
#  2. a mount covered only while the first signal came: the second
#     signal, after the cover went, skipped the write-back and lost what
#     the open file had written;
#  3. a covered mount asked to stop never stopped once uncovered.
# And what helper-25 found in the first fix (d23edf7):
#  4. a cover mounted during the write-back (the target slow) was taken
#     by the unmount by path, and the mount left dead under it;
#  5. a second signal right after the first, while covered, did not stop
#     the mount (it was taken for "stop waiting for the target");
#  6. the probe's name was a counter: a "stat DIR/.lungate-probe-1" made
#     beforehand answered the first probe, and a covered mount wrote back
#     into the cover, unmounted it and lost its open file's write.
# And what helper-27 found in the second (86496f0):
#  7. mount ids are reused (lowest free first): after a lazy unmount, a
#     tmpfs at DIR got the mount's old id, and a signal wrote back into
#     it, unmounted it, and lost the write of a file open through a bind
#     mount of the mount elsewhere.
. "${srcdir:-.}/functions.sh"
require_lungate
require fusermount3 mountpoint pgrep python3
[ -c /dev/fuse ] || skip "no /dev/fuse"
[ "$(id -u)" = 0 ] || skip "mounting the covers needs root"
tgt_start
t=iqn.2026-12.org.lungate:cover
tgt_add_target 1 "$t"
tgt_add_lun 1 1 16M
tgt_allow 1 ALL
url="iscsi://$TGT_PORTAL/$t/1"
p="$TGT_DIR/p"
mkdir -p "$p/m" "$TGT_DIR/m"
cleanup ()
{
  for d in "$p/m" "$p" "$p/m" "$TGT_DIR/m" "$TGT_DIR/m"; do
    umount -l "$d" 2>/dev/null || true
  done
}
on_exit cleanup

# holder FILE BLK OUT: file_holder, its output in OUT, its pid in hpid,
# once it has written.
holder ()
{
  file_holder "$1" "$2" >"$3"
  hpid=$!
  on_exit kill "$hpid"
  for _ in $(seq 100); do grep -q written "$3" && return; sleep 0.1; done
  fail "the holder did not write"
}
# gone PID SECONDS: PID exits within SECONDS.
gone ()
{
  for _ in $(seq $(($2 * 10))); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.1; done
  return 1
}

# 1 and 3: a tmpfs over the parent, another tmpfs at the same path
# inside it, holding a file of the same name.
with_timeout 60 "$LUNGATE" mount --log "$TGT_DIR/1.log" "$url" "$p/m" || fail "mount"
pid=$(pgrep -f -- "lungate mount --log $TGT_DIR/1.log" | head -n 1)
head -c 65536 /dev/urandom >"$TGT_DIR/blk1"
holder "$p/m/lun1" "$TGT_DIR/blk1" "$TGT_DIR/h1.out"
mount -t tmpfs lungate-test-parent "$p" || fail "tmpfs over the parent"
mkdir "$p/m"
mount -t tmpfs lungate-test-other "$p/m" || fail "tmpfs at the path"
echo other >"$p/m/lun1"
kill -TERM "$pid"
sleep 2
kill -0 "$pid" 2>/dev/null || { cat "$TGT_DIR/1.log"
  fail "a mount whose parent is covered exited with its file open"; }
[ "$(cat "$p/m/lun1")" = other ] || fail "the daemon wrote back into another mount's file"
grep -q "^lungate-test-other $p/m tmpfs" /proc/mounts || fail "the stop took the other mount"
kill -TERM "$hpid"
for _ in $(seq 100); do grep -q close "$TGT_DIR/h1.out" && break; sleep 0.1; done
grep -q "closed after" "$TGT_DIR/h1.out" || { cat "$TGT_DIR/h1.out"; fail "the covered file did not close"; }
cmp -n 65536 "$TGT_DIR/blk1" "$(tgt_lun_file 1 1)" \
  || fail "the write of the file open under the covered parent did not reach the LUN"
umount "$p/m" || fail "umount of the other tmpfs"
umount "$p" || fail "umount of the parent's tmpfs"
# Uncovered: the stop asked for goes on by itself.
gone "$pid" 20 || { cat "$TGT_DIR/1.log"; fail "the mount asked to stop did not stop once uncovered"; }
mountpoint -q "$p/m" && fail "the mount stopped but stayed mounted"
grep -q "covers it" "$TGT_DIR/1.log" || { cat "$TGT_DIR/1.log"; fail "the daemon does not say why it went on"; }

# 2: a cover present only for the first signal.
with_timeout 60 "$LUNGATE" mount --log "$TGT_DIR/2.log" "$url" "$TGT_DIR/m" || fail "mount"
pid=$(pgrep -f -- "lungate mount --log $TGT_DIR/2.log" | head -n 1)
head -c 65536 /dev/urandom >"$TGT_DIR/blk2"
holder "$TGT_DIR/m/lun1" "$TGT_DIR/blk2" "$TGT_DIR/h2.out"
mount -t tmpfs lungate-test-cover "$TGT_DIR/m" || fail "tmpfs over the mount"
kill -TERM "$pid"
sleep 2
kill -0 "$pid" 2>/dev/null || { cat "$TGT_DIR/2.log"; fail "a covered mount exited with its file open"; }
umount "$TGT_DIR/m" || fail "umount of the cover"
kill -TERM "$pid"
gone "$pid" 20 || { cat "$TGT_DIR/2.log"; fail "the second signal did not stop the uncovered mount"; }
cmp -n 65536 "$TGT_DIR/blk2" "$(tgt_lun_file 1 1)" \
  || { cat "$TGT_DIR/2.log"; fail "the second signal after the cover went lost the open file's write"; }
mountpoint -q "$TGT_DIR/m" && fail "the mount stopped but stayed mounted"
kill -TERM "$hpid" 2>/dev/null || true

# 4: the target stopped, SIGTERM (the write-back waits), a cover, the
# target back: the write-back reaches the LUN, the cover stays.
with_timeout 60 "$LUNGATE" mount --log "$TGT_DIR/4.log" "$url" "$TGT_DIR/m" || fail "mount"
pid=$(pgrep -f -- "lungate mount --log $TGT_DIR/4.log" | head -n 1)
head -c $((4 << 20)) /dev/urandom >"$TGT_DIR/blk4"
holder "$TGT_DIR/m/lun1" "$TGT_DIR/blk4" "$TGT_DIR/h4.out"
kill -STOP "$TGT_PID"
on_exit kill -CONT "$TGT_PID"
kill -TERM "$pid"
sleep 1.5
mount -t tmpfs lungate-test-late "$TGT_DIR/m" || fail "tmpfs over the mount"
sleep 2.5
kill -CONT "$TGT_PID"
gone "$pid" 30 || { cat "$TGT_DIR/4.log"; fail "the mount did not stop once the target was back"; }
grep -q "^lungate-test-late $TGT_DIR/m tmpfs" /proc/mounts \
  || { cat "$TGT_DIR/4.log"; fail "the unmount after the write-back took the cover mounted meanwhile"; }
cmp -n $((4 << 20)) "$TGT_DIR/blk4" "$(tgt_lun_file 1 1)" \
  || fail "the write-back under a cover made meanwhile did not reach the LUN"
kill -TERM "$hpid" 2>/dev/null || true
umount "$TGT_DIR/m" || fail "umount of the cover"
fusermount3 -u -z "$TGT_DIR/m" 2>/dev/null || true

# 5 and 6: the probe's name looked up beforehand; covered; SIGTERM: the
# mount serves on; then SIGTERM and SIGHUP at once: it stops now,
# without unmounting the cover.
with_timeout 60 "$LUNGATE" mount --log "$TGT_DIR/5.log" "$url" "$TGT_DIR/m" || fail "mount"
pid=$(pgrep -f -- "lungate mount --log $TGT_DIR/5.log" | head -n 1)
head -c 65536 /dev/urandom >"$TGT_DIR/blk5"
holder "$TGT_DIR/m/lun1" "$TGT_DIR/blk5" "$TGT_DIR/h5.out"
stat "$TGT_DIR/m/.lungate-probe-1" >/dev/null 2>&1 || true
mount -t tmpfs lungate-test-five "$TGT_DIR/m" || fail "tmpfs over the mount"
kill -TERM "$pid"
sleep 2
kill -0 "$pid" 2>/dev/null || { cat "$TGT_DIR/5.log"; fail "a probe name looked up beforehand made a covered mount stop"; }
kill -TERM "$hpid"
for _ in $(seq 100); do grep -q close "$TGT_DIR/h5.out" && break; sleep 0.1; done
cmp -n 65536 "$TGT_DIR/blk5" "$(tgt_lun_file 1 1)" || fail "the covered file's write did not reach the LUN"
# Now the burst (the first signal of it asks the path again).
kill -TERM "$pid"; kill -HUP "$pid"
gone "$pid" 10 || { cat "$TGT_DIR/5.log"; fail "SIGTERM and SIGHUP at once did not stop a covered mount"; }
grep -q "^lungate-test-five $TGT_DIR/m tmpfs" /proc/mounts || fail "the stop took the cover"
umount "$TGT_DIR/m" || fail "umount of the cover"
fusermount3 -u "$TGT_DIR/m" 2>/dev/null || true
# 7: a bind mount of the mount elsewhere, a file open through it, a lazy
# unmount of DIR, tmpfs mounts at DIR until one gets the old id.
b="$TGT_DIR/b"; mkdir -p "$b"
on_exit umount -l "$b"
with_timeout 60 "$LUNGATE" mount --log "$TGT_DIR/7.log" "$url" "$TGT_DIR/m" || fail "mount"
pid=$(pgrep -f -- "lungate mount --log $TGT_DIR/7.log" | head -n 1)
id0=$(awk -v d="$TGT_DIR/m" '$5 == d {print $1}' /proc/self/mountinfo | tail -n 1)
mount --bind "$TGT_DIR/m" "$b" || fail "bind mount"
head -c 65536 /dev/urandom >"$TGT_DIR/blk7"
holder "$b/lun1" "$TGT_DIR/blk7" "$TGT_DIR/h7.out"
umount -l "$TGT_DIR/m" || fail "umount -l"
got=
for i in $(seq 40); do
  mount -t tmpfs "lungate-test-reuse$i" "$TGT_DIR/m" || fail "tmpfs $i"
  on_exit umount -l "$TGT_DIR/m"
  top=$(awk -v d="$TGT_DIR/m" '$5 == d {print $1}' /proc/self/mountinfo | tail -n 1)
  [ "$top" = "$id0" ] && { got=$i; break; }
done
if [ -n "$got" ]; then
  echo "tmpfs $got at DIR got the mount's old id $id0"
  echo other >"$TGT_DIR/m/lun1"
  kill -TERM "$pid"
  sleep 2
  kill -0 "$pid" 2>/dev/null || { cat "$TGT_DIR/7.log"; fail "a tmpfs with the mount's old id was taken for the mount"; }
  grep -q "^lungate-test-reuse$got $TGT_DIR/m tmpfs" /proc/mounts || fail "the stop took the tmpfs with the old id"
  [ "$(cat "$TGT_DIR/m/lun1")" = other ] || fail "the daemon wrote back into the tmpfs with the old id"
else
  echo "no tmpfs got the old id $id0 in 40 mounts (unique ids here): case 7 shows only that the stop waits"
  kill -TERM "$pid"
  sleep 2
  kill -0 "$pid" 2>/dev/null || fail "a covered mount open through a bind exited"
fi
kill -TERM "$hpid"
for _ in $(seq 100); do grep -q close "$TGT_DIR/h7.out" && break; sleep 0.1; done
cmp -n 65536 "$TGT_DIR/blk7" "$(tgt_lun_file 1 1)" || fail "the file open through the bind mount lost its write"
umount "$b" || fail "umount of the bind"
gone "$pid" 20 || { cat "$TGT_DIR/7.log"; fail "the mount did not end once its last mount and file were gone"; }
echo "test-mount-cover: ok"
