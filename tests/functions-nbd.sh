# shellcheck shell=bash
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# Helpers for the tests of the nbdkit plugin, on top of functions.sh.
#
#   require_lungate_plugin     LUNGATE_PLUGIN must be the built plugin
#   require_nbd_python         sets NBD_PYTHON, a python3 with libnbd's module
#   nbd_run [NBDKIT-OPTION...] KEY=VALUE... -- CMD ARG...
#       serve the plugin on a private Unix socket for the time CMD runs
#       (nbdkit --run); each '$uri' in an ARG becomes the export's URI.
#       Returns CMD's status.  Bounded by NBD_RUN_TIMEOUT (default 120 s).
#   nbd_write_str SOCKET STRING OFFSET   4 KiB of STRING at OFFSET, flushed
#   nbd_read_head URL OFFSET [PARAM...]  the first 4 bytes at OFFSET

# shellcheck source=functions.sh
. "${srcdir:-.}/functions.sh"

# NBDKIT: the command to run nbdkit with the plugin's needs, for tests
# that run it directly:  "${NBDKIT[@]}" -U - "$LUNGATE_PLUGIN" ...
NBDKIT=(nbdkit)

require_lungate_plugin ()
{
  local preload
  require_lungate
  require nbdkit
  [ -n "${LUNGATE_PLUGIN:-}" ] || fail "LUNGATE_PLUGIN is not set (run through make check)"
  [ -f "$LUNGATE_PLUGIN" ] || fail "LUNGATE_PLUGIN=$LUNGATE_PLUGIN does not exist"
  preload=$(_nbd_preload)
  if [ -n "${LUNGATE_VALGRIND:-}" ]; then
    # LUNGATE_VALGRIND=DIR: nbdkit (and so the plugin) under valgrind,
    # one log per process in DIR; contrib/check reads them.
    [ -z "$preload" ] || fail "LUNGATE_VALGRIND: the plugin is built with sanitizers"
    require valgrind
    mkdir -p "$LUNGATE_VALGRIND"
    NBDKIT=(valgrind --quiet --leak-check=full --show-leak-kinds=definite
            --errors-for-leak-kinds=definite --track-origins=no
            --suppressions="${srcdir:-.}/valgrind.supp"
            --log-file="$LUNGATE_VALGRIND/vg.%p.log" nbdkit)
  elif [ -n "$preload" ]; then
    # Leak checking stays off in nbdkit itself (not our code, and it exits
    # through paths LeakSanitizer reports); ASan's other checks stay on.
    NBDKIT=(env "LD_PRELOAD=$preload"
            "ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
            nbdkit)
  fi
}

# nbd_start SOCK LOG PARAM...: the plugin under nbdkit -f -v in the
# background, on the unix socket SOCK, its messages in LOG; its pid in
# NBD_PID (killed at exit; nbd_stop stops it).  Fails the test if the
# socket does not come within 30 s.  Call it in the test's own shell.
nbd_start ()
{
  local sock=$1 log=$2
  shift 2
  "${NBDKIT[@]}" -f -v -U "$sock" "$LUNGATE_PLUGIN" "$@" 2>"$log" &
  NBD_PID=$!
  on_exit kill "$NBD_PID"
  for _ in $(seq 300); do [ -S "$sock" ] && return 0; sleep 0.1; done
  cat "$log" >&2
  fail "nbdkit did not start"
}

# nbd_stop PID: stops a gateway started with "${NBDKIT[@]}" ... & and
# reaps it; fails if it does not exit within 20 s.  One exception: with
# the AddressSanitizer runtime preloaded, an nbdkit whose sessions called
# strerror while reconnecting can hang in exit (glibc's locale rwlock is
# left with a negative reader count and p11-kit's destructor waits on it;
# never seen without the sanitizer runtime): it is killed, with a note.
nbd_stop ()
{
  local pid=$1 i
  kill "$pid" 2>/dev/null || return 0
  for i in $(seq 200); do
    kill -0 "$pid" 2>/dev/null || { wait "$pid" 2>/dev/null; return 0; }
    sleep 0.1
  done
  if [ -n "$(_nbd_preload)" ]; then
    echo "nbd_stop: nbdkit $pid (AddressSanitizer runtime) did not exit: killed" >&2
    kill -9 "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    return 0
  fi
  kill -9 "$pid" 2>/dev/null
  fail "nbdkit $pid did not exit within 20 s of SIGTERM"
}

require_nbd_python ()
{
  # Debian's python3-libnbd is for /usr/bin/python3, which may not be
  # the first python3 on PATH.
  local p
  for p in /usr/bin/python3 python3; do
    if "$p" -c 'import nbd' 2>/dev/null; then
      NBD_PYTHON=$(command -v "$p")
      export NBD_PYTHON
      return 0
    fi
  done
  skip "no python3 with the nbd module (Debian package python3-libnbd)"
}

# A plugin built with AddressSanitizer loads into Debian's nbdkit only
# with the sanitizer runtimes preloaded.
_nbd_preload ()
{
  local libs=() l
  for l in libasan libubsan; do
    if ldd "$LUNGATE_PLUGIN" 2>/dev/null | grep -q "$l\.so"; then
      libs+=("$(${CC:-gcc} -print-file-name="$l.so")")
    fi
  done
  printf '%s' "${libs[*]}"
}

