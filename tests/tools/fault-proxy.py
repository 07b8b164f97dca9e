#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""An iSCSI-aware TCP proxy that breaks chosen answers of a real target.

    fault-proxy.py --listen PORT --target HOST:PORT --rules FILE --log FILE
                   [--hold FILE]

Each connection to 127.0.0.1:PORT is relayed to the target PDU by PDU
(no digests: the tests that use it leave them off).  The proxy notes the
CDB of every SCSI Command the initiator sends, by its task tag, and
applies the rules file, read again before every PDU, to what the target
answers.  One rule a line, '#' comments, fields KEY=VALUE:

  drop-response op=0x5f [sa=1] [lun=N] [count=N]
        the target executes the command; its SCSI Response (and any
        Data-In with status) is not delivered, and the connection is
        closed at once: an answer lost with the connection.
  drop-command op=0x5f [sa=3] [lun=N] [count=N]
        the initiator's command is not passed on (the target never sees
        it), and the connection is closed at once.
  flip-datain op=0x12 [lba=N] [lun=N] [bit=N] [count=N]
        one bit (default 0) of the first Data-In segment answering the
        command is flipped on its way to the initiator (plain TCP has no
        data digest).  lba: only a READ(16)/READ(10) starting there.
  cut [count=N]
        the next PDU from the target closes the connection instead.

count defaults to 1 (0: every time), counted by the line's number and
text (a rule written anew on the same line fires anew).  skip=N lets the
first N matching PDUs through before the rule fires.  With --hold FILE,
a drop-response, drop-command or cut that fires creates FILE, and new connections are
refused while it exists (the test changes the target meanwhile, then
removes it).  Every rule that fires appends
"fire LINE ACTION ITT" to the log file.
"""
import argparse
import os
import socket
import struct
import sys
import threading

lock = threading.Lock()
fired = {}  # (rule line, text) -> times fired
seen = {}  # (rule line, text) -> matches let through (skip=N)


def load_rules(path):
    rules = []
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except OSError:
        return rules
    for n, line in enumerate(lines, 1):
        line = line.split("#", 1)[0].split()
        if not line:
            continue
        r = {"line": n, "text": " ".join(line), "action": line[0], "count": 1}
        for kv in line[1:]:
            k, _, v = kv.partition("=")
            r[k] = int(v, 0)
        rules.append(r)
    return rules


def take(rule, log, itt):
    """Whether rule may fire again; counts it and logs it if so."""
    with lock:
        key = (rule["line"], rule["text"])
        if seen.get(key, 0) < rule.get("skip", 0):
            seen[key] = seen.get(key, 0) + 1
            return False
        n = fired.get(key, 0)
        if rule["count"] and n >= rule["count"]:
            return False
        fired[key] = n + 1
        with open(log, "a") as f:
            f.write("fire %d %s 0x%08x\n" % (rule["line"], rule["action"], itt))
    return True


def recv_exact(s, n):
    b = bytearray()
    while len(b) < n:
        c = s.recv(n - len(b))
        if not c:
            return None
        b += c
    return bytes(b)


def recv_pdu(s):
    bhs = recv_exact(s, 48)
    if bhs is None:
        return None
    ahs = bhs[4] * 4
    dsl = int.from_bytes(bhs[5:8], "big")
    rest = recv_exact(s, ahs + (dsl + 3) // 4 * 4)
    if rest is None:
        return None
    return bhs + rest


def cdb_matches(rule, cdb, lun):
    if "op" in rule and cdb[0] != rule["op"]:
        return False
    if "sa" in rule and cdb[1] & 0x1F != rule["sa"]:
        return False
    if "lun" in rule and lun != rule["lun"]:
        return False
    if "lba" in rule:
        if cdb[0] == 0x88:
            lba = struct.unpack(">Q", cdb[2:10])[0]
        elif cdb[0] == 0x28:
            lba = struct.unpack(">I", cdb[2:6])[0]
        else:
            return False
        if lba != rule["lba"]:
            return False
    return True


class Conn:
    def __init__(self, client, target, a):
        self.c, self.t, self.a = client, target, a
        self.tasks = {}  # itt -> (cdb, lun)
        self.flipped = set()

    def close(self):
        for s in (self.c, self.t):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def outbound(self):
        try:
            while True:
                p = recv_pdu(self.c)
                if p is None:
                    break
                if p[0] & 0x3F == 0x01:  # SCSI Command
                    itt = struct.unpack(">I", p[16:20])[0]
                    lun = struct.unpack(">H", p[8:10])[0] & 0x3FFF
                    with lock:
                        self.tasks[itt] = (p[32:48], lun)
                    if self.a.verbose:
                        print("cmd 0x%08x lun %d cdb %s" % (itt, lun, p[32:48].hex()),
                              file=sys.stderr, flush=True)
                    if any(r["action"] == "drop-command"
                           and cdb_matches(r, p[32:48], lun)
                           and take(r, self.a.log, itt)
                           for r in load_rules(self.a.rules)):
                        self.hold()
                        break
                self.t.sendall(p)
        except OSError:
            pass
        self.close()

    def inbound(self):
        try:
            while True:
                p = recv_pdu(self.t)
                if p is None:
                    break
                p = self.judge(bytearray(p))
                if p is None:
                    break
                self.c.sendall(p)
        except OSError:
            pass
        self.close()

    def hold(self):
        if self.a.hold:
            open(self.a.hold, "w").close()

    def judge(self, p):
        """The PDU to pass on, or None to close the connection."""
        op = p[0] & 0x3F
        itt = struct.unpack(">I", p[16:20])[0]
        rules = load_rules(self.a.rules)
        for r in rules:
            if r["action"] == "cut" and take(r, self.a.log, itt):
                self.hold()
                return None
        if op not in (0x21, 0x25):
            return p
        with lock:
            task = self.tasks.get(itt)
        if task is None:
            return p
        cdb, lun = task
        status = op == 0x21 or (op == 0x25 and p[1] & 0x01)
        for r in rules:
            if not cdb_matches(r, cdb, lun):
                continue
            if r["action"] == "drop-response" and status and take(r, self.a.log, itt):
                self.hold()
                return None
            if (r["action"] == "flip-datain" and op == 0x25
                    and int.from_bytes(p[5:8], "big") > 0
                    and itt not in self.flipped and take(r, self.a.log, itt)):
                self.flipped.add(itt)
                bit = r.get("bit", 0)
                at = 48 + p[4] * 4 + bit // 8
                p[at] ^= 1 << (bit % 8)
        return bytes(p)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--listen", type=int, required=True)
    ap.add_argument("--target", required=True)
    ap.add_argument("--rules", required=True)
    ap.add_argument("--log", required=True)
    ap.add_argument("--hold", default=None,
                    help="made when a cut or dropped answer fires; new "
                         "connections are refused while it exists")
    ap.add_argument("--verbose", action="store_true",
                    help="print every SCSI command to standard error")
    a = ap.parse_args()
    host, _, port = a.target.rpartition(":")
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", a.listen))
    ls.listen(64)
    print("listening", flush=True)
    while True:
        c, _ = ls.accept()
        if a.hold and os.path.exists(a.hold):
            c.close()
            continue
        try:
            t = socket.create_connection((host, int(port)))
        except OSError:
            c.close()
            continue
        for s in (c, t):
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        k = Conn(c, t, a)
        threading.Thread(target=k.outbound, daemon=True).start()
        threading.Thread(target=k.inbound, daemon=True).start()


if __name__ == "__main__":
    sys.exit(main())
