#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# The layers as doc/design.md draws them, kept so by the build: a front
# end (the NBD plugins, the mount, the commands) includes from the
# library only the block-device interface (dev/dev.h), the constructor
# (dev/open.h), the volume interface (dev/volume.h), the file device
# (dev/file.h) and the utilities (util/), besides the front ends' own
# headers (cmd/, fuse/, common/, lungate/): never the pool, the sessions,
# the iSCSI device, the reservations, the stack policy or the crypt layer
# itself; and no function of the library or the plugins grows past 120
# lines (issue 28); and every test sources the suite's functions.
. "${srcdir:-.}/functions.sh"
top=${top_srcdir:-..}
allowed='^(dev/(dev|open|volume|file)\.h|util/[^/]+|(cmd|fuse|common|lungate)/[^/]+)$'
bad=()
for f in "$top"/src/cmd/*.c "$top"/src/fuse/*.c "$top"/plugins/*/*.c; do
  while IFS= read -r inc; do
    [[ $inc =~ $allowed ]] || bad+=("${f#"$top"/}: includes $inc")
  done < <(sed -n 's/^#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f")
done
if [ "${#bad[@]}" -gt 0 ]; then
  printf '%s\n' "${bad[@]}" >&2
  fail "a front end includes more of the library than dev/dev.h, dev/open.h, dev/volume.h, dev/file.h and util/"
fi

# GNU style: a function's name starts its line, its body ends at the
# first "}" alone on a line.
mapfile -t files < <(find "$top/src" "$top/plugins" -name '*.c' | sort)
long=$(awk 'FNR == 1 { start = 0 }
  /^[a-z_][a-z0-9_]* \(/ && !start { start = FNR; name = $1 }
  /^}/ && start { if (FNR - start > 120) printf "%s: %s is %d lines\n", FILENAME, name, FNR - start; start = 0 }' \
  "${files[@]}")
if [ -n "$long" ]; then
  printf '%s\n' "$long" >&2
  fail "functions over 120 lines"
fi
# Every test sources the suite's functions: one that did not ran its
# "fail" as a missing command and said ok (test-lazy-failed-writes did,
# from the day it was written).
unsourced=()
for t in "$top"/tests/test-*.sh; do
  grep -qE '^\. "\$\{srcdir:-\.\}/functions[a-z-]*\.sh"' "$t" || unsourced+=("${t#"$top"/}")
done
[ "${#unsourced[@]}" -eq 0 ] || fail "tests that do not source tests/functions*.sh: ${unsourced[*]}"
echo "test-layers: ok"
