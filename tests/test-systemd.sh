#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# The systemd units as shipped (issue 15, item 2; issue 30, mounts at
# boot): systemd-analyze accepts them and rates every service's sandbox
# under 4.0 ("OK"), and each service's own ExecStart, taken from the unit
# file, does its job with the secrets in the credentials directory
# systemd makes from /etc/lungate/NAME.d (every file FILE there becomes
# credential lungate_FILE).  lungate-nbd@ serves an encrypted LUN behind
# CHAP, and a plain LUN with no secrets at all; lungate-mount@ mounts an
# encrypted LUN behind CHAP, writes reach the LUN, and SIGTERM (systemctl
# stop) unmounts it.  Both refuse a configuration that names a CHAP user
# without the secret, or lacks what they need, saying what is missing.
# (This machine has no systemd running: the sandbox itself is rated,
# not run.)
. "${srcdir:-.}/functions-nbd.sh"
require_lungate_plugin
require_nbd_python
unit=${top_srcdir:-..}/contrib/systemd/lungate-nbd@.service
socket=${top_srcdir:-..}/contrib/systemd/lungate-nbd@.socket
dir=$(scratch_dir)

mount_unit=${top_srcdir:-..}/contrib/systemd/lungate-mount@.service
if command -v systemd-analyze >/dev/null; then
  cp "$unit" "$dir/lungate-nbd@store.service"
  cp "$socket" "$dir/lungate-nbd@store.socket"
  cp "$mount_unit" "$dir/lungate-mount@store.service"
  (cd "$dir" && SYSTEMD_LOG_LEVEL=warning systemd-analyze verify --man=no \
     ./lungate-nbd@store.service ./lungate-nbd@store.socket \
     ./lungate-mount@store.service) 2>"$dir/analyze" \
    || { cat "$dir/analyze"; fail "systemd-analyze verify"; }
  grep -v "nbdkit: command not found" "$dir/analyze" | grep -q . \
    && { cat "$dir/analyze"; fail "systemd-analyze warns"; }
  # Every service shipped, and the README's promise of under 4.0.
  n=0
  for u in "${top_srcdir:-..}"/contrib/systemd/*@.service; do
    b=$(basename "$u"); i=$dir/${b%@.service}@store.service
    cp "$u" "$i"
    SYSTEMD_LOG_LEVEL=warning systemd-analyze security --offline=true \
      --threshold=40 --no-pager "$i" >"$dir/security" 2>&1 \
      || { grep -E "✗|Overall" "$dir/security"; fail "$b: systemd-analyze security rates it above 4.0"; }
    grep -q "Overall exposure level" "$dir/security" \
      || { cat "$dir/security"; fail "$b: systemd-analyze security gave no rating"; }
    n=$((n + 1))
  done
  [ "$n" -ge 2 ] || fail "only $n services in contrib/systemd"
fi
grep -q "^SocketGroup=" "$socket" || fail "the socket has no SocketGroup="
# What is not a service runs nothing (lungate-units(5): the sandbox
# rating applies to services only; a socket unit rates 9.8 as if it
# were a service with no sandbox).
for u in "${top_srcdir:-..}"/contrib/systemd/*@.*; do
  case $u in
    *.service) ;;
    *.socket) grep -qE '^[[:space:]]*Exec' "$u" && fail "$(basename "$u") runs a process outside the rated sandbox" ;;
    *) fail "$(basename "$u"): a unit type lungate-units(5) does not cover" ;;
  esac
done

# unit_script UNIT: the command systemd runs, the ExecStart line with
# its continuations, $$ -> $, %i -> the instance.
unit_script ()
{
  sed -n '/^ExecStart=/,/[^\\]$/p' "$1" | sed 's/\\$//' | tr -d '\n' \
    | sed -e "s/^ExecStart=\/bin\/sh -c '//" -e "s/'\$//" -e 's/\$\$/$/g' -e 's/%i/store/g'
}
script=$(unit_script "$unit")
[ -n "$script" ] || fail "no ExecStart in $unit"
mount_script=$(unit_script "$mount_unit")
[ -n "$mount_script" ] || fail "no ExecStart in $mount_unit"
for u in "$unit" "$mount_unit"; do
  grep -q "LoadCredential=lungate:/etc/lungate/%i.d$" "$u" || fail "$u: the credentials are not the directory"
done

tgt_start
t=iqn.2026-11.org.lungate:systemd
tgt_add_target 1 "$t"
tgt_add_lun 1 1 16M
tgt_add_lun 1 2 16M
tgt_allow 1 ALL
tgt_chap 1 gw gw-secret-12345
creds=$dir/creds; mkdir "$creds"
printf 'gw-secret-12345\n' >"$creds/lungate_chap"
head -c 32 /dev/urandom >"$creds/lungate_key"
"$LUNGATE" format --lazy --user gw --password-file "$creds/lungate_chap" \
  --key-file "$creds/lungate_key" "iscsi://$TGT_PORTAL/$t/1" >/dev/null 2>&1 || fail "format"

# service CONF...: runs the unit's command with CONF's variables, as
# EnvironmentFile= would, nbdkit serving on $dir/s.sock.
sock=$dir/s.sock
wrap=$dir/nbdkit
# (The unit names the installed plugin, "lungate": the wrapper gives the
# one built here.)
# It notes nbdkit's own options (before the plugin) in $dir/opts.
{
  printf '#!/bin/bash\no=()\nwhile [ $# -gt 0 ] && [ "$1" != lungate ]; do o+=("$1"); shift; done\n'
  printf '[ "$1" = lungate ] || exit 99\nshift\necho "${o[*]}" >%q\nexec' "$dir/opts"
  printf ' %q' "${NBDKIT[@]}" -U "$sock"
  printf ' "${o[@]}" %q "$@"\n' "$LUNGATE_PLUGIN"
} >"$wrap"
chmod +x "$wrap"
service ()
{
  rm -f "$sock"
  env -i PATH="$PATH" CREDENTIALS_DIRECTORY="$creds" NBDKIT="$wrap" "$@" \
    sh -c "$script" 2>>"$dir/service.log" &
  svc=$!
}
wait_sock () { for _ in $(seq 100); do [ -S "$sock" ] && return 0; sleep 0.1; done; cat "$dir/service.log"; fail "the service did not start"; }
rw ()
{
  env -u LD_PRELOAD "$NBD_PYTHON" - "$sock" <<'PY'
import nbd, sys
h = nbd.NBD(); h.connect_uri("nbd+unix:///?socket=" + sys.argv[1])
h.pwrite(b"S" * 4096, 8192); h.flush()
assert h.pread(4096, 8192) == b"S" * 4096
print(h.get_size())
PY
}

service URL="iscsi://$TGT_PORTAL/$t/1" CHAP_USER=gw CONNECTIONS=2 TIMEOUT=30 PARAMS="metadata-cache=1M"
wait_sock
size=$(rw) || fail "I/O through the service"
[ "$size" -lt $((16 << 20)) ] || fail "the service did not open the volume with the key credential (size $size)"
# 64 threads per connection unless THREADS says otherwise (nbdkit's 16
# halve random I/O over a WAN link: nbdkit-lungate-plugin(1)).
[ "$(cat "$dir/opts")" = "--foreground --threads 64" ] \
  || fail "nbdkit's options: $(cat "$dir/opts")"
nbd_stop "$svc"

# lungate-mount@store: the same encrypted LUN behind CHAP, mounted on a
# directory the service makes.
mnt=$dir/mnt/store
on_exit _lg_unmount "$mnt"
mount_service ()
{
  env -i PATH="$PATH" CREDENTIALS_DIRECTORY="$creds" LUNGATE="$LUNGATE" "$@" \
    sh -c "$mount_script" 2>>"$dir/mount.log" &
  msvc=$!
}
wait_mounted ()
{
  for _ in $(seq 300); do
    [ -f "$mnt/lun1" ] && return 0
    _lg_alive "$msvc" || break
    sleep 0.1
  done
  cat "$dir/mount.log"
  fail "the mount service did not mount $mnt/lun1"
}
stop_mount ()
{
  kill -TERM "$msvc"
  wait_exit "$msvc" 90 "lungate-mount@store" "$dir/mount.log"
  wait "$msvc" || { cat "$dir/mount.log"; fail "the mount service exited $? on SIGTERM"; }
  ! grep -q " $mnt " /proc/mounts || fail "$mnt is still mounted after the service stopped"
}
mount_service URL="iscsi://$TGT_PORTAL/$t/1" DIR="$mnt" CHAP_USER=gw TIMEOUT=30 \
  OPTIONS=direct_io ARGS="--mode 0640"
wait_mounted
[ "$(stat -c %a "$mnt/lun1")" = 640 ] || fail "ARGS=--mode 0640 gave mode $(stat -c %a "$mnt/lun1")"
[ "$(stat -c %s "$mnt/lun1")" -lt $((16 << 20)) ] \
  || fail "the mount service did not open the volume with the key credential"
head -c 65536 /dev/urandom >"$dir/data"
dd if="$dir/data" of="$mnt/lun1" bs=64k seek=3 conv=notrunc,fsync status=none \
  || fail "writing through the mount service"
stop_mount
# Started again (a reboot): the data is there.
mount_service URL="iscsi://$TGT_PORTAL/$t/1" DIR="$mnt" CHAP_USER=gw
wait_mounted
dd if="$mnt/lun1" of="$dir/back" bs=64k skip=3 count=1 status=none || fail "reading through the mount service"
cmp -s "$dir/data" "$dir/back" || fail "the data written before the restart did not come back"
stop_mount
# What it cannot do without, named.
refused ()
{
  local want=$1
  shift
  : >"$dir/mount.log"
  mount_service "$@"
  wait "$msvc" && fail "the mount service started with $*"
  grep -qF "lungate-mount@store: $want" "$dir/mount.log" \
    || { cat "$dir/mount.log"; fail "the mount service did not say: $want"; }
}
# The script itself: ARGS is split but never globbed (a service's
# working directory is /), parents of DIR are made reachable under the
# unit's UMask=0077, and a URL with a tab is two URLs (found by an attack
# on the unit).
printf '#!/bin/sh\nprintf "%%s\\n" "$@" >%q\n' "$dir/args.out" >"$dir/args"
chmod +x "$dir/args"
mkdir "$dir/cwd" && : >"$dir/cwd/--takeover"
(cd "$dir/cwd" && umask 077 && env -i PATH="$PATH" CREDENTIALS_DIRECTORY="$creds" \
   LUNGATE="$dir/args" URL="iscsi://$TGT_PORTAL/$t/1" DIR="$dir/p/q/r" ARGS="--mode 0640 *" \
   sh -c "$mount_script") || fail "the mount script with a fake lungate"
grep -qx '\*' "$dir/args.out" || { cat "$dir/args.out"; fail "ARGS lost its '*'"; }
grep -qx -- --takeover "$dir/args.out" && fail "ARGS was globbed against the working directory"
[ "$(stat -c %a "$dir/p")" = 755 ] || fail "DIR's parent was made mode $(stat -c %a "$dir/p")"
refused "URL is not set in /etc/lungate/store.conf" DIR="$mnt"
refused "DIR is not set in /etc/lungate/store.conf" URL="iscsi://$TGT_PORTAL/$t/1"
refused "URL in /etc/lungate/store.conf names more than one URL" \
  URL="iscsi://$TGT_PORTAL/$t/1 iscsi://$TGT_PORTAL/$t/2" DIR="$mnt"
refused "URL in /etc/lungate/store.conf names more than one URL" \
  URL="iscsi://$TGT_PORTAL/$t/1	iscsi://$TGT_PORTAL/$t/2" DIR="$mnt"

# A plain LUN without CHAP: no secret needed, a missing file is fine.
rm "$creds/lungate_key"
tgtadm_ --mode account --op unbind --tid 1 --user gw || fail "tgtadm unbind"
service URL="iscsi://$TGT_PORTAL/$t/2" THREADS=8
wait_sock
[ "$(rw)" = $((16 << 20)) ] || fail "a plain LUN through the service"
[ "$(cat "$dir/opts")" = "--foreground --threads 8" ] \
  || fail "THREADS=8 gave nbdkit: $(cat "$dir/opts")"
nbd_stop "$svc"

# CHAP_USER without its secret: refused, naming the file.
rm "$creds/lungate_chap"
service URL="iscsi://$TGT_PORTAL/$t/2" CHAP_USER=gw
wait "$svc" && fail "the service started without the CHAP secret"
grep -q "CHAP_USER is set but /etc/lungate/store.d/chap is missing" "$dir/service.log" \
  || { cat "$dir/service.log"; fail "no message naming the missing secret"; }
refused "CHAP_USER is set but /etc/lungate/store.d/chap is missing" \
  URL="iscsi://$TGT_PORTAL/$t/2" DIR="$mnt" CHAP_USER=gw
echo "test-systemd: ok"
