#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# --help, --version and usage errors: no target needed.
. "${srcdir:-.}/functions.sh"
require_lungate

out=$("$LUNGATE" --help) || fail "--help failed"
for c in discover info; do
  grep -q "^  $c " <<<"$out" || fail "--help does not list $c"
  "$LUNGATE" "$c" --help | grep -q "^Usage: lungate $c" \
    || fail "$c --help has no usage line"
  "$LUNGATE" "$c" --help | grep -q -- "--password-file" \
    || fail "$c --help does not document the login options"
done
"$LUNGATE" --version | grep -Eq '^lungate [0-9]' || fail "--version: no version"
"$LUNGATE" --version | grep -q '^libiscsi ' || fail "--version: no libiscsi"
"$LUNGATE" --version | grep -q '^libsodium ' || fail "--version: no libsodium"

expect_exit 2 "unknown command 'frobnicate'" "$LUNGATE" frobnicate
expect_exit 2 "Usage:" "$LUNGATE"
expect_exit 2 "unknown option|unrecognized option" "$LUNGATE" info --nope iscsi://h/iqn.a:b/1
expect_exit 2 "expected a LUN URL" "$LUNGATE" info
expect_exit 2 "expected a portal URL" "$LUNGATE" discover
# Options anywhere, as GNU tools take them (issue 15, item 1): after the
# URL they are options, an extra argument is named, and after "--" an
# option-looking word is an argument.
for c in info format verify bench; do
  expect_exit 2 "unexpected argument 'extra'" \
    "$LUNGATE" $c iscsi://h/iqn.a:b/1 extra
  expect_fail_with "--connect-timeout: 'abc'" \
    "$LUNGATE" $c iscsi://h/iqn.a:b/1 --connect-timeout abc
done
expect_fail_with "--connect-timeout: 'abc'" \
  "$LUNGATE" key list iscsi://h/iqn.a:b/1 --connect-timeout abc
expect_fail_with "--connect-timeout: 'abc'" \
  "$LUNGATE" key iscsi://h/iqn.a:b/1 --connect-timeout abc list
expect_exit 2 "unexpected argument 'extra'" "$LUNGATE" key list iscsi://h/iqn.a:b/1 extra
expect_exit 2 "unexpected argument 'd2'" "$LUNGATE" mount iscsi://h/iqn.a:b/1 d1 d2
# --connections 0 exited 1 with no message at all (issue 30, item 7).
for n in 0 65 x; do
  expect_exit 2 "--connections: '$n' is not a number from 1 to 64" \
    "$LUNGATE" mount --connections "$n" iscsi://h/iqn.a:b/1 d1
done
expect_fail_with "--connect-timeout: 'abc'" \
  "$LUNGATE" mount iscsi://h/iqn.a:b/1 d1 -f --connect-timeout abc
expect_exit 2 "unexpected argument '--json'" "$LUNGATE" info iscsi://h/iqn.a:b/1 -- --json
expect_fail_with "--connect-timeout: 'abc'" \
  "$LUNGATE" discover iscsi://h --json --connect-timeout abc
expect_fail_with "--header-digest: 'md5'" \
  "$LUNGATE" info --header-digest md5 iscsi://h/iqn.a:b/1
expect_fail_with "--connect-timeout: 'abc'" \
  "$LUNGATE" info --connect-timeout abc iscsi://h/iqn.a:b/1
expect_fail_with "needs both a user" \
  "$LUNGATE" info --user alice iscsi://h/iqn.a:b/1
pw=$(secret_file abcdefabcdef)
expect_fail_with "needs one-way CHAP" \
  "$LUNGATE" info --target-user t --target-password-file "$pw" \
  iscsi://h/iqn.a:b/1
expect_fail_with "/nonexistent/pw: No such file" \
  "$LUNGATE" info --user a --password-file /nonexistent/pw iscsi://h/iqn.a:b/1
# A host name that does not resolve is said in words, not libiscsi's
# "Can not resolv into IPv4/v6" (issue 15, item 10).
expect_exit 1 "no-such-host.invalid:3260: cannot connect: the host name does not resolve" \
  "$LUNGATE" info iscsi://no-such-host.invalid/iqn.2026-11.a:b/1
# A malformed option value is a usage error, exit 2, as lungate(1) says
# (issue 30, item 6: they all exited 1).  Nothing is sent: the portal
# below does not exist.
u=iscsi://127.0.0.1:9/iqn.a:b/1
kf=$(scratch_dir)/key
head -c 32 /dev/urandom >"$kf"
while IFS='|' read -r pat args; do
  # shellcheck disable=SC2086 # args is split on purpose
  expect_exit 2 "$pat" "$LUNGATE" $args
done <<EOF2
--slot: '9'|key add --slot 9 --key-file $kf --new-key-file $kf $u
--connect-timeout: 'abc'|info --connect-timeout abc $u
--io-timeout: '-5'|info --io-timeout -5 $u
--header-digest: 'md5'|info --header-digest md5 $u
--initiator-name: 'bob'|discover --initiator-name bob iscsi://127.0.0.1:9
--password-fd: 'x'|info --password-fd x $u
--passphrase-fd: 'x'|verify --passphrase-fd x $u
--mode: 'xts'|format --mode xts $u
--argon2: 'max'|format --argon2 max $u
--mode: '999'|mount --mode 999 $u /nonexistent
--uid: 'bob'|mount --uid bob $u /nonexistent
unknown mount option 'foo'|mount -o foo $u /nonexistent
--time: 'x'|bench --time x $u
--depths: '0'|bench --depths 0 $u
--size: '1Q'|bench --size 1Q $u
--crypt: 'rot13'|bench --crypt rot13 $u
EOF2
# A key file that is missing is not a usage error: it names the file.
expect_exit 1 "/nonexistent/k" "$LUNGATE" verify --key-file /nonexistent/k $u

# -v and -q anywhere, as GNU tools take options (issue 30, item 13): after
# the command and after the URL; every command's --help lists them.
for c in discover info format verify key mount bench; do
  "$LUNGATE" $c --help | grep -q -- '-v, --verbose' \
    || fail "$c --help does not list -v"
  "$LUNGATE" $c --help | grep -q -- '-q, --quiet' \
    || fail "$c --help does not list -q"
done
# -v shows the debug line that names the key slot, -q silences the
# progress lines; both after the command, the file or other options.
img=$(scratch_dir)/vol.img
truncate -s 16M "$img"
"$LUNGATE" format "$img" --key-file "$kf" -q >/dev/null 2>"$img.err" \
  || { cat "$img.err" >&2; fail "format -q"; }
[ ! -s "$img.err" ] || { cat "$img.err" >&2; fail "format -q said more than errors"; }
"$LUNGATE" verify --key-file "$kf" "$img" -v 2>&1 >/dev/null \
  | grep -q "debug: .*unlocked with key slot 0" || fail "verify FILE -v: no debug line"
"$LUNGATE" verify -v --key-file "$kf" "$img" 2>&1 >/dev/null \
  | grep -q "debug: .*unlocked with key slot 0" || fail "verify -v FILE: no debug line"
"$LUNGATE" verify --key-file "$kf" "$img" 2>&1 >/dev/null | grep -q "debug:" \
  && fail "verify without -v printed debug lines"
echo "test-usage: ok"
