#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# info on a 512-byte thin LUN, a 4096-byte LUN, a write-protected LUN and
# the controller LUN, in text and JSON.
. "${srcdir:-.}/functions.sh"
require_lungate
require python3
tgt_start
t=iqn.2026-11.org.lungate:info
tgt_add_target 1 "$t"
tgt_add_lun 1 1 1G
tgt_lun_params 1 1 thin_provisioning=1
tgt_add_lun 1 2 256M 4096
tgt_add_lun 1 3 16M
tgt_lun_params 1 3 readonly=1
# WCE=0 in the caching mode page: a write-through LUN.
tgt_lun_params 1 3 mode_page=8:0:18:0x10:0:0xff:0xff:0:0:0xff:0xff:0xff:0xff:0x80:0x14:0:0:0:0:0:0
tgt_allow 1 ALL
url="iscsi://$TGT_PORTAL/$t"

out=$(with_timeout 60 "$LUNGATE" info "$url/1") || fail "info 1 failed"
printf '%s\n' "$out"
want ()
{
  grep -qx -- "$1" <<<"$out" || fail "info: no line '$1'"
}
want "url: $url/1"
want "vendor: IET"
want "device-type: disk (0x00)"
want "size: 1073741824 bytes (1.00 GiB)"
want "blocks: 2097152"
want "logical-block-size: 512"
want "thin-provisioning: lbpme=1 lbprz=1 lbpu=1 lbpws=1 lbpws10=1"
want "write-protected: no"
want "volatile-write-cache: yes"
grep -q "^supports: .*unmap" <<<"$out" || fail "info: unmap not listed"
grep -q "^supports: .*get-lba-status" <<<"$out" || fail "no get-lba-status"

out=$(with_timeout 60 "$LUNGATE" info "$url/2") || fail "info 2 failed"
want "size: 268435456 bytes (256.00 MiB)"
want "blocks: 65536"
want "logical-block-size: 4096"
want "thin-provisioning: lbpme=0 lbprz=0 lbpu=0 lbpws=0 lbpws10=0"
if grep -q "^supports: .*unmap" <<<"$out"; then fail "unmap on a thick LUN"; fi

out=$(with_timeout 60 "$LUNGATE" info "$url/3") || fail "info 3 failed"
want "write-protected: yes"
want "volatile-write-cache: no"

out=$(with_timeout 60 "$LUNGATE" info "$url/0") || fail "info 0 failed"
want "device-type: controller (0x0c)"

with_timeout 60 "$LUNGATE" info --json "$url/2" >"$TGT_DIR/i.json" \
  || fail "info --json failed"
python3 - "$TGT_DIR/i.json" <<'PY' || fail "info --json content wrong"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["size"] == 256 << 20, d
assert d["logical_block_size"] == 4096, d
assert d["blocks"] == 65536, d
assert d["write_protected"] is False, d
assert d["volatile_write_cache"] is True, d
assert d["device_type"] == "disk", d
PY

# Header digest on: the same answer.
out=$(with_timeout 60 "$LUNGATE" info --header-digest crc32c "$url/1") \
  || fail "info with header digest failed"
want "size: 1073741824 bytes (1.00 GiB)"
echo "test-info: ok"
