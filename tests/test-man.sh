#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# The man pages are valid POD, and every option --help lists is in them.
. "${srcdir:-.}/functions-nbd.sh"
require_lungate_plugin
man="${top_srcdir:-..}/man"
podchecker=${PODCHECKER:-podchecker}
[ -x "$(command -v "$podchecker")" ] || fail "podchecker not found"
for p in "$man"/*.pod; do
  "$podchecker" "$p" >/dev/null 2>"$(scratch_dir)/pc" \
    || { cat "$(scratch_dir)/pc" >&2; fail "podchecker: $p"; }
  if grep -q WARNING "$(scratch_dir)/pc"; then
    cat "$(scratch_dir)/pc" >&2
    fail "podchecker warnings in $p"
  fi
done
for c in discover info format verify key mount bench status; do
  page="$man/lungate-$c.pod"
  [ -f "$page" ] || page="$man/lungate-$c.1.pod"
  [ -f "$page" ] || fail "no man page for lungate $c"
  for opt in $("$LUNGATE" "$c" --help | grep -oE -- '--[a-z][a-z0-9-]+' | sort -u); do
    grep -q -- "B<$opt>" "$page" "$man/lungate.pod" \
      || fail "lungate $c: $opt is in --help but in no man page"
  done
  # ... and the other way: every option the page documents is in --help.
  "$LUNGATE" "$c" --help >"$(scratch_dir)/help-$c"
  while read -r opt; do
    grep -qE -- "$opt([^a-z0-9-]|\$)" "$(scratch_dir)/help-$c" \
      || fail "lungate $c: $opt is in $(basename "$page") but not in --help"
  done < <(grep -oE -- '^=item B<--[a-z][a-z0-9-]+>' "$page" | grep -oE -- '--[a-z0-9-]+' | sort -u)
done
for opt in $("$LUNGATE" --help | grep -oE -- '--[a-z][a-z0-9-]+' | sort -u); do
  grep -q -- "B<$opt>" "$man/lungate.pod" || fail "lungate.pod lacks $opt"
done
# lungate(1)'s SYNOPSIS shows every command --help lists (it lagged:
# status and umount were missing).
synopsis=$(sed -n '/^=head1 SYNOPSIS/,/^=head1 DESCRIPTION/p' "$man/lungate.pod")
n=0
while read -r c; do
  n=$((n + 1))
  grep -q "^ lungate $c\b" <<<"$synopsis" || fail "lungate.pod's SYNOPSIS lacks lungate $c"
done < <("$LUNGATE" --help | sed -n '/^Commands:/,/^$/p' | awk 'NF > 1 && /^  [a-z]/ { print $1 }')
[ "$n" -ge 9 ] || fail "only $n commands found in lungate --help"
# Every parameter the plugin's --help names is in its man page.
"${NBDKIT[@]}" "$LUNGATE_PLUGIN" --help >"$(scratch_dir)/ph" 2>&1 || fail "nbdkit plugin --help"
n=0
while read -r p; do
  n=$((n + 1))
  grep -q -- "B<$p" "$man/nbdkit-lungate-plugin.pod" \
    || fail "plugin parameter $p is not in nbdkit-lungate-plugin.pod"
done < <(grep -oE '^[a-z-]+=' "$(scratch_dir)/ph" | sort -u)
[ "$n" -ge 8 ] || fail "only $n plugin parameters found in --help"
# ... and every parameter the page documents is in --help.
while read -r p; do
  grep -q "^$p" "$(scratch_dir)/ph" \
    || fail "plugin parameter $p is in nbdkit-lungate-plugin.pod but not in --help"
done < <(grep -oE '^=item B<[a-z-]+=' "$man/nbdkit-lungate-plugin.pod" | sed 's/^=item B<//')
echo "test-man: ok"
