#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# One writer per LUN through lungate mount (issue 14): a mount of a LUN
# the plugin holds is refused (and lungate mount says so and fails, with
# nothing left mounted), a read-only mount beside it works, a mount holds
# the LUN against the plugin; the mount point must be an empty directory
# (--nonempty overrides), and one URL is mounted once per host.
. "${srcdir:-.}/functions-nbd.sh"
require_lungate_plugin
require_nbd_python
require fusermount3 mountpoint
[ -c /dev/fuse ] || skip "no /dev/fuse"
tgt_start
t=iqn.2026-11.org.lungate:resmount
tgt_add_target 1 "$t"
tgt_add_lun 1 1 16M
tgt_allow 1 ALL
url="iscsi://$TGT_PORTAL/$t/1"
mnt=$TGT_DIR/mnt; mnt2=$TGT_DIR/mnt2
mount_points "$mnt" "$mnt2"
sock=$TGT_DIR/gw.sock

# The plugin holds the LUN (a writable connection claims it).
"${NBDKIT[@]}" -f -U "$sock" "$LUNGATE_PLUGIN" "url=$url" 2>>"$TGT_DIR/gw.log" &
gw=$!
on_exit kill -9 "$gw"
for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.1; done
env -u LD_PRELOAD "$NBD_PYTHON" -c "
import nbd; h = nbd.NBD(); h.connect_uri('nbd+unix:///?socket=$sock')
h.pwrite(b'Q' * 4096, 0); h.flush()" || fail "the plugin cannot write"

expect_fail_with "in use by a gateway on this host.*reservation key 0x4c.*-o ro" \
  "$LUNGATE" mount "$url" "$mnt"
mountpoint -q "$mnt" && fail "a refused mount left $mnt mounted"
# A mount killed while its claim waits for the holder leaves nothing
# mounted (the hostile review: the signal came before the handlers).
"$LUNGATE" mount "$url" "$mnt" 2>"$TGT_DIR/killed.err" &
parent=$!
for _ in $(seq 50); do grep -q " $mnt " /proc/mounts && break; sleep 0.05; done
child=$(pgrep -f -- "lungate mount $url $mnt" | grep -v "^$parent\$" | head -n 1)
[ -n "$child" ] && kill -TERM "$child"
wait "$parent" && fail "a mount killed during its claim succeeded"
sleep 0.5
if grep -q " $mnt " /proc/mounts || ! ls "$mnt" >/dev/null 2>&1; then
  fail "a mount killed during its claim left $mnt mounted"
fi

with_timeout 60 "$LUNGATE" mount -o ro "$url" "$mnt" 2>"$TGT_DIR/ro.err" \
  || { cat "$TGT_DIR/ro.err"; fail "a read-only mount beside the writer"; }
grep -q "/1: read-only beside the writer, .*changes under the reader" "$TGT_DIR/ro.err" \
  || { cat "$TGT_DIR/ro.err"; fail "the read-only mount does not say what reading beside a writer means"; }
[ "$(head -c 1 "$mnt/lun1")" = Q ] || fail "the read-only mount does not read the writer's data"
# One URL, one mount.
expect_fail_with "mounted already on $mnt" "$LUNGATE" mount -o ro "$url" "$mnt2"
# A second mount on the same directory names the mount there (issue 30,
# item 12: it said "the directory is not empty").
expect_exit 1 "$mnt: lungate has .* mounted there already: unmount it first \\(lungate umount $mnt\\)" \
  "$LUNGATE" mount -o ro "iscsi://$TGT_PORTAL/$t" "$mnt"
fusermount3 -u "$mnt" || fail "unmount"
nbd_stop "$gw"

# The mount holds the LUN now: the plugin's writable connection is refused.
with_timeout 60 "$LUNGATE" mount "$url" "$mnt" || fail "mount after the plugin left"
printf 'M' | dd of="$mnt/lun1" conv=notrunc status=none || fail "write through the mount"
NBD_RUN_TIMEOUT=60 nbd_run "url=$url" -- "$NBD_PYTHON" -c \
  'import nbd,sys; h=nbd.NBD(); h.connect_uri(sys.argv[1]); h.pwrite(b"X"*4096, 0)' '$uri' \
  2>"$TGT_DIR/second.log" && fail "the plugin wrote to a LUN the mount holds"
grep -q "in use by a gateway on this host" "$TGT_DIR/second.log" \
  || { cat "$TGT_DIR/second.log"; fail "the plugin's refusal does not name the mount"; }
[ "$(head -c 1 "$mnt/lun1")" = M ] || fail "the mount's data changed"
fusermount3 -u "$mnt" || fail "unmount"

# The mount point: an empty directory only.
touch "$TGT_DIR/file"
expect_fail_with "not a directory" "$LUNGATE" mount -o ro "$url" "$TGT_DIR/file"
touch "$mnt2/something"
expect_fail_with "not empty.*--nonempty" "$LUNGATE" mount -o ro "$url" "$mnt2"
mountpoint -q "$mnt2" && fail "a refused mount left $mnt2 mounted"
with_timeout 60 "$LUNGATE" mount -o ro --nonempty "$url" "$mnt2" || fail "--nonempty"
[ -f "$mnt2/lun1" ] || fail "--nonempty did not mount"
fusermount3 -u "$mnt2" || fail "unmount"
[ -e "$mnt2/something" ] || fail "the directory's own file is gone"

# A mount point with a space in its name (/proc/mounts writes it \040):
# a second mount there names the first, with or without --nonempty, and
# the same URL elsewhere names where it is mounted.
sp="$TGT_DIR/with space"
mkdir "$sp"
mount_points "$sp"
with_timeout 60 "$LUNGATE" mount -o ro "$url" "$sp" || fail "mount on a name with a space"
expect_exit 1 "lungate has .* mounted there already" \
  "$LUNGATE" mount -o ro --nonempty "iscsi://$TGT_PORTAL/$t" "$sp"
expect_fail_with "mounted already on $sp " "$LUNGATE" mount -o ro "$url" "$mnt"
fusermount3 -u "$sp" || fail "unmount"
echo "test-reserve-mount: ok"
