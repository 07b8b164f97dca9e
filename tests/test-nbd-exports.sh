#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# A target URL: one export per data LUN, listed with descriptions, each
# reachable by name; CHAP through password=+FILE; a wrong secret fails at
# start with a clear message; read-only LUNs and -r refuse writes.
. "${srcdir:-.}/functions-nbd.sh"
require_lungate_plugin
require nbdkit nbdinfo
require_nbd_python
tgt_start
t=iqn.2026-11.org.lungate:exports
tgt_add_target 1 "$t"
tgt_add_lun 1 1 16M
tgt_add_lun 1 2 32M 4096
tgt_add_lun 1 3 48M
tgt_lun_params 1 3 readonly=1
tgt_allow 1 ALL
tgt_chap 1 carol carol-secret-42
pw=$(secret_file carol-secret-42)
bad=$(secret_file carol-secret-00)
url="iscsi://$TGT_PORTAL/$t"

nbd_run "url=$url" user=carol "password=+$pw" -- nbdinfo --list '$uri' \
  >"$TGT_DIR/list" || fail "nbdinfo --list"
cat "$TGT_DIR/list"
for n in 1 2 3; do
  grep -q "^export=\"lun$n\":" "$TGT_DIR/list" || fail "lun$n not listed"
done
if grep -q '^export="lun0"' "$TGT_DIR/list"; then fail "controller LUN exported"; fi
grep -q "description: IET VIRTUAL-DISK, 32.00 MiB, 4096-byte blocks" "$TGT_DIR/list" \
  || fail "no description for lun2"

nbd_run "url=$url" user=carol "password=+$pw" -- "$NBD_PYTHON" - '$uri' <<'PY' || fail "exports by name"
import nbd, sys
sock = sys.argv[1].split("socket=", 1)[1]
def uri(name):
    return "nbd+unix:///%s?socket=%s" % (name, sock)
sizes = {}
for n in (1, 2, 3):
    h = nbd.NBD(); h.connect_uri(uri("lun%d" % n))
    sizes[n] = h.get_size()
    if n == 3:
        assert h.is_read_only(), "lun3 is write-protected"
        try:
            h.pwrite(b"x" * 512, 0)
            sys.exit("write to a write-protected LUN succeeded")
        except nbd.Error as e:
            assert e.errnum == 1, e   # EPERM
    else:
        assert not h.is_read_only()
        h.pwrite(b"%d" % n * 4096, 0)
assert sizes == {1: 16 << 20, 2: 32 << 20, 3: 48 << 20}, sizes
# The default export is the first data LUN.
h = nbd.NBD(); h.connect_uri(uri("")); assert h.get_size() == 16 << 20
# A name that is no LUN is refused.
try:
    h = nbd.NBD(); h.connect_uri(uri("lun9"))
    sys.exit("lun9 was accepted")
except nbd.Error:
    pass
PY
head -c 4 "$(tgt_lun_file 1 1)" | grep -q 1111 || fail "lun1 not written"
head -c 4 "$(tgt_lun_file 1 2)" | grep -q 2222 || fail "lun2 not written"

# -r: no writes at all.
nbd_run -r "url=$url/1" user=carol "password=+$pw" -- "$NBD_PYTHON" - '$uri' <<'PY' || fail "-r"
import nbd, sys
h = nbd.NBD(); h.connect_uri(sys.argv[1])
assert h.is_read_only()
PY

# A wrong secret: nbdkit does not start, and says why.
expect_fail_with "authentication failed" \
  "${NBDKIT[@]}" -U - "$LUNGATE_PLUGIN" "url=$url/1" user=carol "password=+$bad" \
  --run 'true'
# No such LUN.
expect_fail_with "LUN 7 does not exist" \
  "${NBDKIT[@]}" -U - "$LUNGATE_PLUGIN" "url=$url/7" user=carol "password=+$pw" \
  --run 'true'
expect_fail_with "invalid URL" "${NBDKIT[@]}" -U - "$LUNGATE_PLUGIN" url=iscsi:/x --run true
# A password in the URL works, with the warning the command gives
# (issue 15, item 10).
"${NBDKIT[@]}" -U - "$LUNGATE_PLUGIN" "url=iscsi://carol%carol-secret-42@$TGT_PORTAL/$t/1" \
  --run true 2>"$TGT_DIR/urlpw.log" || { cat "$TGT_DIR/urlpw.log"; fail "a password in the URL"; }
grep -q "password in the URL is visible to other users" "$TGT_DIR/urlpw.log" \
  || { cat "$TGT_DIR/urlpw.log"; fail "no warning for a password in the URL"; }
# A warning says "warning:", not nbdkit's "error:" (issue 30, item 10),
# and goes where nbdkit's own messages go: nowhere with --log=null, to
# stderr with --log=stderr.
grep -q "^nbdkit: lungate: warning: a password in the URL" "$TGT_DIR/urlpw.log" \
  || { cat "$TGT_DIR/urlpw.log"; fail "the warning is not tagged 'warning:'"; }
if grep -q "error: .*password in the URL" "$TGT_DIR/urlpw.log"; then
  cat "$TGT_DIR/urlpw.log"; fail "a warning is tagged 'error:'"
fi
for to in null stderr; do
  "${NBDKIT[@]}" --log="$to" -U - "$LUNGATE_PLUGIN" \
    "url=iscsi://carol%carol-secret-42@$TGT_PORTAL/$t/1" \
    --run true 2>"$TGT_DIR/urlpw-$to.log" || fail "--log=$to"
done
if grep -q "password in the URL" "$TGT_DIR/urlpw-null.log"; then
  cat "$TGT_DIR/urlpw-null.log"; fail "nbdkit --log=null: the plugin still writes its warning"
fi
grep -q "^nbdkit: lungate: warning: a password in the URL" "$TGT_DIR/urlpw-stderr.log" \
  || { cat "$TGT_DIR/urlpw-stderr.log"; fail "nbdkit --log=stderr: no warning"; }
echo "test-nbd-exports: ok"
