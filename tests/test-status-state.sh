#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# lungate status shows each mounted LUN's state and where each mount's
# messages go, and finds the mount daemons it cannot see (issue 30: "each
# LUN with ... state (clean/dirty, fenced ranges, reconnects)"; item 5,
# a daemon left in a mount namespace nobody can see; and the background
# mount that did not say where its log goes):
#  - an encrypted LUN is "volume clean" before a write, "volume in use"
#    once written (a clean unmount marks it clean), and "volume dirty"
#    when a killed gateway left it so; a plain LUN has no volume word;
#    writes in doubt (fenced) are counted;
#  - the mount's log destination ("log: FILE");
#  - a lungate mount daemon in another mount namespace, by pid, with its
#    command line and how to stop it.
# (Before: status said none of it; the .stats line had no volume state.)
. "${srcdir:-.}/functions.sh"
require_lungate
require fusermount3 mountpoint pgrep python3 unshare
[ -x /usr/bin/python3 ] || skip "no /usr/bin/python3"
[ -c /dev/fuse ] || skip "no /dev/fuse"
[ "$(id -u)" = 0 ] || skip "a mount namespace of its own needs root here"
tgt_start
iqn=iqn.2026-12.org.lungate:status-state
tgt_add_target 1 "$iqn"
tgt_add_lun 1 1 32M
tgt_add_lun 1 2 16M
tgt_allow 1 ALL
url=iscsi://$TGT_PORTAL/$iqn
d=$TGT_DIR
mnt=$d/m
mkdir "$mnt" "$d/hidden"
on_exit fusermount3 -u -z "$mnt"
head -c 32 /dev/urandom >"$d/key"
"$LUNGATE" format --key-file "$d/key" "$url/1" >"$d/format.log" 2>&1 \
  || { cat "$d/format.log"; fail "format"; }

mount_it ()
{
  with_timeout 60 "$LUNGATE" mount --log "$d/mount.log" --key-file "lun1=$d/key" \
    "$url" "$mnt" || { cat "$d/mount.log"; fail "mount ($1)"; }
}

# the_mount [DIR MODE]: that mount's block of lungate status (default:
# this test's read-write mount).
the_mount ()
{
  "$LUNGATE" status >"$d/status.out" 2>&1 || { cat "$d/status.out"; fail "status"; }
  awk -v m="mount ${1:-$mnt} (${2:-rw})" '$0 == m { f = 1; print; next }
    f && /^  / { print; next } { f = 0 }' "$d/status.out"
}

want ()
{
  grep -qF -- "$2" <<<"$3" || { echo "$3"; fail "status ($1): no '$2'"; }
}

mount_it first
block=$(the_mount)
want "before a write" "lun1: $iqn/1, " "$block"
want "before a write" "volume clean" "$block"
want "before a write" "log: $d/mount.log" "$block"
grep "lun2: " <<<"$block" | grep -q "volume" && { echo "$block"; fail "a plain LUN has a volume state"; }

dd if=/dev/urandom of="$mnt/lun1" bs=4096 count=4 conv=notrunc,fsync status=none \
  || fail "write"
block=$(the_mount)
want "after a write" "volume in use" "$block"
want "after a write" "0 writes in doubt" "$block"
"$LUNGATE" status --json >"$d/status.json" || fail "status --json"
python3 - "$d/status.json" "$mnt" "$d/mount.log" <<'PY' || fail "status --json"
import json, sys
j = json.load(open(sys.argv[1]))
m = [x for x in j["mounts"] if x["dir"] == sys.argv[2]]
assert len(m) == 1, j["mounts"]
m = m[0]
assert m["log"] == sys.argv[3], m
luns = {x["file"]: x for x in m["luns"]}
assert luns["lun1"]["volume"] == "in-use", luns
assert luns["lun1"]["unconfirmed"] == 0, luns
assert "volume" not in luns["lun2"], luns
PY

