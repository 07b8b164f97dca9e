#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
# hostile-target.py: a small iSCSI target (RFC 7143) that misbehaves on
# purpose, for testing how lungate copes with broken or odd targets.  It
# implements enough of the protocol for libiscsi 1.19 to log in (AuthMethod
# None), run discovery (SendTargets=All) and normal sessions, NOP, TMF,
# Logout and the SCSI commands a block gateway uses, on RAM disks.  Each
# --mode breaks one thing; --list-modes names them all.  Python 3 standard
# library only.
#
# Threads: the main thread accepts; each connection has its own thread (and
# a second one in nop-flood mode, which only sends).  Sends on a connection
# go through its send lock; the disks have their own lock; the log sink has
# its own.  No lock is held while another is taken, except disk then none.
#
# Usage: hostile-target.py --port N [--host 127.0.0.1|::1] [--mode M[,M]]
#   [--log FILE] [--once] ...; prints "ready PORT" when listening.
import argparse
import os
import socket
import sys
import threading
import time

MODES = {
    "good": "well behaved (default)",
    "close-after-login": "close TCP right after the login response that "
    "enters full feature phase",
    "close-during-login": "close TCP on the first login request of a normal "
    "session, unanswered (a reset on a flaky link)",
    "truncated-pdu": "first READ: send half a Data-In header, then close",
    "truncated-pdu-stall": "first READ: send half a Data-In header, then "
    "stall (read and ignore everything)",
    "huge-dsl": "first READ: a Data-In with DataSegmentLength 16 MiB-1 "
    "(and that much data)",
    "ahs": "first SCSI Response PDU (not a Data-In with status) with "
    "TotalAHSLength 2",
    "wrong-itt": "first READ: Data-In and SCSI Response with an ITT that "
    "matches nothing, then the real answer",
    "login-itt-datain": "first READ: a Data-In carrying the login's ITT, "
    "then the real answer",
    "nop-itt-datain": "first NOP-Out: after the NOP-In, a Data-In carrying "
    "the NOP-Out's ITT",
    "offset-past-buffer": "first READ: a Data-In whose BufferOffset is past "
    "the read's length, then the real answer",
    "datain-overlap": "READ: two Data-In PDUs that overlap, status GOOD",
    "datain-gap": "READ: two Data-In PDUs that leave a hole, status GOOD",
    "underflow": "READ: half the bytes, U bit and residual, status GOOD",
    "underflow-silent": "READ: half the bytes, no U bit, status GOOD",
    "recovered-no-data": "READ: CHECK CONDITION RECOVERED ERROR, no data",
    "odd-sense": "READ: CHECK CONDITION whose SenseLength lies (longer than "
    "the segment, then 0 the next time)",
    "r2t-huge": "first WRITE: an R2T asking for 4 GiB-1 bytes",
    "r2t-overlap": "WRITE: each R2T after the first asks again for the "
    "last 512 bytes it got, and the bytes are counted, not placed: the "
    "write completes GOOD with its end never sent",
    "no-answer": "never answer SCSI commands (NOP, TMF, Logout still "
    "answered)",
    "expcmdsn-ahead": "ExpCmdSN 5 ahead of the commands received, from "
    "the final login response on (normal sessions)",
    "closed-window": "MaxCmdSN = ExpCmdSN-1 from the final login response "
    "on (normal sessions)",
    "nop-flood": "unsolicited NOP-Ins (asking for a reply) as fast as "
    "possible after login",
    "inquiry-flood": "INQUIRY answered with 1 GiB of Data-In",
    "mrdsl-zero": "declare the target's MaxRecvDataSegmentLength=0",
    "async-logout": "after 3 SCSI commands, Async Message event 1 (target "
    "requests logout)",
    "reject-logout": "answer Logout with a Reject PDU",
    "redirect": "login answered with status 0x0101 to another port of this "
    "tool (which is well behaved)",
    "redirect-loop": "login answered with status 0x0101 to the same port, "
    "for ever",
    "escape-text": "SendTargets, INQUIRY and VPD 0x83 strings with terminal "
    "escape sequences",
    "capacity-zero": "READ CAPACITY reports 0 blocks (returned LBA all "
    "ones)",
    "capacity-huge": "READ CAPACITY reports 2^64-1 blocks (> 2^63 bytes)",
    "block-len-odd": "READ CAPACITY reports block length 520 (or "
    "--block-size-report)",
    "unit-attention": "every command answered UNIT ATTENTION once (every "
    "other command), retries succeed",
    "busy": "every other READ/WRITE answered BUSY (status 0x08), "
    "retries succeed",
    "task-set-full": "every other READ/WRITE answered TASK SET FULL "
    "(status 0x28), retries succeed",
    "ua-then-stall": "READ: the first of each connection answered UNIT "
    "ATTENTION, the retry never; the connection closed 3 s later",
    "unit-attention-once": "first command on each LUN of a connection "
    "answered UNIT ATTENTION (power on)",
    "thin-full": "WRITE reaching the second half of a LUN: CHECK CONDITION "
    "DATA PROTECT, SPACE ALLOCATION FAILED WRITE PROTECT (27/07), as a "
    "thin-provisioned LUN out of space answers (LIO)",
}

READ_OPS = (0x08, 0x28, 0x88, 0xA8)
WRITE_OPS = (0x0A, 0x2A, 0x8A, 0xAA)
OP_NAMES = {
    0x00: "TEST-UNIT-READY", 0x03: "REQUEST-SENSE", 0x08: "READ6",
    0x0A: "WRITE6", 0x12: "INQUIRY", 0x1A: "MODE-SENSE6",
    0x1B: "START-STOP", 0x1E: "PREVENT-ALLOW", 0x25: "READ-CAPACITY10",
    0x28: "READ10", 0x2A: "WRITE10", 0x2F: "VERIFY10",
    0x35: "SYNC-CACHE10", 0x41: "WRITE-SAME10", 0x42: "UNMAP",
    0x5A: "MODE-SENSE10", 0x5E: "PR-IN", 0x5F: "PR-OUT", 0x88: "READ16",
    0x8A: "WRITE16", 0x91: "SYNC-CACHE16", 0x93: "WRITE-SAME16",
    0x9E: "SERVICE-ACTION-IN16", 0xA0: "REPORT-LUNS",
    0xA3: "MAINTENANCE-IN", 0xA8: "READ12", 0xAA: "WRITE12",
}
GOOD, CHECK = 0x00, 0x02
NO_ITT = 0xFFFFFFFF
ESC_NAME = "\x1b]0;pwned\x07\x1b[31m"

A = None        # parsed arguments
LOG = None      # the event sink
DISKS = []      # one Disk per LUN
STATE = None    # process-wide counters


def armed():
    """Modes act once --armed-by FILE exists (at once without it)."""
    return A.armed_by is None or os.path.exists(A.armed_by)


