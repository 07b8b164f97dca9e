#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# lungate status and lungate umount (issue 30: what iscsiadm -m session
# and cryptsetup status/close users look for).  status lists a mount (its
# directory, source, daemon pid, reservation key, LUNs) and an nbdkit
# serving the plugin (pid, URL, socket), in text and JSON; umount
# unmounts and returns only once the daemon has exited, having released
# the LUN (a new mount needs no --takeover at once); a killed daemon's
# dead mount is removed too.  (Before: "unknown command 'status'".)
# Other tests' mounts and servers may show beside ours: only ours are
# checked.
. "${srcdir:-.}/functions-nbd.sh"
require_lungate_plugin
require fusermount3 mountpoint pgrep python3
[ -c /dev/fuse ] || skip "no /dev/fuse"
tgt_start
iqn=iqn.2026-12.org.lungate:status
tgt_add_target 1 "$iqn"
tgt_add_lun 1 1 64M
tgt_add_lun 1 2 32M
tgt_allow 1 ALL
url=iscsi://$TGT_PORTAL/$iqn
mnt=$TGT_DIR/m
sock=$TGT_DIR/s.sock
mkdir "$mnt"
on_exit fusermount3 -u -z "$mnt"

expect_exit 2 "expected a mount directory" "$LUNGATE" umount
expect_exit 1 "not a lungate mount" "$LUNGATE" umount "$TGT_DIR"

with_timeout 60 "$LUNGATE" mount "$url/1" "$mnt" || fail "mount"
mpid=$(pgrep -f -- "lungate mount $url/1 $mnt\$" | head -n 1)
[ -n "$mpid" ] || fail "no mount daemon"
"${NBDKIT[@]}" -f -U "$sock" "$LUNGATE_PLUGIN" "url=$url/2" 2>"$TGT_DIR/nbdkit.log" &
npid=$!
on_exit nbd_stop "$npid"
for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.1; done
[ -S "$sock" ] || { cat "$TGT_DIR/nbdkit.log"; fail "nbdkit did not start"; }

out=$("$LUNGATE" status) || fail "status"
block=$(awk -v m="mount $mnt (rw)" '$0 == m { f = 1; print; next }
  f && /^  / { print; next } { f = 0 }' <<<"$out")
for want in "source: iscsi://$TGT_PORTAL/$iqn/1" "daemon: pid $mpid, since " \
  "reservation key: 0x" "lun1: $iqn/1, 64.00 MiB; "; do
  grep -qF -- "$want" <<<"$block" || { echo "$out"; fail "status: no '$want' for the mount"; }
done
# nbdkit's pid may be a wrapper's (valgrind): the plugin's process is
# the one whose command line names the socket.
grep -qF "unix socket: $sock" <<<"$out" || { echo "$out"; fail "status: no nbdkit on $sock"; }
grep -qF "url: $url/2" <<<"$out" || { echo "$out"; fail "status: no URL for nbdkit"; }

"$LUNGATE" status --json >"$TGT_DIR/status.json" || fail "status --json"
python3 - "$TGT_DIR/status.json" "$mnt" "$mpid" "$sock" "$url/2" <<'PY' || fail "status --json"
import json, sys
j = json.load(open(sys.argv[1]))
m = [x for x in j["mounts"] if x["dir"] == sys.argv[2]]
assert len(m) == 1, j["mounts"]
m = m[0]
assert m["pid"] == int(sys.argv[3]) and m["state"] == "serving", m
assert not m["read_only"] and len(m["reservation_keys"]) == 1, m
assert m["luns"][0]["file"] == "lun1" and m["luns"][0]["size"] == 64 << 20, m
n = [x for x in j["nbd"] if sys.argv[4] in x["args"]]
assert len(n) == 1 and "url=" + sys.argv[5] in n[0]["args"], j["nbd"]
PY

# A file open on the mount: umount refuses (after asking again for 2 s:
# a file just closed may hold the mount a moment longer) and names the
# process that holds it.  (CI run s41fin-b: the umount below failed with
# "Device or resource busy" once, and nothing said who held the mount.)
exec 8<"$mnt/lun1"
if with_timeout 30 "$LUNGATE" umount "$mnt" 2>"$TGT_DIR/busy.err"; then
  exec 8<&-; fail "umount with a file open succeeded"
fi
exec 8<&-
grep -qF "held by process $$: $mnt/lun1" "$TGT_DIR/busy.err" \
  || { cat "$TGT_DIR/busy.err"; fail "umount did not name the process holding the mount"; }
mountpoint -q "$mnt" || fail "a refused umount unmounted"

# A stopped daemon (the second hostile review: status hung for ever on
# its .stats, and umount would have returned with the daemon still to
# write back): status answers, umount refuses and leaves the mount.
kill -STOP "$mpid"
out=$(with_timeout 30 "$LUNGATE" status) || { kill -CONT "$mpid"; fail "status hung on a stopped daemon"; }
grep -qF "daemon: not known: .stats: its daemon does not answer" <<<"$out" \
  || { kill -CONT "$mpid"; echo "$out"; fail "status did not say the daemon does not answer"; }
if with_timeout 30 "$LUNGATE" umount "$mnt" 2>"$TGT_DIR/umount.err"; then
  kill -CONT "$mpid"; fail "umount of a mount whose daemon does not answer succeeded"
fi
kill -CONT "$mpid"
grep -q "cannot tell its daemon" "$TGT_DIR/umount.err" || { cat "$TGT_DIR/umount.err"; fail "umount did not say why"; }
mountpoint -q "$mnt" || fail "a refused umount unmounted"

# umount: back only once the daemon is gone and the LUN released.
out=$(with_timeout 120 "$LUNGATE" umount "$mnt" 2>&1) || { echo "$out"; fail "umount"; }
# (A zombie has ended: its parent, init here, reaps it when it will.)
if [ -e "/proc/$mpid" ] && ! grep -q '^State:.*Z' "/proc/$mpid/status" 2>/dev/null; then
  fail "umount returned while the daemon (pid $mpid) runs"
fi
grep -q "the daemon (pid $mpid) has exited" <<<"$out" || fail "umount said: $out"
mountpoint -q "$mnt" && fail "still mounted after umount"
with_timeout 60 "$LUNGATE" mount "$url/1" "$mnt" \
  || fail "a mount right after umount was refused (the LUN not released)"

# A dead mount (its daemon killed): umount removes it.
kill -9 "$(pgrep -f -- "lungate mount $url/1 $mnt\$" | head -n 1)"
sleep 0.5
"$LUNGATE" status | grep -qF "daemon: gone (a dead mount: fusermount3 -u $mnt)" \
  || fail "status does not call the killed mount dead"
out=$(with_timeout 60 "$LUNGATE" umount "$mnt/" 2>&1) || { echo "$out"; fail "umount of a dead mount (with a slash)"; }
grep -q "its daemon was already gone" <<<"$out" || fail "umount of a dead mount said: $out"
mountpoint -q "$mnt" && fail "the dead mount is still there"
echo "test-status: ok"
