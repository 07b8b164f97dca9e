# shellcheck shell=bash
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# Helpers for the fault-injection tests, on top of functions-nbd.sh (and so
# functions.sh): a private tgtd running under LD_PRELOAD of
# tests/tools/faultio.so, which stalls, delays, fails or drops chosen
# backing-store I/O while tgtd goes on answering everything else.
#
#   fault_tgt_start            tgt_start with tgtd under faultio
#   fault_rule 'LINE'          append a rule (atomically: a new file)
#   fault_clear                remove every rule (counts are kept by line text)
#   fault_wait_log ERE SECS    wait until a line of the log matches, or fail
#   fault_log_has ERE          a line of the log matches
#   fault_cut_conns PID        reset every TCP connection of process PID to
#                              tgtd (ss -K), and fail unless one was cut
#   fault_lines                the number of lines in the rules file (the
#                              line number the next fault_rule gets)
#
# FAULT_RULES and FAULT_LOG name the rules file and the event log.
# FAULTIO_CACHE=SUBSTR (set before fault_tgt_start): a volatile write
# cache over the backing files whose path contains SUBSTR, lost when tgtd
# is killed (tgt_kill): a power cut of the target.
#
# Rules (faultio.c has the details), one a line, '#' comments, fields
# KEY=VALUE separated by blanks, all given fields must match:
#   op=write|read|any  path=SUBSTR (of the backing file's path)
#   off=START-END (bytes; the I/O overlaps [START, END))
#   match=ASCII (a write whose data starts with these bytes)
#   action=stall:MS|delay:MS|fail:ERRNO|slowfail:MS|drop
#   count=N (default 1, 0: always)
# e.g.  fault_rule 'op=write path=lun-1-1.img match=OLD action=stall:75000'
#
# Log lines: "fire LINE OP OFF LEN", "stall-begin LINE OP OFF LEN MS",
# "stall-end LINE OP OFF LEN RESULT" (after the real I/O returned),
# "delay-end ...".  LINE is the rule's line number in FAULT_RULES.

# shellcheck source=functions-nbd.sh
. "${srcdir:-.}/functions-nbd.sh"

FAULT_RULES=
FAULT_LOG=

fault_tgt_start ()
{
  local so=${top_builddir:-..}/tests/tools/faultio.so dir
  [ -f "$so" ] || fail "$so is not built (make check builds it)"
  so=$(cd "$(dirname "$so")" && pwd)/faultio.so
  dir=$(scratch_dir)
  FAULT_RULES=$dir/faultio.rules
  FAULT_LOG=$dir/faultio.log
  : >"$FAULT_RULES"
  : >"$FAULT_LOG"
  TGT_ENV=("LD_PRELOAD=$so" "FAULTIO_RULES=$FAULT_RULES"
           "FAULTIO_LOG=$FAULT_LOG")
  [ -z "${FAULTIO_DEBUG:-}" ] || TGT_ENV+=("FAULTIO_DEBUG=$FAULTIO_DEBUG")
  [ -z "${FAULTIO_CACHE:-}" ] || TGT_ENV+=("FAULTIO_CACHE=$FAULTIO_CACHE")
  tgt_start
  grep -q faultio "/proc/$TGT_PID/maps" 2>/dev/null \
    || fail "tgtd did not load $so"
}

# fault_lines: how many lines the rules file has.
fault_lines ()
{
  wc -l <"$FAULT_RULES" | tr -d ' '
}

# fault_rule LINE: append LINE; print nothing.  The file is replaced by
# rename, so faultio never reads half a line.
fault_rule ()
{
  local tmp
  [ -n "$FAULT_RULES" ] || fail "fault_rule: fault_tgt_start was not called"
  tmp=$(mktemp "$FAULT_RULES.XXXXXX") || fail "fault_rule: mktemp"
  { cat "$FAULT_RULES"; printf '%s\n' "$1"; } >"$tmp"
  mv -f "$tmp" "$FAULT_RULES" || fail "fault_rule: cannot replace $FAULT_RULES"
}

fault_clear ()
{
  local tmp
  tmp=$(mktemp "$FAULT_RULES.XXXXXX") || fail "fault_clear: mktemp"
  mv -f "$tmp" "$FAULT_RULES" || fail "fault_clear: cannot replace $FAULT_RULES"
}

fault_log_has ()
{
  grep -Eq -- "$1" "$FAULT_LOG"
}

# fault_wait_log ERE SECS
fault_wait_log ()
{
  local n=0
  until fault_log_has "$1"; do
    if [ "$n" -ge $(($2 * 10)) ]; then
      sed 's/^/faultio.log: /' "$FAULT_LOG" >&2
      fail "no line /$1/ in the faultio log within $2 s"
    fi
    sleep 0.1
    n=$((n + 1))
  done
}

# fault_cut_conns PID: reset (ss -K: SOCK_DESTROY, both ends see the
# connection die) each TCP connection that process PID holds to tgtd.
fault_cut_conns ()
{
  local pid=$1 ports p n=0
  require ss
  ports=$(ss -tnpH state established "( dport = :$TGT_PORT )" 2>/dev/null \
            | grep -F "pid=$pid," \
            | awk '{ for (i = 1; i <= NF; i++)
                       if ($i ~ /^127\.0\.0\.1:[0-9]+$/) { sub(/.*:/, "", $i); print $i; break } }')
  for p in $ports; do
    ss -K state established "( dport = :$TGT_PORT and sport = :$p )" \
      >/dev/null 2>&1 || fail "ss -K cannot cut 127.0.0.1:$p (no SOCK_DESTROY here?)"
    n=$((n + 1))
  done
  [ "$n" -gt 0 ] || fail "fault_cut_conns: process $pid has no connection to port $TGT_PORT"
  if ss -tnpH state established "( dport = :$TGT_PORT )" 2>/dev/null \
       | grep -F "pid=$pid," | grep -Eq ":($(echo "$ports" | paste -sd'|'))[[:space:]]"; then
    fail "fault_cut_conns: a connection of $pid survived ss -K"
  fi
  printf 'cut %d connection(s) of process %s to tgtd\n' "$n" "$pid"
}