nbd_run ()
{
  local opts=() params=() cmd='' a q
  while [ $# -gt 0 ] && [ "${1#-}" != "$1" ] && [ "$1" != -- ]; do
    opts+=("$1"); shift
  done
  while [ $# -gt 0 ] && [ "$1" != -- ]; do
    params+=("$1"); shift
  done
  [ "${1:-}" = -- ] || fail "nbd_run: no -- before the command"
  shift
  # The client runs without the sanitizer runtime nbdkit may need
  # (qemu's coroutines and ASan do not mix).
  cmd='env -u LD_PRELOAD '
  for a in "$@"; do
    q=$(printf '%q' "$a")
    q=${q//'\$uri'/'"$uri"'}
    cmd+="$q "
  done
  if [ -z "$(_nbd_preload)" ]; then
    timeout --kill-after=5 "${NBD_RUN_TIMEOUT:-120}" \
      "${NBDKIT[@]}" -U - "${opts[@]}" "$LUNGATE_PLUGIN" "${params[@]}" \
      --run "$cmd"
    return
  fi
  # With the sanitizer runtime preloaded nbdkit can hang in exit once its
  # sessions called strerror while reconnecting (nbd_stop; seen in
  # test-flaky-link: the copy done, nbdkit in exit's freelocale): the
  # command's status goes to a file, and an nbdkit still there 15 s after
  # the command ended is killed, with a note, and the command's status
  # returned.  nbdkit keeps the caller's stdin ('<&0': a background job
  # would read /dev/null otherwise, and some commands read their data
  # from it).
  local mark pid rc i=0
  mark=$(mktemp "${TMPDIR:-/tmp}/nbd_run.XXXXXX") || fail "mktemp"
  rm -f "$mark"
  timeout --kill-after=5 "${NBD_RUN_TIMEOUT:-120}" \
    "${NBDKIT[@]}" -U - "${opts[@]}" "$LUNGATE_PLUGIN" "${params[@]}" \
    --run "$cmd; echo \$? >'$mark'; exit \$(cat '$mark')" <&0 &
  pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    if [ -s "$mark" ] && [ $((i += 1)) -ge 150 ]; then
      echo "nbd_run: nbdkit (AddressSanitizer runtime) did not exit 15 s after the command ended: killed" >&2
      _nbd_kill_tree "$pid"
      wait "$pid" 2>/dev/null
      rc=$(cat "$mark")
      rm -f "$mark"
      return "$rc"
    fi
    sleep 0.1
  done
  rc=0
  wait "$pid" || rc=$?
  rm -f "$mark"
  return "$rc"
}

# _nbd_kill_tree PID: PID and every process under it, SIGKILL.
_nbd_kill_tree ()
{
  local c
  for c in $(pgrep -P "$1"); do
    _nbd_kill_tree "$c"
  done
  kill -9 "$1" 2>/dev/null || true
}

# ---------------------------------------------------------------------------
# Gateways by name, for tests that run several at once (test-reserve,
# test-owner).  nbd_gw NAME PARAMS...: the plugin in the background on
# $TGT_DIR/NAME.sock (its stderr in $TGT_DIR/NAME.log, its pid in
# NBD_GW[NAME]; with NBD_GW_RO set, nbdkit -r), killed at exit.  Call it
# in the test's own shell.
declare -A NBD_GW
nbd_gw ()
{
  local n=$1 s=$TGT_DIR/$1.sock
  shift
  rm -f "$s"
  "${NBDKIT[@]}" ${NBD_GW_RO:+-r} -f -U "$s" "$LUNGATE_PLUGIN" "$@" \
    2>>"$TGT_DIR/$n.log" &
  # shellcheck disable=SC2034 # read by the tests
  NBD_GW[$n]=$!
  on_exit kill -9 "$!"
  for _ in $(seq 100); do [ -S "$s" ] && return 0; sleep 0.1; done
  fail "gateway $n did not start"
}

# nbd_io NAME write|read UNIT [BYTE]: through gateway NAME, write (and
# flush) 4 KiB unit UNIT full of BYTE, or read it and print its first
# byte; on an NBD error print its errno (EPERM, ...) and exit 3.
nbd_io ()
{
  env -u LD_PRELOAD "$NBD_PYTHON" - "$TGT_DIR/$1.sock" "$2" "$3" "${4:-0}" <<'PY'
import nbd, sys
sock, op, u, b = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
try:
    h = nbd.NBD(); h.connect_uri("nbd+unix:///?socket=" + sock)
    if op == "write":
        h.pwrite(bytes([b]) * 4096, u * 4096); h.flush()
    else:
        print(h.pread(4096, u * 4096)[0])
except nbd.Error as e:
    print("nbd error:", e.errno or e.string, file=sys.stderr)
    print(e.errno or "error")
    sys.exit(3)
PY
}

# nbd_write_str SOCKET STRING OFFSET: 4 KiB of STRING repeated, written
# at OFFSET through the gateway on SOCKET, then a flush.
nbd_write_str ()
{
  env -u LD_PRELOAD "$NBD_PYTHON" - "$1" "$2" "$3" <<'PY'
import nbd, sys
h = nbd.NBD(); h.connect_uri("nbd+unix:///?socket=" + sys.argv[1])
d = (sys.argv[2].encode() * 4096)[:4096]
h.pwrite(d, int(sys.argv[3])); h.flush()
PY
}

# nbd_read_head URL OFFSET [PARAM...]: the first 4 bytes of the 4 KiB at
# OFFSET, as text, through a fresh read-only gateway.
nbd_read_head ()
{
  local url=$1 off=$2
  shift 2
  nbd_run -r "url=$url" "$@" -- "$NBD_PYTHON" -c \
    "import nbd,sys; h=nbd.NBD(); h.connect_uri(sys.argv[1]); print(h.pread(4096, $off)[:4].decode(errors='replace'))" '$uri'
}
