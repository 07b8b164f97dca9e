#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# Key hygiene: while format writes an encrypted LUN's metadata and while a
# mount (key file, then passphrase) and the plugin (key file, passphrase)
# serve one, reading the whole memory of the process through /proc/PID/mem
# finds no copy of the key or the passphrase outside memory marked not to
# be dumped (libsodium's guarded pages), and neither does a core dump of
# it (gcore); each scan is shown to work by finding a non-secret marker.
. "${srcdir:-.}/functions-nbd.sh"
require_lungate_plugin
require python3 fusermount3 mountpoint gcore
[ "$(id -u)" = 0 ] || skip "reading another process's memory needs root"
tgt_start
t=iqn.2026-11.org.lungate:hygiene
tgt_add_target 1 "$t"
tgt_add_lun 1 1 16M
tgt_add_lun 1 2 16M
tgt_add_lun 1 3 8G
tgt_allow 1 ALL
key="$TGT_DIR/key"; head -c 32 /dev/urandom >"$key"
pass="hygiene-passphrase-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')"
pf=$(secret_file "$pass")
"$LUNGATE" format --key-file "$key" "iscsi://$TGT_PORTAL/$t/1" >/dev/null 2>&1 || fail "format 1"
"$LUNGATE" format --passphrase-file "$pf" --argon2 interactive "iscsi://$TGT_PORTAL/$t/2" \
  >/dev/null 2>&1 || "$LUNGATE" format --passphrase-file "$pf" "iscsi://$TGT_PORTAL/$t/2" >/dev/null 2>&1 \
  || fail "format 2"

cat >"$TGT_DIR/scan.py" <<'PY'
# scan.py PID KEYFILE PASSPHRASE MARKER: exit 1 if a secret is found outside
# "dd" (do not dump) mappings, 2 if the marker is not found at all.
import re, sys
pid, keyfile, passphrase, marker = sys.argv[1:5]
secrets = {"key": open(keyfile, "rb").read(), "passphrase": passphrase.encode()}
found_marker = False
bad = []
maps = open("/proc/%s/smaps" % pid).read().split("\n")
regions = []
cur = None
for line in maps:
    m = re.match(r"^([0-9a-f]+)-([0-9a-f]+) (\S+) \S+ \S+ \S+\s*(.*)$", line)
    if m:
        cur = [int(m.group(1), 16), int(m.group(2), 16), m.group(3), m.group(4), ""]
        regions.append(cur)
    elif line.startswith("VmFlags:") and cur:
        cur[4] = line
mem = open("/proc/%s/mem" % pid, "rb", buffering=0)
for lo, hi, perms, name, flags in regions:
    if "r" not in perms or name in ("[vvar]", "[vsyscall]"):
        continue
    data = bytearray()
    try:
        mem.seek(lo)
        for off in range(lo, hi, 1 << 24):
            data += mem.read(min(1 << 24, hi - off))
    except OSError:
        pass
    if marker.encode() in data:
        found_marker = True
    nodump = " dd" in flags
    for what, s in secrets.items():
        if s in data and not nodump:
            bad.append("%s at %x-%x %s %s" % (what, lo, hi, perms, name))
for b in bad:
    print("secret outside no-dump memory:", b)
if not found_marker:
    print("the scan did not find the marker", marker)
    sys.exit(2)
sys.exit(1 if bad else 0)
PY

cat >"$TGT_DIR/scancore.py" <<'PY'
# scancore.py CORE KEYFILE PASSPHRASE MARKER: exit 1 if a secret is in the
# core file, 2 if the marker is not.
import sys
core, keyfile, passphrase, marker = sys.argv[1:5]
data = open(core, "rb").read()
if marker.encode() not in data:
    print("the core file does not hold the marker", marker)
    sys.exit(2)
bad = [w for w, s in (("key", open(keyfile, "rb").read()),
                      ("passphrase", passphrase.encode())) if s in data]
for w in bad:
    print("the core file holds the", w)
sys.exit(1 if bad else 0)
PY

