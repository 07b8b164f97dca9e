#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# A bad URL is refused before anything is sent, naming the part that is
# wrong.  No target is started: nothing could be reached anyway.
. "${srcdir:-.}/functions.sh"
require_lungate

bad ()
{
  local pat=$1 url=$2
  expect_exit 1 "invalid URL '.*': .*$pat" "$LUNGATE" info "$url"
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
expect_exit 1 "invalid URL .*missing 'iscsi://'" "$LUNGATE" discover 127.0.0.1
expect_exit 1 "not a LUN" "$LUNGATE" discover "iscsi://127.0.0.1/iqn.2026-11.org.x:t/1"
echo "test-bad-url: ok"
