#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# fio through the plugin: random writes verified with crc32c at iodepth 32
# on 4 NBD connections.
. "${srcdir:-.}/functions-nbd.sh"
require_lungate_plugin
require nbdkit fio
require_nbd_python
tgt_start
t=iqn.2026-11.org.lungate:fio
tgt_add_target 1 "$t"
tgt_add_lun 1 1 256M
tgt_allow 1 ALL

nbd_run "url=iscsi://$TGT_PORTAL/$t/1" connections=4 -- \
  fio --name=verify --ioengine=nbd --uri='$uri' --rw=randwrite \
    --bsrange=4k-64k --iodepth=32 --numjobs=4 --size=64m \
    --offset_increment=64m --verify=crc32c --verify_state_save=0 --verify_fatal=1 \
    --do_verify=1 --output-format=json --output="$TGT_DIR/fio.json" \
  || { cat "$TGT_DIR/fio.json" >&2; fail "fio verify"; }
"$NBD_PYTHON" - "$TGT_DIR/fio.json" <<'PY' || fail "fio reported errors"
import json, sys
d = json.load(open(sys.argv[1]))
for j in d["jobs"]:
    assert j["error"] == 0, j["error"]
    assert j["write"]["io_bytes"] >= 64 << 20, j["write"]["io_bytes"]
    assert j["read"]["io_bytes"] >= 64 << 20, j["read"]["io_bytes"]
PY
echo "test-nbd-fio: ok"
