#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# JSON for verify and for progress (issue 30): `verify --json` prints one
# object on stdout with the units, the bad ranges (unit and byte ranges,
# as the text output names them) and whether all are authentic, with the
# same exit status as without; --progress-json (before or after the
# command) makes every progress line of format and verify one JSON
# object on stderr, ending with "finished": true, and no text progress.
. "${srcdir:-.}/functions.sh"
require_lungate
require python3
tgt_start
t=iqn.2026-12.org.lungate:json
tgt_add_target 1 "$t"
tgt_add_lun 1 1 32M
tgt_allow 1 ALL
url="iscsi://$TGT_PORTAL/$t/1"
key=$TGT_DIR/key; head -c 32 /dev/urandom >"$key"
d=$TGT_DIR

# check_progress FILE OPERATION: every line of FILE that is not a log
# line is a JSON progress object; OPERATION's last one says finished.
check_progress ()
{
  python3 - "$1" "$2" <<'PY' || { cat "$1"; fail "progress JSON of $2 (above)"; }
import json, sys
path, op = sys.argv[1], sys.argv[2]
objs = []
for line in open(path):
    line = line.rstrip("\n")
    if line.startswith("lungate:") or line.startswith("formatted ") or not line:
        continue
    if not line.startswith("{"):
        sys.exit("not a JSON line: %r" % line)
    objs.append(json.loads(line))
mine = [o for o in objs if o.get("operation") == op]
if not mine:
    sys.exit("no progress object for %r" % op)
if mine[-1].get("finished") is not True:
    sys.exit("the last object of %r is not finished: %r" % (op, mine[-1]))
for o in mine[:-1]:
    if "finished" in o or "hint" in o:
        continue
    if not (0 <= o["done"] <= o["total"] and 0 <= o["percent"] <= 100):
        sys.exit("a wrong progress object: %r" % o)
PY
}

"$LUNGATE" --progress-json format --key-file "$key" "$url" >"$d/f.out" 2>"$d/f.err" \
  || { cat "$d/f.err"; fail "format"; }
check_progress "$d/f.err" "format: sealing units"
grep -q "done in" "$d/f.err" && fail "format --progress-json still printed text progress"

"$LUNGATE" verify --progress-json --json --key-file "$key" "$url" >"$d/v.json" 2>"$d/v.err" \
  || { cat "$d/v.json" "$d/v.err"; fail "verify --json of a fresh volume"; }
check_progress "$d/v.err" verify
units=$("$LUNGATE" info "$url" | sed -n 's/^volume-size: .*(\([0-9]*\) units of 4096)$/\1/p')
dataoff=$("$LUNGATE" info "$url" | sed -n 's/^volume-data-offset: \([0-9]*\)$/\1/p')
{ [ -n "$units" ] && [ -n "$dataoff" ]; } || fail "info shows no volume size or data offset"
python3 - "$d/v.json" "$units" <<'PY' || { cat "$d/v.json"; fail "verify --json of a fresh volume (above)"; }
import json, sys
v = json.load(open(sys.argv[1]))
want = {"units": int(sys.argv[2]), "units_checked": int(sys.argv[2]), "complete": True,
        "repair": False, "bad_units": 0, "bad_ranges": [], "bad_ranges_total": 0,
        "authentic": True}
for k, w in want.items():
    if v.get(k) != w:
        sys.exit("%s is %r, not %r" % (k, v.get(k), w))
if not v["volume"].endswith(":json/1"):
    sys.exit("volume names %r" % v["volume"])
PY

# Units 5 and 6 damaged on the target's disk.
head -c 8192 /dev/urandom | dd of="$(tgt_lun_file 1 1)" bs=4096 seek=$((dataoff / 4096 + 5)) \
  conv=notrunc status=none
expect_exit 1 "" "$LUNGATE" verify --json --key-file "$key" "$url"
"$LUNGATE" verify --json --key-file "$key" "$url" >"$d/b.json" 2>/dev/null
python3 - "$d/b.json" <<'PY' || { cat "$d/b.json"; fail "verify --json of a damaged volume (above)"; }
import json, sys
v = json.load(open(sys.argv[1]))
r = [{"first_unit": 5, "units": 2, "first_byte": 5 * 4096, "last_byte": 7 * 4096 - 1}]
if v["bad_ranges"] != r or v["bad_units"] != 2 or v["authentic"] is not False \
        or v["bad_ranges_total"] != 1 or v["complete"] is not True:
    sys.exit("wrong report")
PY
# The text says the same.
"$LUNGATE" verify --key-file "$key" "$url" >"$d/b.txt" 2>/dev/null && fail "verify of a damaged volume exited 0"
grep -q "^bad: units 5-6 (bytes 20480-28671 of the volume)$" "$d/b.txt" \
  || { cat "$d/b.txt"; fail "the text report differs"; }
echo "test-json-verify: ok"
