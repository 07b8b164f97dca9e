#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# A 15 TiB sparse LUN (ext4 stops just under 16 TiB): info, a lazy format,
# and random I/O through the plugin, plain and encrypted, with the
# gateway's resident set under 64 MiB (memory flat in the size of the LUN).
. "${srcdir:-.}/functions-nbd.sh"
require_lungate_plugin
require_nbd_python
require fio
tgt_start
t=iqn.2026-11.org.lungate:big
tgt_add_target 1 "$t"
tgt_add_lun 1 1 15T
tgt_add_lun 1 2 15T
tgt_allow 1 ALL
url="iscsi://$TGT_PORTAL/$t"
key="$TGT_DIR/key"; head -c 32 /dev/urandom >"$key"
"$LUNGATE" info "$url/1" | grep -qx "size: 16492674416640 bytes (15.00 TiB)" \
  || fail "info on 15 TiB"
"$LUNGATE" format --lazy --key-file "$key" "$url/2" >/dev/null 2>&1 || fail "lazy format"
sock="$TGT_DIR/s"
for lun in 1 2; do
  k=(); [ $lun = 2 ] && k=("key-file=$key")
  rm -f "$sock"
  "${NBDKIT[@]}" -f -U "$sock" "$LUNGATE_PLUGIN" "url=$url/$lun" "${k[@]}" &
  gw=$!
  for _ in $(seq 200); do [ -S "$sock" ] && break; sleep 0.05; done
  timeout 60 env -u LD_PRELOAD fio --name=big --ioengine=nbd \
    --uri="nbd+unix:///?socket=$sock" --rw=randrw --bs=4k --iodepth=16 \
    --size=14t --time_based --runtime=3 --verify=crc32c --verify_state_save=0 --verify_fatal=1 \
    --output="$TGT_DIR/fio.out" >/dev/null 2>&1 || { cat "$TGT_DIR/fio.out"; fail "fio on LUN $lun"; }
  env -u LD_PRELOAD "$NBD_PYTHON" - "$sock" <<'PY' || fail "LUN $lun: ends"
import nbd, os, sys
h = nbd.NBD(); h.connect_uri("nbd+unix:///?socket=" + sys.argv[1])
size = h.get_size()
for off in (0, size // 2, size - 65536):
    d = os.urandom(65536); h.pwrite(d, off); assert h.pread(65536, off) == d
PY
  rss=$(awk '/VmHWM/ { print $2 }' "/proc/$gw/status")
  echo "LUN $lun: peak resident set $((rss / 1024)) MiB"
  kill "$gw"; wait "$gw" 2>/dev/null || true
  # Under ASan the sanitizer's own shadow memory dominates: bound it only
  # in the normal build.
  if [ -z "$(_nbd_preload)" ] && [ "$rss" -gt $((64 * 1024)) ]; then
    fail "LUN $lun: the gateway's resident set reached $((rss / 1024)) MiB"
  fi
done
echo "test-big: ok"
