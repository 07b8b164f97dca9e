#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# A bad URL is refused before anything is sent, naming the part that is
# wrong, with the exit status lungate(1) gives usage errors (2), as are
# other malformed invocations.  No target is started: nothing could be
# reached anyway.
. "${srcdir:-.}/functions.sh"
require_lungate

bad ()
{
  local pat=$1 url=$2
  expect_exit 2 "invalid URL '.*': .*$pat" "$LUNGATE" info "$url"
}

bad "missing 'iscsi://' scheme" "http://127.0.0.1/iqn.2026-11.org.x:t/1"
bad "missing host" "iscsi:///iqn.2026-11.org.x:t/1"
bad "bad port '70000'" "iscsi://127.0.0.1:70000/iqn.2026-11.org.x:t/1"
bad "bad port 'ab'" "iscsi://127.0.0.1:ab/iqn.2026-11.org.x:t/1"
bad "target 'disk1' is not an iSCSI name" "iscsi://127.0.0.1/disk1/1"
bad "LUN 'one' is not a number" "iscsi://127.0.0.1/iqn.2026-11.org.x:t/one"
bad "after the LUN" "iscsi://127.0.0.1/iqn.2026-11.org.x:t/1/2"
bad "bad IPv6" "iscsi://[::1/iqn.2026-11.org.x:t/1"
bad "info needs a LUN URL" "iscsi://127.0.0.1/iqn.2026-11.org.x:t"
expect_exit 2 "invalid URL .*missing 'iscsi://'" "$LUNGATE" discover 127.0.0.1
expect_exit 2 "not a LUN" "$LUNGATE" discover "iscsi://127.0.0.1/iqn.2026-11.org.x:t/1"

# Every command: a malformed URL, a URL of the wrong kind.
t=iqn.2026-11.org.x:t
k=$(scratch_dir)/key
head -c 32 /dev/zero >"$k"
expect_exit 2 "bad port" "$LUNGATE" format --key-file "$k" "iscsi://127.0.0.1:0/$t/1"
expect_exit 2 "format needs a LUN URL" "$LUNGATE" format --key-file "$k" "iscsi://127.0.0.1/$t"
expect_exit 2 "verify needs a LUN URL" "$LUNGATE" verify --key-file "$k" "iscsi://127.0.0.1"
expect_exit 2 "key needs a LUN URL" "$LUNGATE" key list --key-file "$k" "iscsi://127.0.0.1/$t"
expect_exit 2 "bench needs a LUN URL" "$LUNGATE" bench "iscsi://127.0.0.1/$t"
expect_exit 2 "missing host" "$LUNGATE" mount "iscsi:///$t/1" /nonexistent
# Options that do not go together, a missing or extra argument, unknown
# options and commands.
expect_exit 2 "CHAP needs both a user" "$LUNGATE" info --user u "iscsi://127.0.0.1/$t/1"
expect_exit 2 "mutual CHAP" "$LUNGATE" info --target-user u "iscsi://127.0.0.1/$t/1"
expect_exit 2 "expected a LUN URL" "$LUNGATE" info
expect_exit 2 "unexpected argument 'extra'" "$LUNGATE" info "iscsi://127.0.0.1/$t/1" extra
expect_exit 2 "unrecognized option|unknown option" "$LUNGATE" info --no-such "iscsi://127.0.0.1/$t/1"
expect_exit 2 "unknown command 'frobnicate'" "$LUNGATE" frobnicate
expect_exit 2 "" "$LUNGATE"
expect_exit 2 "bad port" "$LUNGATE" --verbose info "iscsi://127.0.0.1:99999/$t/1"
echo "test-bad-url: ok"
