#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# lungate mount: a portal with two targets shows both trees (SEEK_DATA and
# SEEK_HOLE: test-mount-seek); killing the daemon gives readers
# ENOTCONN, not a hang; and an unprivileged user mounts inside
# unshare -Urm, as a rootless container would.
. "${srcdir:-.}/functions.sh"
require_lungate
require fusermount3 python3 setpriv unshare mountpoint
[ -c /dev/fuse ] || skip "no /dev/fuse"
tgt_start
t1=iqn.2026-11.org.lungate:tree-one
t2=iqn.2026-11.org.lungate:tree-two
tgt_add_target 1 "$t1"
tgt_add_lun 1 1 32M
tgt_lun_params 1 1 thin_provisioning=1
tgt_add_lun 1 2 16M
tgt_allow 1 ALL
tgt_add_target 2 "$t2"
tgt_add_lun 2 1 8M
tgt_allow 2 ALL
# A hostile name: tgt accepts "..", the mount must not make it a directory.
tgtadm_ --mode target --op new --tid 3 -T ".." || fail "tgtadm: target '..'"
tgt_add_lun 3 1 8M
tgt_allow 3 ALL
mnt="$TGT_DIR/mnt"; mount_points "$mnt"

# A portal: DIR/IQN/lunN for every target.
"$LUNGATE" mount -f "iscsi://$TGT_PORTAL" "$mnt" 2>"$TGT_DIR/mount.log" &
pid=$!
for _ in $(seq 100); do mountpoint -q "$mnt" && break; sleep 0.1; done
mountpoint -q "$mnt" || { cat "$TGT_DIR/mount.log"; fail "portal mount"; }
for f in "$t1/lun1" "$t1/lun2" "$t2/lun1"; do
  [ -f "$mnt/$f" ] || { ls -laR "$mnt" >&2; fail "$f missing"; }
done
[ "$(stat -c %s "$mnt/$t2/lun1")" = 8388608 ] || fail "size of $t2/lun1"
[ "$(cd "$mnt" && find . -mindepth 1 -maxdepth 1 ! -name .stats -printf '%P\n' | sort | tr '\n' ' ')" = "$t1 $t2 " ] \
  || { ls -la "$mnt" >&2; fail "the portal mount shows more than the two named targets"; }
grep -q "1 target(s) left out" "$TGT_DIR/mount.log" \
  || { cat "$TGT_DIR/mount.log" >&2; fail "no warning for the target named '..'"; }


# SIGTERM: flush, unmount, exit 0 (and no sanitizer report on stderr).
# A target of its own: the portal mount holds the LUNs of the others.
t4=iqn.2026-11.org.lungate:tree-four
tgt_add_target 4 "$t4"
tgt_add_lun 4 1 8M
tgt_allow 4 ALL
mkdir -p "$TGT_DIR/m2"
"$LUNGATE" mount -f "iscsi://$TGT_PORTAL/$t4" "$TGT_DIR/m2" 2>"$TGT_DIR/m2.log" &
pid2=$!
for _ in $(seq 100); do mountpoint -q "$TGT_DIR/m2" && break; sleep 0.1; done
mountpoint -q "$TGT_DIR/m2" || { cat "$TGT_DIR/m2.log"; fail "mount -f"; }
head -c 1M /dev/urandom >"$TGT_DIR/data"
dd if="$TGT_DIR/data" of="$TGT_DIR/m2/lun1" bs=64k conv=notrunc status=none
kill -TERM "$pid2"
rc=0; wait "$pid2" || rc=$?
[ "$rc" = 0 ] || { cat "$TGT_DIR/m2.log"; fail "SIGTERM: exit status $rc"; }
if mountpoint -q "$TGT_DIR/m2"; then fail "still mounted after SIGTERM"; fi
cmp -n 1048576 "$TGT_DIR/data" "$(tgt_lun_file 4 1)" || fail "data not on the LUN after SIGTERM"
if grep -Eq 'AddressSanitizer|LeakSanitizer|runtime error:' "$TGT_DIR/m2.log"; then
  cat "$TGT_DIR/m2.log"; fail "sanitizer report from the mount daemon"
fi

# The LUN removed on the target under the mount: aligned direct reads and
# writes (answered from the session thread) and an unaligned one (on a
# worker) fail with EIO, promptly; the other LUNs go on; .stats counts it.
tgtadm_ --mode logicalunit --op delete --tid 1 --lun 2
timeout 20 python3 - "$mnt/$t1/lun2" "$mnt/$t1/lun1" <<'PY' || fail "I/O on a removed LUN"
import errno, mmap, os, sys
buf = mmap.mmap(-1, 65536)
fd = os.open(sys.argv[1], os.O_RDWR | os.O_DIRECT)
for what, op in (("read", lambda: os.preadv(fd, [buf], 65536)),
                 ("write", lambda: os.pwritev(fd, [buf], 131072))):
    try:
        op()
        sys.exit(what + " on a removed LUN succeeded")
    except OSError as e:
        assert e.errno == errno.EIO, (what, e)
os.close(fd)
fd = os.open(sys.argv[1], os.O_RDONLY)
try:
    os.pread(fd, 100, 7)
    sys.exit("unaligned read on a removed LUN succeeded")
except OSError as e:
    assert e.errno == errno.EIO, e
os.close(fd)
fd = os.open(sys.argv[2], os.O_RDONLY | os.O_DIRECT)
assert os.preadv(fd, [buf], 4 << 20) == 65536
os.close(fd)
PY
grep -q "lun2 .*errors=[1-9]" "$mnt/.stats" 2>/dev/null \
  || grep -q "lun=$t1/2 .*errors=[1-9]" "$mnt/.stats" || { cat "$mnt/.stats" >&2; fail ".stats errors for the removed LUN"; }
