#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# Why a mount failed, told right (issue 30, item 4): as user nobody with
# /dev/fuse at mode 0600, in unshare -Ur without a mount namespace, and
# with -o allow_other where /etc/fuse.conf lacks user_allow_other; and
# that unshare -Urm needs no helper, as README says.  (Before: each said
# "cannot mount (is /dev/fuse usable?)".)  /dev/fuse and /etc/fuse.conf
# are replaced in a private mount namespace only.
. "${srcdir:-.}/functions.sh"
require_lungate
require setpriv unshare fusermount3 mknod
[ "$(id -u)" -eq 0 ] || skip "needs root to become user nobody"
[ -c /dev/fuse ] || skip "no /dev/fuse"
tgt_start
iqn=iqn.2026-12.org.lungate:hints
tgt_add_target 1 "$iqn"
tgt_add_lun 1 1 16M
tgt_allow 1 ALL
url=iscsi://$TGT_PORTAL/$iqn/1

# A directory nobody can use, with lungate in it (the build tree may be
# in a directory nobody cannot enter).
w=$(mktemp -d /tmp/lungate-hints.XXXXXX) || fail "mktemp"
on_exit rm -rf "$w"
chmod 755 "$w"
cp "$LUNGATE" "$w/lungate"
mkdir -m 777 "$w/m"
mknod -m 600 "$w/fuse" c 10 229
: >"$w/fuse.conf"
on_exit fusermount3 -u -z "$w/m"

# as_nobody [SETUP] -- CMD...: CMD as user nobody, after SETUP (run as
# root in a private mount namespace); its stderr in $w/err.
as_nobody ()
{
  local setup=$1 rc=0
  shift
  with_timeout 60 unshare -m sh -c "$setup"' exec "$@"' sh \
    setpriv --reuid=65534 --regid=65534 --clear-groups "$@" >"$w/out" 2>"$w/err" \
    || rc=$?
  return "$rc"
}
# hint WHAT PATTERN SETUP CMD...: the mount fails, and says PATTERN.
hint ()
{
  local what=$1 pat=$2 setup=$3
  shift 3
  if as_nobody "$setup" "$@"; then
    fail "$what: the mount succeeded"
  fi
  grep -Eq -- "$pat" "$w/err" || { cat "$w/err"; fail "$what: no /$pat/"; }
  echo "$what: $(grep 'cannot mount' "$w/err")"
}

hint "/dev/fuse at 0600" "/dev/fuse: Permission denied \\(mode 0600, owner uid 0\\).*root can make it mode 0666" \
  "mount --bind $w/fuse /dev/fuse &&" \
  "$w/lungate" mount -f "$url" "$w/m"
hint "unshare -Ur" "no mount namespace of its own \\(unshare -Urm, with -m\\)" "" \
  unshare -Ur "$w/lungate" mount -f "$url" "$w/m"
hint "allow_other" "allow_other needs user_allow_other in /etc/fuse.conf" \
  "mount --bind $w/fuse.conf /etc/fuse.conf &&" \
  "$w/lungate" mount -f -o allow_other,default_permissions "$url" "$w/m"

# fusermount3 reads a line with a CR, or a comment after the word, as
# user_allow_other: then the refusal is another (a directory nobody may
# write), and the hint must not blame fuse.conf.
printf 'user_allow_other\r\n# a comment\n' >"$w/fuse-crlf.conf"
mkdir -m 755 "$w/m-root"
as_nobody "mount --bind $w/fuse-crlf.conf /etc/fuse.conf &&" \
  "$w/lungate" mount -f -o allow_other,default_permissions "$url" "$w/m-root" \
  && fail "a mount on a directory nobody may write succeeded"
grep -q "cannot mount" "$w/err" || { cat "$w/err"; fail "no word on the refused mount"; }
if grep -v '^fusermount3' "$w/err" | grep -q "user_allow_other"; then
  cat "$w/err"; fail "a fuse.conf that allows allow_other was blamed"
fi

# unshare -Urm: no helper, and it works; the pattern of lungate-mount(1),
# ending with lungate umount, leaves no daemon behind in the namespace.
as_nobody "" unshare -Urm sh -c \
  "'$w/lungate' mount --log stderr '$url' '$w/m' && ls '$w/m'; '$w/lungate' umount '$w/m'" \
  || { cat "$w/err"; fail "unshare -Urm: the mount or lungate umount failed"; }
grep -qx lun1 "$w/out" || { cat "$w/out" "$w/err"; fail "unshare -Urm: no lun1"; }
for _ in $(seq 50); do pgrep -f "lungate mount --log stderr $url" >/dev/null || break; sleep 0.1; done
if pgrep -f "lungate mount --log stderr $url" >/dev/null; then
  pkill -f "lungate mount --log stderr $url"
  fail "unshare -Urm: the daemon outlived the shell after lungate umount"
fi
# unshare -Urm with no XDG_RUNTIME_DIR (after su, in a CI job or a
# container): the daemon left in the namespace keeps its runtime file and
# log in /tmp/lungate-UID, UID as outside, so that a second mount of the
# LUN outside names it by its pid.  (Before: uid 0 inside took /run,
# which it may not write: "no syslog and no runtime directory (Operation
# not permitted)", and the refusal offered --takeover.)
mkdir -m 777 "$w/m2" "$w/m3"
on_exit fusermount3 -u -z "$w/m3"
as_nobody "" env -u XDG_RUNTIME_DIR unshare -Urm \
  "$w/lungate" mount --log syslog "$url" "$w/m2" \
  || { cat "$w/err"; fail "unshare -Urm without XDG_RUNTIME_DIR: the mount failed"; }
dpid=$(pgrep -f -- "lungate mount --log syslog $url $w/m2" | head -n 1)
[ -n "$dpid" ] || { cat "$w/err"; fail "no daemon in the user namespace"; }
on_exit kill "$dpid"
grep -q "no runtime directory" "$w/err" && { cat "$w/err"; fail "the daemon in the user namespace has no runtime directory"; }
if as_nobody "" env -u XDG_RUNTIME_DIR "$w/lungate" mount -f "$url" "$w/m3"; then
  fail "a second mount of a LUN held in a user namespace succeeded"
fi
grep -q "pid $dpid" "$w/err" \
  || { cat "$w/err"; fail "the refusal does not name the daemon in the user namespace"; }
kill "$dpid"
wait_exit "$dpid" 60 "the daemon in the user namespace"
echo "test-fuse-hints: ok"
