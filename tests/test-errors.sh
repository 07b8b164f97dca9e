#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# Each failure is clear, bounded in time, and writes nothing to the LUN:
# closed port, a peer that never answers, a target that does not exist, a
# LUN that does not exist, an initiator refused by the ACL.
. "${srcdir:-.}/functions.sh"
require_lungate
require python3 cmp
tgt_start
t=iqn.2026-11.org.lungate:errors
tgt_add_target 1 "$t"
tgt_add_lun 1 1 16M
tgt_add_lun 1 2 4K
tgt_allow_initiator 1 iqn.2026-11.org.lungate:allowed
url="iscsi://$TGT_PORTAL/$t"
lunfile=$(tgt_lun_file 1 1)
allowed=(--initiator-name iqn.2026-11.org.lungate:allowed)

# The allowed initiator gets in; another name does not.
with_timeout 60 "$LUNGATE" info "${allowed[@]}" "$url/1" | grep -q "^size: 16777216 " \
  || fail "the allowed initiator could not log in"
expect_fail_with "not authorized: its ACL does not admit initiator iqn.2026-11.org.lungate:intruder" \
  "$LUNGATE" info --initiator-name iqn.2026-11.org.lungate:intruder "$url/1"

# -v adds debug messages, -v -v the trace of every command as well.
d=$(scratch_dir)
with_timeout 60 "$LUNGATE" info "${allowed[@]}" "$url/1" >/dev/null 2>"$d/v0" || fail "info"
with_timeout 60 "$LUNGATE" -v info "${allowed[@]}" "$url/1" >/dev/null 2>"$d/v1" || fail "info -v"
with_timeout 60 "$LUNGATE" -v -v info "${allowed[@]}" "$url/1" >/dev/null 2>"$d/v2" || fail "info -v -v"
if grep -q "debug:\|trace:" "$d/v0"; then fail "info without -v prints debug messages"; fi
grep -q "^lungate: debug: " "$d/v1" || fail "info -v prints no debug message"
if grep -q "trace:" "$d/v1"; then fail "info -v already traces commands (that is -v -v)"; fi
grep -q "^lungate: trace: .*: INQUIRY: GOOD" "$d/v2" \
  || fail "info -v -v does not trace the commands"

# A LUN smaller than the lungate headers is a plain LUN, not an error.
with_timeout 60 "$LUNGATE" info "${allowed[@]}" "$url/2" >"$d/tiny" 2>&1 \
  || { cat "$d/tiny"; fail "info of a 4 KiB LUN"; }
grep -qx "lungate-volume: no" "$d/tiny" || { cat "$d/tiny"; fail "a 4 KiB LUN is not a plain LUN"; }
head -c 32 /dev/urandom >"$d/key"
expect_fail_with "too small to be a lungate volume" \
  "$LUNGATE" verify "${allowed[@]}" --key-file "$d/key" "$url/2"

# No such target, no such LUN.
expect_fail_with "iqn.2026-11.org.lungate:missing: target not found" \
  "$LUNGATE" info "${allowed[@]}" "iscsi://$TGT_PORTAL/iqn.2026-11.org.lungate:missing/1"
# ... and which LUNs do (issue 30, item 17: it did not say).
expect_fail_with "LUN 9 does not exist on this target \\(its LUNs: 0, 1, 2\\)" \
  "$LUNGATE" info "${allowed[@]}" "$url/9"
# README shows that message as it is (the audit of issue 30 found the
# old one there).
grep -q "^    lungate: iqn....: LUN 7 does not exist on this target (its LUNs: [0-9, ]*)\$" \
  "${top_srcdir:-..}/README" || fail "README's example of a missing LUN is not the message lungate gives"

# A closed port: refused at once.
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
start=$SECONDS
expect_fail_with "127.0.0.1:$port: cannot connect: Connection refused" \
  "$LUNGATE" info "iscsi://127.0.0.1:$port/$t/1"
[ $((SECONDS - start)) -le 5 ] || fail "a refused connection took $((SECONDS - start)) s"

# A peer that accepts and never answers: the login gives up within the
# connect timeout.
silent="$TGT_DIR/silent.port"
python3 - "$silent" <<'PY' &
import socket, sys, time
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen(8)
open(sys.argv[1] + ".tmp", "w").write(str(s.getsockname()[1]))
import os
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
conns = []
end = time.time() + 60
s.settimeout(1)
while time.time() < end:
    try:
        conns.append(s.accept())
    except OSError:
        pass
PY
silent_pid=$!
on_exit kill "$silent_pid"
for _ in $(seq 50); do [ -s "$silent" ] && break; sleep 0.1; done
[ -s "$silent" ] || fail "the silent listener did not start"
start=$SECONDS
expect_fail_with "timed out after 2 s" \
  "$LUNGATE" info --connect-timeout 2 "iscsi://127.0.0.1:$(cat "$silent")/$t/1"
el=$((SECONDS - start))
[ "$el" -le 6 ] || fail "a silent peer held the login for $el s (timeout 2 s)"
# The default (10 s) is bounded too.
start=$SECONDS
expect_fail_with "timed out after 10 s" \
  "$LUNGATE" discover "iscsi://127.0.0.1:$(cat "$silent")"
el=$((SECONDS - start))
[ "$el" -le 15 ] || fail "default connect timeout took $el s"

# Nothing of the above wrote to the LUN.
cmp -n 16777216 "$lunfile" /dev/zero || fail "the LUN was written to"
echo "test-errors: ok"