class Check(Exception):
    """CHECK CONDITION with fixed-format sense KEY/ASC/ASCQ."""

    def __init__(self, key, asc, ascq=0):
        super().__init__("sense %x/%02x/%02x" % (key, asc, ascq))
        self.key, self.asc, self.ascq = key, asc, ascq


def illegal(asc=0x24, ascq=0):
    return Check(0x05, asc, ascq)


class Log:
    """One line per event, to --log FILE and, with -v, to stderr."""

    def __init__(self, path, verbose):
        self.lock = threading.Lock()
        self.f = open(path, "a", buffering=1) if path else None
        self.verbose = verbose
        self.t0 = time.monotonic()

    def __call__(self, fmt, *args):
        line = "%.3f %s" % (time.monotonic() - self.t0, fmt % args)
        with self.lock:
            if self.f:
                self.f.write(line + "\n")
            if self.verbose:
                sys.stderr.write(line + "\n")


class State:
    """What is shared by all connections."""

    def __init__(self):
        self.lock = threading.Lock()
        self.conn_ids = 0
        self.tsih = 0
        self.fired = set()
        self.redirect_port = None

    def next_conn(self):
        with self.lock:
            self.conn_ids += 1
            return self.conn_ids

    def next_tsih(self):
        with self.lock:
            self.tsih = self.tsih % 0xFFFF + 1
            return self.tsih