grep -q "LBA" "$TGT_DIR/mount.log" || { cat "$TGT_DIR/mount.log" >&2; fail "no log line naming the LBA"; }

# Kill the daemon: a reader gets ENOTCONN at once, no hang.
kill -KILL "$pid"; wait "$pid" 2>/dev/null || true
timeout 10 python3 - "$mnt/$t1/lun2" <<'PY' || fail "reading after the daemon died"
import errno, sys
try:
    open(sys.argv[1], "rb").read(4096)
    sys.exit("read succeeded")
except OSError as e:
    assert e.errno == errno.ENOTCONN, e
PY
fusermount3 -u "$mnt" || fail "unmount after the kill"

# Unprivileged, in a user namespace.  /dev/fuse is 0666 on an ordinary
# system; this machine may have it tighter, so open it up for the test.
mode=$(stat -c %a /dev/fuse)
if [ "$mode" != 666 ]; then
  chmod 666 /dev/fuse
  on_exit chmod "$mode" /dev/fuse
fi
umnt=$(mktemp -d /tmp/lungate-userns.XXXXXX)
on_exit rm -rf "$umnt"
chmod 777 "$umnt"
# The build tree may sit under a directory only root can enter (a CI
# clone in a mktemp -d): give the user a copy of the command.
ubin=$(mktemp -d /tmp/lungate-bin.XXXXXX)
on_exit rm -rf "$ubin"
cp "$LUNGATE" "$ubin/lungate"
chmod 755 "$ubin" "$ubin/lungate"
# --takeover: the portal mount killed above still holds the reservation.
timeout 60 setpriv --reuid=65534 --regid=65534 --clear-groups \
  unshare -Urm sh -c '
    set -e
    "$1" mount --takeover "$2" "$3"
    test "$(stat -c %s "$3/lun1")" = 8388608
    dd if=/dev/zero of="$3/lun1" bs=4096 count=1 conv=notrunc status=none
    dd if="$3/lun1" of=/dev/null bs=1M status=none
    umount "$3"
  ' sh "$ubin/lungate" "iscsi://$TGT_PORTAL/$t2" "$umnt" \
  || fail "mounting as an unprivileged user in unshare -Urm"

# The container pattern of lungate-mount(1) leaves the daemon in a mount
# namespace nobody else sees: a second mount from here is refused with
# the daemon's pid and where it runs (issue 30, item 5), and kill stops
# it.
nsmnt=$(mktemp -d /tmp/lungate-ns.XXXXXX)
on_exit rm -rf "$nsmnt"
unshare -m sh -c '"$1" mount "$2" "$3"' sh "$LUNGATE" "iscsi://$TGT_PORTAL/$t2" "$nsmnt" \
  || fail "mounting inside unshare -m"
with_timeout 60 "$LUNGATE" mount "iscsi://$TGT_PORTAL/$t2" "$mnt" 2>"$nsmnt.err" \
  && { fusermount3 -u "$mnt"; fail "a second mount beside the one in another namespace"; }
grep -Eq "in use by a gateway on this host .*pid [0-9]+, in another mount namespace.*stop that gateway first" "$nsmnt.err" \
  || { cat "$nsmnt.err"; fail "the refusal does not name the pid and the other namespace"; }
on_exit rm -f "$nsmnt.err"
pid=$(sed -n 's/.*pid \([0-9]*\), in another mount namespace.*/\1/p' "$nsmnt.err" | head -n 1)
{ [ -n "$pid" ] && kill -0 "$pid"; } || fail "the refusal names no running pid"
kill "$pid"
for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
kill -0 "$pid" 2>/dev/null && fail "the gateway in the other namespace did not stop on SIGTERM"

# In another PID namespace the holder's own pid (1 there) names another
# process here: the refusal must not tell to stop it (the hostile
# review: "pid 1 ... stop that gateway first").
for _ in $(seq 50); do mountpoint -q "$nsmnt" || break; sleep 0.1; done
unshare -pf --kill-child=TERM "$LUNGATE" mount -f "iscsi://$TGT_PORTAL/$t2" "$nsmnt" \
  2>"$nsmnt.pidns" &
upid=$!
on_exit pkill -P "$upid"
for _ in $(seq 100); do mountpoint -q "$nsmnt" && break; sleep 0.1; done
mountpoint -q "$nsmnt" || { cat "$nsmnt.pidns"; fail "mounting inside unshare -pf"; }
# (bench --write: a second mount would be refused sooner, the source
# being mounted already in this mount namespace.)
with_timeout 60 "$LUNGATE" bench --write --time 0.5 --size 1M "iscsi://$TGT_PORTAL/$t2/1" \
  >/dev/null 2>"$nsmnt.err" && fail "a writer beside the mount in another PID namespace"
grep -q "running, its pid not visible here (another PID namespace" "$nsmnt.err" \
  || { cat "$nsmnt.err"; fail "the refusal does not say the holder's pid is not visible"; }
grep -Eq "pid [0-9]+[,)]" "$nsmnt.err" && { cat "$nsmnt.err"; fail "the refusal names a pid of another namespace"; }
# (unshare ignores SIGTERM while it waits: the daemon, pid 1 there, is
# its child.)
kill "$(pgrep -P "$upid")"
for _ in $(seq 100); do mountpoint -q "$nsmnt" || break; sleep 0.1; done
mountpoint -q "$nsmnt" && fail "the mount in the other PID namespace did not stop"
rm -f "$nsmnt.pidns"
echo "test-mount-tree: ok"