# check_pid WHAT PID MARKER: the live memory, then a core dump of it (gcore
# leaves out, as the kernel's own dump does, what is marked not to dump).
check_pid ()
{
  local rc=0 core="$TGT_DIR/core"
  python3 "$TGT_DIR/scan.py" "$2" "$key" "$pass" "$3" || rc=$?
  case $rc in
    0) echo "$1: no secret outside no-dump memory" ;;
    2) fail "$1: the memory scan does not work" ;;
    *) fail "$1: a key or passphrase copy in dumpable memory" ;;
  esac
  rm -f "$core".*
  timeout 120 gcore -o "$core" "$2" >"$TGT_DIR/gcore.log" 2>&1 \
    || { cat "$TGT_DIR/gcore.log" >&2; fail "$1: gcore failed"; }
  rc=0
  python3 "$TGT_DIR/scancore.py" "$core.$2" "$key" "$pass" "$3" || rc=$?
  case $rc in
    0) echo "$1: no secret in a core dump ($(du -m "$core.$2" | cut -f1) MiB)" ;;
    2) fail "$1: the core dump does not work" ;;
    *) fail "$1: a key or passphrase copy in a core dump" ;;
  esac
  rm -f "$core".*
}

# format, caught in the middle of writing the metadata of an 8 GiB LUN:
# stopped, scanned, let go on.
"$LUNGATE" format --key-file "$key" "iscsi://$TGT_PORTAL/$t/3" >"$TGT_DIR/format.log" 2>&1 &
fpid=$!
for _ in $(seq 600); do
  [ "$(du -k "$TGT_DIR/lun-1-3.img" | cut -f1)" -gt 1024 ] && break
  kill -0 "$fpid" 2>/dev/null || break
  sleep 0.05
done
kill -STOP "$fpid" 2>/dev/null || fail "format ended before it could be scanned"
check_pid "format (key file)" "$fpid" "$t"
kill -CONT "$fpid"
wait "$fpid" || { cat "$TGT_DIR/format.log" >&2; fail "format of LUN 3"; }

mnt="$TGT_DIR/mnt"; mkdir -p "$mnt"
cleanup () { fusermount3 -u -z "$mnt" 2>/dev/null || true; }
on_exit cleanup
for lun in 1 2; do
  k=(--key-file "$key"); [ $lun = 2 ] && k=(--passphrase-file "$pf")
  "$LUNGATE" mount -f "${k[@]}" "iscsi://$TGT_PORTAL/$t/$lun" "$mnt" 2>"$TGT_DIR/mount.log" &
  mpid=$!
  for _ in $(seq 100); do mountpoint -q "$mnt" && break; sleep 0.1; done
  mountpoint -q "$mnt" || { cat "$TGT_DIR/mount.log"; fail "mount $lun"; }
  dd if=/dev/urandom of="$mnt/lun$lun" bs=64k count=16 conv=notrunc,fsync status=none || fail "write"
  cmp -n 65536 "$mnt/lun$lun" "$mnt/lun$lun" || fail "read"
  check_pid "mount LUN $lun" "$mpid" "$t"
  fusermount3 -u "$mnt"; wait "$mpid" 2>/dev/null || true
done

sock="$TGT_DIR/nbd.sock"
"${NBDKIT[@]}" -f -U "$sock" "$LUNGATE_PLUGIN" "url=iscsi://$TGT_PORTAL/$t/1" "key-file=$key" \
  2>"$TGT_DIR/nbdkit.log" &
gw=$!
on_exit nbd_stop "$gw"
for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.1; done
[ -S "$sock" ] || { cat "$TGT_DIR/nbdkit.log"; fail "nbdkit"; }
check_pid "plugin, key-file=" "$gw" "$t"
nbd_stop "$gw"
rm -f "$sock"
"${NBDKIT[@]}" -f -U "$sock" "$LUNGATE_PLUGIN" "url=iscsi://$TGT_PORTAL/$t/2" "passphrase=+$pf" \
  2>"$TGT_DIR/nbdkit.log" &
gw=$!
for _ in $(seq 300); do [ -S "$sock" ] && break; sleep 0.1; done
[ -S "$sock" ] || { cat "$TGT_DIR/nbdkit.log"; fail "nbdkit with a passphrase"; }
check_pid "plugin, passphrase=" "$gw" "$t"
nbd_stop "$gw"
echo "test-key-hygiene: ok"
