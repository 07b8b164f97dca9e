#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# lungate bench: the JSON holds every workload of the matrix in every mode
# and parses; the SVG is well-formed XML; a refused destructive run (a
# file system on the LUN, or --crypt without --write) leaves the LUN
# byte-for-byte unchanged; without --write nothing is written.
. "${srcdir:-.}/functions.sh"
require_lungate
require python3 mkfs.ext4
tgt_start
t=iqn.2026-11.org.lungate:bench
tgt_add_target 1 "$t"
tgt_add_lun 1 1 64M
tgt_add_lun 1 2 64M
tgt_allow 1 ALL
url="iscsi://$TGT_PORTAL/$t"

# Read-only run on a LUN with a file system: allowed, and changes nothing.
mkfs.ext4 -q -F -O ^has_journal "$(tgt_lun_file 1 2)" >/dev/null 2>&1 || fail "mkfs"
sha=$(sha256sum <"$(tgt_lun_file 1 2)")
"$LUNGATE" bench --time 0.5 --size 16M --json "$url/2" >"$TGT_DIR/ro.json" \
  || fail "read-only bench"
python3 - "$TGT_DIR/ro.json" <<'PY' || fail "read-only JSON"
import json, sys
j = json.load(open(sys.argv[1]))
names = sorted(r["workload"] for r in j["results"])
assert names == sorted(["seqread-128K-qd1", "seqread-128K-qd32",
                        "randread-4K-qd1", "randread-4K-qd32"]), names
for r in j["results"]:
    assert r["mode"] == "plain" and r["ops"] > 0 and r["bytes"] == r["ops"] * r["block_size"], r
PY
[ "$(sha256sum <"$(tgt_lun_file 1 2)")" = "$sha" ] || fail "a read-only bench changed the LUN"

# Refused: --write over a file system, --crypt without --write.
expect_fail_with "holds an ext2/3/4 file system" \
  "$LUNGATE" bench --time 0.5 --size 16M --write "$url/2"
expect_fail_with "add --write" \
  "$LUNGATE" bench --time 0.5 --size 16M --crypt aead "$url/2"
[ "$(sha256sum <"$(tgt_lun_file 1 2)")" = "$sha" ] || fail "a refused bench changed the LUN"

# The whole matrix, plain, aead and mac, on an empty LUN.
"$LUNGATE" bench --time 0.5 --size 16M --depths 1,8 --write --crypt aead,mac \
  --json --svg "$TGT_DIR/bench.svg" "$url/1" >"$TGT_DIR/bench.json" \
  || fail "bench --write --crypt"
python3 - "$TGT_DIR/bench.json" "$TGT_DIR/bench.svg" <<'PY' || fail "JSON or SVG"
import json, sys, xml.etree.ElementTree as ET
j = json.load(open(sys.argv[1]))
want = {(p + rw + "-" + bs + "-qd" + d, m)
        for p, bs in (("seq", "128K"), ("rand", "4K"))
        for rw in ("read", "write") for d in ("1", "8")
        for m in ("plain", "aead", "mac")}
got = {(r["workload"], r["mode"]) for r in j["results"]}
assert got == want, (sorted(want - got), sorted(got - want))
for r in j["results"]:
    assert r["ops"] > 0 and r["mb_per_s"] > 0 and r["iops"] > 0, r
    lat = r["latency_us"]
    assert 0 < lat["p50"] <= lat["p99"] <= lat["p99_9"], r
    assert r["cpu_s_per_gib"] > 0, r
    assert (r["mode"] == "plain") == ("ratio_to_plain" not in r), r
root = ET.parse(sys.argv[2]).getroot()
assert root.tag.endswith("svg"), root.tag
rects = [e for e in root.iter() if e.tag.endswith("rect")]
# a background, 3 legend boxes, and 2 charts of 8 workloads x 3 modes
assert len(rects) >= 1 + 3 + 2 * 8 * 3, len(rects)
PY
# The text table names every mode and the ratios.
"$LUNGATE" bench --time 0.5 --size 16M --depths 4 --write --crypt mac "$url/1" \
  >"$TGT_DIR/table.txt" || fail "bench table"
cat "$TGT_DIR/table.txt"
grep -q "^seq write 128K QD4 *plain" "$TGT_DIR/table.txt" || fail "table: plain row"
grep -Eq "^ +mac .*[0-9.]+x$" "$TGT_DIR/table.txt" || fail "table: mac row with a ratio"
# --progress-json: JSON lines on stderr for every workload and mode, each
# one finished; the table on stdout as without it.
"$LUNGATE" bench --progress-json --time 0.5 --size 16M --depths 4 "$url/1" \
  >"$TGT_DIR/pj.txt" 2>"$TGT_DIR/pj.err" || { cat "$TGT_DIR/pj.err"; fail "bench --progress-json"; }
python3 - "$TGT_DIR/pj.err" <<'PY' || { cat "$TGT_DIR/pj.err"; fail "bench --progress-json: the JSON lines"; }
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
done = [o for o in lines if o.get("finished")]
assert all(o["operation"] == "bench" for o in lines), lines
assert len(done) >= 2, done  # the read workloads (no --write)
for o in done:
    assert o["mode"] == "plain" and o["job"] and o["mb_per_s"] >= 0, o
assert any("percent" in o for o in lines), lines
PY
grep -q "^seq read 128K QD4 *plain" "$TGT_DIR/pj.txt" || fail "bench --progress-json: no table"
# A workload that fails ends with "finished": false (the LUN made
# read-only while bench writes; it ended with no closing line before).
"$LUNGATE" bench --progress-json --write --time 2 --size 16M --depths 1 "$url/1" \
  >/dev/null 2>"$TGT_DIR/pf.err" &
bp=$!
sleep 3
tgtadm_ --mode logicalunit --op update --tid 1 --lun 1 --params readonly=1 || fail "readonly=1"
wait "$bp" && fail "bench --write went on through a read-only LUN"
tgtadm_ --mode logicalunit --op update --tid 1 --lun 1 --params readonly=0 || fail "readonly=0"
grep -q '"finished": false' "$TGT_DIR/pf.err" \
  || { cat "$TGT_DIR/pf.err"; fail "bench --progress-json: no \"finished\": false after the failure"; }
echo "test-bench: ok"
