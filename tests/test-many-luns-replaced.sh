#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# test-lun-replaced with many LUNs on one pool: the plugin serves a whole
# target of 66 LUNs (as a target URL or `lungate mount' do: one pool for
# all).  LUN 66 is replaced by another disk while tgtd is down and the
# gateway is idle (nothing held); after the login the client writes to
# it again.  The write must fail and the other disk must not change.
# After every login the pool runs the reattach of every LUN it serves
# (src/iscsi/pool.c); with a fixed cap of 64 the 65th and later were never
# checked, and the write landed (found by an attack on the reattach
# lifecycle).  Plain round: tgt's default serial and designators, so only
# the blocks the gateway last wrote tell the disks apart.  Crypt round:
# two volumes under one key, told apart by the header.
. "${srcdir:-.}/functions-nbd.sh"
require_lungate_plugin
require_nbd_python
require sha256sum sed
nluns=66
tgt_start
key=$TGT_DIR/key; head -c 32 /dev/urandom >"$key"
cat >"$TGT_DIR/w.py" <<'PY'
import nbd, sys
h = nbd.NBD(); h.set_export_name(sys.argv[2]); h.connect_unix(sys.argv[1])
try:
    h.pwrite(bytes([int(sys.argv[3])]) * 65536, 0); h.flush(); print("write ok")
except nbd.Error as e:
    print("write failed:", e); sys.exit(1)
finally:
    h.shutdown()
PY

round ()   # round NAME TID CRYPT WANT: LUN 66 of target TID swapped
{
  local name=$1 tid=$2 crypt=$3 want=$4 t a b sock log gw sum rc=0
  t=iqn.2026-12.org.lungate:many$tid
  a=$TGT_DIR/$name-a.img b=$TGT_DIR/$name-b.img
  sock=$TGT_DIR/$name.sock log=$TGT_DIR/$name.log
  truncate -s 16M "$a" "$b"
  if [ -n "$crypt" ]; then
    "$LUNGATE" format --key-file "$key" "$a" >/dev/null || fail "$name: format A"
    "$LUNGATE" format --key-file "$key" "$b" >/dev/null || fail "$name: format B"
  else
    head -c 1M /dev/urandom | dd of="$b" conv=notrunc status=none
  fi
  tgt_add_target "$tid" "$t"
  for l in $(seq 1 $((nluns - 1))); do
    truncate -s 1M "$TGT_DIR/$name-p$l.img"
    tgtadm_ --mode logicalunit --op new --tid "$tid" --lun "$l" \
      --backing-store "$TGT_DIR/$name-p$l.img" || fail "$name: LUN $l"
  done
  tgtadm_ --mode logicalunit --op new --tid "$tid" --lun "$nluns" \
    --backing-store "$a" || fail "$name: LUN $nluns"
  tgt_allow "$tid" ALL
  sum=$(sha256sum <"$b")

  "${NBDKIT[@]}" -f -U "$sock" "$LUNGATE_PLUGIN" "url=iscsi://$TGT_PORTAL/$t" \
    ${crypt:+"key-file=lun$nluns:$key"} connections=1 timeout=60 2>"$log" &
  gw=$!
  on_exit kill -9 "$gw"
  for _ in $(seq 600); do
    [ -S "$sock" ] && break
    kill -0 "$gw" 2>/dev/null || break
    sleep 0.1
  done
  [ -S "$sock" ] || { cat "$log" >&2; fail "$name: the gateway did not start"; }
  env -u LD_PRELOAD "$NBD_PYTHON" "$TGT_DIR/w.py" "$sock" "lun$nluns" 17 \
    || { cat "$log"; fail "$name: the first write failed"; }
  tgt_stop
  sed -i "s|$a|@A@|; s|$b|$a|; s|@A@|$b|" "$TGT_DIR/journal"
  tgt_restart
  for _ in $(seq 600); do
    grep -q "logged in again" "$log" && break
    sleep 0.1
  done
  grep -q "logged in again" "$log" || { cat "$log"; fail "$name: no login after the restart"; }
  env -u LD_PRELOAD "$NBD_PYTHON" "$TGT_DIR/w.py" "$sock" "lun$nluns" 34 || rc=$?
  nbd_stop "$gw"
  grep -v '^nbdkit: debug' "$log" | tail -8
  [ "$rc" != 0 ] || fail "$name: the write after the outage succeeded"
  [ "$(sha256sum <"$b")" = "$sum" ] || fail "$name: the disk that replaced LUN $nluns was written to"
  grep -Eq "$want" "$log" || fail "$name: the log does not say what changed (want /$want/)"
  echo "$name: ok"
}

round plain 1 "" \
  "/$nluns: the LUN changed identity during the outage \(LBA 0 holds other data than this gateway last wrote there"
round crypt 2 1 \
  "/$nluns: the LUN holds another volume since the outage \(header UUID"
echo "test-many-luns-replaced: ok"