# A reader beside the writer (the hostile review helper-35: a read-only
# mount said "volume clean" while the writer had it in use, and after
# the writer's kill -9): it cannot know, and says so.
mkdir "$d/ro"
on_exit fusermount3 -u -z "$d/ro"
with_timeout 60 "$LUNGATE" mount -o ro --log "$d/ro.log" --key-file "lun1=$d/key" \
  "iscsi://localhost:${TGT_PORTAL##*:}/$iqn" "$d/ro" || { cat "$d/ro.log"; fail "mount -o ro"; }
block=$(the_mount "$d/ro" ro)
want "read-only" "volume state not known here" "$block"
with_timeout 120 "$LUNGATE" umount "$d/ro" >/dev/null || fail "umount -o ro"

# A log file's name is a line of .stats: a newline in it would add a LUN
# to status (helper-35: "lunX: FAKE" was listed).  Refused.
expect_exit 2 "control character" "$LUNGATE" mount --log "$d/a
file=lunX lun=FAKE size=1" "$url" "$d/ro"

# Killed: the header stays dirty, and the next mount says so.  The next
# mount of the whole target takes both LUNs back from the dead gateway
# (before: the first LUN's takeover removed the dead gateway's runtime
# file, and the second LUN was refused as "in use by a gateway on this
# host ... --takeover").
mpid=$(pgrep -f -- "lungate mount --log $d/mount.log" | head -n 1)
[ -n "$mpid" ] || fail "no mount daemon"
kill -9 "$mpid"
wait_exit "$mpid" 30 "the killed mount daemon"
fusermount3 -u -z "$mnt"
mount_it "after a crash"
block=$(the_mount)
want "after a crash" "volume dirty" "$block"
# A runtime file whose pid is another process's now (a dead gateway's
# file stays, util/alive.h, and pids are reused) does not make status
# show that process holding the dead key (the hostile review
# helper-35).  The file is forged, unlocked, naming a live process that
# looks like a mount daemon (making the kernel hand out the dead pid
# itself, with ns_last_pid, made other tests' processes get pids they
# kill later: CI run s44fin3-a).
printf 'import time\ntime.sleep(120)\n' >"$d/mount"
# (Not python3 by PATH: a shim there may exec it again, with its own
# argv[0].)
(cd "$d" && exec unshare -m bash -c 'exec -a lungate /usr/bin/python3 mount') &
fake=$!
on_exit kill "$fake"
for _ in $(seq 50); do tr '\0' ' ' <"/proc/$fake/cmdline" | grep -q '^lungate mount' && break; sleep 0.1; done
echo "$fake" >"$XDG_RUNTIME_DIR/lungate/lungate-4c00deadbeef0001.alive"
"$LUNGATE" status >"$d/status.out" 2>&1 || fail "status"
awk -v m="mount daemon pid $fake in another mount namespace" 'index($0, m) == 1 { f = 1; print; next }
  f && /^  / { print; next } { f = 0 }' "$d/status.out" >"$d/fake.out"
grep -q . "$d/fake.out" || { cat "$d/status.out"; fail "status does not list the process $fake"; }
grep -q "reservation key" "$d/fake.out" \
  && { cat "$d/fake.out"; fail "status shows a dead gateway's key for another process with its pid"; }
kill "$fake"
rm -f "$XDG_RUNTIME_DIR/lungate/lungate-4c00deadbeef0001.alive"
with_timeout 120 "$LUNGATE" umount "$mnt" >/dev/null || fail "umount"

# --log syslog where no syslog runs: said, not silently lost (the audit
# helper-36: it exited 0 without a word).
if [ -S /dev/log ]; then
  with_timeout 60 "$LUNGATE" mount --log syslog --key-file "lun1=$d/key" "$url" "$mnt" 2>"$d/syslog.err" \
    || { cat "$d/syslog.err"; fail "mount --log syslog"; }
  want "--log syslog" "log: syslog" "$(the_mount)"
