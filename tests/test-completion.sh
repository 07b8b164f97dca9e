#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# The bash completion (contrib/completion/lungate) completes subcommands,
# each subcommand's options as its --help lists them, and the values of the
# options that take a fixed set.
. "${srcdir:-.}/functions.sh"
require_lungate
d=$(scratch_dir)
mkdir -p "$d/bin"
ln -sf "$(cd "$(dirname "$LUNGATE")" && pwd)/$(basename "$LUNGATE")" "$d/bin/lungate"
PATH=$d/bin:$PATH
# shellcheck source=contrib/completion/lungate
. "${srcdir:-.}/../contrib/completion/lungate"

# complete_words WORD...: the completions for the last word, sorted, on one line.
complete_words ()
{
  COMP_WORDS=(lungate "$@")
  COMP_CWORD=$(( ${#COMP_WORDS[@]} - 1 ))
  COMPREPLY=()
  _lungate
  [ "${#COMPREPLY[@]}" -gt 0 ] || return 0
  printf '%s\n' "${COMPREPLY[@]}" | sort | tr '\n' ' '
}

want ()   # want "EXPECTED" WORD...
{
  local exp=$1 got
  shift
  got=$(complete_words "$@")
  [ "$got" = "$exp" ] || fail "completion of 'lungate $*': got '$got', want '$exp'"
  echo "lungate $*<TAB> -> $got"
}

want "mount " mo
want "discover " di
cmds=$(complete_words "")
for c in discover info mount format verify key bench; do
  grep -qw -- "$c" <<<"$cmds" || fail "subcommand $c not completed (got: $cmds)"
done
want "--write " bench --wr
want "--repair " verify --rep
want "--key-file " mount --key-f
want "aead mac " format --mode ""
want "crc32c none " info --header-digest ""
want "add backup change list remove restore test " key ""
want "aead aead,mac mac " bench --crypt ""
# A file name after every option that takes a file, in any subcommand;
# after key's action, no action again.
mkdir -p "$d/files"
touch "$d/files/volume.key" "$d/files/volume.pass"
cd "$d/files" || fail "cd $d/files"
want "volume.key volume.pass " key add --new-key-file vol
want "volume.key volume.pass " key add --key-file k --new-passphrase-file vol
want "volume.key volume.pass " format --key-file vol
want "volume.key volume.pass " info --target-password-file vol
want "" key add ""
# Nor after backup or restore and a URL (the audit helper-36: it offered
# the actions again).
want "" key backup iscsi://h/iqn.x:t/1 ""
want "" key restore iscsi://h/iqn.x:t/1 ""
want "" key remove --slot ""
cd - >/dev/null || fail "cd back"
# mount -o: the mount options, also after a comma.
want "allow_other default_permissions direct_io ro " mount -o ""
want "ro " mount -o r
want "ro,allow_other " mount -o ro,al
want "ro,default_permissions ro,direct_io " mount URL DIR -o ro,d
# mount: a URL first (it offered directories there: issue 30, item 17),
# then the directory, also after an option with its value.
mkdir -p "$d/mdir"
cd "$d" || fail "cd $d"
want "iscsi:// " mount ""
want "iscsi:// " mount -o ro ""
want "mdir " mount iscsi://h/iqn.a:b/1 md
want "mdir " mount --connections 2 iscsi://h/iqn.a:b/1 md
want "change " key ch
cd - >/dev/null || fail "cd back"
# Every option of every subcommand's --help is offered after "--".
for c in discover info mount format verify key bench; do
  opts=$(complete_words "$c" --)
  for o in $("$LUNGATE" "$c" --help | grep -oE -- '--[a-z][a-z0-9-]*' | sort -u); do
    grep -qw -- "$o" <<<"$opts" || fail "lungate $c: $o not completed"
  done
done
echo "test-completion: ok"
