#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# The design pages in doc/ name files and functions; each name in
# backquotes must still exist: a file name (.c, .h, .md, .sh, .py) under
# src/, plugins/, tests/, doc/ or contrib/, an identifier in src/ or
# plugins/.  A rename that leaves a page naming what is gone fails here.
. "${srcdir:-.}/functions.sh"
top=${top_srcdir:-..}
missing=()
pages=("$top/doc/locking.md" "$top/doc/design.md")
for page in "${pages[@]}"; do
  [ -f "$page" ] || fail "$page is missing"
  while IFS= read -r name; do
    case $name in
      */*)
        [ -e "$top/$name" ] || [ -e "$top/src/$name" ] \
          || missing+=("$page: path $name") ;;
      *.c|*.h|*.md|*.sh|*.py)
        base=${name##*/}
        [ -n "$(find "$top/src" "$top/plugins" "$top/tests" "$top/doc" "$top/contrib" \
                  -name "$base" -print -quit 2>/dev/null)" ] \
          || missing+=("$page: file $name") ;;
      *)
        grep -rqw -- "$name" "$top/src" "$top/plugins" \
          || missing+=("$page: identifier $name") ;;
    esac
  done < <(grep -o '`[^`]*`' "$page" | tr -d '`' | tr ' ' '\n' \
             | grep -E '^[A-Za-z_][A-Za-z0-9_./-]*$' | grep -Ev '^(-|[0-9])' | sort -u)
done
if [ "${#missing[@]}" -gt 0 ]; then
  printf '%s\n' "${missing[@]}" >&2
  fail "${#missing[@]} names in doc/ no longer exist"
fi
echo "test-doc: ok"