else
  with_timeout 60 "$LUNGATE" mount --log syslog "$url/2" "$mnt" 2>"$d/syslog.err" \
    || { cat "$d/syslog.err"; fail "mount --log syslog"; }
  grep -q "no syslog runs here (no /dev/log): the mount's messages are lost" "$d/syslog.err" \
    || { cat "$d/syslog.err"; fail "mount --log syslog without a syslog says nothing"; }
fi
with_timeout 120 "$LUNGATE" umount "$mnt" >/dev/null || fail "umount"

# A daemon of another mount namespace whose mount is visible here (a
# shared mount: systemd's default for a unit with a namespace of its
# own) is listed once, as a mount (helper-35: listed twice, the second
# time as "not visible here").
mkdir "$d/shared"
mount --bind "$d/shared" "$d/shared"
on_exit umount -l "$d/shared"
mount --make-shared "$d/shared"
mkdir "$d/shared/m"
unshare -m --propagation unchanged "$LUNGATE" mount --log "$d/shared.log" \
  --key-file "lun1=$d/key" "$url" "$d/shared/m" || { cat "$d/shared.log"; fail "mount on a shared mount"; }
spid=$(pgrep -f -- "lungate mount --log $d/shared.log" | head -n 1)
[ -n "$spid" ] || fail "no daemon for the shared mount"
"$LUNGATE" status >"$d/status.out" 2>&1 || fail "status"
grep -qF "mount $d/shared/m (rw)" "$d/status.out" || { cat "$d/status.out"; fail "the shared mount is not listed"; }
grep -qF "mount daemon pid $spid in another mount namespace" "$d/status.out" \
  && { cat "$d/status.out"; fail "the daemon of a mount listed here is listed again as not visible"; }
with_timeout 120 "$LUNGATE" umount "$d/shared/m" >/dev/null || fail "umount the shared mount"

# A daemon in a mount namespace of its own: not in our mounts, still
# listed, with the way to stop it.
unshare -m --propagation private sh -c \
  "'$LUNGATE' mount --log '$d/hidden.log' --key-file 'lun1=$d/key' '$url' '$d/hidden'" \
  || { cat "$d/hidden.log"; fail "mount in a namespace of its own"; }
hpid=$(pgrep -f -- "lungate mount --log $d/hidden.log" | head -n 1)
[ -n "$hpid" ] || fail "no daemon in the other namespace"
on_exit kill "$hpid"
"$LUNGATE" status >"$d/status.out" 2>&1 || fail "status"
grep -qF "mount daemon pid $hpid in another mount namespace" "$d/status.out" \
  || { cat "$d/status.out"; fail "status does not list the daemon of another mount namespace"; }
grep -qF "$url $d/hidden" "$d/status.out" \
  || { cat "$d/status.out"; fail "status does not give that daemon's command line"; }
grep -qF "stop it with: kill $hpid" "$d/status.out" \
  || { cat "$d/status.out"; fail "status does not say how to stop it"; }
"$LUNGATE" status --json >"$d/status.json" || fail "status --json"
python3 - "$d/status.json" "$hpid" <<'PY' || fail "status --json: other namespaces"
import json, sys
j = json.load(open(sys.argv[1]))
o = [x for x in j["other_namespaces"] if x["pid"] == int(sys.argv[2])]
assert len(o) == 1 and "mount" in o[0]["args"], j["other_namespaces"]
PY
# SIGTERM: the daemon unmounts in its namespace and releases the LUN.
kill "$hpid"
wait_exit "$hpid" 60 "the daemon of the other namespace, at SIGTERM," "$d/hidden.log"
with_timeout 60 "$LUNGATE" mount --log "$d/mount.log" --key-file "lun1=$d/key" \
  "$url" "$mnt" || fail "the LUN was not released by the stopped daemon"
with_timeout 120 "$LUNGATE" umount "$mnt" >/dev/null || fail "umount"
echo "test-status-state: ok"
