# shellcheck shell=bash
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# A Linux-kernel LIO target for the tests, in a qemu VM that the test
# boots itself (tests/lio/lio-vm, tests/lio/init).  Sourced after
# functions.sh (or functions-nbd.sh), never run.  The host's kernel need
# not have LIO; Debian's linux-image-amd64, qemu-system-x86, busybox-static
# and cpio must be installed, and the test must run as root (the kernel
# image is readable by root only; the network namespace needs it too).
#
# Typical use:
#
#   . "${srcdir:-.}/functions.sh"
#   . "${srcdir:-.}/functions-lio.sh"
#   lio_enter_netns "$@"          # first: re-runs the test in a netns
#   require_lungate
#   lio_start                     # ~15-20 s with TCG
#   "$LUNGATE" info "iscsi://$LIO_PORTAL/$LIO_PLAIN/1"
#   lio_ctl tpg plain disable
#
# The test runs in a network namespace of its own with only loopback up
# (lio_enter_netns); qemu's user network forwards 127.0.0.1:LIO_PORT in
# that namespace to LIO's portal, restrict=on keeps the guest from
# reaching anything.  SendTargets names the guest's own address,
# 10.0.2.15:3260 (LIO_VM_PORTAL), which is unreachable from the namespace.
#
# What the VM serves (demo mode: every initiator is admitted, read-write):
#   $LIO_PLAIN  no authentication
#     LUN 0  64 MiB, 512-byte blocks, write cache on, unit serial
#            lungate-lio-a, UNMAP; backing file /lio/a.img in the guest
#     LUN 1  64 MiB, 4096-byte blocks, write cache off, unit serial
#            lungate-lio-b, UNMAP; /lio/b.img
#     LUN 2  64 MiB, 512-byte blocks, no unit serial, UNMAP; /lio/c.img
#   $LIO_CHAP   mutual CHAP: the initiator is $LIO_CHAP_USER with
#               $LIO_CHAP_SECRET, the target $LIO_CHAP_TUSER with
#               $LIO_CHAP_TSECRET (LIO also admits one-way CHAP as
#               $LIO_CHAP_USER: it does not insist on the mutual part)
#     LUN 0  64 MiB, 512-byte blocks, unit serial lungate-lio-d; /lio/d.img
#   db_root /var/target (tmpfs), with /var/target/pr for APTPL files.
#
# Variables set by lio_start: LIO_DIR (initrd, console.log, ctl.sock,
# qemu.pid; removed on exit unless LUNGATE_KEEP_TMP=1), LIO_PORT,
# LIO_PORTAL (127.0.0.1:PORT), LIO_PID (qemu), LIO_BOOT_SECONDS (from
# qemu's start to LIO-READY and a TCP connect, e.g. 16.2).
# LIO_BOOT_TIMEOUT (default 180) bounds the boot.
#
# lio_ctl CMD... runs a command in the guest and prints its output; its
# status is the command's, or 125 if the control channel failed.
# Commands:
#   ping                      prints pong
#   tpg plain|chap enable|disable
#                             the target's tpgt_1/enable (a disabled TPG
#                             refuses logins and leaves SendTargets)
#   lun plain|chap map|unmap N
#                             export or withdraw LUN N (the same backing
#                             file as at boot)
#   prdir off|on              off: db_root/pr becomes a regular file (LIO
#                             cannot write APTPL state); on: an empty
#                             writable directory again
#   sh SHELL-COMMAND          a busybox sh command line in the guest, e.g.
#                             lio_ctl sh 'dd if=/dev/urandom of=/lio/a.img
#                             bs=512 seek=8 count=1 conv=notrunc'
# LIO_CTL_TIMEOUT (default 60) bounds each command.

# shellcheck disable=SC2034 # for the tests
LIO_PLAIN=iqn.2026-12.org.lungate.lio:plain
# shellcheck disable=SC2034
LIO_CHAP=iqn.2026-12.org.lungate.lio:chap
# shellcheck disable=SC2034
LIO_CHAP_USER=lguser
# shellcheck disable=SC2034
LIO_CHAP_SECRET=lgsecret-123456
# shellcheck disable=SC2034
LIO_CHAP_TUSER=lgtarget
# shellcheck disable=SC2034
LIO_CHAP_TSECRET=lgtsecret-654321
# shellcheck disable=SC2034
LIO_VM_PORTAL=10.0.2.15:3260

