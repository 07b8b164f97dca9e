#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# A client that leaves while the plugin holds its requests (issue 27,
# item 3).  nbdkit 1.32 aborts the whole server when a second reply is
# sent after a first one failed on the closed socket ("raw_send_socket:
# Assertion 'sock >= 0' failed"); the plugin's requests, held for a
# target that stopped and then all answered at once, made that window
# wide.  tests/tools/slowsend.so, preloaded into nbdkit, makes a send to
# a gone client fail only after 100 ms, so that the window is one every
# round falls into; nbdkit must survive each round, serve the next client
# and stop on SIGTERM.  Three ways the held requests end together: the
# target comes back (they succeed), the outage budget ends (they fail),
# and the target comes back under nbdkit's blocksize filter, which holds
# a lock across its calls to the plugin for unaligned writes (the plugin
# must not make one request wait for another without end: the hostile
# review found that deadlock).
. "${srcdir:-.}/functions-nbd.sh"
require_lungate_plugin
require_nbd_python
require python3
tool=${srcdir:-.}/tools/hostile-target.py
slow=${top_builddir:-..}/tests/tools/slowsend.so
[ -f "$slow" ] || fail "$slow is not built (make check builds it)"
slow=$(cd "$(dirname "$slow")" && pwd)/slowsend.so
d=$(scratch_dir)
iqn=iqn.2026-01.test.lungate:hostile
hpid='' npid=''

stop_all ()
{
  [ -z "$hpid" ] || { kill -CONT "$hpid"; kill "$hpid"; wait "$hpid"; } 2>/dev/null
  [ -z "$npid" ] || nbd_stop "$npid"
  hpid='' npid=''
}
on_exit stop_all

# The ASan runtime, when the plugin needs it, comes first.
pre=$(_nbd_preload)
nbdkit_slow=(env "LD_PRELOAD=${pre:+$pre }$slow" SLOWSEND_MS=100
             "ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" nbdkit)

# round NAME [TARGET-ARG...]: a target, nbdkit on it (for "filter",
# under --filter=blocksize minblock=4096),
# a client that sends 32 requests (reads; for "filter", writes of which
# every 8th has an unaligned tail), sees the target stop answering and
# leaves.
round ()
{
  local name=$1 rc=0 filter=() params=()
  shift
  if [ "$name" = filter ]; then
    filter=(--filter=blocksize)
    params=(minblock=4096)
  fi
  rm -f "$d/arm" "$d/s.sock" "$d/h.out"
  python3 -B "$tool" --port 0 --log "$d/h.log" "$@" >"$d/h.out" 2>"$d/h.err" &
  hpid=$!
  for _ in $(seq 100); do grep -q '^ready ' "$d/h.out" && break; sleep 0.05; done
  port=$(awk '/^ready /{print $2}' "$d/h.out")
  [ -n "$port" ] || fail "$name: the target did not start"
  "${nbdkit_slow[@]}" -f -U "$d/s.sock" "${filter[@]}" "$LUNGATE_PLUGIN" \
    "url=iscsi://127.0.0.1:$port/$iqn/0" timeout=3 "${params[@]}" 2>"$d/$name.log" &
  npid=$!
  for _ in $(seq 200); do [ -S "$d/s.sock" ] && break; sleep 0.05; done
  [ -S "$d/s.sock" ] || { cat "$d/$name.log"; fail "$name: nbdkit did not start"; }
  # The client: connected, it says so (the test stops the target, or
  # arms it), sends its requests, gives them a second to reach the
  # target, and leaves without a word.
  env -u LD_PRELOAD "$NBD_PYTHON" - "nbd+unix:///?socket=$d/s.sock" "$d/arm" "$name" \
    >"$d/client.out" 2>&1 <<'PY' &
import nbd, os, sys, time
h = nbd.NBD()
h.connect_uri(sys.argv[1])
open(sys.argv[2], "w").close()
time.sleep(0.5)
bufs = []
for i in range(32):
    if sys.argv[3] == "filter":
        b = nbd.Buffer(65536 + (512 if i % 8 == 7 else 0))
        bufs.append(b)
        h.aio_pwrite(b, i << 20)
    else:
        b = nbd.Buffer(65536)
        bufs.append(b)
        h.aio_pread(b, i << 20)
t = time.monotonic()
while time.monotonic() - t < 1:
    h.poll(0)
    time.sleep(0.01)
os._exit(0)
PY
  local cpid=$!
  for _ in $(seq 200); do [ -f "$d/arm" ] && break; sleep 0.05; done
  [ -f "$d/arm" ] || { cat "$d/client.out"; fail "$name: the client did not connect"; }
  [ "$name" = budget ] || kill -STOP "$hpid"
  wait "$cpid" || { cat "$d/client.out"; fail "$name: the client failed"; }
  [ "$name" = budget ] || kill -CONT "$hpid"
  # Every held request ends now (the target answers) or at the 3 s
  # budget; then the replies, at most one gate wait each.
  sleep 5
  kill -0 "$npid" 2>/dev/null \
    || { cat "$d/$name.log"; fail "$name: nbdkit died when the held requests ended after the client left"; }
  grep -q "Assertion" "$d/$name.log" && { cat "$d/$name.log"; fail "$name: nbdkit reports a failed assertion"; }
  # ... and still serves: the next client reads (unaligned: under the
  # filter that needs its lock).
  rm -f "$d/arm"
  env -u LD_PRELOAD timeout 60 "$NBD_PYTHON" - "nbd+unix:///?socket=$d/s.sock" \
    >"$d/next.out" 2>&1 <<'PY' || rc=$?
import nbd, sys
h = nbd.NBD()
h.connect_uri(sys.argv[1])
h.pread(4608, 0)
print(h.get_size())
PY
  [ "$rc" -eq 0 ] || { cat "$d/next.out" "$d/$name.log"; fail "$name: the next client was not served"; }
  # ... and stops on SIGTERM (nbd_stop fails after 20 s).
  stop_all
  echo "round $name: nbdkit survived, served the next client and stopped"
}

# The target stops (SIGSTOP) with 32 reads held, the client leaves, the
# target comes back: the reads succeed together.
for i in 1 2 3; do round resumed; done
# The target stops answering commands once armed (NOP-Outs still
# answered): the budget (3 s) fails the reads together.
for i in 1 2 3; do round budget --mode no-answer --armed-by "$d/arm"; done
# Writes under the blocksize filter, the target stopped and back.
for i in 1 2; do round filter; done
echo "test-nbd-client-gone: ok"
