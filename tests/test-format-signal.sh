#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# Ctrl-C during `format' and `verify --repair' (issue 30, item 1).  Each
# is made slow by a tgtd that stalls every write (format) or read (verify)
# past the first MiB for 0.3 s; SIGINT comes while one is stalled.  The
# command stops at the next piece, says so, releases its reservation and
# dies of SIGINT (status 130, as a shell expects of Ctrl-C).  Then:
#  - `format' with no option formats the LUN (it used to say "in use by a
#    gateway on this host", and after --takeover "holds part of an
#    interrupted lungate format ... use --force");
#  - after `verify --repair', the volume is clean, as it was before (it
#    used to be left dirty), and `verify --repair' runs again as it is.
. "${srcdir:-.}/functions-fault.sh"
require_lungate
fault_tgt_start
t=iqn.2026-12.org.lungate:format-signal
tgt_add_target 1 "$t"
tgt_add_lun 1 1 64M
tgt_allow 1 ALL
url="iscsi://$TGT_PORTAL/$t/1"
key=$TGT_DIR/key; head -c 32 /dev/urandom >"$key"

# interrupt NAME OP CMD...: runs CMD in the background with every OP past
# the first MiB stalled, sends SIGINT once one is stalled, and checks
# that CMD said it was interrupted and died of SIGINT.
interrupt ()
{
  local name=$1 op=$2 pid rc=0
  shift 2
  : >"$FAULT_LOG"
  fault_rule "op=$op path=lun-1-1.img off=1048576-68719476736 action=stall:300 count=0"
  # A background job of a script starts with SIGINT ignored: not this one.
  env --default-signal=INT "$@" >"$TGT_DIR/$name.out" 2>"$TGT_DIR/$name.err" &
  pid=$!
  fault_wait_log "stall-begin .* $op " 60
  kill -INT "$pid"
  wait "$pid" || rc=$?
  fault_clear
  cat "$TGT_DIR/$name.err"
  [ "$rc" = 130 ] || fail "$name: exit status $rc after SIGINT (130 expected: killed by SIGINT)"
  grep -q "interrupted" "$TGT_DIR/$name.err" || fail "$name: SIGINT and not a word"
  grep -Eq 'AddressSanitizer|runtime error:' "$TGT_DIR/$name.err" && fail "$name: sanitizer report"
  # Its reservation released, its runtime file goes too (the audit of
  # issue 30: five interrupted formats left five, whose dead pids prove
  # nothing any more).
  if ls "$XDG_RUNTIME_DIR"/lungate/lungate-*.alive >/dev/null 2>&1; then
    ls -l "$XDG_RUNTIME_DIR"/lungate/ >&2
    fail "$name: the interrupted command left its runtime file"
  fi
  return 0
}

interrupt format write "$LUNGATE" format --key-file "$key" "$url"
grep -q "lungate format.*starts over" "$TGT_DIR/format.err" \
  || fail "the interrupted format does not say that format starts over"
"$LUNGATE" info "$url" | grep -q '^lungate-volume: no (a format was interrupted' \
  || fail "an interrupted format left something info calls a volume"
# Again, as it was typed the first time.
"$LUNGATE" format --key-file "$key" "$url" >"$TGT_DIR/f2.out" 2>&1 \
  || { cat "$TGT_DIR/f2.out" >&2; fail "format after an interrupted format"; }
"$LUNGATE" verify --key-file "$key" "$url" >/dev/null || fail "verify after format"

"$LUNGATE" info "$url" | grep -q '^volume-state: clean' || fail "not clean before the repair"
interrupt repair read "$LUNGATE" verify --repair --key-file "$key" "$url"
"$LUNGATE" info "$url" | grep -q '^volume-state: clean' \
  || fail "an interrupted verify --repair left the volume $("$LUNGATE" info "$url" | sed -n 's/^volume-state: //p')"
"$LUNGATE" verify --repair --key-file "$key" "$url" >"$TGT_DIR/r2.out" 2>&1 \
  || { cat "$TGT_DIR/r2.out" >&2; fail "verify --repair after an interrupted one"; }
# The hostile review of the above: a stop that comes after the last
# check before the first write (here during the key slot's setup: the
# last getrandom(2) before the first write, delivered by strace)
# wrote the mark and zeroed the LUN, destroying the volume `--force' was
# about to replace: a Ctrl-C during the passphrase step must leave the
# LUN as it was.
require strace cmp
img=$TGT_DIR/vol.img
truncate -s 16M "$img"
"$LUNGATE" format --key-file "$key" "$img" >/dev/null 2>&1 || fail "format a file"
cp "$img" "$img.orig"
# env: SIGINT may be ignored where the suite runs (a background job of a
# script), and lungate keeps an ignored signal ignored.
strace -f -qq -e trace=getrandom,pwrite64,fallocate -o "$TGT_DIR/trace" \
  env --default-signal=INT ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" "$LUNGATE" format --force --key-file "$key" "$img" >/dev/null 2>&1 \
  || fail "format --force under strace"
n=$(awk '/pwrite64\(|fallocate\(/ { exit } /getrandom\(/ { n++ } END { print n + 0 }' "$TGT_DIR/trace")
[ "$n" -ge 1 ] || { cat "$TGT_DIR/trace" >&2; fail "no getrandom before the first write"; }
cp "$img.orig" "$img"
rc=0
strace -f -qq -o /dev/null -e trace=getrandom -e inject=getrandom:signal=SIGINT:when="$n" \
  env --default-signal=INT ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" "$LUNGATE" format --force --key-file "$key" "$img" >/dev/null 2>"$TGT_DIR/late.err" || rc=$?
cat "$TGT_DIR/late.err"
[ "$rc" = 130 ] || fail "format stopped at its last getrandom: exit status $rc, 130 expected"
grep -q "interrupted (SIGINT) before it wrote anything" "$TGT_DIR/late.err" \
  || fail "format stopped before writing does not say so"
cmp -s "$img" "$img.orig" || fail "format stopped before writing changed the LUN"

# The mark proves only that a format began: data after it is still
# refused without --force (an md superblock sits at 4 KiB), and so is a
# header copy 1 that survived.
"$LUNGATE" info "$img" | grep -q '^lungate-volume: yes' || fail "the volume is gone"
printf 'LUNGATE-FORMAT-UNDER-WAY\nlungate format began here and did not finish: this LUN holds no\nvolume; lungate format starts over.\n' \
  | dd of="$img" bs=4096 conv=notrunc,sync status=none
expect_exit 1 "already holds a lungate header" "$LUNGATE" format --key-file "$key" "$img"
truncate -s 0 "$img"; truncate -s 16M "$img"
printf 'LUNGATE-FORMAT-UNDER-WAY\nlungate format began here and did not finish: this LUN holds no\nvolume; lungate format starts over.\n' \
  | dd of="$img" bs=4096 conv=notrunc,sync status=none
printf 'foreign' | dd of="$img" bs=1 seek=4096 conv=notrunc status=none
expect_exit 1 "already holds data in its first MiB" "$LUNGATE" format --key-file "$key" "$img"
echo "test-format-signal: ok"
