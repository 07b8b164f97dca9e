#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# A LUN that goes away under the plugin: reads and writes fail with an
# errno NBD carries, the log names the LUN, the command, the LBA range and
# the sense, and nothing hangs.
. "${srcdir:-.}/functions-nbd.sh"
require_lungate_plugin
require_nbd_python
tgt_start
t=iqn.2026-11.org.lungate:gone
tgt_add_target 1 "$t"
tgt_add_lun 1 1 16M
tgt_allow 1 ALL
export TGT_IPC_SOCKET="$TGT_DIR/sock"

nbd_run "url=iscsi://$TGT_PORTAL/$t/1" -- "$NBD_PYTHON" - '$uri' \
  2>"$TGT_DIR/nbdkit.log" <<'PY' || { cat "$TGT_DIR/nbdkit.log" >&2; fail "LUN removal"; }
import errno, nbd, subprocess, sys
h = nbd.NBD(); h.connect_uri(sys.argv[1])
h.pwrite(b"\x5a" * 65536, 1 << 20)
assert h.pread(4096, 1 << 20) == b"\x5a" * 4096
h.flush()  # with write-behind (test-faults-wb): tgt refuses to delete a busy LUN
subprocess.run(["tgtadm", "--lld", "iscsi", "--mode", "logicalunit",
                "--op", "delete", "--tid", "1", "--lun", "1"], check=True)
for op in ("read", "write"):
    try:
        if op == "read":
            h.pread(4096, 2 << 20)
        else:
            h.pwrite(b"x" * 4096, 3 << 20)
        sys.exit("%s from a removed LUN succeeded" % op)
    except nbd.Error as e:
        assert e.errnum in (errno.EIO, errno.ESHUTDOWN, errno.EINVAL), e
        print("%s failed as expected: %s" % (op, e))
PY
cat "$TGT_DIR/nbdkit.log"
grep -Eq "$t/1: READ\(16\) LBA 4096\+8: .*LOGICAL_UNIT_NOT_SUPPORTED" "$TGT_DIR/nbdkit.log" \
  || fail "the read error does not name the LUN, the LBA range and the sense"
grep -Eq "$t/1: WRITE\(16\) LBA 6144\+8: .*LOGICAL_UNIT_NOT_SUPPORTED" "$TGT_DIR/nbdkit.log" \
  || fail "the write error does not name the LUN, the LBA range and the sense"
echo "test-nbd-errors: ok"
