#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# Keys per LUN: one target holding two volumes under different keys, a
# plain LUN and a volume whose key nobody gave.  The plugin (target URL,
# key-file=lun1:FILE, key-dir=DIR) and lungate mount (--key-file
# lun1=FILE, --key-dir DIR) serve the two volumes and the plain LUN, each
# as what it is, and leave the keyless volume out, saying so; a portal
# mount leaves out a target that needs CHAP and mounts the others.
. "${srcdir:-.}/functions-nbd.sh"
require_lungate_plugin
require_nbd_python
require fusermount3 mountpoint cmp
tgt_start
t=iqn.2026-11.org.lungate:keys
t2=iqn.2026-11.org.lungate:keys-chap
tgt_add_target 1 "$t"
for l in 1 2 3 4; do tgt_add_lun 1 "$l" 32M; done
tgt_allow 1 ALL
tgt_add_target 2 "$t2"
tgt_add_lun 2 1 16M
tgt_allow 2 ALL
tgt_chap 2 carol carol-secret-12
url="iscsi://$TGT_PORTAL/$t"
d=$TGT_DIR
for k in a b c; do head -c 32 /dev/urandom >"$d/key-$k"; done
"$LUNGATE" format --key-file "$d/key-a" "$url/1" >/dev/null 2>&1 || fail "format 1"
"$LUNGATE" format --key-file "$d/key-b" "$url/2" >/dev/null 2>&1 || fail "format 2"
"$LUNGATE" format --key-file "$d/key-c" "$url/4" >/dev/null 2>&1 || fail "format 4"
uuid2=$("$LUNGATE" info "$url/2" | sed -n 's/^volume-uuid: //p')
[ -n "$uuid2" ] || fail "no volume-uuid for LUN 2"
mkdir -p "$d/keys"
cp "$d/key-b" "$d/keys/$uuid2"

# The plugin: lun1 by its own key, lun2 by the key directory, lun3 plain,
# lun4 left out (named in the log).
nbd_run "url=$url" "key-file=lun1:$d/key-a" "key-dir=$d/keys" -- \
  "$NBD_PYTHON" - '$uri' 2>"$d/plugin.log" <<'PY' || { cat "$d/plugin.log"; fail "plugin: keys per LUN"; }
import nbd, sys
def open_export(name):
    x = nbd.NBD()
    u = sys.argv[1]
    i = u.index("?")
    x.connect_uri("nbd+unix:///" + name + u[i:])
    return x
for name, fill in (("lun1", b"\x11"), ("lun2", b"\x22"), ("lun3", b"\x33")):
    x = open_export(name)
    x.pwrite(fill * 65536, 0); x.flush()
    assert x.pread(65536, 0) == fill * 65536, name
    x.shutdown()
try:
    open_export("lun4")
except nbd.Error:
    pass
else:
    raise AssertionError("lun4 was exported without its key")
PY
# A key given twice for one LUN: the last one counts (as for --key-file).
nbd_run "url=$url/1" "key-file=lun1:$d/key-c" "key-file=lun1:$d/key-a" -- \
  nbdinfo '$uri' >/dev/null 2>"$d/twice.log" \
  || { cat "$d/twice.log"; fail "plugin: the second key-file=lun1: did not count"; }
grep -q "not exporting LUN 4.*formatted by lungate (volume [0-9a-f]*): give its key" "$d/plugin.log" \
  || { cat "$d/plugin.log"; fail "plugin: the keyless volume is not named"; }
# The client that asked for lun4 is refused with the reason, not with
# "does not exist".
grep -q "export 'lun4' is not served: .*give its key" "$d/plugin.log" \
  || { cat "$d/plugin.log"; fail "plugin: asking for the keyless volume does not say why it is not served"; }
# strict=true: the keyless volume fails the start, named.
nbd_run "url=$url" "key-file=lun1:$d/key-a" "key-dir=$d/keys" strict=true -- \
  nbdinfo '$uri' >/dev/null 2>"$d/strict.log" && { cat "$d/strict.log"; fail "plugin: strict=true started without LUN 4's key"; }
grep -q "LUN 4 cannot be served (strict=true): .*give its key" "$d/strict.log" \
  || { cat "$d/strict.log"; fail "plugin: strict=true does not name the LUN it could not serve"; }
"$LUNGATE" verify --key-file "$d/key-a" "$url/1" >/dev/null 2>&1 || fail "verify 1"
"$LUNGATE" verify --key-file "$d/key-b" "$url/2" >/dev/null 2>&1 || fail "verify 2"
python3 -c "import sys; sys.stdout.buffer.write(bytes([51]) * 65536)" >"$d/want"
cmp -n 65536 "$d/want" "$(tgt_lun_file 1 3)" \
  || fail "the plain LUN did not get plain data"

# The mount, the same keys.
[ -c /dev/fuse ] || skip "no /dev/fuse"
mnt=$d/mnt; mount_points "$mnt"
"$LUNGATE" mount --key-file "lun1=$d/key-a" --key-dir "$d/keys" "$url" "$mnt" \
  2>"$d/mount.err" || { cat "$d/mount.err"; fail "mount with keys per LUN"; }
grep -q "not mounting LUN 4.*give its key" "$d/mount.err" \
  || { cat "$d/mount.err"; fail "mount: the keyless volume is not named"; }
[ -e "$mnt/lun4" ] && fail "mount: lun4 is there without its key"
for p in 1:17 2:34 3:51; do
  python3 -c "import sys; sys.stdout.buffer.write(bytes([${p#*:}]) * 65536)" >"$d/want"
  cmp -n 65536 "$d/want" "$mnt/lun${p%%:*}" \
    || fail "mount: lun${p%%:*} does not read what was written"
done
"$LUNGATE" umount "$mnt" >/dev/null || fail "unmount"
# --strict: the keyless volume fails the mount, named; nothing mounted.
"$LUNGATE" mount --strict --key-file "lun1=$d/key-a" --key-dir "$d/keys" "$url" "$mnt" \
  2>"$d/strict-mount.err" && { fusermount3 -u "$mnt"; fail "mount --strict mounted without LUN 4's key"; }
grep -q "LUN 4 cannot be mounted (--strict): .*give its key" "$d/strict-mount.err" \
  || { cat "$d/strict-mount.err"; fail "mount --strict does not name the LUN it could not mount"; }
grep -q " $mnt " /proc/self/mounts && fail "mount --strict failed but left a mount"

# A portal mount: the CHAP target is left out, the other one mounted.
"$LUNGATE" mount -o ro --key-dir "$d/keys" --key-file "lun1=$d/key-a" \
  "iscsi://$TGT_PORTAL" "$mnt" 2>"$d/portal.err" \
  || { cat "$d/portal.err"; fail "portal mount with a CHAP target"; }
grep -q "$t2: not mounted:.*CHAP" "$d/portal.err" \
  || { cat "$d/portal.err"; fail "portal mount: the CHAP target is not named"; }
[ -e "$mnt/$t/lun1" ] || fail "portal mount: $t/lun1 missing"
[ -e "$mnt/$t2" ] && fail "portal mount: the CHAP target has a directory"
echo "test-keys-per-lun: ok"
