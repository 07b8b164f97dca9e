#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# Passphrases typed at a terminal (issue 30, item 8): --passphrase-prompt
# and --passphrase-file - on a terminal ask without echo, naming the
# volume; format and key add ask twice, and two different answers change
# nothing.  (Before: no --passphrase-prompt; --passphrase-file - on a
# terminal showed no prompt, echoed the passphrase and asked once.)  A
# volume in a file needs no target.
. "${srcdir:-.}/functions.sh"
require_lungate
require python3
pty_run=${srcdir:-.}/tools/pty-run.py
d=$(scratch_dir)
vol=$d/v.img
truncate -s 16M "$vol"
pass="correct horse $$"

# on_tty WANT-STATUS OUT ARGS...: pty-run.py ARGS; its status must be
# WANT-STATUS, and what the terminal showed (in OUT) must not hold the
# passphrase anywhere (no echo).
on_tty ()
{
  local want=$1 out=$2 rc=0
  shift 2
  with_timeout 180 python3 -B "$pty_run" "$@" >"$out" 2>&1 || rc=$?
  if [ "$rc" -ne "$want" ]; then
    cat "$out"
    fail "exit status $rc, expected $want: ${*: -4}"
  fi
  if grep -q "horse" "$out"; then
    cat "$out"
    fail "the terminal echoed the passphrase: ${*: -4}"
  fi
}

# Two different answers: nothing is written.
on_tty 1 "$d/t1" --answer 'New passphrase for .*v\.img: ' "$pass" \
  --answer 'Verify passphrase: ' "other horse" \
  -- "$LUNGATE" format --argon2 interactive --passphrase-prompt "$vol"
grep -q "the two passphrases differ" "$d/t1" || { cat "$d/t1"; fail "no word on two different passphrases"; }
cmp -s "$vol" <(head -c 16M /dev/zero) || fail "format wrote after two different passphrases"

on_tty 0 "$d/t2" --answer 'New passphrase for .*v\.img: ' "$pass" \
  --answer 'Verify passphrase: ' "$pass" \
  -- "$LUNGATE" format --argon2 interactive --passphrase-prompt "$vol"
grep -q "^formatted " "$d/t2" || { cat "$d/t2"; fail "format did not format"; }

# Opening asks once, also for --passphrase-file - on a terminal.
on_tty 0 "$d/t3" --answer 'Passphrase for .*v\.img: ' "$pass" \
  -- "$LUNGATE" key test --passphrase-file - "$vol"
grep -q "opens key slot 0" "$d/t3" || { cat "$d/t3"; fail "key test"; }
on_tty 1 "$d/t4" --answer 'Passphrase for .*v\.img: ' "wrong horse" \
  -- "$LUNGATE" key test --passphrase-prompt "$vol"

# Ctrl-C at the prompt: the status of SIGINT, and the terminal keeps its
# echo (pty-run.py exits 126 otherwise; the hostile review found it left
# without).  A pair of answers pasted at once is kept whole.
on_tty 130 "$d/t4b" --answer 'Passphrase for ' '^C' \
  -- "$LUNGATE" key test --passphrase-prompt "$vol"
v2=$d/v2.img
truncate -s 16M "$v2"
on_tty 0 "$d/t4c" --answer 'New passphrase for ' $'pasted horse\npasted horse' \
  -- "$LUNGATE" format --argon2 interactive --passphrase-prompt "$v2"
printf 'pasted horse\n' | "$LUNGATE" key test --passphrase-file - "$v2" \
  | grep -q "opens key slot 0" || fail "the pasted passphrase"

# key add: the old passphrase once, the new one twice.
on_tty 0 "$d/t5" --answer 'Passphrase for ' "$pass" \
  --answer 'New passphrase for ' "second horse" \
  --answer 'Verify passphrase: ' "second horse" \
  -- "$LUNGATE" key add --passphrase-prompt --new-passphrase-file - "$vol"
new=$(secret_file "second horse")
"$LUNGATE" key test --passphrase-file "$new" "$vol" | grep -q "opens key slot 1" \
  || fail "the passphrase key add asked for does not open slot 1"
on_tty 0 "$d/t6" --answer 'Passphrase for ' "second horse" \
  -- "$LUNGATE" verify --passphrase-prompt "$vol"

# No terminal: a prompt is an error that says so; a pipe still works.
expect_exit 1 "cannot prompt for a secret: /dev/tty" \
  setsid -w "$LUNGATE" key test --passphrase-prompt "$vol"
printf '%s\n' "$pass" | "$LUNGATE" key test --passphrase-file - "$vol" \
  | grep -q "opens key slot 0" || fail "--passphrase-file - from a pipe"
echo "test-passphrase-prompt: ok"
