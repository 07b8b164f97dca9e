# shellcheck shell=bash
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# Helpers for lungate's integration tests (tests/test-*.sh).  Sourced, never
# run.  Each test starts its own tgtd on a free loopback port with a private
# control socket, so tests can run in parallel (make -jN check) next to each
# other and next to a system tgtd.  Everything a test starts or creates is
# undone by one EXIT trap, also when the test fails or is interrupted, and a
# watchdog kills tgtd if the test itself is SIGKILLed.
#
# Typical use:
#
#   . "${srcdir:-.}/functions.sh"
#   require tgtd tgtadm
#   tgt_start
#   tgt_add_target 1 iqn.2026-11.org.lungate:test
#   tgt_add_lun 1 1 64M
#   tgt_add_lun 1 2 64M 4096
#   tgt_allow 1 ALL
#   "$LUNGATE" info "iscsi://$TGT_PORTAL/iqn.2026-11.org.lungate:test/1"
#
# Variables set here: TGT_DIR (private directory: control socket, tgtd.log,
# LUN backing files, secret files; removed on exit), TGT_PORT, TGT_PORTAL
# (127.0.0.1:PORT), TGT_PID.  Set TGT_TMPDIR to choose where TGT_DIR is made
# (default $TMPDIR or /tmp): a 16 TiB sparse LUN needs tmpfs or xfs, ext4
# stops at 16 TiB - 4 KiB.  Set LUNGATE_KEEP_TMP=1 to keep TGT_DIR.
#
# Facts about tgt 1.0.85 (Debian 12) these helpers rely on:
#  - a target admits nobody until an ACL is bound (tgt_allow 1 ALL); the
#    address list and the name list are OR-ed, so ALL admits every name;
#  - a denied initiator gets login status 0x0203 "target not found", the
#    same as for a target that does not exist, and SendTargets hides the
#    target from it;
#  - when the portal cannot be bound tgtd does not exit: it logs the error
#    and listens on 0.0.0.0:3260 and [::]:3260 instead, hence the check of
#    the portal list after each start;
#  - tgtadm accepts --params only with --op update, not with --op new.

# ---------------------------------------------------------------------------
# Failing, skipping, timeouts.

# fail MSG...: the test fails.
fail ()
{
  local log=${XDG_RUNTIME_DIR:-/nonexistent}/lungate/mount.log
  printf '%s: FAIL: %s\n' "${0##*/}" "$*" >&2
  # What the background mounts of this test logged (lungate-mount(1),
  # --log: where there is no syslog, the runtime directory's file).
  if [ -s "$log" ]; then
    echo "--- the last lines of $log:" >&2
    tail -n 60 "$log" >&2
  fi
  exit 1
}

# skip MSG...: the test cannot run here (exit 77, automake's SKIP).  In CI
# (CI set non-empty) or with LUNGATE_NO_SKIP=1 nothing may be skipped, and
# the test fails instead.
skip ()
{
  if [ -n "${CI:-}" ] || [ "${LUNGATE_NO_SKIP:-}" = 1 ]; then
    printf '%s: FAIL: cannot run (skipping is not allowed here): %s\n' \
      "${0##*/}" "$*" >&2
    exit 1
  fi
  printf '%s: SKIP: %s\n' "${0##*/}" "$*" >&2
  exit 77
}

# require CMD...: skip unless every CMD is on PATH (or is an executable path).
require ()
{
  local c missing=()
  for c in "$@"; do
    command -v "$c" >/dev/null 2>&1 || missing+=("$c")
  done
  if [ "${#missing[@]}" -gt 0 ]; then
    skip "missing prerequisite: ${missing[*]}"
  fi
}

# require_lungate: $LUNGATE must name the built binary (set by make check).
require_lungate ()
{
  [ -n "${LUNGATE:-}" ] || fail "LUNGATE is not set (run through make check)"
  [ -x "$LUNGATE" ] || fail "LUNGATE=$LUNGATE is not an executable"
}

# with_timeout SECS CMD...: run CMD (an external command, not a shell
# function), killing it after SECS seconds (and SIGKILL 5 s later).  Returns
# CMD's status, or 124 after saying on stderr that it timed out.
with_timeout ()
{
  local secs=$1 rc=0
  shift
  if [ "$(type -t "$1")" = function ]; then
    fail "with_timeout: '$1' is a shell function; wrap it in bash -c"
  fi
  timeout --kill-after=5 "$secs" "$@" || rc=$?
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    printf '%s: timed out after %s s: %s\n' "${0##*/}" "$secs" "$*" >&2
    # How loaded the machine was: a timeout on a busy machine and a hang
    # read alike otherwise.
    printf '%s: load average %s; the busiest processes:\n' "${0##*/}" \
      "$(cut -d' ' -f1-3 /proc/loadavg)" >&2
    ps -eo pcpu=,etimes=,args= --sort=-pcpu 2>/dev/null | head -n 8 | cut -c1-160 >&2 || true
    rc=124
  fi
  return "$rc"
}

