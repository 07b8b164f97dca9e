#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# The fault-injection harness itself (tests/tools/faultio.c under tgtd,
# through the plugin): fail:ERRNO reaches the client as EIO and leaves
# the data alone, drop acknowledges without writing, delay holds a read,
# count limits how often a rule fires (0: always) and survives a re-read
# of the rules, path= and match= select, fault_clear removes every rule.
# A few seconds; the stall tests (test-fault-stall*.sh) depend on it.
. "${srcdir:-.}/functions-fault.sh"
require_lungate_plugin
require_nbd_python
fault_tgt_start
t=iqn.2026-11.org.lungate:harness
tgt_add_target 1 "$t"
tgt_add_lun 1 1 16M
tgt_allow 1 ALL
img=$(tgt_lun_file 1 1)
sock="$TGT_DIR/nbd.sock"
"${NBDKIT[@]}" -f -U "$sock" "$LUNGATE_PLUGIN" "url=iscsi://$TGT_PORTAL/$t/1" \
  2>"$TGT_DIR/nbdkit.log" &
gw=$!
on_exit nbd_stop "$gw"
for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.1; done
[ -S "$sock" ] || { cat "$TGT_DIR/nbdkit.log" >&2; fail "the gateway did not start"; }

# io write|read OFF [WORD]: a 4096-byte write of WORD repeated, or a read
# (prints the first word and the seconds it took); exit 5 on EIO.
io ()
{
  with_timeout 60 env -u LD_PRELOAD "$NBD_PYTHON" - "$sock" "$@" <<'PY'
import errno, nbd, sys, time
sock, op, off = sys.argv[1], sys.argv[2], int(sys.argv[3])
h = nbd.NBD(); h.connect_uri("nbd+unix:///?socket=" + sock)
t = time.monotonic()
try:
    if op == "write":
        w = sys.argv[4].encode()
        h.pwrite((w * (4096 // len(w) + 1))[:4096], off)
        h.flush()
    else:
        d = h.pread(4096, off)
        print(d[:6].replace(b"\0", b".").decode("ascii", "replace"),
              "%.1f" % (time.monotonic() - t))
except nbd.Error as e:
    if e.errnum != errno.EIO:
        print("error:", e, file=sys.stderr)
    sys.exit(5 if e.errnum == errno.EIO else 6)
PY
}
# disk OFF: the first 6 bytes of the backing file at OFF.
disk ()
{
  dd if="$img" bs=1 skip="$1" count=6 status=none | tr '\0' '.'
}
expect_io () # STATUS io-args...
{
  local want=$1 rc=0
  shift
  io "$@" >/dev/null || rc=$?
  [ "$rc" -eq "$want" ] || fail "io $*: status $rc, expected $want"
}

# fail: the first matching write fails (EIO), the data is not written;
# the second goes through (count=1).
fault_rule "op=write path=lun-1-1.img match=FAILME action=fail:5"
expect_io 5 write 0 FAILME
[ "$(disk 0)" = "......" ] || fail "a failed write reached the disk: $(disk 0)"
fault_log_has '^fire 1 write 0 4096$' || fail "no 'fire 1' in the log"
expect_io 0 write 0 FAILME
[ "$(disk 0)" = FAILME ] || fail "the second write did not land: $(disk 0)"

# drop, count=2: two writes acknowledged and lost, the third lands.
fault_rule "op=write match=DROPME action=drop count=2"
expect_io 0 write 8192 DROPME
expect_io 0 write 8192 DROPME
[ "$(disk 8192)" = "......" ] || fail "a dropped write reached the disk"
expect_io 0 write 8192 DROPME
[ "$(disk 8192)" = DROPME ] || fail "the write after two drops did not land"
[ "$(grep -c '^fire 2 ' "$FAULT_LOG")" -eq 2 ] || fail "drop fired other than twice"

# The rules file is re-read with a new line: lines 1 and 2 keep their
# counts (they do not fire again).
fault_rule "op=read off=12288-12289 action=delay:1500"
expect_io 0 write 0 FAILME
expect_io 0 write 8192 DROPME
[ "$(grep -c '^fire 1 ' "$FAULT_LOG")" -eq 1 ] || fail "rule 1 fired again after a re-read"

# delay: a read overlapping [12288, 12289) waits 1.5 s, once.
out=$(io read 12288) || fail "the delayed read failed"
awk -v s="${out#* }" 'BEGIN { exit !(s >= 1.4) }' || fail "the read was not delayed: $out"
fault_log_has '^delay-end 3 read 12288 4096 4096$' || fail "no delay-end for rule 3"
out=$(io read 12288) || fail "read"
awk -v s="${out#* }" 'BEGIN { exit !(s < 1.0) }' || fail "the delay fired twice: $out"

# count=0 fires every time; path= that does not match never fires;
# fault_clear removes the rules.
fault_clear
fault_rule "op=write match=ALWAYS action=fail:5 count=0"
fault_rule "op=write path=no-such-file match=PATHNO action=fail:5"
expect_io 5 write 16384 ALWAYS
expect_io 5 write 16384 ALWAYS
expect_io 0 write 20480 PATHNO
[ "$(disk 20480)" = PATHNO ] || fail "path= did not keep the rule away"
fault_clear
expect_io 0 write 16384 ALWAYS
[ "$(disk 16384)" = ALWAYS ] || fail "a write after fault_clear did not land"
_lg_alive "$gw" || fail "the gateway died"
echo "test-fault-harness: ok"
