#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# Resilience, bounded: with timeout=3 (the outage budget) and the target
# gone, every request fails with EIO within budget + 5 s, the gateway does
# not spin, and I/O works again by itself once the target is back.  Then
# the CHAP account is revoked and the connections cut: reconnecting says
# why it fails, does not spin, requests fail with EIO within the budget,
# and service resumes when the account is restored.
. "${srcdir:-.}/functions-nbd.sh"
require_lungate_plugin
require_nbd_python
require ss
tgt_start
t=iqn.2026-11.org.lungate:outage
tgt_add_target 1 "$t"
tgt_add_lun 1 1 16M
tgt_allow 1 ALL
tgt_chap 1 gwuser gwsecret-0123456789
secret="$(secret_file gwsecret-0123456789)"
# Another account bound to the target, so that CHAP stays required when
# ours is revoked.
_tgt_account other other-secret-0123456789
sock="$TGT_DIR/nbd.sock"
log="$TGT_DIR/nbdkit.log"
"${NBDKIT[@]}" -f -U "$sock" "$LUNGATE_PLUGIN" "url=iscsi://$TGT_PORTAL/$t/1" \
  user=gwuser "password=+$secret" connections=2 timeout=3 2>"$log" &
gw=$!
on_exit nbd_stop "$gw"
for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.1; done
[ -S "$sock" ] || { cat "$log" >&2; fail "the gateway did not start"; }

cpu_ticks () { awk '{ print $14 + $15 }' "/proc/$gw/stat"; }

# check_outage WHAT: with the target unreachable, reads and writes fail
# with EIO within budget + 5 s (a write with write-behind: the flush
# after it), and the gateway uses almost no CPU.
check_outage ()
{
  local c0 c1
  c0=$(cpu_ticks)
  env -u LD_PRELOAD "$NBD_PYTHON" - "$sock" <<'PY' || { cat "$log" >&2; fail "$1: requests during the outage"; }
import errno, nbd, os, sys, time
h = nbd.NBD(); h.connect_uri("nbd+unix:///?socket=" + sys.argv[1])
for i, op in enumerate(("read", "write", "read")):
    t0 = time.monotonic()
    try:
        if op == "read":
            h.pread(4096, i << 20)
        else:
            h.pwrite(b"w" * 4096, i << 20)
            # With write-behind (test-faults-wb) a write is acknowledged
            # once buffered, and the flush after it reports its failure.
            if os.environ.get("LUNGATE_TEST_WRITE_BEHIND"):
                op = "write and flush"
                h.flush()
        sys.exit("%s succeeded with the target gone" % op)
    except nbd.Error as e:
        assert e.errnum == errno.EIO, e
    took = time.monotonic() - t0
    print("%s failed with EIO after %.1f s" % (op, took))
    assert took <= 3 + 5, took
PY
  sleep 3
  c1=$(cpu_ticks)
  echo "$1: gateway CPU during the outage: $((c1 - c0)) ticks"
  [ $((c1 - c0)) -lt 100 ] || fail "$1: the gateway spins while the target is away ($((c1 - c0)) ticks)"
}

# check_back WHAT: I/O works again, by itself, within 20 s.
check_back ()
{
  env -u LD_PRELOAD "$NBD_PYTHON" - "$sock" <<'PY' || { cat "$log" >&2; fail "$1: no service after the target came back"; }
import nbd, sys, time
h = nbd.NBD(); h.connect_uri("nbd+unix:///?socket=" + sys.argv[1])
deadline = time.monotonic() + 20
while True:
    try:
        h.pwrite(b"z" * 4096, 8 << 20)
        assert h.pread(4096, 8 << 20) == b"z" * 4096
        break
    except nbd.Error as e:
        if time.monotonic() > deadline:
            raise
        time.sleep(0.5)
print("service is back")
PY
}

# The target works.  (Flushed: with write-behind, test-faults-wb, only
# what a flush returned for is kept across a target's crash.)
env -u LD_PRELOAD "$NBD_PYTHON" - "$sock" <<'PY' || fail "I/O before the outage"
import nbd, sys
h = nbd.NBD(); h.connect_uri("nbd+unix:///?socket=" + sys.argv[1])
h.pwrite(b"a" * 65536, 0)
assert h.pread(65536, 0) == b"a" * 65536
h.flush()
PY

# 1. The target killed and kept away longer than the budget.
tgt_kill
check_outage "target down"
grep -q "outage budget" "$log" || { cat "$log" >&2; fail "no log line about the outage budget"; }
# Each session sees the same outage: its lines come once for the pool
# (issue 30, item 10: every line came once per session).
# Two sessions may lose their connections differently (one finds it
# closed, the other gets EPIPE sending a request: CI run s45h, ASan and
# write-behind under load), which are two lines; the same line twice is
# the bug.
for what in "connection lost: .*; reconnecting" "reconnecting: .*Connection refused"; do
  n=$(grep -c -- "$what" "$log" || true)
  dup=$(grep -- "$what" "$log" | sort | uniq -d)
  if [ "$n" -lt 1 ] || [ -n "$dup" ]; then
    cat "$log" >&2
    fail "'$what' logged $n times for one outage of a 2-session pool${dup:+, twice: $dup}"
  fi
done
tgt_restart
check_back "target back"

# 2. Credentials revoked, then the connections cut (the target stays up,
# so no restart window where it would take any login).
tgtadm_ --mode account --op unbind --tid 1 --user gwuser || fail "unbind"
tgtadm_ --mode account --op bind --tid 1 --user other || fail "bind"
ss -K dst 127.0.0.1 dport = "$TGT_PORT" >/dev/null 2>&1 || fail "ss -K"
check_outage "revoked account"
grep -q "reconnecting: .*authentication failed" "$log" \
  || { cat "$log" >&2; fail "the reconnection does not say that authentication failed"; }
n=$(grep -c "reconnecting: .*authentication failed" "$log")
[ "$n" -le 3 ] || fail "the same login failure logged $n times in a few seconds"
tgtadm_ --mode account --op bind --tid 1 --user gwuser || fail "bind again"
check_back "account restored"
env -u LD_PRELOAD "$NBD_PYTHON" - "$sock" <<'PY' || fail "data lost across the outages"
import nbd, sys
h = nbd.NBD(); h.connect_uri("nbd+unix:///?socket=" + sys.argv[1])
assert h.pread(65536, 0) == b"a" * 65536
PY
nbd_stop "$gw"
cat "$log"
if grep -Eq "AddressSanitizer|runtime error:" "$log"; then fail "sanitizer report"; fi
echo "test-nbd-outage: ok"