# expect_exit STATUS PATTERN CMD...: run CMD (bounded by EXPECT_TIMEOUT
# seconds, default 60) and assert that it finished with exit status STATUS
# ("nonzero" for any failure), was not killed by a signal, did not trip a
# sanitizer, and wrote something matching grep -E PATTERN to stderr.  The
# captured stdout and stderr are printed when an assertion fails.
expect_exit ()
{
  local want=$1 pat=$2 dir out err rc=0 why=
  shift 2
  dir=$(scratch_dir)
  out=$(mktemp "$dir/expect-out.XXXXXX")
  err=$(mktemp "$dir/expect-err.XXXXXX")
  with_timeout "${EXPECT_TIMEOUT:-60}" "$@" </dev/null >"$out" 2>"$err" \
    || rc=$?
  if [ "$rc" -eq 124 ]; then
    why="did not finish within ${EXPECT_TIMEOUT:-60} s"
  elif [ "$rc" -eq 0 ]; then
    why="succeeded, expected a failure"
  elif [ "$rc" -ge 126 ]; then
    why="exit status $rc (not found, not executable or killed by a signal)"
  elif [ "$want" != nonzero ] && [ "$rc" -ne "$want" ]; then
    why="exit status $rc, expected $want"
  elif grep -Eq 'AddressSanitizer|LeakSanitizer|runtime error:' "$err"; then
    why="sanitizer report on stderr"
  elif ! grep -Eq -- "$pat" "$err"; then
    why="stderr does not match /$pat/"
  fi
  if [ -n "$why" ]; then
    {
      printf '%s: FAIL: %s\n' "${0##*/}" "$why"
      printf 'command: %s\n' "$*"
      printf -- '--- stdout (exit status %s) ---\n' "$rc"
      cat "$out"
      printf -- '--- stderr ---\n'
      cat "$err"
      printf -- '--- end ---\n'
    } >&2
    exit 1
  fi
  rm -f "$out" "$err"
}

# expect_fail_with PATTERN CMD...: CMD must fail (any non-zero status) with
# stderr matching PATTERN; see expect_exit.
expect_fail_with ()
{
  local pat=$1
  shift
  expect_exit nonzero "$pat" "$@"
}

# ---------------------------------------------------------------------------
# Cleanup on exit.  on_exit CMD [ARGS...] registers a command (argv form:
# on_exit kill "$pid") that runs once, last registered first, when the test
# exits for any reason; the test's exit status is kept.  Tests must use
# on_exit rather than their own "trap ... EXIT", which would replace ours.
# Call on_exit and tgt_start in the test's own shell, not in a subshell or
# $(...): a subshell's traps die with it.

_lg_exit_cmds=()
_lg_exit_trap_set=

on_exit ()
{
  local a args=()
  # kill PID...: only the process that has that pid now, at the exit.
  # Pids come round again (pid_max 32768 wraps many times in a CI run),
  # and a gateway stopped long before the exit may have left its pid to
  # another test's tgtd (CI run s44fin4-a: a tgtd killed by SIGKILL in
  # the middle of its test).  Each pid goes with its start time.
  if [ "$1" = kill ]; then
    for a in "${@:2}"; do
      if [[ $a =~ ^[0-9]+$ ]]; then
        args+=("$a@$(_lg_start_time "$a")")
      else
        args+=("$a")
      fi
    done
    set -- _lg_kill_same "${args[@]}"
  fi
  _lg_exit_cmds+=("$(printf '%q ' "$@")")
  if [ -z "$_lg_exit_trap_set" ]; then
    _lg_exit_trap_set=1
    trap _lg_run_exit EXIT
    trap 'exit 129' HUP
    trap 'exit 130' INT
    trap 'exit 143' TERM
  fi
}

# _lg_start_time PID: when process PID started (clock ticks since boot,
# /proc/PID/stat's 22nd field), or nothing.
_lg_start_time ()
{
  local st
  st=$(cat "/proc/$1/stat" 2>/dev/null) || return 0
  st=${st##*) }
  # shellcheck disable=SC2086 # the fields, split
  set -- $st
  printf '%s' "${20}"
}

# _lg_kill_same [OPTION...] PID@START...: kill, with the options, each
# PID that still started at START (on_exit).
_lg_kill_same ()
{
  local a opts=() pids=()
  for a in "$@"; do
    case $a in
      *@*)
        [ -n "${a#*@}" ] && [ "$(_lg_start_time "${a%@*}")" = "${a#*@}" ] \
          && pids+=("${a%@*}") ;;
      *) opts+=("$a") ;;
    esac
  done
  [ "${#pids[@]}" -gt 0 ] || return 0
  kill "${opts[@]}" "${pids[@]}"
}

