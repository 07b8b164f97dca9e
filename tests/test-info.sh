#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# info on a 512-byte thin LUN, a 4096-byte LUN, a write-protected LUN,
# the controller LUN and a formatted LUN, in text and JSON; and the examples
# of README (info and discover) and lungate-info(1) are what it really
# prints.
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
# The quickstart's LUN 2 (contrib/quickstart), to be formatted.
tgt_add_lun 1 4 256M
tgt_lun_params 1 4 thin_provisioning=1
tgt_allow 1 ALL
url="iscsi://$TGT_PORTAL/$t"
# The quickstart's target itself (contrib/quickstart), for README's
# discover example.
qs=iqn.2026-11.org.lungate:quickstart
tgt_add_target 2 "$qs"
tgt_add_lun 2 1 1G
tgt_lun_params 2 1 thin_provisioning=1
tgt_add_lun 2 2 256M
tgt_lun_params 2 2 thin_provisioning=1
tgt_allow 2 ALL

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

# LUN 4: a lungate volume.
key=$TGT_DIR/volume.key
head -c 32 /dev/urandom >"$key"
with_timeout 120 "$LUNGATE" format --key-file "$key" "$url/4" >/dev/null 2>&1 \
  || fail "format 4"
# --json: every fact the text shows, typed (numbers as numbers, flags as
# booleans, lists as arrays), and the same values as the text.
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
assert d["lbpu"] is False and d["lbpws10"] is False, d
assert d["max_unmap_blocks"] is None, d
assert d["max_unmap_descriptors"] is None, d
assert d["supports"] == ["read16", "write16", "sync-cache16"], d
PY
for l in 0 1 4; do
  with_timeout 60 "$LUNGATE" info --json "$url/$l" >"$TGT_DIR/i$l.json" \
    || fail "info --json $l failed"
  with_timeout 60 "$LUNGATE" info "$url/$l" >"$TGT_DIR/i$l.txt" \
    || fail "info $l failed"
done
python3 - "$TGT_DIR" <<'PY' || fail "info --json does not say what the text says"
import json, sys
def load(l):
    d = json.load(open(f"{sys.argv[1]}/i{l}.json"))
    t = {}
    for line in open(f"{sys.argv[1]}/i{l}.txt"):
        k, _, v = line.rstrip("\n").partition(": ")
        t[k] = v
    return d, t
def typed(d, want):
    for k, ty in want.items():
        assert k in d, (k, d)
        assert type(d[k]) is ty, (k, d[k], ty)

d, t = load(0)
assert d["device_type"] == "controller" and d["device_type_code"] == 0x0C, d
assert t["device-type"] == "controller (0x0c)", t

for l in (1, 4):
    d, t = load(l)
    typed(d, {"url": str, "lun": int, "vendor": str, "product": str,
              "revision": str, "device_type": str, "device_type_code": int,
              "removable": bool, "size": int, "blocks": int,
              "logical_block_size": int, "physical_block_size": int,
              "max_transfer_blocks": int, "optimal_transfer_blocks": int,
              "optimal_transfer_granularity_blocks": int,
              "lbpme": bool, "lbprz": bool, "lbpu": bool, "lbpws": bool,
              "lbpws10": bool, "max_unmap_blocks": int,
              "max_unmap_descriptors": int, "write_protected": bool,
              "volatile_write_cache": bool, "supports": list,
              "lungate_volume": bool})
    assert all(type(s) is str for s in d["supports"]), d["supports"]
    assert " ".join(d["supports"]) == t["supports"], (d["supports"], t)
    assert "unmap" in d["supports"] and "get-lba-status" in d["supports"], d
    assert t["url"] == d["url"] and d["lun"] == l, d
    assert t["device-type"] == "%s (0x%02x)" % (d["device_type"],
                                                d["device_type_code"]), d
    assert t["size"].startswith("%d bytes" % d["size"]), d
    assert t["blocks"] == str(d["blocks"]), d
    assert t["physical-block-size"] == str(d["physical_block_size"]), d
    assert t["optimal-transfer-length"] == "%d blocks" % d["optimal_transfer_blocks"]
    assert t["optimal-transfer-granularity"] == \
        "%d blocks" % d["optimal_transfer_granularity_blocks"], d
    assert t["thin-provisioning"] == " ".join(
        "%s=%d" % (k, d[k]) for k in ("lbpme", "lbprz", "lbpu", "lbpws", "lbpws10")), d
    assert t["max-unmap"] == "%d blocks, %d descriptors" % (
        d["max_unmap_blocks"], d["max_unmap_descriptors"]), d