LIO_DIR=
LIO_PORT=
LIO_PORTAL=
LIO_PID=
LIO_BOOT_SECONDS=
_LIO_WATCHDOG=
_LIO_VM=${srcdir:-.}/lio/lio-vm

# lio_enter_netns "$@": unless already done, run the test again, with the
# same arguments, in a new network namespace with only loopback up.  Call
# it first, before anything that the test must not do twice.
lio_enter_netns ()
{
  local here
  here=$(readlink /proc/self/ns/net) || fail "cannot read /proc/self/ns/net"
  if [ -n "${_LIO_HOST_NETNS:-}" ] && [ "$_LIO_HOST_NETNS" != "$here" ]; then
    ip link set lo up || fail "cannot bring up lo in the network namespace"
    return 0
  fi
  [ -z "${_LIO_HOST_NETNS:-}" ] || fail "lio_enter_netns: unshare did not give a new network namespace"
  [ "$(id -u)" -eq 0 ] || skip "the LIO tests need root (network namespace, /boot/vmlinuz-*)"
  require unshare ip
  unshare -n true 2>/dev/null || skip "unshare -n is not permitted here"
  export _LIO_HOST_NETNS=$here
  # exec skips the EXIT trap: remove what functions.sh made already.
  rm -rf -- "$_LG_SCRATCH"
  exec unshare -n -- "$BASH" "$0" "$@"
}

# lio_start: build the initramfs, boot the VM and wait for LIO (see the
# top of this file).
lio_start ()
{
  local port tries=0 kv
  [ -z "$LIO_DIR" ] || fail "lio_start: already started"
  [ -n "${_LIO_HOST_NETNS:-}" ] || fail "lio_start: call lio_enter_netns first"
  [ "$(id -u)" -eq 0 ] || skip "the LIO tests need root"
  require qemu-system-x86_64 cpio gzip modprobe python3 timeout
  kv=$("$_LIO_VM" kernel 2>&1) || skip "$kv"
  LIO_DIR=$(mktemp -d "$(_lg_tmproot)/lungate-lio.XXXXXX") \
    || fail "lio_start: cannot create a temporary directory"
  on_exit _lio_cleanup
  # sun_path holds 108 bytes.
  if [ "${#LIO_DIR}" -gt 90 ]; then
    fail "lio_start: $LIO_DIR: too long for a socket path; set TGT_TMPDIR"
  fi
  "$_LIO_VM" build "$LIO_DIR" >"$LIO_DIR/build.log" 2>&1 \
    || { cat "$LIO_DIR/build.log" >&2; fail "lio_start: cannot build the VM"; }
  _lio_start_watchdog
  # The namespace is the test's own: a port is taken only if qemu
  # itself failed to bind it, which says so.
  while :; do
    _tgt_pick_port port || fail "lio_start: no port"
    _lio_launch "$port" && break
    tries=$((tries + 1))
    if [ "$tries" -ge 5 ] \
       || ! grep -q 'host forwarding' "$LIO_DIR/qemu.log"; then
      fail "lio_start: the VM did not come up (kernel $kv)"
    fi
  done
  printf '%s: LIO VM (kernel %s) up on %s in %s s\n' \
    "${0##*/}" "$kv" "$LIO_PORTAL" "$LIO_BOOT_SECONDS" >&2
}

# _lio_launch PORT: start qemu, wait for LIO-READY and a TCP connect.
_lio_launch ()
{
  local port=$1 t0 deadline
  t0=${EPOCHREALTIME/,/.}
  deadline=$((SECONDS + ${LIO_BOOT_TIMEOUT:-180}))
  rm -f "$LIO_DIR/console.log"
  "$_LIO_VM" run "$LIO_DIR" "$port" </dev/null >"$LIO_DIR/qemu.log" 2>&1 &
  LIO_PID=$!
  printf '%s\n' "$LIO_PID" >"$LIO_DIR/launch.pid"
  while :; do
    if ! _lg_alive "$LIO_PID"; then
      wait "$LIO_PID" 2>/dev/null || true
      LIO_PID=
      return 1
    fi
    if grep -aq '^LIO-FAILED' "$LIO_DIR/console.log" 2>/dev/null; then
      _lio_kill
      return 1
    fi
    if grep -aq '^LIO-READY' "$LIO_DIR/console.log" 2>/dev/null \
       && timeout 5 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1"' _ "$port" \
            2>/dev/null; then
      break
    fi
    if [ "$SECONDS" -ge "$deadline" ]; then
      printf '%s: the LIO VM was not ready within %s s\n' \
        "${0##*/}" "${LIO_BOOT_TIMEOUT:-180}" >&2
      _lio_kill
      return 1
    fi
    sleep 0.2
  done
  LIO_BOOT_SECONDS=$(awk -v a="$t0" -v b="${EPOCHREALTIME/,/.}" \
                       'BEGIN { printf "%.1f", b - a }')
  LIO_PORT=$port
  LIO_PORTAL=127.0.0.1:$port
  return 0
}

