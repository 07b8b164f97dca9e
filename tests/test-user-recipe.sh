#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# The README's file-system recipe, as an ordinary user runs it (issue 30,
# item 3): user nobody, a Debian user's PATH (no /sbin), a home of its
# own; the README's mount block as printed (its first three lines), then
# a file in ~/fs/data, then its unmount line.  (Before: "mkfs.ext4:
# command not found", and with the full path the file system's root was
# root's, so mkdir ~/fs/data was refused.)
. "${srcdir:-.}/functions.sh"
require_lungate
require setpriv fuse2fs fusermount3
[ "$(id -u)" -eq 0 ] || skip "needs root to become user nobody"
[ -c /dev/fuse ] || skip "no /dev/fuse"
readme=${top_srcdir:-..}/README
tgt_start
iqn=iqn.2026-11.org.example:store
tgt_add_target 1 "$iqn"
tgt_add_lun 1 1 64M
tgt_allow 1 ALL

# A home nobody owns, with lungate in it (the build tree may be in a
# directory nobody cannot enter).
home=$(mktemp -d /tmp/lungate-user.XXXXXX) || fail "mktemp"
on_exit rm -rf "$home"
mkdir -m 700 "$home/bin" "$home/lun" "$home/fs" "$home/run"
cp "$LUNGATE" "$home/bin/lungate"
chown -R 65534:65534 "$home"
chmod 755 "$home"
on_exit fusermount3 -u -z "$home/lun"
on_exit fusermount3 -u -z "$home/fs"

# The block: the indented lines after the "Mount as files (FUSE)" title.
mapfile -t block < <(awk '/^Mount as files \(FUSE\)/ { f = 1; next }
  f && /^    / { print substr($0, 5); n++ } f && n && !/^    / { exit }' "$readme")
[ "${#block[@]}" -ge 4 ] || fail "README: no mount block found"
as_user ()
{
  with_timeout 120 setpriv --reuid=65534 --regid=65534 --clear-groups \
    env -i HOME="$home" PATH="$home/bin:/usr/local/bin:/usr/bin:/bin" \
    XDG_RUNTIME_DIR="$home/run" bash -c "cd && $1"
}
for line in "${block[0]}" "${block[1]}" "${block[2]}" \
  'echo hello >~/fs/data/f && cat ~/fs/data/f' "${block[3]}"; do
  line=${line//iscsi:\/\/HOST\/TARGET-IQN/iscsi://$TGT_PORTAL/$iqn}
  echo "\$ $line"
  as_user "$line" || fail "as user nobody: $line"
done
grep -q " $home/" /proc/mounts && fail "still mounted after the README's unmount line"
echo "test-user-recipe: ok"