d, t = load(4)
assert d["lungate_volume"] is True and t["lungate-volume"] == "yes", d
typed(d, {"volume_mode": str, "volume_uuid": str, "volume_lazy": bool,
          "volume_dirty": bool, "volume_units": int, "volume_unit_size": int,
          "volume_size": int, "volume_metadata_offset": int,
          "volume_metadata_size": int, "volume_data_offset": int,
          "volume_header_seq": int, "volume_key_slots": list})
assert t["volume-mode"] == d["volume_mode"] == "aead", d
assert t["volume-uuid"] == d["volume_uuid"], d
assert t["volume-size"] == "%d bytes (%d units of %d)" % (
    d["volume_size"], d["volume_units"], d["volume_unit_size"]), d
assert t["volume-metadata"] == "%d+%d" % (d["volume_metadata_offset"],
                                          d["volume_metadata_size"]), d
assert t["volume-data-offset"] == str(d["volume_data_offset"]), d
assert t["volume-header-seq"] == str(d["volume_header_seq"]), d
assert d["volume_key_slots"] == [{"slot": 0, "kind": "key-file"}], d
assert t["volume-state"] == "clean" and d["volume_dirty"] is False, d
assert d["volume_owner"] is None and t["volume-owner"] == "none", d
PY

# Header digest on: the same answer.
out=$(with_timeout 60 "$LUNGATE" info --header-digest crc32c "$url/1") \
  || fail "info with header digest failed"
want "size: 1073741824 bytes (1.00 GiB)"
# The examples in the docs are real output.  LUN 1 here is the
# quickstart's LUN 1, LUN 4 its LUN 2 once formatted: the documented lines
# must be what info prints now, all of them, in order (the URL and the
# UUID aside).
mask ()
{
  sed -E 's|^url: iscsi://[^ ]*/[0-9]+$|url: URL|
          s|^volume-uuid: [0-9a-f]{32}$|volume-uuid: UUID|'
}
# doc_example FILE LUN [FILTER]: the lines under "$ lungate info
# iscsi://...quickstart/LUN[ | FILTER]" up to the next blank line, unindented.
doc_example ()
{
  awk -v cmd="quickstart/$2${3:+ | $3}" '
    index($0, "$ lungate info iscsi://") && substr($0, length($0) - length(cmd) + 1) == cmd {
      on = 1; n++; next }
    on && /^[[:space:]]*$/ { on = 0 }
    on { sub(/^[[:space:]]+/, ""); print }
    END { if (n != 1) exit 1 }' "$1" | mask
  [ "${PIPESTATUS[0]}" -eq 0 ] \
    || fail "${1##*/}: not exactly one example of lungate info .../$2${3:+ | $3}"
}
# check_example FILE DOC-LUN LUN [FILTER]: the example for the quickstart's
# DOC-LUN in FILE is what info prints for our LUN.
check_example ()
{
  local doc real
  doc=$(doc_example "$1" "$2" "${4:-}") || exit 1
  real=$(with_timeout 60 "$LUNGATE" info "$url/$3") || fail "info $3 failed"
  if [ -n "${4:-}" ]; then
    real=$(sh -c "$4" <<<"$real")
  fi
  real=$(mask <<<"$real")
  [ "$doc" = "$real" ] || {
    diff -u <(printf '%s\n' "$doc") <(printf '%s\n' "$real") >&2
    fail "${1##*/}: the example of lungate info .../$2 is not what it prints"
  }
}
doc=${top_srcdir:-..}
# README's discover example (one target on the portal there; here the
# same target by its URL), the portal's address aside.
doc_disc=$(awk 'index($0, "$ lungate discover iscsi://") { on = 1; n++; next }
    on && /^[[:space:]]*$/ { on = 0 }
    on { sub(/^    /, ""); print }
    END { if (n != 1) exit 1 }' "$doc/README") \
  || fail "README: not exactly one example of lungate discover"
real_disc=$(with_timeout 60 "$LUNGATE" discover "iscsi://$TGT_PORTAL/$qs") \
  || fail "discover failed"
mask_portal () { sed -E 's/^(  portal )[0-9.:]+(,[0-9]+)$/\1PORTAL\2/'; }
[ "$(mask_portal <<<"$doc_disc")" = "$(mask_portal <<<"$real_disc")" ] || {
  diff -u <(mask_portal <<<"$doc_disc") <(mask_portal <<<"$real_disc") >&2
  fail "README: the example of lungate discover is not what it prints"
}
check_example "$doc/README" 1 1
check_example "$doc/README" 2 4 "grep volume"
check_example "$doc/man/lungate-info.pod" 1 1
check_example "$doc/man/lungate-info.pod" 2 4
echo "test-info: ok"