_lio_show_logs ()
{
  local f
  for f in build.log qemu.log; do
    if [ -s "$LIO_DIR/$f" ]; then
      printf -- '--- %s ---\n' "$LIO_DIR/$f" >&2
      tail -n 20 "$LIO_DIR/$f" >&2
    fi
  done
  if [ -s "$LIO_DIR/console.log" ]; then
    # /dev/kmsg records ("6,123,456,-;text") and their continuation
    # lines: only the text of those at warning level or above, and what
    # init said.
    printf -- '--- last lines of %s (warnings and errors) ---\n' \
      "$LIO_DIR/console.log" >&2
    tr -d '\r' <"$LIO_DIR/console.log" \
      | sed -n -e 's/^[0-4],[0-9]*,[0-9]*,[^;]*;/kernel: /p; t' \
          -e '/^[^ 0-9]/p' \
      | tail -n 40 >&2
  fi
}

# _lio_kill: stop qemu (it holds nothing the guest must flush) and reap it.
_lio_kill ()
{
  [ -n "$LIO_PID" ] || return 0
  kill -TERM "$LIO_PID" 2>/dev/null || true
  _lg_wait_gone "$LIO_PID" 50 || kill -KILL "$LIO_PID" 2>/dev/null || true
  wait "$LIO_PID" 2>/dev/null || true
  LIO_PID=
  return 0
}

# The watchdog kills qemu if the test's shell dies without running its
# EXIT trap (SIGKILL, e.g. from a harness timeout).
_lio_start_watchdog ()
{
  local parent=$$ dir=$LIO_DIR
  (
    trap - EXIT HUP INT TERM
    while _lg_alive "$parent"; do
      sleep 1
    done
    for f in "$dir/qemu.pid" "$dir/launch.pid"; do
      p=$(cat "$f" 2>/dev/null) || continue
      case $(cat "/proc/$p/comm" 2>/dev/null) in
        qemu-system-*) kill -KILL "$p" ;;
      esac
    done
    _lg_rm_dir "$dir"
    _lg_rm_dir "$_LG_SCRATCH"
  ) </dev/null >/dev/null 2>&1 &
  _LIO_WATCHDOG=$!
}

_lio_cleanup ()
{
  if [ "${_LG_EXIT_STATUS:-0}" -ne 0 ] && [ "${_LG_EXIT_STATUS:-0}" -ne 77 ]; then
    _lio_show_logs
  fi
  _lio_kill 2>/dev/null
  if [ -n "$_LIO_WATCHDOG" ]; then
    kill "$_LIO_WATCHDOG" 2>/dev/null || true
    wait "$_LIO_WATCHDOG" 2>/dev/null || true
    _LIO_WATCHDOG=
  fi
  _lg_rm_dir "$LIO_DIR"
}

# lio_ctl CMD...: run CMD in the guest (see the top of this file).
lio_ctl ()
{
  [ -n "$LIO_PID" ] || fail "lio_ctl: the VM is not running"
  python3 - "$LIO_DIR/ctl.sock" "${LIO_CTL_TIMEOUT:-60}" "$*" <<'EOF'
import re, socket, sys, time

path, timeout, cmd = sys.argv[1], float(sys.argv[2]), sys.argv[3]
deadline = time.monotonic() + timeout
try:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.connect(path)
    s.sendall(cmd.encode() + b"\n")
    buf = b""
    while True:
        m = re.search(rb"(?:^|\n)__rc=(\d+)\r?\n", buf)
        if m:
            break
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("no answer within %g s" % timeout)
        s.settimeout(left)
        chunk = s.recv(65536)
        if not chunk:
            raise EOFError("the control channel closed")
        buf += chunk
except Exception as e:
    print("lio_ctl: %s: %s" % (cmd, e), file=sys.stderr)
    sys.exit(125)
out = buf[: m.start() + (1 if m.group(0).startswith(b"\n") else 0)]
sys.stdout.buffer.write(out.replace(b"\r\n", b"\n"))
sys.exit(int(m.group(1)))
EOF
}
