# SPDX-License-Identifier: LGPL-2.1-or-later
# One stalled-write scenario, as a client sees it (tests/test-fault-*.sh):
#   1. write OLD (4096 bytes starting "OLD-TAG-") at OFF; the target stalls
#      it (a faultio rule matches it); it may succeed or fail with EIO;
#   2. once it has returned, write NEW at OFF and flush, retrying on EIO
#      (as a client would) until a deadline: it must be acknowledged;
#   3. wait for the stalled write to finish inside the target (faultio's
#      "stall-end LINE" log line), then a few seconds more;
#   4. read OFF back through the gateway (must not fail) and, for a plain
#      LUN, from the backing file: both must hold NEW.
# Only data outcomes are checked, never the gateway's log.  Prints a
# timeline; exits 1 with "FAIL: ..." lines on failure.
#
# python3 fault-stall.py (--nbd SOCKET | --file PATH) --off N --tag T
#   --log FAULTIO_LOG --line RULE-LINE [--backing FILE --backing-off N]
#   [--expect-old either|success] [--deadline SECS] [--settle SECS]
import argparse
import errno
import os
import sys
import time

p = argparse.ArgumentParser()
p.add_argument("--nbd")
p.add_argument("--file")
p.add_argument("--off", type=int, required=True)
p.add_argument("--tag", required=True)
p.add_argument("--log", required=True)
p.add_argument("--line", type=int, required=True)
p.add_argument("--backing")
p.add_argument("--backing-off", type=int)
p.add_argument("--expect-old", choices=("either", "success"), default="either")
p.add_argument("--deadline", type=float, default=240)
p.add_argument("--settle", type=float, default=5)
a = p.parse_args()

T0 = time.monotonic()
LEN = 4096


def now():
    return time.monotonic() - T0


def say(msg):
    print("[%s %6.1f s] %s" % (a.tag, now(), msg), flush=True)


failures = []


def fail(msg):
    failures.append(msg)
    say("FAIL: " + msg)


def block(kind):
    head = ("%s-%s-" % (kind, a.tag)).encode()
    unit = head + b"%s %s data " % (kind.encode(), a.tag.encode())
    return (unit * (LEN // len(unit) + 1))[:LEN]


OLD, NEW = block("OLD"), block("NEW")


def log_has(prefix):
    try:
        with open(a.log) as f:
            return any(l.startswith(prefix) for l in f)
    except FileNotFoundError:
        return False


BEGIN = "stall-begin %d " % a.line
END = "stall-end %d " % a.line


class Nbd:
    def __init__(self, sock):
        import nbd

        self.nbd = nbd
        self.h = nbd.NBD()
        self.h.connect_uri("nbd+unix:///?socket=" + sock)

    def _errno(self, e):
        say("nbd error: %s" % e)
        # .errnum is the number (.errno is its name); 0 when unknown.
        return e.errnum if e.errnum else -1

    def pwrite(self, data, off):
        try:
            self.h.pwrite(data, off)
            return 0
        except self.nbd.Error as e:
            return self._errno(e)

    def flush(self):
        try:
            self.h.flush()
            return 0
        except self.nbd.Error as e:
            return self._errno(e)

    def pread(self, n, off):
        try:
            return self.h.pread(n, off), 0
        except self.nbd.Error as e:
            return None, self._errno(e)


class File:
    def __init__(self, path):
        self.fd = os.open(path, os.O_RDWR)

    def pwrite(self, data, off):
        try:
            n = os.pwrite(self.fd, data, off)
            return 0 if n == len(data) else errno.EMSGSIZE
        except OSError as e:
            return e.errno

    def flush(self):
        try:
            os.fsync(self.fd)
            return 0
        except OSError as e:
            return e.errno

    def pread(self, n, off):
        try:
            return os.pread(self.fd, n, off), 0
        except OSError as e:
            return None, e.errno


dev = Nbd(a.nbd) if a.nbd else File(a.file)

# 1. The write that the target stalls.
say("writing OLD at %d" % a.off)
t = now()
r = dev.pwrite(OLD, a.off)
took = now() - t
stalled_then = log_has(BEGIN)
ended_then = log_has(END)
say(
    "OLD write returned %s after %.1f s (stall began: %s, stall ended: %s)"
    % ("success" if r == 0 else os.strerror(r), took, stalled_then, ended_then)
)
# With write-behind (test-faults-wb.sh) the write was acknowledged once
# buffered: it reaches the target, and stalls there, just after.  Its
# failure, if it fails, is for the next flush to report (step 2 retries).
if not stalled_then and r == 0 and os.environ.get("LUNGATE_TEST_WRITE_BEHIND"):
    t = now()
    while not log_has(BEGIN) and now() - t < 30:
        time.sleep(0.1)
    stalled_then = log_has(BEGIN)
    say("write-behind: the buffered OLD write stalled in the target: %s" % stalled_then)
if not stalled_then:
    fail("the OLD write was not stalled by the target (no '%s')" % BEGIN.strip())
if r != 0 and r != errno.EIO:
    fail("the OLD write failed with %s, expected success or EIO" % os.strerror(r))
if r != 0 and a.expect_old == "success":
    fail("the OLD write failed (%s) with no outage budget" % os.strerror(r))

# 2. The newer write, retried on EIO, and a flush.
acked = False
tries = 0
t = now()
while now() - t < a.deadline:
    tries += 1
    r = dev.pwrite(NEW, a.off)
    if r == 0:
        r = dev.flush()
        if r == 0:
            acked = True
            break
    if r != errno.EIO:
        fail("the NEW write or flush failed with %s" % os.strerror(r))
        break
    time.sleep(1)
say(
    "NEW write+flush %s after %.1f s, %d tries (stall ended by then: %s)"
    % ("acknowledged" if acked else "NOT acknowledged", now() - t, tries, log_has(END))
)
if not acked:
    fail("the NEW write was never acknowledged")

# 3. The stalled write finishes inside the target.
t = now()
while not log_has(END) and stalled_then and now() - t < a.deadline:
    time.sleep(0.2)
if not log_has(END):
    fail("the stalled write never finished in the target")
say("stall ended in the target; settling %.0f s" % a.settle)
time.sleep(a.settle)


def what(d):
    if d == NEW:
        return "NEW"
    if d == OLD:
        return "OLD"
    if d is not None and d == bytes(len(d)):
        return "zeroes"
    return "neither OLD nor NEW: %r" % (d[:32] if d is not None else None)


# 4. What the range holds.
d, r = dev.pread(LEN, a.off)
if d is None:
    fail("reading the range back through the gateway failed: %s" % os.strerror(r))
else:
    say("through the gateway the range holds %s" % what(d))
    if d != NEW:
        fail("through the gateway the range holds %s, not the acknowledged NEW data" % what(d))
if a.backing:
    with open(a.backing, "rb") as f:
        f.seek(a.backing_off if a.backing_off is not None else a.off)
        d = f.read(LEN)
    say("the backing file holds %s" % what(d))
    if d != NEW:
        fail("the backing file holds %s, not the acknowledged NEW data" % what(d))

# The gateway still serves.
r = dev.pwrite(NEW, a.off + LEN)
if r == 0:
    d, r = dev.pread(LEN, a.off + LEN)
if r != 0 or d != NEW:
    fail("the gateway no longer serves a plain write and read (%s)" % os.strerror(r))

if failures:
    sys.exit(1)
say("ok")
