#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# The LIO VM of functions-lio.sh boots and serves what it promises: both
# targets discovered, the three LUNs of the plain target with their block
# sizes, the mutual-CHAP target, the guest's own address unreachable from
# the test's namespace, and the control channel (a disabled TPG refuses
# logins, enabling it again admits them; the PR directory switched off
# and on).  Prints the boot time.
. "${srcdir:-.}/functions.sh"
. "${srcdir:-.}/functions-lio.sh"
lio_enter_netns "$@"
require_lungate
lio_start
printf 'boot: %s s\n' "$LIO_BOOT_SECONDS"

# The guest's address, which SendTargets names, must be out of reach.
if timeout 5 bash -c 'exec 3<>/dev/tcp/10.0.2.15/3260' 2>/dev/null; then
  fail "10.0.2.15:3260 is reachable from the test's network namespace"
fi
[ "$(lio_ctl ping)" = pong ] || fail "lio_ctl ping"

dir=$(scratch_dir)
# SendTargets names both targets at the guest's address.  Listing the
# CHAP target's LUNs needs a login, so discover fails for it: its output
# is what counts here.
out=$(with_timeout 60 "$LUNGATE" discover "iscsi://$LIO_PORTAL" 2>"$dir/d.err") \
  || true
printf '%s\n' "$out"
cat "$dir/d.err"
grep -qx "$LIO_PLAIN" <<<"$out" || fail "discover: $LIO_PLAIN not listed"
grep -qx "$LIO_CHAP" <<<"$out" || fail "discover: $LIO_CHAP not listed"
grep -qx "  portal $LIO_VM_PORTAL,1" <<<"$out" \
  || fail "discover: SendTargets does not name $LIO_VM_PORTAL"
out=$(with_timeout 60 "$LUNGATE" discover "iscsi://$LIO_PORTAL/$LIO_PLAIN") \
  || fail "discover $LIO_PLAIN failed"
[ "$(grep -c '^  lun [0-2]  disk  64.00 MiB' <<<"$out")" -eq 3 ] \
  || fail "discover $LIO_PLAIN: not three 64 MiB LUNs"

# info LUN BLOCKSIZE
info ()
{
  local o
  o=$(with_timeout 60 "$LUNGATE" info "iscsi://$LIO_PORTAL/$LIO_PLAIN/$1") \
    || fail "info on LUN $1 failed"
  printf '%s\n' "$o"
  grep -q "^size: 67108864 " <<<"$o" || fail "LUN $1: not 64 MiB"
  grep -qx "logical-block-size: $2" <<<"$o" \
    || fail "LUN $1: block size is not $2"
}
info 0 512
info 1 4096
info 2 512

pw=$(secret_file "$LIO_CHAP_SECRET")
tpw=$(secret_file "$LIO_CHAP_TSECRET")
with_timeout 60 "$LUNGATE" info --user "$LIO_CHAP_USER" --password-file "$pw" \
  --target-user "$LIO_CHAP_TUSER" --target-password-file "$tpw" \
  "iscsi://$LIO_PORTAL/$LIO_CHAP/0" | grep -q "^size: 67108864 " \
  || fail "mutual CHAP login to $LIO_CHAP"
expect_fail_with "authentication failed" \
  "$LUNGATE" info "iscsi://$LIO_PORTAL/$LIO_CHAP/0"

# A disabled TPG refuses the login; enabled again, it admits it.
lio_ctl tpg plain disable || fail "lio_ctl tpg plain disable"
expect_fail_with "login failed" "$LUNGATE" info "iscsi://$LIO_PORTAL/$LIO_PLAIN/0"
lio_ctl tpg plain enable || fail "lio_ctl tpg plain enable"
with_timeout 60 "$LUNGATE" info "iscsi://$LIO_PORTAL/$LIO_PLAIN/0" >/dev/null \
  || fail "login after the TPG was enabled again"

# The PR directory off and on again; LIO keeps serving meanwhile.
lio_ctl prdir off || fail "lio_ctl prdir off"
lio_ctl sh '[ -f /var/target/pr ]' || fail "prdir off left a directory"
with_timeout 60 "$LUNGATE" info "iscsi://$LIO_PORTAL/$LIO_PLAIN/0" >/dev/null \
  || fail "info with the PR directory missing"
lio_ctl prdir on || fail "lio_ctl prdir on"
lio_ctl sh '[ -d /var/target/pr ] && [ -w /var/target/pr ]' \
  || fail "prdir on did not restore the directory"
echo "LIO boot test passed (boot $LIO_BOOT_SECONDS s)"