_lg_run_exit ()
{
  local rc=$? i
  set +e
  trap - EXIT HUP INT TERM
  _LG_EXIT_STATUS=$rc
  for ((i = ${#_lg_exit_cmds[@]} - 1; i >= 0; i--)); do
    eval "${_lg_exit_cmds[i]}"
  done
  exit "$rc"
}

# mount_points DIR...: makes the directories, and unmounts (lazily) what
# is still mounted on them when the test exits, the last named first (a
# file system on a file of an earlier one comes off before it).
mount_points ()
{
  mkdir -p "$@" || fail "cannot make $*"
  on_exit _lg_unmount "$@"
}

_lg_unmount ()
{
  local i dirs=("$@")
  for ((i = ${#dirs[@]} - 1; i >= 0; i--)); do
    fusermount3 -u -z "${dirs[i]}" 2>/dev/null || true
  done
  sleep 0.5
}

# scratch_dir: print the test's private temporary directory (made when
# this file is sourced, removed on exit).  It is TGT_DIR once tgtd is
# started.
scratch_dir ()
{
  if [ -n "${TGT_DIR:-}" ]; then
    printf '%s\n' "$TGT_DIR"
  else
    printf '%s\n' "$_LG_SCRATCH"
  fi
}

_lg_tmproot ()
{
  printf '%s\n' "${TGT_TMPDIR:-${TMPDIR:-/tmp}}"
}

_lg_make_scratch ()
{
  _LG_SCRATCH=$(mktemp -d "$(_lg_tmproot)/lungate-test.XXXXXX") \
    || fail "cannot create a temporary directory"
  on_exit _lg_rm_dir "$_LG_SCRATCH"
}

_lg_rm_dir ()
{
  if [ "${LUNGATE_KEEP_TMP:-}" = 1 ]; then
    printf '%s: keeping %s\n' "${0##*/}" "$1" >&2
  else
    rm -rf -- "$1"
  fi
}

# secret_file CONTENT: write CONTENT and a newline to a new 0600 file in the
# private directory and print its path: pw=$(secret_file s3cret-s3cret).
secret_file ()
{
  local dir f
  dir=$(scratch_dir)
  f=$(umask 077 && mktemp "$dir/secret.XXXXXX") \
    || fail "secret_file: cannot create a file in $dir"
  printf '%s\n' "$1" >"$f"
  chmod 600 "$f"
  printf '%s\n' "$f"
}

# ---------------------------------------------------------------------------
# A private tgtd.

TGT_PID=
_TGT_WATCHDOG=
# TGT_ENV: extra VAR=VALUE words for tgtd's environment (e.g. LD_PRELOAD
# of tests/tools/faultio.so: functions-fault.sh), set before tgt_start;
# tgt_restart keeps them.
TGT_ENV=()
_TGT_REPLAY=

# _lg_alive PID: PID exists and is not a zombie.  (kill -0 succeeds on
# zombies, and in some sandboxes PID 1 never reaps orphans.)
_lg_alive ()
{
  local stat
  [ -n "$1" ] || return 1
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  stat=${stat##*) }
  [ "${stat%% *}" != Z ] && [ "${stat%% *}" != X ]
}

# require_test_hooks: the test sets a LUNGATE_TEST_* variable, which only a
# build configured with --enable-test-hooks reads (src/util/hooks.h); on
# another build it would test something else, so it fails.
require_test_hooks ()
{
  "$LUNGATE" --version | grep -q '^test hooks: on' \
    || fail "this test needs a build configured with --enable-test-hooks"
}

# wait_exit PID SECS WHAT [LOG]: waits up to SECS for PID to exit; if it
# does not, prints every thread's stack (gdb, when there is one) and the
# end of LOG, kills it and fails with "WHAT did not exit".  A hang then
# says where it hung (issue 27, item 2: a mount that did not exit after
# its unmount, once, with nothing to tell why).
wait_exit ()
{
  local pid=$1 secs=$2 what=$3 log=${4:-}
  with_timeout "$secs" tail --pid="$pid" -f /dev/null && return 0
  _lg_alive "$pid" || return 0
  echo "--- $what (pid $pid) still runs after $secs s: its threads ---" >&2
  if command -v gdb >/dev/null; then
    timeout 60 gdb -p "$pid" -batch -ex 'thread apply all bt' 2>&1 \
      | grep -E '^(Thread|#)' >&2 || true
  else
    cat "/proc/$pid/task/"*/stack 2>/dev/null >&2 || true
  fi
  if [ -n "$log" ] && [ -f "$log" ]; then
    echo "--- the end of $log ---" >&2
    tail -n 40 "$log" >&2
  fi
  kill -9 "$pid" 2>/dev/null
  fail "$what did not exit within $secs s"
}

# _lg_wait_gone PID TENTHS: wait up to TENTHS/10 s for PID to exit.
_lg_wait_gone ()
{
  local n=0
  while _lg_alive "$1"; do
    [ "$n" -ge "$2" ] && return 1
    sleep 0.1
    n=$((n + 1))
  done
  return 0
}

# tgtadm_ ARGS...: tgtadm on our tgtd (bounded to 30 s).  Commands that
# change the configuration are journalled so that tgt_restart can replay
# them on a new tgtd.
tgtadm_ ()
{
  local a change=1
  [ -n "${TGT_DIR:-}" ] || fail "tgtadm_: tgt_start was not called"
  for a in "$@"; do
    case $a in
      show | --op=show) change= ;;
    esac
  done
  TGT_IPC_SOCKET="$TGT_DIR/sock" timeout 30 tgtadm --lld iscsi "$@" \
    || return
  if [ -n "$change" ] && [ -z "$_TGT_REPLAY" ]; then
    printf '%q ' "$@" >>"$TGT_DIR/journal"
    printf '\n' >>"$TGT_DIR/journal"
  fi
}

# _tgtadm_nj ARGS...: tgtadm_ without journalling (stopping, cleaning up).
_tgtadm_nj ()
{
  local _TGT_REPLAY=1
  tgtadm_ "$@"
}

# _tgt_pick_port VAR: set VAR to a port that nothing listens on, below
# the ephemeral range so that it cannot be taken by an outgoing
# connection, and keep it from the other tests of this machine for as
# long as this shell (or a process it started) lives: a lock on
# /tmp/lungate-ports/PORT, on a descriptor this shell keeps open.
# Without it a test whose target was down for a while
# (test-mount-signals: 15 s) found its port taken by another test's tgtd
# and could not restart its own.  Call it in the test's own shell, not
# in $(...).
_tgt_pick_port ()
{
  local lo=20000 hi=32000 eph_lo p i fd dir=/tmp/lungate-ports
  eph_lo=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null)
  if [ -n "$eph_lo" ] && [ "$eph_lo" -gt 11000 ] \
     && [ "$eph_lo" -le "$hi" ]; then
    hi=$eph_lo
    lo=$((eph_lo - 10000))
  fi
  # LG_TEST_PORT_RANGE="LO HI": from LO to HI-1 (test-port-pick).
  [ -n "${LG_TEST_PORT_RANGE:-}" ] && read -r lo hi <<<"$LG_TEST_PORT_RANGE"
  [ -d "$dir" ] || mkdir -m 1777 "$dir" 2>/dev/null || true
  for i in $(seq 200); do
    p=$((lo + (RANDOM * 32768 + RANDOM) % (hi - lo)))
    if command -v ss >/dev/null 2>&1 \
       && [ -n "$(ss -Hltn "sport = :$p" 2>/dev/null)" ]; then
      continue
    fi
    # Held by another test: another port.  The lock file is opened to
    # read (flock needs no more), so that another user's file is locked
    # and respected too; where none can be made or opened, unlocked.
    : 2>/dev/null >>"$dir/$p"
    if { exec {fd}<"$dir/$p"; } 2>/dev/null && ! flock -n "$fd"; then
      exec {fd}<&-
      continue
    fi
    printf -v "$1" '%s' "$p"
    return 0
  done
  echo "_tgt_pick_port: no free port from $lo to $((hi - 1))" >&2
  return 1
}

# _tgt_launch PORT: start tgtd on 127.0.0.1:PORT and wait until it serves
# its control socket and listens on exactly that portal.  On failure it
# leaves no tgtd behind and returns 1.
_tgt_launch ()
{
  local port=$1 n=0 portals
  rm -f "$TGT_DIR/sock.0" "$TGT_DIR/sock.0.lock"
  printf '=== %s: tgtd -f --iscsi portal=127.0.0.1:%s\n' \
    "$(date '+%F %T')" "$port" >>"$TGT_DIR/tgtd.log"
  env TGT_IPC_SOCKET="$TGT_DIR/sock" "${TGT_ENV[@]}" \
    tgtd -f --iscsi "portal=127.0.0.1:$port" \
    </dev/null >>"$TGT_DIR/tgtd.log" 2>&1 &
  TGT_PID=$!
  printf '%s\n' "$TGT_PID" >"$TGT_DIR/tgtd.pid"
  # tgtd creates sock.0 before it sets up the portals: wait for the socket,
  # then for a portal list.
  while :; do
    if ! _lg_alive "$TGT_PID"; then
      wait "$TGT_PID" 2>/dev/null || true
      TGT_PID=
      return 1
    fi
    if [ -S "$TGT_DIR/sock.0" ]; then
      portals=$(_tgtadm_nj --mode portal --op show 2>/dev/null) || portals=
      [ -n "$portals" ] && break
    fi
    if [ "$n" -ge 100 ]; then
      printf '%s: tgtd did not come up within 10 s\n' "${0##*/}" >&2
      _tgt_kill_pid 2>/dev/null
      return 1
    fi
    sleep 0.1
    n=$((n + 1))
  done
  # Bind failure is not fatal to tgtd: it falls back to *:3260.
  if ! printf '%s\n' "$portals" | grep -q "^Portal: 127\.0\.0\.1:$port,"; then
    _tgt_kill_pid 2>/dev/null
    return 1
  fi
  TGT_PORT=$port
  # shellcheck disable=SC2034 # for the tests
  TGT_PORTAL=127.0.0.1:$port
  return 0
}

# _tgt_kill_pid [SIGNAL]: kill our tgtd and reap it.
_tgt_kill_pid ()
{
  [ -n "$TGT_PID" ] || return 0
  kill "-${1:-KILL}" "$TGT_PID" 2>/dev/null || true
  _lg_wait_gone "$TGT_PID" 50 || kill -KILL "$TGT_PID" 2>/dev/null || true
  wait "$TGT_PID" 2>/dev/null || true
  TGT_PID=
  return 0
}

# The watchdog kills tgtd if the test's shell dies without running its
# EXIT trap (SIGKILL, e.g. from a harness timeout).
_tgt_start_watchdog ()
{
  local parent=$$ pidfile=$TGT_DIR/tgtd.pid
  (
    trap - EXIT HUP INT TERM
    while _lg_alive "$parent"; do
      sleep 1
    done
    p=$(cat "$pidfile" 2>/dev/null) || exit 0
    if [ "$(cat "/proc/$p/comm" 2>/dev/null)" = tgtd ]; then
      kill -KILL "$p"
    fi
    _lg_rm_dir "$TGT_DIR"
    _lg_rm_dir "$_LG_SCRATCH"
  ) </dev/null >/dev/null 2>&1 &
  _TGT_WATCHDOG=$!
}

# tgt_start [PORT]: start a private tgtd (see the top of this file).  With
# PORT, use that port or fail; without, pick a free one, retrying on a
# collision with a concurrently started tgtd.
# shellcheck disable=SC2120 # PORT is optional
tgt_start ()
{
  local tries=0 port
  [ -z "${TGT_DIR:-}" ] || fail "tgt_start: already started"
  require tgtd tgtadm timeout
  TGT_DIR=$(mktemp -d "$(_lg_tmproot)/lungate-tgt.XXXXXX") \
    || fail "tgt_start: cannot create a temporary directory"
  on_exit _tgt_cleanup
  # sun_path holds 108 bytes.
  if [ "${#TGT_DIR}" -gt 90 ]; then
    fail "tgt_start: $TGT_DIR: too long for a socket path; set TGT_TMPDIR"
  fi
  _tgt_start_watchdog
  while :; do
    if [ -n "${1:-}" ]; then port=$1; else _tgt_pick_port port || fail "tgt_start: no port"; fi
    _tgt_launch "$port" && break
    tries=$((tries + 1))
    if [ -n "${1:-}" ] || [ "$tries" -ge 20 ]; then
      tail -n 20 "$TGT_DIR/tgtd.log" | sed 's/^/tgtd.log: /' >&2
      fail "tgt_start: cannot start tgtd on 127.0.0.1:$port"
    fi
  done
}

# tgt_stop: stop tgtd the polite way (delete every target, forcibly,
# then the system) and reap it; SIGTERM then SIGKILL if it lingers.  The
# configuration journal and the LUN files are kept for tgt_restart.
tgt_stop ()
{
  # Quiet: bash reports "Killed" for a reaped job on stderr.
  _tgt_stop 2>/dev/null
}

_tgt_stop ()
{
  local tid
  [ -n "$TGT_PID" ] || return 0
  if _lg_alive "$TGT_PID"; then
    for tid in $(_tgtadm_nj --mode target --op show 2>/dev/null \
                   | sed -n 's/^Target \([0-9]*\):.*/\1/p'); do
      _tgtadm_nj --mode target --op delete --force --tid "$tid" \
        >/dev/null 2>&1 || true
    done
    _tgtadm_nj --mode system --op delete >/dev/null 2>&1 || true
    _lg_wait_gone "$TGT_PID" 50 || kill -TERM "$TGT_PID" 2>/dev/null || true
    _lg_wait_gone "$TGT_PID" 20 || kill -KILL "$TGT_PID" 2>/dev/null || true
  fi
  _tgt_kill_pid
}

# tgt_kill: SIGKILL tgtd (a crashed target), and reap it.
tgt_kill ()
{
  _tgt_kill_pid KILL 2>/dev/null
}

# tgt_restart: stop tgtd if it still runs, start a new one on the same port
# with the same control socket, and replay the configuration (targets,
# LUNs on the same backing files, accounts, ACLs).  Retries for up to
# 10 s while the port is still held.
tgt_restart ()
{
  local n=0 line
  [ -n "${TGT_PORT:-}" ] || fail "tgt_restart: tgt_start was not called"
  tgt_stop
  until _tgt_launch "$TGT_PORT"; do
    n=$((n + 1))
    if [ "$n" -ge 20 ]; then
      tail -n 20 "$TGT_DIR/tgtd.log" | sed 's/^/tgtd.log: /' >&2
      echo "who holds 127.0.0.1:$TGT_PORT now:" >&2
      ss -Htanp "sport = :$TGT_PORT" >&2 2>/dev/null || true
      fail "tgt_restart: cannot start tgtd on 127.0.0.1:$TGT_PORT again"
    fi
    sleep 0.5
  done
  if [ -f "$TGT_DIR/journal" ]; then
    while IFS= read -r line; do
      eval "_tgtadm_nj $line" >/dev/null \
        || fail "tgt_restart: replay failed: tgtadm $line"
    done <"$TGT_DIR/journal"
  fi
}

# file_holder FILE BLK: in the background, a process that writes BLK at
# the start of FILE, says "written", keeps FILE open until SIGTERM, then
# closes it and says "closed after S s" or "close failed after S s:
# ERROR" (on stdout; its pid in $!).  Call it in the test's own shell.
file_holder ()
{
  python3 -c '
import os, signal, sys, time
def stop(*_):
    raise KeyboardInterrupt
signal.signal(signal.SIGTERM, stop)
fd = os.open(sys.argv[1], os.O_WRONLY)
os.pwrite(fd, open(sys.argv[2], "rb").read(), 0)
sys.stdout.write("written\n"); sys.stdout.flush()
try:
    time.sleep(3600)
except KeyboardInterrupt:
    pass
t = time.monotonic()
try:
    os.close(fd)
    print("closed after %.1f s" % (time.monotonic() - t))
except OSError as e:
    print("close failed after %.1f s: %s" % (time.monotonic() - t, e))' "$1" "$2" &
}

# delay_proxy_start ARGS...: tests/tools/delay-proxy between the gateway
# and tgtd (--upstream $TGT_PORTAL, then ARGS: --delay-ms, --rate ...),
# killed at exit; its port in DELAY_PORT, its pid in DELAY_PID, its log
# in $TGT_DIR/proxy.log.  Call it in the test's own shell.
delay_proxy_start ()
{
  local proxy="${top_builddir:-..}/tests/tools/delay-proxy"
  [ -x "$proxy" ] || fail "$proxy not built"
  "$proxy" --upstream "$TGT_PORTAL" "$@" >"$TGT_DIR/proxy.port" \
    2>"$TGT_DIR/proxy.log" &
  DELAY_PID=$!
  on_exit kill "$DELAY_PID"
  for _ in $(seq 100); do [ -s "$TGT_DIR/proxy.port" ] && break; sleep 0.1; done
  DELAY_PORT=$(cat "$TGT_DIR/proxy.port")
  [ -n "$DELAY_PORT" ] || { cat "$TGT_DIR/proxy.log" >&2; fail "the delay proxy did not start"; }
}

# hostile_start DIR ARGS...: tests/tools/hostile-target.py with ARGS (a
# target nobody else wrote the bugs of: --mode M), its events logged to
# DIR/h.log; one at a time, the one before stopped.  Sets HOSTILE_PORT.
# hostile_stop stops it (and it is stopped at exit).  Call them in the
# test's own shell.
HOSTILE_PID=
hostile_stop ()
{
  [ -n "$HOSTILE_PID" ] || return 0
  kill "$HOSTILE_PID" 2>/dev/null
  wait "$HOSTILE_PID" 2>/dev/null
  HOSTILE_PID=
}
hostile_start ()
{
  local dir=$1
  shift
  hostile_stop
  [ -n "${_HOSTILE_AT_EXIT:-}" ] || { on_exit hostile_stop; _HOSTILE_AT_EXIT=1; }
  : >"$dir/h.out"
  python3 -B "${HOSTILE_TARGET:-${srcdir:-.}/tools/hostile-target.py}" \
    --port 0 --log "$dir/h.log" "$@" >"$dir/h.out" 2>"$dir/h.err" &
  HOSTILE_PID=$!
  for _ in $(seq 100); do
    grep -q '^ready ' "$dir/h.out" && break
    sleep 0.05
  done
  HOSTILE_PORT=$(awk '/^ready /{print $2}' "$dir/h.out")
  [ -n "$HOSTILE_PORT" ] || { cat "$dir/h.err"; fail "the hostile target did not start ($*)"; }
}

# fault_proxy_start plain|hold: tests/tools/fault-proxy.py between the
# gateway and tgtd, on 127.0.0.1:$FAULT_PORT; its rules are read from
# $TGT_DIR/proxy.rules and what fires is logged to $TGT_DIR/proxy.log
# (both made empty).  With hold, a cut or dropped answer creates
# $TGT_DIR/hold, and new connections are refused while it exists.
fault_proxy_start ()
{
  local opt=() pid
  [ "$1" = hold ] && opt=(--hold "$TGT_DIR/hold")
  _tgt_pick_port FAULT_PORT || fail "fault_proxy_start: no port"
  : >"$TGT_DIR/proxy.rules"; : >"$TGT_DIR/proxy.log"
  python3 "${srcdir:-.}/tools/fault-proxy.py" --listen "$FAULT_PORT" \
    --target "$TGT_PORTAL" --rules "$TGT_DIR/proxy.rules" \
    --log "$TGT_DIR/proxy.log" "${opt[@]}" >"$TGT_DIR/proxy.out" 2>&1 &
  pid=$!
  on_exit kill "$pid"
  for _ in $(seq 100); do
    grep -q listening "$TGT_DIR/proxy.out" && return 0
    _lg_alive "$pid" || break
    sleep 0.1
  done
  cat "$TGT_DIR/proxy.out" >&2
  fail "fault-proxy did not start"
}

# tgt_detach: leave tgtd and TGT_DIR in place when the script exits
# (contrib/quickstart --keep).
tgt_detach ()
{
  if [ -n "$_TGT_WATCHDOG" ]; then
    kill "$_TGT_WATCHDOG" 2>/dev/null || true
    wait "$_TGT_WATCHDOG" 2>/dev/null || true
    _TGT_WATCHDOG=
  fi
  _TGT_DETACHED=1
}

_tgt_cleanup ()
{
  if [ -n "${_TGT_DETACHED:-}" ]; then
    return 0
  fi
  if [ "${_LG_EXIT_STATUS:-0}" -ne 0 ] && [ "${_LG_EXIT_STATUS:-0}" -ne 77 ] \
     && [ -s "$TGT_DIR/tgtd.log" ]; then
    printf -- '--- last lines of %s ---\n' "$TGT_DIR/tgtd.log" >&2
    tail -n 30 "$TGT_DIR/tgtd.log" >&2
  fi
  tgt_stop
  if [ -n "$_TGT_WATCHDOG" ]; then
    kill "$_TGT_WATCHDOG" 2>/dev/null || true
    wait "$_TGT_WATCHDOG" 2>/dev/null || true
    _TGT_WATCHDOG=
  fi
  _lg_rm_dir "$TGT_DIR"
}

# ---------------------------------------------------------------------------
# Configuration.  Each helper prints nothing and fails the test on error.

# tgt_add_target TID IQN
tgt_add_target ()
{
  tgtadm_ --mode target --op new --tid "$1" --targetname "$2" \
    || fail "tgt_add_target $*: tgtadm failed"
}

# tgt_lun_file TID LUN: print the backing file of that LUN.
tgt_lun_file ()
{
  printf '%s\n' "$TGT_DIR/lun-$1-$2.img"
}

# tgt_add_lun TID LUN SIZE [BLOCKSIZE]: a LUN backed by a sparse file of
# SIZE (truncate(1) syntax: 64M, 1G, 16T...).  BLOCKSIZE (default 512) is
# the logical block size; tgtd rounds SIZE down to a multiple of it.  An
# existing backing file keeps its data (only its size is set).
tgt_add_lun ()
{
  local f
  f=$(tgt_lun_file "$1" "$2")
  truncate -s "$3" "$f" || fail "tgt_add_lun $*: cannot make $f"
  if [ -n "${4:-}" ]; then
    tgtadm_ --mode logicalunit --op new --tid "$1" --lun "$2" \
      --backing-store "$f" --blocksize "$4" \
      || fail "tgt_add_lun $*: tgtadm failed"
  else
    tgtadm_ --mode logicalunit --op new --tid "$1" --lun "$2" \
      --backing-store "$f" || fail "tgt_add_lun $*: tgtadm failed"
  fi
}

# tgt_lun_params TID LUN PARAM=VALUE[,...]: e.g. thin_provisioning=1
# (LBPME, UNMAP and WRITE SAME; needs hole punching in the backing file
# system), readonly=1, vendor_id=..., product_id=..., scsi_sn=...
tgt_lun_params ()
{
  tgtadm_ --mode logicalunit --op update --tid "$1" --lun "$2" --params "$3" \
    || fail "tgt_lun_params $*: tgtadm failed"
}

# tgt_allow TID ADDR|ALL: admit initiators by address (ALL: everyone).
tgt_allow ()
{
  tgtadm_ --mode target --op bind --tid "$1" --initiator-address "$2" \
    || fail "tgt_allow $*: tgtadm failed"
}

# tgt_disallow TID ADDR|ALL: undo tgt_allow.
tgt_disallow ()
{
  tgtadm_ --mode target --op unbind --tid "$1" --initiator-address "$2" \
    || fail "tgt_disallow $*: tgtadm failed"
}

# tgt_allow_initiator TID IQN: admit an initiator by name.  Do not also
# tgt_allow ALL: the lists are OR-ed.
tgt_allow_initiator ()
{
  tgtadm_ --mode target --op bind --tid "$1" --initiator-name "$2" \
    || fail "tgt_allow_initiator $*: tgtadm failed"
}

# _tgt_account USER SECRET: create the account unless this test already
# did (accounts are global to tgtd; the same user may serve two targets).
_tgt_account ()
{
  local rec
  rec="$TGT_DIR/account.$(printf '%s' "$1" | od -An -tx1 | tr -d ' \n')"
  if [ -f "$rec" ]; then
    [ "$(cat "$rec")" = "$2" ] \
      || fail "CHAP account '$1' already exists with another secret"
    return 0
  fi
  tgtadm_ --mode account --op new --user "$1" --password "$2" \
    || fail "cannot create CHAP account '$1'"
  (umask 077 && printf '%s' "$2" >"$rec")
}

# tgt_chap TID USER SECRET: one-way CHAP, the initiator must log in to
# target TID as USER with SECRET.
tgt_chap ()
{
  _tgt_account "$2" "$3"
  tgtadm_ --mode account --op bind --tid "$1" --user "$2" \
    || fail "tgt_chap $1 $2: cannot bind the account"
}

# tgt_chap_mutual TID USER SECRET: the target answers the initiator's
# challenge as USER with SECRET (mutual CHAP; set up tgt_chap as well).
tgt_chap_mutual ()
{
  _tgt_account "$2" "$3"
  tgtadm_ --mode account --op bind --tid "$1" --user "$2" --outgoing \
    || fail "tgt_chap_mutual $1 $2: cannot bind the account"
}

_lg_make_scratch
# The gateways' runtime files (src/util/alive.h: how a gateway of this
# host is proven dead) are the test's own, not the user's.
export XDG_RUNTIME_DIR=$_LG_SCRATCH/run
mkdir -m 0700 "$XDG_RUNTIME_DIR" || fail "cannot create $XDG_RUNTIME_DIR"

# ---------------------------------------------------------------------------
# A file-system round trip through lungate mount (the interop tests).

# fuse_fsck DIR LUN-URL [LOGIN-OPTION...]: in scratch directory DIR,
# mkfs.ext4 on the mounted LUN file, fuse2fs on it, a tree in, both
# unmounted, mounted again, compared, e2fsck -fn clean.  0 or 1.
fuse_fsck ()
{
  local dir=$1 url=$2 m="$1/m" fs="$1/fs" f
  shift 2
  mkdir -p "$m" "$fs" "$dir/tree/a/b"
  head -c 300k /dev/urandom >"$dir/tree/a/one"
  head -c 70k /dev/urandom >"$dir/tree/a/b/two"
  "$LUNGATE" mount "$@" "$url" "$m" || return 1
  f="$m/lun0"
  mkfs.ext4 -q -F -O ^has_journal "$f" >/dev/null 2>&1 || { fusermount3 -u "$m"; return 1; }
  _lg_fs_mount "$f" "$fs" || { fusermount3 -u "$m"; return 1; }
  cp -a "$dir/tree/." "$fs/"
  _lg_fs_umount "$fs"
  # (lungate umount waits for the daemon to release the LUN.)
  "$LUNGATE" umount "$m" >/dev/null || return 1
  "$LUNGATE" mount "$@" "$url" "$m" || return 1
  _lg_fs_mount "$f" "$fs" ro || { fusermount3 -u "$m"; return 1; }
  diff -r -x lost+found "$dir/tree" "$fs" >/dev/null || { _lg_fs_umount "$fs"; fusermount3 -u "$m"; return 1; }
  _lg_fs_umount "$fs"
  e2fsck -fn "$f" >/dev/null 2>&1 || { fusermount3 -u "$m"; return 1; }
  fusermount3 -u "$m"
}

# fuse2fs in the foreground, so that unmounting can wait for it to let go
# of the LUN file.  _lg_fs_mount FILE DIR [ro]
_lg_fs_mount ()
{
  local o=fakeroot
  [ -n "${3:-}" ] && o=fakeroot,ro
  fuse2fs -f -o "$o" "$1" "$2" >/dev/null 2>&1 &
  _lg_fs_pid=$!
  for _ in $(seq 100); do mountpoint -q "$2" && return 0; sleep 0.1; done
  return 1
}

_lg_fs_umount ()
{
  fusermount3 -u "$1"
  wait "$_lg_fs_pid" 2>/dev/null || true
}
