#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# format over something (issue 30, item 14): it names what the LUN holds
# (as bench does), and on a terminal asks for YES before destroying it;
# anything else, a stop, --batch or no terminal leave the LUN as it was;
# --force asks nothing.  (Before: "the first MiB of the LUN is not empty
# (a partition table or a file system?)", and --force never asked.)  A
# volume in a file needs no target.
. "${srcdir:-.}/functions.sh"
require_lungate
require python3
PATH=$PATH:/usr/sbin:/sbin
require mkfs.ext4
pty_run=${srcdir:-.}/tools/pty-run.py
d=$(scratch_dir)
img=$d/fs.img
key=$d/key
head -c 32 /dev/urandom >"$key"
truncate -s 32M "$img"
mkfs.ext4 -q -F "$img" || fail "mkfs.ext4"
sum0=$(md5sum <"$img")

# tty STATUS OUT ARGS...: pty-run.py ARGS, whose status must be STATUS.
tty ()
{
  local want=$1 out=$2 rc=0
  shift 2
  with_timeout 120 python3 -B "$pty_run" "$@" >"$out" 2>&1 || rc=$?
  [ "$rc" -eq "$want" ] || { cat "$out"; fail "exit status $rc, expected $want: ${*: -5}"; }
}
unchanged ()
{
  [ "$(md5sum <"$img")" = "$sum0" ] || fail "$1: the file system was changed"
}

expect_exit 1 "fs.img: the LUN already holds an ext2/3/4 file system: use --force" \
  "$LUNGATE" format --key-file "$key" "$img"
unchanged "no terminal"
tty 1 "$d/t1" --answer 'Type YES' 'yes' -- "$LUNGATE" format --key-file "$key" "$img"
grep -q "fs.img holds an ext2/3/4 file system: lungate format destroys it" "$d/t1" \
  || { cat "$d/t1"; fail "the question does not name the file system"; }
grep -q "not formatted: the LUN is as it was" "$d/t1" || { cat "$d/t1"; fail "no word on a no"; }
unchanged "'yes' in small letters"
tty 1 "$d/t2" -- "$LUNGATE" format --batch --key-file "$key" "$img"
grep -q "Type YES" "$d/t2" && { cat "$d/t2"; fail "--batch asked"; }
unchanged "--batch"
# Ctrl-C at the question.
tty 130 "$d/t3" --answer 'Type YES' $'\x03' -- "$LUNGATE" format --key-file "$key" "$img"
unchanged "Ctrl-C at the question"

# YES: formatted; the passphrase is asked for after the question.
tty 0 "$d/t4" --answer 'Type YES' 'YES' --answer 'New passphrase for ' 'pw one' \
  --answer 'Verify passphrase: ' 'pw one' \
  -- "$LUNGATE" format --argon2 interactive --passphrase-prompt "$img"
grep -q "^formatted " "$d/t4" || { cat "$d/t4"; fail "YES did not format"; }
uuid=$("$LUNGATE" info "$img" | sed -n 's/^volume-uuid: //p')
[ -n "$uuid" ] || fail "no volume after YES"

# A file system past the first MiB (a partition at 1 or 2 MiB), or a
# backup GPT at the end, is named too (the hostile review: format
# destroyed an ext4 at 2 MiB without a word, and called one at 1 MiB an
# interrupted format).
for off in 1 2; do
  p=$d/p$off.img
  truncate -s 64M "$p"
  mkfs.ext4 -q -F -E offset=$((off << 20)) "$p" 60M || fail "mkfs.ext4 at $off MiB"
  s=$(md5sum <"$p")
  expect_exit 1 "already holds an ext2/3/4 file system at $off MiB" \
    "$LUNGATE" format --key-file "$key" "$p"
  [ "$(md5sum <"$p")" = "$s" ] || fail "format changed the file system at $off MiB"
done
# ... also behind unknown bytes at 1 MiB (the second hostile review:
# they stopped the search, and format went on).
p=$d/p2x.img
truncate -s 64M "$p"
mkfs.ext4 -q -F -E offset=$((2 << 20)) "$p" 32M || fail "mkfs.ext4 at 2 MiB"
printf x | dd of="$p" bs=1 seek=$(((1 << 20) + 8192)) conv=notrunc status=none
expect_exit 1 "already holds an ext2/3/4 file system at 2 MiB" \
  "$LUNGATE" format --key-file "$key" "$p"
g=$d/gpt.img
truncate -s 64M "$g"
printf 'EFI PART' | dd of="$g" bs=1 seek=$(((64 << 20) - 512)) conv=notrunc status=none
expect_exit 1 "already holds a backup GPT partition table at the end" \
  "$LUNGATE" format --key-file "$key" "$g"
# Ctrl-C at the passphrase prompt: the LUN as it was, the terminal with
# its echo (pty-run says 126 otherwise), the status of SIGINT.
z=$d/z.img
truncate -s 16M "$z"
tty 130 "$d/t7" --answer 'New passphrase for ' '^C' \
  -- "$LUNGATE" format --argon2 interactive --passphrase-prompt "$z"
cmp -s "$z" <(head -c 16M /dev/zero) || fail "format wrote after a Ctrl-C at its prompt"

# A volume is named too; --force asks nothing.
tty 1 "$d/t5" --answer 'Type YES' 'no' -- "$LUNGATE" format --key-file "$key" "$img"
grep -q "holds a lungate header (a volume): lungate format destroys it" "$d/t5" \
  || { cat "$d/t5"; fail "the question does not name the volume"; }
[ "$("$LUNGATE" info "$img" | sed -n 's/^volume-uuid: //p')" = "$uuid" ] \
  || fail "a no changed the volume"
tty 0 "$d/t6" -- "$LUNGATE" format --force --key-file "$key" "$img"
grep -q "Type YES" "$d/t6" && { cat "$d/t6"; fail "--force asked"; }
[ "$("$LUNGATE" info "$img" | sed -n 's/^volume-uuid: //p')" != "$uuid" ] \
  || fail "format --force left the old volume"

# A LUN too small for a volume is refused before any question: a YES
# would destroy nothing and then fail.  (Before, it asked first; the
# answer 'no' then exited 1 instead of ending before the prompt.)
head -c 512K /dev/urandom >"$d/small.img"
sums=$(md5sum <"$d/small.img")
tty 125 "$d/t7" --timeout 60 --answer 'Type YES' 'no' -- "$LUNGATE" format --key-file "$key" "$d/small.img"
grep -q "is too small for a lungate volume" "$d/t7" || { cat "$d/t7"; fail "no word on the size"; }
[ "$(md5sum <"$d/small.img")" = "$sums" ] || fail "the small LUN was changed"
echo "test-format-confirm: ok"
