#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# The systemd units as shipped (issue 15, item 2): systemd-analyze
# accepts them, and the service's own ExecStart, taken from the unit
# file, serves an encrypted LUN behind CHAP with the secrets in the
# credentials directory systemd makes from /etc/lungate/NAME.d (every
# file FILE there becomes credential lungate_FILE), a plain LUN with no
# secrets at all, and refuses a configuration that names a CHAP user
# without the secret, saying which file is missing.
. "${srcdir:-.}/functions-nbd.sh"
require_lungate_plugin
require_nbd_python
unit=${top_srcdir:-..}/contrib/systemd/lungate-nbd@.service
socket=${top_srcdir:-..}/contrib/systemd/lungate-nbd@.socket
dir=$(scratch_dir)

if command -v systemd-analyze >/dev/null; then
  cp "$unit" "$dir/lungate-nbd@store.service"
  cp "$socket" "$dir/lungate-nbd@store.socket"
  (cd "$dir" && SYSTEMD_LOG_LEVEL=warning systemd-analyze verify --man=no \
     ./lungate-nbd@store.service ./lungate-nbd@store.socket) 2>"$dir/analyze" \
    || { cat "$dir/analyze"; fail "systemd-analyze verify"; }
  grep -v "nbdkit: command not found" "$dir/analyze" | grep -q . \
    && { cat "$dir/analyze"; fail "systemd-analyze warns"; }
fi
grep -q "^SocketGroup=" "$socket" || fail "the socket has no SocketGroup="

# The command systemd runs: the ExecStart line with its continuations,
# $$ -> $, %i -> the instance.
script=$(sed -n '/^ExecStart=/,/[^\\]$/p' "$unit" | sed 's/\\$//' | tr -d '\n' \
  | sed -e "s/^ExecStart=\/bin\/sh -c '//" -e "s/'\$//" -e 's/\$\$/$/g' -e 's/%i/store/g')
[ -n "$script" ] || fail "no ExecStart in $unit"
grep -q "LoadCredential=lungate:/etc/lungate/%i.d$" "$unit" || fail "the credentials are not the directory"

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
echo "test-systemd: ok"
