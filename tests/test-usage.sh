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
  expect_exit 1 "--connections: '$n' is not a number from 1 to 64" \
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
echo "test-usage: ok"
