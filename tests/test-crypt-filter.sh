#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# The crypt layer as an nbdkit filter over another plugin (here nbdkit's
# file plugin on the LUN's backing file): it reads what the lungate plugin
# wrote over iSCSI, and the plugin reads what it writes.
. "${srcdir:-.}/functions-nbd.sh"
require_lungate_plugin
require_nbd_python
require nbdcopy cmp
[ -f "${LUNGATE_FILTER:-}" ] || fail "LUNGATE_FILTER not built"
tgt_start
t=iqn.2026-11.org.lungate:filter
tgt_add_target 1 "$t"
tgt_add_lun 1 1 32M
tgt_allow 1 ALL
url="iscsi://$TGT_PORTAL/$t/1"
f=$(tgt_lun_file 1 1)
key="$TGT_DIR/key"; head -c 32 /dev/urandom >"$key"
bad="$TGT_DIR/bad"; head -c 32 /dev/urandom >"$bad"
"$LUNGATE" format --key-file "$key" "$url" >/dev/null 2>&1 || fail "format"
head -c 8M /dev/urandom >"$TGT_DIR/a"
head -c 2M /dev/urandom >"$TGT_DIR/b"

# Through the plugin (iSCSI) ...
nbd_run "url=$url" "key-file=$key" -- nbdcopy "$TGT_DIR/a" '$uri' || fail "write via the plugin"
# ... and back through the filter over the file plugin.
filter ()
{
  timeout 120 "${NBDKIT[@]}" -U - --filter="$LUNGATE_FILTER" file "$f" "$@"
}
filter "key-file=$key" --run "env -u LD_PRELOAD $NBD_PYTHON - \"\$uri\" $TGT_DIR/a $TGT_DIR/b" <<'PY' || fail "the filter"
import nbd, sys
h = nbd.NBD(); h.connect_uri(sys.argv[1])
a = open(sys.argv[2], "rb").read(); b = open(sys.argv[3], "rb").read()
assert h.pread(len(a), 0) == a, "the filter reads other data than the plugin wrote"
h.pwrite(b, 16 << 20); h.flush()
assert h.pread(len(b), 16 << 20) == b
PY
nbd_run "url=$url" "key-file=$key" -- "$NBD_PYTHON" - '$uri' "$TGT_DIR/b" <<'PY' || fail "plugin reading the filter's writes"
import nbd, sys
h = nbd.NBD(); h.connect_uri(sys.argv[1])
b = open(sys.argv[2], "rb").read()
assert h.pread(len(b), 16 << 20) == b, "the plugin reads other data than the filter wrote"
PY
"$LUNGATE" verify --key-file "$key" "$url" >/dev/null 2>&1 || fail "verify after the filter's writes"

# Read-only, one connection after another (nbdinfo opens the export twice:
# NBD_OPT_INFO, then NBD_OPT_GO; a second connection once crashed nbdkit),
# and a copy of what the plugin wrote.
filter -r "key-file=$key" --run "env -u LD_PRELOAD nbdinfo \"\$uri\" && env -u LD_PRELOAD nbdcopy \"\$uri\" $TGT_DIR/copy" \
  >"$TGT_DIR/info" 2>&1 || { cat "$TGT_DIR/info"; fail "read-only filter, two connections"; }
grep -q "export-size: $(( (32 - 2) << 20 ))" "$TGT_DIR/info" || { cat "$TGT_DIR/info"; fail "nbdinfo size"; }
cmp -n $((8 << 20)) "$TGT_DIR/a" "$TGT_DIR/copy" || fail "read-only copy differs"

# Wrong key, and a backend that is no volume: clear errors.
filter "key-file=$bad" --run "env -u LD_PRELOAD nbdinfo \"\$uri\"" 2>"$TGT_DIR/e" \
  && fail "the filter opened with a wrong key"
grep -q "wrong key" "$TGT_DIR/e" || { cat "$TGT_DIR/e"; fail "no 'wrong key' message"; }
truncate -s 16M "$TGT_DIR/plain"
timeout 60 "${NBDKIT[@]}" -U - --filter="$LUNGATE_FILTER" file "$TGT_DIR/plain" \
  "key-file=$key" --run "env -u LD_PRELOAD nbdinfo \"\$uri\"" 2>"$TGT_DIR/e" \
  && fail "the filter opened a file that is no volume"
grep -q "no lungate header" "$TGT_DIR/e" || { cat "$TGT_DIR/e"; fail "no 'no lungate header' message"; }
# The dirty flag under the filter, as under the plugin: dirty while a
# writer is connected (and after nbdkit is killed: a crash), clean after
# the last writer leaves.  (The filter never marked it: after a crash
# under it the next session trusted the newer slots.)
state () { "$LUNGATE" info "$url" | sed -n 's/^volume-state: \([a-z]*\).*/\1/p'; }
[ "$(state)" = clean ] || fail "not clean before"
sock="$TGT_DIR/filter.sock"
"${NBDKIT[@]}" -f -U "$sock" --filter="$LUNGATE_FILTER" file "$f" \
  "key-file=$key" 2>"$TGT_DIR/filter.log" &
fpid=$!
on_exit kill -9 "$fpid"
for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.1; done
env -u LD_PRELOAD "$NBD_PYTHON" - "$sock" <<'PY' || fail "write through the filter"
import nbd, sys
h = nbd.NBD(); h.connect_unix(sys.argv[1])
h.pwrite(b"w" * 65536, 4 << 20); h.flush(); h.shutdown()
PY
[ "$(state)" = clean ] || fail "not clean after the last writer left"
env -u LD_PRELOAD "$NBD_PYTHON" - "$sock" <<'PY' &
import nbd, sys, time
h = nbd.NBD(); h.connect_unix(sys.argv[1])
h.pwrite(b"x" * 65536, 4 << 20); h.flush()
time.sleep(30)
PY
writer=$!
for _ in $(seq 100); do [ "$(state)" = dirty ] && break; sleep 0.1; done
[ "$(state)" = dirty ] || fail "not dirty while a writer is connected"
kill -9 "$fpid"; wait "$fpid" 2>/dev/null || true
kill "$writer" 2>/dev/null; wait "$writer" 2>/dev/null || true
[ "$(state)" = dirty ] || fail "not dirty after nbdkit was killed"
echo "test-crypt-filter: ok"