class Disk:
    """A sparse RAM disk of A.size bytes; remembers which blocks were
    written (the rest reads as zeros and is reported deallocated)."""

    CHUNK = 1 << 20

    def __init__(self):
        self.lock = threading.Lock()
        self.bs = A.block_size
        self.size = A.size - A.size % self.bs
        self.nblocks = self.size // self.bs
        self.chunks = {}
        self.mapped = bytearray(self.nblocks)

    def _io(self, off, n, data=None):
        """Read N bytes at OFF, or write DATA there; the part past the
        backing store reads as zeros and is dropped on write."""
        out = bytearray()
        pos, end = off, off + n
        while pos < end:
            ci, co = divmod(pos, self.CHUNK)
            step = min(end - pos, self.CHUNK - co)
            if pos >= self.size:
                if data is None:
                    out += bytes(end - pos)
                break
            step = min(step, self.size - pos)
            chunk = self.chunks.get(ci)
            if data is None:
                out += chunk[co:co + step] if chunk else bytes(step)
            else:
                piece = data[pos - off:pos - off + step]
                if chunk is None:
                    if not any(piece):
                        pos += step
                        continue
                    chunk = self.chunks[ci] = bytearray(self.CHUNK)
                chunk[co:co + step] = piece
            pos += step
        return bytes(out)

    def read(self, lba, nblocks):
        with self.lock:
            return self._io(lba * self.bs, nblocks * self.bs)

    def write(self, lba, data):
        with self.lock:
            self._io(lba * self.bs, len(data), data)
            self._map(lba, len(data) // self.bs, 1)

    def _map(self, lba, n, value):
        lo, hi = min(lba, self.nblocks), min(lba + n, self.nblocks)
        if hi > lo:
            self.mapped[lo:hi] = bytes([value]) * (hi - lo)

    def fill(self, lba, n, block, unmap):
        """WRITE SAME: BLOCK repeated N times at LBA; deallocated instead
        when UNMAP and the block is zeros."""
        with self.lock:
            hi = min(lba + n, self.nblocks)
            if hi <= lba:
                return
            if unmap and not any(block):
                self._zero(lba, hi - lba)
                self._map(lba, hi - lba, 0)
                return
            per = max(1, self.CHUNK // self.bs)
            pos = lba
            while pos < hi:
                k = min(per, hi - pos)
                self._io(pos * self.bs, k * self.bs, block * k)
                pos += k
            self._map(lba, hi - lba, 1)

    def _zero(self, lba, n):
        off, end = lba * self.bs, min((lba + n) * self.bs, self.size)
        while off < end:
            ci, co = divmod(off, self.CHUNK)
            step = min(end - off, self.CHUNK - co)
            if co == 0 and step == self.CHUNK:
                self.chunks.pop(ci, None)
            elif ci in self.chunks:
                self.chunks[ci][co:co + step] = bytes(step)
            off += step

    def unmap(self, lba, n):
        with self.lock:
            self._zero(lba, n)
            self._map(lba, n, 0)

    def runs(self, lba, limit, capacity):
        """Up to LIMIT (lba, nblocks, deallocated) runs from LBA to the
        reported CAPACITY; blocks past the backing store are deallocated."""
        out = []
        with self.lock:
            pos = lba
            while pos < capacity and len(out) < limit:
                if pos >= self.nblocks:
                    out.append((pos, capacity - pos, 1))
                    break
                state = self.mapped[pos]
                nxt = self.mapped.find(b"\x00" if state else b"\x01", pos)
                if nxt < 0:
                    nxt = self.nblocks if state else capacity
                nxt = min(nxt, capacity)
                out.append((pos, nxt - pos, 0 if state else 1))
                pos = nxt
        return out


def be(n, v):
    return v.to_bytes(n, "big")


def u16(b, o):
    return int.from_bytes(b[o:o + 2], "big")


def u32(b, o):
    return int.from_bytes(b[o:o + 4], "big")


def u64(b, o):
    return int.from_bytes(b[o:o + 8], "big")


def put(h, off, n, v):
    h[off:off + n] = (v & ((1 << (8 * n)) - 1)).to_bytes(n, "big")


def sense_data(key, asc, ascq):
    s = bytearray(18)
    s[0], s[2], s[7], s[12], s[13] = 0x70, key, 10, asc, ascq
    return bytes(s)


def padded(s, n):
    return s.encode("latin-1")[:n].ljust(n, b" ")


def reported_blocks():
    """The block count READ CAPACITY claims (may wrap or lie)."""
    if "capacity-zero" in A.modes:
        return 0
    if "capacity-huge" in A.modes:
        return (1 << 64) - 1
    if A.capacity_blocks is not None:
        return A.capacity_blocks
    return DISKS[0].nblocks


def reported_block_len():
    if A.block_size_report is not None:
        return A.block_size_report
    if "block-len-odd" in A.modes:
        return 520
    return A.block_size


class Pdu:
    def __init__(self, hdr, ahs, data):
        self.hdr, self.ahs, self.data = hdr, ahs, data
        self.op = hdr[0] & 0x3F
        self.immediate = bool(hdr[0] & 0x40)
        self.flags = hdr[1]
        self.lun_raw = bytes(hdr[8:16])
        self.itt = u32(hdr, 16)


class Task:
    """A SCSI command waiting for its Data-Out."""

    def __init__(self, pdu, lun, cdb, edtl):
        self.pdu, self.lun, self.cdb, self.edtl = pdu, lun, cdb, edtl
        self.buf = bytearray(edtl)
        self.got = 0
        self.ttt = None
        self.r2t_end = 0
        self.r2tsn = 0


class Conn:
    """One TCP connection (and its session: MaxConnections=1)."""

    def __init__(self, sock, peer, modes, port):
        self.sock, self.peer, self.modes, self.port = sock, peer, modes, port
        self.id = STATE.next_conn()
        self.send_lock = threading.Lock()
        self.statsn = 0x1000
        self.expcmdsn = 0
        self.window = A.window
        self.ffp = False
        self.closed = False
        self.session = "?"
        self.target = ""
        self.login_itt = None
        self.login_keys = {}
        self.login_buf = b""
        self.login_started = False
        self.tsih = 0
        self.peer_mrdsl = 8192
        self.first_burst = 65536
        self.max_burst = 262144
        self.initial_r2t = True
        self.immediate_data = True
        self.tasks = {}
        self.ttts = 0x100
        self.fired = set()
        self.noted = set()
        self.ncmds = 0
        self.ua_due = True
        self.ua_luns = set()
        self.odd_sense_turn = 0
        self.stall = False
        self.ua_stalled = False

    # -- helpers -------------------------------------------------------

    def log(self, fmt, *args):
        LOG("c%d " + fmt, self.id, *args)

    def fire(self, mode, detail=""):
        """True if MODE should act now (subject to --repeat); logs it."""
        if mode not in self.modes or not armed() or self.id <= A.spare:
            return False
        with STATE.lock:
            if A.repeat == "once" and mode in STATE.fired:
                return False
            if A.repeat == "conn" and mode in self.fired:
                return False
            STATE.fired.add(mode)
        self.fired.add(mode)
        self.log("fired %s %s", mode, detail)
        return True

    def active(self, mode, detail=""):
        """True if MODE is on; logs it the first time per connection."""
        if mode not in self.modes or not armed() or self.id <= A.spare:
            return False
        if mode not in self.noted:
            self.noted.add(mode)
            self.log("fired %s %s", mode, detail)
        return True

    def normal(self):
        return self.session == "Normal"

    def maxcmdsn(self):
        if self.ffp and self.normal() and self.active("closed-window"):
            return (self.expcmdsn - 1) & 0xFFFFFFFF
        return (self.expcmdsn + self.window - 1) & 0xFFFFFFFF

    def next_statsn(self):
        s = self.statsn
        self.statsn = (self.statsn + 1) & 0xFFFFFFFF
        return s

    def header(self, op, flags, itt=NO_ITT, lun=b"\0" * 8, statsn=True):
        """A target BHS with the sequence numbers filled in; STATSN says
        whether this PDU consumes a StatSN."""
        h = bytearray(48)
        h[0], h[1] = op, flags
        h[8:16] = lun
        put(h, 16, 4, itt)
        put(h, 24, 4, self.next_statsn() if statsn else self.statsn)
        ahead = (5 if self.ffp and self.normal()
                 and self.active("expcmdsn-ahead") else 0)
        put(h, 28, 4, (self.expcmdsn + ahead) & 0xFFFFFFFF)
        put(h, 32, 4, (self.maxcmdsn() + ahead) & 0xFFFFFFFF)
        return h

    def send(self, h, data=b"", ahs=b"", dsl=None):
        h[4] = len(ahs) // 4
        put(h, 5, 3, len(data) if dsl is None else dsl)
        pad = bytes(-len(data) % 4)
        self.send_raw(bytes(h) + ahs + data + pad)

    def send_raw(self, b):
        with self.send_lock:
            self.sock.sendall(b)

    def recv_exact(self, n):
        buf = bytearray()
        while len(buf) < n:
            b = self.sock.recv(min(n - len(buf), 1 << 20))
            if not b:
                return None
            buf += b
        return bytes(buf)

    def recv_pdu(self):
        hdr = self.recv_exact(48)
        if hdr is None:
            return None
        ahs = self.recv_exact(hdr[4] * 4) if hdr[4] else b""
        dsl = u32(hdr, 4) & 0xFFFFFF
        data = self.recv_exact(dsl + (-dsl % 4)) if dsl else b""
        if ahs is None or data is None:
            return None
        return Pdu(hdr, ahs, data[:dsl])

    # -- main loop -----------------------------------------------------

    def serve(self):
        self.log("connect %s port %d modes %s", self.peer, self.port,
                 ",".join(sorted(self.modes)))
        why = "eof"
        try:
            while not self.closed:
                pdu = self.recv_pdu()
                if pdu is None:
                    break
                if self.stall:
                    continue
                handler = PDU_HANDLERS.get(pdu.op)
                if not self.ffp and pdu.op != 0x03:
                    self.log("pdu 0x%02x before full feature phase", pdu.op)
                    why = "protocol"
                    break
                if not pdu.immediate and pdu.op in (0x00, 0x01, 0x02,
                                                    0x04, 0x06):
                    self.advance(pdu)
                if handler is None:
                    self.log("unknown pdu 0x%02x: reject", pdu.op)
                    self.send_reject(pdu, 0x04)
                    continue
                handler(self, pdu)
        except (ConnectionError, BrokenPipeError, OSError) as e:
            why = str(e)
        finally:
            self.closed = True
            try:
                self.sock.close()
            except OSError:
                pass
            self.log("close %s", why)

    # -- login ---------------------------------------------------------

    def on_login(self, pdu):
        if self.ffp:
            self.send_reject(pdu, 0x04)
            return
        flags = pdu.flags
        csg, nsg, transit = (flags >> 2) & 3, flags & 3, flags & 0x80
        cmdsn = u32(pdu.hdr, 24)
        self.expcmdsn = cmdsn
        self.login_itt = pdu.itt
        self.login_buf += pdu.data
        if flags & 0x40:
            self.login_reply(pdu, 0, csg, 0, b"")    # C bit: more to come
            return
        keys = parse_keys(self.login_buf)
        self.login_buf = b""
        self.login_keys.update(keys)
        self.session = self.login_keys.get("SessionType", "Normal")
        self.target = self.login_keys.get("TargetName", "")
        first = not self.login_started
        self.login_started = True
        out = []
        if first:
            self.log("login %s target=%r initiator=%r", self.session,
                     self.target, self.login_keys.get("InitiatorName", ""))
            redirect = self.redirect_to()
            if redirect:
                self.login_reply(pdu, 0x0101, csg, 0,
                                 keys_blob([("TargetAddress", redirect)]))
                self.closed = True
                return
            if self.normal() and self.fire("close-during-login"):
                self.closed = True
                self.sock.shutdown(socket.SHUT_RDWR)
                return
            if self.session == "Normal" and not self.known_target():
                self.log("login refused: unknown target %r", self.target)
                self.login_reply(pdu, 0x0203, csg, 0, b"")
                self.closed = True
                return
            out.append(("TargetPortalGroupTag", "1"))
        for k, v in keys.items():
            ans = self.negotiate(k, v)
            if ans is not None:
                out.append((k, ans))
        if csg == 0 and "AuthMethod" in keys:
            if "None" not in keys["AuthMethod"].split(","):
                self.log("login refused: AuthMethod=%s", keys["AuthMethod"])
                self.login_reply(pdu, 0x0201, csg, 0, keys_blob(out))
                self.closed = True
                return
        if not transit:
            self.login_reply(pdu, 0, csg, 0, keys_blob(out))
            return
        if nsg == 3:
            self.tsih = STATE.next_tsih()
            self.ffp = True     # so that closed-window shows already here
        self.login_reply(pdu, 0, csg, nsg | 0x80, keys_blob(out))
        if nsg == 3:
            self.log("login done %s tsih=%d mrdsl=%d fbl=%d mbl=%d "
                     "initialr2t=%s immediatedata=%s", self.session,
                     self.tsih, self.peer_mrdsl, self.first_burst,
                     self.max_burst, self.initial_r2t, self.immediate_data)
            if self.fire("close-after-login"):
                self.closed = True
                self.sock.shutdown(socket.SHUT_RDWR)
                return
            if self.normal() and "nop-flood" in self.modes:
                threading.Thread(target=self.nop_flood, daemon=True).start()

    def login_reply(self, pdu, status, csg, tflags, data):
        h = self.header(0x23, tflags | (csg << 2), pdu.itt)
        h[8:14] = pdu.hdr[8:14]
        put(h, 14, 2, self.tsih if tflags & 0x80 and (tflags & 3) == 3
            else u16(pdu.hdr, 14))
        put(h, 36, 2, status)
        self.send(h, data)

    def redirect_to(self):
        if self.active("redirect") and STATE.redirect_port:
            return "%s:%d,1" % (host_for_text(), STATE.redirect_port)
        if self.active("redirect-loop"):
            return "%s:%d,1" % (host_for_text(), self.port)
        return None

    def known_target(self):
        if self.target in target_names():
            return True
        return "escape-text" in self.modes

    def negotiate(self, k, v):
        """The answer to key K=V, or None for declarative keys."""
        def num(default):
            try:
                return int(v)
            except ValueError:
                return default
        if k in ("InitiatorName", "InitiatorAlias", "TargetName",
                 "SessionType", "TargetAlias"):
            return None
        if k == "AuthMethod":
            return "None" if "None" in v.split(",") else "Reject"
        if k in ("HeaderDigest", "DataDigest"):
            return "None" if "None" in v.split(",") else "Reject"
        if k == "MaxRecvDataSegmentLength":
            self.peer_mrdsl = max(512, num(8192))
            if self.active("mrdsl-zero"):
                return "0"
            return str(A.mrdsl)
        if k == "MaxBurstLength":
            self.max_burst = min(num(262144), A.max_burst)
            return str(self.max_burst)
        if k == "FirstBurstLength":
            self.first_burst = min(num(65536), A.first_burst)
            return str(self.first_burst)
        if k == "InitialR2T":
            self.initial_r2t = v == "Yes" or A.initial_r2t == "Yes"
            return "Yes" if self.initial_r2t else "No"
        if k == "ImmediateData":
            self.immediate_data = v == "Yes" and A.immediate_data == "Yes"
            return "Yes" if self.immediate_data else "No"
        if k == "MaxOutstandingR2T":
            return "1"
        if k in ("DataPDUInOrder", "DataSequenceInOrder"):
            return "Yes"
        if k == "ErrorRecoveryLevel":
            return "0"
        if k == "DefaultTime2Wait":
            return str(max(num(2), 2))
        if k == "DefaultTime2Retain":
            return "0"
        if k == "MaxConnections":
            return "1"
        if k in ("IFMarker", "OFMarker", "RDMAExtensions"):
            return "No"
        return "NotUnderstood"

    # -- full feature phase PDUs -----------------------------------------

    def on_nop_out(self, pdu):
        if pdu.itt == NO_ITT:
            return      # the answer to one of our NOP-Ins
        self.log("nop-out itt=0x%08x", pdu.itt)
        h = self.header(0x20, 0x80, pdu.itt, pdu.lun_raw)
        put(h, 20, 4, NO_ITT)
        self.send(h, pdu.data[:self.peer_mrdsl])
        if self.fire("nop-itt-datain", "itt=0x%08x" % pdu.itt):
            self.send_datain(pdu.itt, pdu.lun_raw, 0, 0, bytes(512),
                             0x80, statsn=False)

    def on_text(self, pdu):
        keys = parse_keys(pdu.data)
        out = b""
        if keys.get("SendTargets") is not None:
            self.log("sendtargets %s", keys["SendTargets"])
            out = sendtargets_blob(self.port)
        else:
            out = keys_blob([(k, "NotUnderstood") for k in keys])
        h = self.header(0x24, 0x80, pdu.itt, pdu.lun_raw)
        put(h, 20, 4, NO_ITT)
        self.send(h, out)

    def on_logout(self, pdu):
        self.log("logout reason %d cmdsn=0x%08x exp=0x%08x", pdu.flags & 0x7F,
                 u32(pdu.hdr, 24), self.expcmdsn)
        if self.fire("reject-logout"):
            self.send_reject(pdu, 0x09)
            return
        h = self.header(0x26, 0x80, pdu.itt)
        put(h, 40, 2, 2)
        self.send(h)
        self.closed = True

    def on_tmf(self, pdu):
        func = pdu.flags & 0x7F
        rtt = u32(pdu.hdr, 20)
        self.log("tmf function %d rtt 0x%08x", func, rtt)
        self.tasks.pop(rtt, None)
        h = self.header(0x22, 0x80, pdu.itt)
        self.send(h)

    def on_snack(self, pdu):
        self.send_reject(pdu, 0x05)

    def send_reject(self, pdu, reason):
        h = self.header(0x3F, 0x80)
        h[2] = reason
        put(h, 16, 4, NO_ITT)
        self.send(h, bytes(pdu.hdr))

    def send_async_logout(self):
        h = self.header(0x32, 0x80)
        h[36] = 1
        put(h, 42, 2, 5)
        self.send(h)

    def nop_flood(self):
        n = 0
        try:
            while not self.closed:
                h = self.header(0x20, 0x80, NO_ITT, statsn=False)
                put(h, 20, 4, 0x7000_0000 + (n & 0xFFFFFF))
                self.send(h)
                n += 1
                if n == 1:
                    self.log("fired nop-flood")
        except OSError:
            pass
        self.log("nop-flood sent %d", n)

    def advance(self, pdu):
        cmdsn = u32(pdu.hdr, 24)
        if ((cmdsn - self.expcmdsn) & 0xFFFFFFFF) < 0x80000000:
            self.expcmdsn = (cmdsn + 1) & 0xFFFFFFFF

    # -- SCSI ------------------------------------------------------------

    def on_scsi_cmd(self, pdu):
        h = pdu.hdr
        lun = ((h[8] & 0x3F) << 8) | h[9]
        edtl = u32(h, 20)
        cdb = bytes(h[32:48]) + (pdu.ahs[4:] if pdu.ahs else b"")
        self.ncmds += 1
        self.log("cmd lun=%d %s cmdsn=0x%08x%s", lun, describe_cdb(cdb),
                 u32(h, 24), " imm" if pdu.immediate else "")
        if self.normal() and self.active("no-answer"):
            return
        if self.ua_stalled and cdb[0] in READ_OPS:
            if not self.closed:
                threading.Timer(3.0, self.close_now).start()
            return
        if self.ncmds == 4 and self.fire("async-logout"):
            self.send_async_logout()
        if pdu.flags & 0x20 and edtl:
            t = Task(pdu, lun, cdb, edtl)
            imm = pdu.data[:edtl]
            t.buf[:len(imm)] = imm
            t.got = len(imm)
            self.tasks[pdu.itt] = t
            if cdb[0] in WRITE_OPS and self.fire("r2t-huge"):
                self.send_r2t(t, 0, 0xFFFFFFFF)
                if t.got >= edtl:
                    self.complete(t)
                return
            if t.got >= edtl:
                self.complete(t)
            elif pdu.flags & 0x80 or self.initial_r2t:
                self.next_r2t(t)
            return
        self.execute(pdu, lun, cdb, edtl, b"")

    def on_data_out(self, pdu):
        t = self.tasks.get(pdu.itt)
        if t is None:
            self.log("data-out for unknown itt 0x%08x", pdu.itt)
            return
        off = u32(pdu.hdr, 40)
        data = pdu.data
        if off < t.edtl:
            piece = data[:t.edtl - off]
            t.buf[off:off + len(piece)] = piece
        t.got += len(data)
        if not pdu.flags & 0x80:
            return
        if t.got >= t.edtl:
            self.complete(t)
        elif u32(pdu.hdr, 20) == NO_ITT or t.got >= t.r2t_end:
            self.next_r2t(t)

    def next_r2t(self, t):
        off = t.got
        if off >= 512 and self.fire("r2t-overlap"):
            off -= 512
        n = min(self.max_burst, t.edtl - off)
        self.send_r2t(t, off, n)

    def send_r2t(self, t, off, n):
        self.ttts = (self.ttts + 1) & 0x7FFFFFFF
        t.ttt = self.ttts
        t.r2t_end = off + n
        h = self.header(0x31, 0x80, t.pdu.itt, t.pdu.lun_raw, statsn=False)
        put(h, 20, 4, t.ttt)
        put(h, 36, 4, t.r2tsn)
        put(h, 40, 4, off)
        put(h, 44, 4, n)
        t.r2tsn += 1
        self.send(h)

    def complete(self, t):
        self.tasks.pop(t.pdu.itt, None)
        self.execute(t.pdu, t.lun, t.cdb, t.edtl, bytes(t.buf))

    def execute(self, pdu, lun, cdb, edtl, dout):
        op = cdb[0]
        for m, st in (("busy", 0x08), ("task-set-full", 0x28)):
            if (self.normal() and m in self.modes
                    and op in READ_OPS + WRITE_OPS):
                self.busy_turn = not getattr(self, "busy_turn", False)
                if self.busy_turn:
                    self.active(m)
                    self.send_status(pdu, st)
                    return
        try:
            self.pre_checks(lun, op)
            handler = SCSI_HANDLERS.get(op)
            if handler is None:
                raise illegal(0x20)
            data = handler(self, DISKS[lun] if lun < len(DISKS) else None,
                           cdb, dout)
        except Check as e:
            self.log("check lun=%d op=0x%02x %s", lun, op, e)
            self.send_status(pdu, CHECK,
                             sense_data(e.key, e.asc, e.ascq))
            return
        if data is None:
            self.send_status(pdu, GOOD)
        elif op in READ_OPS:
            self.reply_read(pdu, data, edtl)
        elif op == 0x12 and self.fire("inquiry-flood"):
            self.flood_inquiry(pdu)
        else:
            self.reply_data(pdu, data, edtl)

    def note_capacity(self):
        for m in ("capacity-zero", "capacity-huge", "block-len-odd"):
            self.active(m, "blocks=%d len=%d" % (reported_blocks(),
                                                 reported_block_len()))

    def close_now(self):
        """ua-then-stall: end the connection (from a timer thread)."""
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def pre_checks(self, lun, op):
        if op in (0x12, 0xA0):
            return      # INQUIRY and REPORT LUNS never fail on the LUN
        if lun >= len(DISKS):
            raise illegal(0x25)
        if op == 0x03:
            return
        if self.normal() and "unit-attention" in self.modes:
            self.ua_due = not self.ua_due
            if not self.ua_due:
                self.active("unit-attention")
                raise Check(0x06, 0x29, 0x00)
        if (op in READ_OPS and self.normal() and not self.ua_stalled
                and self.active("ua-then-stall")):
            self.ua_stalled = True
            raise Check(0x06, 0x29, 0x00)
        if lun not in self.ua_luns and "unit-attention-once" in self.modes:
            self.ua_luns.add(lun)
            self.log("fired unit-attention-once lun=%d", lun)
            raise Check(0x06, 0x29, 0x00)

    def send_status(self, pdu, status, sense=None, flags=0, resid=0,
                    itt=None, ahs=b"", sense_len=None):
        h = self.header(0x21, 0x80 | flags,
                        pdu.itt if itt is None else itt)
        h[2], h[3] = 0, status
        put(h, 44, 4, resid)
        data = b""
        if sense is not None:
            n = len(sense) if sense_len is None else sense_len
            data = be(2, n) + sense
        if self.ncmds and self.fire("ahs"):
            ahs = b"\x00\x05\x02\x00" + be(4, 0)
        self.send(h, data, ahs)

    def send_datain(self, itt, lun, datasn, offset, data, flags,
                    status=None, resid=0, statsn=None, dsl=None):
        """One Data-In; STATUS set means phase collapse (S bit)."""
        if status is not None:
            flags |= 0x81
        h = self.header(0x25, flags, itt, lun,
                        statsn=status is not None if statsn is None
                        else statsn)
        if status is not None:
            h[3] = status
        put(h, 20, 4, NO_ITT)
        put(h, 36, 4, datasn)
        put(h, 40, 4, offset)
        put(h, 44, 4, resid)
        self.send(h, data, dsl=dsl)

    def data_in(self, pdu, data, offset=0, datasn=0, last=True,
                resid_flags=0, resid=0, itt=None):
        """DATA at OFFSET in MRDSL-sized Data-Ins; the last one carries
        status GOOD when LAST.  Returns the next DataSN."""
        itt = pdu.itt if itt is None else itt
        step = max(512, self.peer_mrdsl)
        pos = 0
        if not data and last:
            self.send_status(pdu, GOOD, flags=resid_flags, resid=resid,
                             itt=itt)
            return datasn
        while pos < len(data):
            piece = data[pos:pos + step]
            end = pos + len(piece) >= len(data)
            burst_end = (offset + pos + len(piece)) % self.max_burst == 0
            flags = 0x80 if end or burst_end else 0
            if end and last:
                self.send_datain(itt, pdu.lun_raw, datasn, offset + pos,
                                 piece, flags | resid_flags, status=GOOD,
                                 resid=resid)
            else:
                self.send_datain(itt, pdu.lun_raw, datasn, offset + pos,
                                 piece, flags)
            datasn += 1
            pos += len(piece)
        return datasn

    def reply_data(self, pdu, data, edtl):
        """The normal answer: DATA cut to EDTL, with O/U residuals."""
        if len(data) > edtl:
            self.data_in(pdu, data[:edtl], resid_flags=0x04,
                         resid=len(data) - edtl)
        elif len(data) < edtl:
            self.data_in(pdu, data, resid_flags=0x02,
                         resid=edtl - len(data))
        else:
            self.data_in(pdu, data)

    def reply_read(self, pdu, data, edtl):
        """A READ's answer, where most of the modes strike."""
        n = len(data)
        lun = pdu.lun_raw
        if self.fire("truncated-pdu"):
            self.send_raw(bytes([0x25, 0x80]) + bytes(22))
            self.closed = True
            self.sock.shutdown(socket.SHUT_RDWR)
            return
        if self.fire("truncated-pdu-stall"):
            self.send_raw(bytes([0x25, 0x80]) + bytes(22))
            self.stall = True
            return
        if self.fire("huge-dsl", "len=%d" % n):
            huge = 0xFFFFFF
            self.send_datain(pdu.itt, lun, 0, 0, (data * (huge // max(n, 1)
                             + 1))[:huge], 0x80, status=GOOD)
            return
        if self.fire("wrong-itt", "itt=0x%08x" % pdu.itt):
            bad = pdu.itt ^ 0x5A5A0000
            self.send_datain(bad, lun, 0, 0, data, 0x80, statsn=False)
            self.send_status(pdu, GOOD, itt=bad)
        if self.login_itt is not None and self.fire(
                "login-itt-datain", "itt=0x%08x" % self.login_itt):
            self.send_datain(self.login_itt, lun, 0, 0, data, 0x80,
                             statsn=False)
        if self.fire("offset-past-buffer", "edtl=%d" % edtl):
            self.send_datain(pdu.itt, lun, 0, edtl + 4096,
                             data[:4096] or bytes(512), 0)
            self.data_in(pdu, data, datasn=1)
            return
        if n >= 2 and self.fire("datain-overlap", "len=%d" % n):
            sn = self.data_in(pdu, data, last=False)
            self.data_in(pdu, data[n // 2:], offset=n // 2, datasn=sn)
            return
        if n >= 4 and self.fire("datain-gap", "len=%d" % n):
            sn = self.data_in(pdu, data[:n // 4], last=False)
            self.data_in(pdu, data[n // 2:], offset=n // 2, datasn=sn)
            return
        half = (n // 2) - (n // 2) % 512 if n > 512 else n // 2
        if n >= 2 and self.fire("underflow", "len=%d sent=%d" % (n, half)):
            self.data_in(pdu, data[:half], resid_flags=0x02,
                         resid=edtl - half)
            return
        if n >= 2 and self.fire("underflow-silent",
                                "len=%d sent=%d" % (n, half)):
            self.data_in(pdu, data[:half])
            return
        if self.fire("recovered-no-data"):
            self.send_status(pdu, CHECK, sense_data(0x01, 0x17, 0x01))
            return
        if self.fire("odd-sense"):
            self.odd_sense_turn += 1
            s = bytearray(sense_data(0x03, 0x11, 0x00))
            if self.odd_sense_turn % 2:
                s[7] = 250      # additional length past the buffer too
                self.send_status(pdu, CHECK, bytes(s), sense_len=4000)
            else:
                self.send_status(pdu, CHECK, bytes(s), sense_len=0)
            return
        self.reply_data(pdu, data, edtl)

    def flood_inquiry(self, pdu):
        total = 1 << 30
        step = max(512, self.peer_mrdsl)
        chunk = bytes(step)
        sn = 0
        try:
            for off in range(0, total, step):
                self.send_datain(pdu.itt, pdu.lun_raw, sn, off, chunk, 0)
                sn += 1
            self.send_status(pdu, GOOD)
        finally:
            self.log("inquiry-flood sent %d pdus", sn)


# -- SCSI command handlers: (conn, disk, cdb, data-out) -> data or None --

def check_range(lba, n):
    if lba + n > reported_blocks() and "capacity-huge" not in A.modes:
        raise illegal(0x21)


def scsi_tur(c, d, cdb, dout):
    return None


def scsi_request_sense(c, d, cdb, dout):
    return sense_data(0, 0, 0)


def scsi_inquiry(c, d, cdb, dout):
    evpd, page = cdb[1] & 1, cdb[2]
    lun = DISKS.index(d) if d is not None else None
    pq = 0x00 if d is not None else 0x7F
    esc = c.active("escape-text")
    if not evpd:
        if page:
            raise illegal()
        vendor = "\x1b[2J\x1b[H" if esc else "HOSTILE"
        product = ESC_NAME if esc else "hostile-target"
        return bytes([pq, 0, 6, 0x12, 91, 0, 0, 0x02]) + padded(vendor, 8) \
            + padded(product, 16) + padded("0001", 4) + bytes(60)
    if d is None:
        raise illegal(0x25)
    if page == 0x00:
        body = bytes([0x00, 0x80, 0x83, 0xB0, 0xB1, 0xB2])
    elif page == 0x80:
        body = ("HT%05d%03d" % (c.port, lun)).encode()
    elif page == 0x83:
        naa = bytes([0x60 | 0x0D, 0x65, 0x73, 0x74]) + be(4, c.port) + \
            be(4, lun) + be(4, 0x686F7374)
        t10 = padded("HOSTILE", 8) + (ESC_NAME if esc else
                                      "hostile-%d" % lun).encode("latin-1")
        body = bytes([0x01, 0x03, 0x00, 16]) + naa + \
            bytes([0x02, 0x01, 0x00, len(t10)]) + t10
    elif page == 0xB0:
        b = bytearray(60)
        put(b, 2, 2, A.opt_gran)
        put(b, 4, 4, A.max_xfer)
        put(b, 8, 4, A.opt_xfer)
        put(b, 16, 4, A.max_unmap)
        put(b, 20, 4, 64)
        put(b, 24, 4, A.unmap_gran)
        put(b, 32, 8, A.max_ws)
        body = bytes(b)
    elif page == 0xB1:
        body = bytes([0x00, 0x01]) + bytes(58)
    elif page == 0xB2:
        flags = 0x80 | 0x40 | 0x20 | (0x04 if A.lbprz else 0)
        body = bytes([0, flags, 0x02 if A.lbpme else 0, 0])
    else:
        raise illegal()
    return bytes([pq, page]) + be(2, len(body)) + body


def scsi_read_capacity10(c, d, cdb, dout):
    last = (reported_blocks() - 1) & ((1 << 64) - 1)
    c.note_capacity()
    return be(4, min(last, 0xFFFFFFFF)) + be(4, reported_block_len())


def scsi_service_action_in(c, d, cdb, dout):
    sa = cdb[1] & 0x1F
    if sa == 0x10:
        c.note_capacity()
        last = (reported_blocks() - 1) & ((1 << 64) - 1)
        b = bytearray(32)
        put(b, 0, 8, last)
        put(b, 8, 4, reported_block_len())
        b[13] = A.phys_exp & 0x0F
        b[14] = (0x80 if A.lbpme else 0) | (0x40 if A.lbprz else 0)
        return bytes(b)
    if sa == 0x12:
        return get_lba_status(c, d, cdb)
    raise illegal()


def get_lba_status(c, d, cdb):
    lba, alloc = u64(cdb, 2), u32(cdb, 10)
    cap = reported_blocks()
    if lba >= cap:
        raise illegal(0x21)
    limit = max(1, (min(alloc, 65536) - 8) // 16)
    out = b""
    n = 0
    for start, length, dealloc in d.runs(lba, limit, cap):
        while length and n < limit:
            if A.gls_zero_length:
                piece, shown = length, length & 0xFFFFFFFF
                if length >> 32:
                    c.log("fired gls-zero-length lba=%d blocks=%d shown=%d",
                          start, length, shown)
            else:
                piece = shown = min(length, 0xFFFFFFFF)
            out += be(8, start) + be(4, shown) + bytes([dealloc]) + bytes(3)
            start += piece
            length -= piece
            n += 1
    return be(4, len(out) + 4) + bytes(4) + out


def scsi_report_luns(c, d, cdb, dout):
    luns = b"".join(be(2, n if n < 256 else 0x4000 | n) + bytes(6)
                    for n in range(len(DISKS)))
    return be(4, len(luns)) + bytes(4) + luns


def mode_pages(page):
    caching = bytes([0x08, 0x12, 0x04 if A.wce else 0]) + bytes(17)
    control = bytes([0x0A, 0x0A, 0x02]) + bytes(9)
    if page == 0x08:
        return caching
    if page == 0x0A:
        return control
    if page == 0x3F:
        return caching + control
    raise illegal()


def scsi_mode_sense6(c, d, cdb, dout):
    pages = mode_pages(cdb[2] & 0x3F)
    return bytes([len(pages) + 3, 0, 0x10, 0]) + pages


def scsi_mode_sense10(c, d, cdb, dout):
    pages = mode_pages(cdb[2] & 0x3F)
    return be(2, len(pages) + 6) + bytes([0, 0x10, 0, 0, 0, 0]) + pages


def rw_args(cdb):
    op = cdb[0]
    if op in (0x08, 0x0A):
        lba = ((cdb[1] & 0x1F) << 16) | u16(cdb, 2)
        return lba, cdb[4] or 256
    if op in (0x28, 0x2A, 0x2F, 0x35, 0x41):
        return u32(cdb, 2), u16(cdb, 7)
    if op in (0xA8, 0xAA):
        return u32(cdb, 2), u32(cdb, 6)
    return u64(cdb, 2), u32(cdb, 10)


def scsi_read(c, d, cdb, dout):
    lba, n = rw_args(cdb)
    check_range(lba, n)
    if n > 65536:
        raise illegal()
    return d.read(lba, n)


def scsi_write(c, d, cdb, dout):
    lba, n = rw_args(cdb)
    check_range(lba, n)
    if len(dout) < n * d.bs:
        raise illegal()
    if lba + n > d.nblocks // 2 and c.active("thin-full"):
        raise Check(0x07, 0x27, 0x07)
    d.write(lba, dout[:n * d.bs])
    return None


def scsi_sync(c, d, cdb, dout):
    return None


def scsi_write_same(c, d, cdb, dout):
    lba, n = rw_args(cdb)
    unmap = bool(cdb[1] & 0x08)
    ndob = cdb[0] == 0x93 and bool(cdb[1] & 0x01)
    if cdb[0] == 0x93 and A.write_same_refuse:
        how = A.write_same_refuse
        if how == "invalid-opcode":
            c.log("fired write-same-refuse invalid-opcode")
            raise illegal(0x20)
        if how == "invalid-field" or "ws-refused" not in c.fired:
            c.fired.add("ws-refused")
            c.log("fired write-same-refuse %s", how)
            raise illegal(0x24)
    if n == 0:
        n = reported_blocks() - lba
    check_range(lba, n)
    if n > A.max_ws:
        raise illegal()
    block = bytes(d.bs) if ndob else dout[:d.bs]
    if len(block) < d.bs:
        raise illegal()
    d.fill(lba, n, block, unmap)
    return None


def scsi_unmap(c, d, cdb, dout):
    if len(dout) < 8:
        return None
    n = u16(dout, 2)
    for off in range(8, min(len(dout), 8 + n) - 15, 16):
        lba, cnt = u64(dout, off), u32(dout, off + 8)
        check_range(lba, cnt)
        d.unmap(lba, cnt)
    return None


def scsi_pr_in(c, d, cdb, dout):
    sa = cdb[1] & 0x1F
    if sa in (0, 1):
        return be(4, 0) + be(4, 0)
    if sa == 2:
        return bytes([0, 8, 0, 0, 0, 0, 0, 0])
    raise illegal()


def scsi_pr_out(c, d, cdb, dout):
    return None


def scsi_maintenance_in(c, d, cdb, dout):
    raise illegal()


SCSI_HANDLERS = {
    0x00: scsi_tur, 0x03: scsi_request_sense, 0x12: scsi_inquiry,
    0x1A: scsi_mode_sense6, 0x5A: scsi_mode_sense10,
    0x1B: scsi_tur, 0x1E: scsi_tur, 0x2F: scsi_tur,
    0x25: scsi_read_capacity10, 0x9E: scsi_service_action_in,
    0xA0: scsi_report_luns,
    0x08: scsi_read, 0x28: scsi_read, 0xA8: scsi_read, 0x88: scsi_read,
    0x0A: scsi_write, 0x2A: scsi_write, 0xAA: scsi_write, 0x8A: scsi_write,
    0x35: scsi_sync, 0x91: scsi_sync,
    0x41: scsi_write_same, 0x93: scsi_write_same, 0x42: scsi_unmap,
    0x5E: scsi_pr_in, 0x5F: scsi_pr_out, 0xA3: scsi_maintenance_in,
}

PDU_HANDLERS = {
    0x00: Conn.on_nop_out, 0x01: Conn.on_scsi_cmd, 0x02: Conn.on_tmf,
    0x03: Conn.on_login, 0x04: Conn.on_text, 0x05: Conn.on_data_out,
    0x06: Conn.on_logout, 0x10: Conn.on_snack,
}


def describe_cdb(cdb):
    op = cdb[0]
    name = OP_NAMES.get(op, "op-0x%02x" % op)
    if op in READ_OPS + WRITE_OPS + (0x2F, 0x35, 0x41, 0x91, 0x93):
        lba, n = rw_args(cdb)
        return "%s lba=%d len=%d" % (name, lba, n)
    if op == 0x12:
        return "%s evpd=%d page=0x%02x" % (name, cdb[1] & 1, cdb[2])
    if op == 0x9E:
        return "%s sa=0x%02x lba=%d" % (name, cdb[1] & 0x1F, u64(cdb, 2))
    return name


def parse_keys(data):
    keys = {}
    for item in data.split(b"\0"):
        if b"=" in item:
            k, v = item.split(b"=", 1)
            keys[k.decode("latin-1")] = v.decode("latin-1")
    return keys


def keys_blob(pairs):
    return b"".join(("%s=%s" % kv).encode("latin-1") + b"\0" for kv in pairs)


def host_for_text():
    return "[%s]" % A.host if ":" in A.host else A.host


def target_names():
    names = [A.iqn]
    if "escape-text" in A.modes:
        names.append(A.iqn + ":" + ESC_NAME + "red")
    return names


def sendtargets_blob(port):
    pairs = []
    for name in target_names():
        pairs.append(("TargetName", name))
        addr = "%s:%d,1" % (host_for_text(), port)
        pairs.append(("TargetAddress", addr))
        if "escape-text" in A.modes:
            pairs.append(("TargetAddress", "%s:%d,1%s" % (host_for_text(),
                                                         port, ESC_NAME)))
    return keys_blob(pairs)


def listen(port):
    fam = socket.AF_INET6 if ":" in A.host else socket.AF_INET
    s = socket.socket(fam, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((A.host, port))
    s.listen(64)
    return s


def accept_loop(srv, modes, once=False):
    port = srv.getsockname()[1]
    while True:
        sock, peer = srv.accept()
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn = Conn(sock, "%s:%d" % peer[:2], modes, port)
        if once:
            conn.serve()
            return
        threading.Thread(target=conn.serve, daemon=True).start()


def parse_args(argv):
    p = argparse.ArgumentParser(
        description="A deliberately misbehaving iSCSI target for tests.")
    p.add_argument("--port", type=int, default=3260)
    p.add_argument("--host", default="127.0.0.1",
                   choices=("127.0.0.1", "::1", "localhost"))
    p.add_argument("--iqn", default="iqn.2026-01.test.lungate:hostile")
    p.add_argument("--size", type=int, default=64 << 20,
                   help="bytes served per LUN (default 64 MiB)")
    p.add_argument("--block-size", type=int, default=512,
                   choices=(512, 4096))
    p.add_argument("--luns", type=int, default=1)
    p.add_argument("--mode", default="good",
                   help="comma-separated modes; see --list-modes")
    p.add_argument("--repeat", default="conn",
                   choices=("conn", "once", "always"),
                   help="one-shot modes act: first time per connection "
                   "(default), first time in the process, or every time")
    p.add_argument("--once", action="store_true",
                   help="serve one connection, then exit")
    p.add_argument("--log", help="append one line per event to FILE")
    p.add_argument("--spare", type=int, default=0, metavar="N",
                   help="the first N connections behave well (nbdkit's "
                   "check before it listens), the later ones as --mode says")
    p.add_argument("--armed-by", metavar="FILE",
                   help="behave well until FILE exists, then as --mode "
                   "says (a mode that strikes once the gateway is up)")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="also log to stderr")
    p.add_argument("--list-modes", action="store_true")
    p.add_argument("--lbprz", type=int, default=1, choices=(0, 1))
    p.add_argument("--lbpme", type=int, default=1, choices=(0, 1))
    p.add_argument("--wce", type=int, default=1, choices=(0, 1))
    p.add_argument("--opt-gran", type=int, default=8,
                   help="VPD 0xb0 optimal transfer length granularity")
    p.add_argument("--max-xfer", type=int, default=2048,
                   help="VPD 0xb0 maximum transfer length (blocks)")
    p.add_argument("--opt-xfer", type=int, default=256)
    p.add_argument("--max-unmap", type=int, default=0x100000)
    p.add_argument("--unmap-gran", type=int, default=8)
    p.add_argument("--max-ws", type=int, default=0x100000,
                   help="VPD 0xb0 maximum WRITE SAME length (blocks)")
    p.add_argument("--capacity-blocks", type=lambda s: int(s, 0),
                   help="block count to report (any 64-bit value)")
    p.add_argument("--block-size-report", type=int,
                   help="block length READ CAPACITY reports")
    p.add_argument("--phys-exp", type=int, default=0,
                   help="logical blocks per physical block exponent")
    p.add_argument("--write-same-refuse",
                   choices=("invalid-field", "invalid-opcode", "once"))
    p.add_argument("--gls-zero-length", action="store_true",
                   help="GET LBA STATUS lengths truncated to 32 bits "
                   "(tgt): runs of 2^32 blocks show length 0")
    p.add_argument("--mrdsl", type=int, default=262144,
                   help="MaxRecvDataSegmentLength the target declares")
    p.add_argument("--first-burst", type=int, default=65536)
    p.add_argument("--max-burst", type=int, default=262144)
    p.add_argument("--initial-r2t", default="No", choices=("Yes", "No"))
    p.add_argument("--immediate-data", default="Yes", choices=("Yes", "No"))
    p.add_argument("--window", type=int, default=32,
                   help="command window (MaxCmdSN - ExpCmdSN + 1)")
    a = p.parse_args(argv)
    a.modes = set(m for m in a.mode.split(",") if m)
    bad = a.modes - set(MODES)
    if bad:
        p.error("unknown mode(s): %s (see --list-modes)"
                % ",".join(sorted(bad)))
    if a.host == "localhost":
        a.host = "127.0.0.1"
    if a.luns < 1 or a.luns > 16383:
        p.error("--luns must be 1..16383")
    return a


def main(argv):
    global A, LOG, STATE
    A = parse_args(argv)
    if A.list_modes:
        for name, desc in MODES.items():
            print("%-20s %s" % (name, desc))
        return 0
    LOG = Log(A.log, A.verbose)
    STATE = State()
    DISKS.extend(Disk() for _ in range(A.luns))
    srv = listen(A.port)
    port = srv.getsockname()[1]
    if "redirect" in A.modes:
        other = listen(0)
        STATE.redirect_port = other.getsockname()[1]
        good = A.modes - {"redirect", "redirect-loop"}
        threading.Thread(target=accept_loop, args=(other, good),
                         daemon=True).start()
        LOG("redirect target on port %d", STATE.redirect_port)
    LOG("ready %d modes %s", port, ",".join(sorted(A.modes)))
    print("ready %d" % port, flush=True)
    try:
        accept_loop(srv, A.modes, A.once)
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
