#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# make install under a user's prefix writes nothing outside it (the plugin
# and the filter go to LIBDIR/nbdkit/...), and under nbdkit's own prefix
# the plugin goes to nbdkit's plugin directory; --with-nbdkit-filterdir
# still decides.  configure runs in a scratch directory (about 2 s each)
# and make install only with -n: nothing is built or installed.  (A
# configure bounded to 120 s timed out once with two CI runs and a CPU
# hog beside it: the bound is for a hang, 600 s.)
. "${srcdir:-.}/functions.sh"
require pkg-config make
src=$(cd "${top_srcdir:-..}" && pwd)
[ -x "$src/configure" ] || fail "no $src/configure (run autoreconf -fi)"
# A source tree configured in place takes no other build directory.
[ ! -f "$src/config.status" ] || skip "$src is configured in place"
d=$(scratch_dir)

# configure_in DIR ARGS...: configure a build directory DIR.
configure_in ()
{
  local dir=$1
  shift
  mkdir -p "$dir"
  (cd "$dir" && with_timeout 600 "$src/configure" "$@") >"$dir.log" 2>&1 \
    || { tail -n 30 "$dir.log" >&2; fail "configure $*"; }
}
# destinations DIR DESTDIR: every path make install would write, one a line.
destinations ()
{
  (cd "$1" && make -n install DESTDIR="$2") >"$1.install" 2>&1 \
    || { cat "$1.install" >&2; fail "make -n install in $1"; }
  grep -oE "$2/[^ '\"]*" "$1.install" | sort -u
}

# A user's prefix: nothing outside it.
pfx=$d/home/x
configure_in "$d/b1" --prefix="$pfx"
destinations "$d/b1" "$d/dest" >"$d/dests"
[ -s "$d/dests" ] || fail "make -n install names no destination"
if grep -v "^$d/dest$pfx/" "$d/dests"; then
  fail "make install with --prefix=$pfx writes outside the prefix (above)"
fi
grep -q "^$d/dest$pfx/lib/nbdkit/plugins$" "$d/dests" \
  || fail "the plugin does not go to PREFIX/lib/nbdkit/plugins"
grep -q "^$d/dest$pfx/lib/nbdkit/filters$" "$d/dests" \
  || fail "the filter does not go to PREFIX/lib/nbdkit/filters"

# nbdkit's own prefix: nbdkit's plugin directory, so that "nbdkit lungate"
# finds it; an explicit filter directory wins.
sysplugins=$(pkg-config --variable=plugindir nbdkit)
configure_in "$d/b2" --prefix="$(pkg-config --variable=prefix nbdkit)" \
  --with-nbdkit-filterdir="$d/filters"
destinations "$d/b2" "$d/dest2" >"$d/dests2"
grep -q "^$d/dest2$sysplugins$" "$d/dests2" \
  || fail "under nbdkit's prefix the plugin does not go to $sysplugins"
grep -q "^$d/dest2$d/filters$" "$d/dests2" \
  || fail "--with-nbdkit-filterdir is not where the filter goes"
echo "test-install: ok"
