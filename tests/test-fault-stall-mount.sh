#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# The stalled write of test-fault-stall.sh through lungate mount (FUSE,
# -o direct_io, so that each pwrite goes out at once): a write held 75 s
# inside the target's backing store, then a newer write and fsync to the
# same range; after the stalled write has landed the file must hold the
# newer data.  Two scenarios at once, each with its own LUN and mount:
#   mplain  plain LUN (the backing file is checked too);
#   mcrypt  encrypted (aead) LUN, stalled by the offset of the unit's
#           ciphertext; the unit must read as the newer plaintext;
#   m150    plain LUN, stalled 150 s (past three command timeouts) with
#           --io-timeout -1: the stalled write must succeed;
#   mcut    plain LUN, stalled 75 s, the mount's connections to the
#           target cut (ss -K) 10 s into the stall.
. "${srcdir:-.}/functions-fault.sh"
require_lungate
require fusermount3 mountpoint
[ -c /dev/fuse ] || skip "no /dev/fuse"
fault_tgt_start
t=iqn.2026-11.org.lungate:stall-mount
tgt_add_target 1 "$t"
tgt_add_lun 1 1 16M
tgt_add_lun 1 2 16M
tgt_add_lun 1 3 16M
tgt_add_lun 1 4 16M
tgt_allow 1 ALL
url="iscsi://$TGT_PORTAL/$t"
key="$TGT_DIR/key"; head -c 32 /dev/urandom >"$key"
"$LUNGATE" format --mode aead --key-file "$key" "$url/2" >/dev/null 2>&1 \
  || fail "format"
data_off=$("$LUNGATE" info "$url/2" | sed -n 's/^volume-data-offset: //p')
[ -n "$data_off" ] || fail "lungate info shows no volume-data-offset"
off=$((1 << 20))
unit=100
coff=$((unit * 4096))
cboff=$((data_off + coff))

fault_rule "op=write path=lun-1-1.img match=OLD-mplain- action=stall:75000"
fault_rule "op=write path=lun-1-2.img off=$cboff-$((cboff + 4096)) action=stall:75000"
fault_rule "op=write path=lun-1-3.img match=OLD-m150- action=stall:150000"
fault_rule "op=write path=lun-1-4.img match=OLD-mcut- action=stall:75000"

declare -A mnt_pid
umount_all ()
{
  local name
  for name in mplain mcrypt m150 mcut; do
    fusermount3 -u -z "$TGT_DIR/$name.mnt" 2>/dev/null || true
  done
  sleep 0.5
}
on_exit umount_all
mount_lun () # NAME LUN OPTION...
{
  local name=$1 lun=$2 dir="$TGT_DIR/$1.mnt"
  shift 2
  mkdir -p "$dir"
  "$LUNGATE" mount -f -o direct_io "$@" "$url/$lun" "$dir" \
    2>"$TGT_DIR/$name.mount.log" &
  mnt_pid[$name]=$!
  for _ in $(seq 100); do
    mountpoint -q "$dir" && [ -f "$dir/lun$lun" ] && return 0
    _lg_alive "${mnt_pid[$name]}" || break
    sleep 0.1
  done
  cat "$TGT_DIR/$name.mount.log" >&2
  fail "lungate mount $name did not come up"
}
mount_lun mplain 1
mount_lun mcrypt 2 --key-file "$key"
mount_lun m150 3 --io-timeout -1
mount_lun mcut 4

declare -A job
run () # NAME LUN LINE ARGS...
{
  local name=$1 lun=$2 line=$3
  shift 3
  timeout --kill-after=5 480 python3 "$srcdir/tools/fault-stall.py" \
    --file "$TGT_DIR/$name.mnt/lun$lun" --tag "$name" \
    --log "$FAULT_LOG" --line "$line" "$@" >"$TGT_DIR/$name.out" 2>&1 &
  job[$name]=$!
}
run mplain 1 1 --off "$off" --backing "$(tgt_lun_file 1 1)"
run mcrypt 2 2 --off "$coff"
run m150 3 3 --off "$off" --backing "$(tgt_lun_file 1 3)" --expect-old success
run mcut 4 4 --off "$off" --backing "$(tgt_lun_file 1 4)"

# The cut: 10 s into the stall of rule 4.
fault_wait_log '^stall-begin 4 ' 60
sleep 10
fault_log_has '^stall-end 4 ' && fail "the cut scenario's stall ended early"
fault_cut_conns "${mnt_pid[mcut]}"

failed=()
for name in mplain mcrypt m150 mcut; do
  rc=0; wait "${job[$name]}" || rc=$?
  cat "$TGT_DIR/$name.out"
  [ "$rc" -eq 0 ] || failed+=("$name (status $rc)")
done
for name in mplain mcrypt m150 mcut; do
  _lg_alive "${mnt_pid[$name]}" || failed+=("$name: lungate mount died")
done
echo "--- faultio.log ---"; cat "$FAULT_LOG"
if [ "${#failed[@]}" -gt 0 ]; then
  for name in mplain mcrypt m150 mcut; do
    echo "--- $name.mount.log (last lines) ---"; tail -n 15 "$TGT_DIR/$name.mount.log"
  done
  fail "scenarios failed: ${failed[*]}"
fi
for name in mplain mcrypt m150 mcut; do
  fusermount3 -u "$TGT_DIR/$name.mnt" || fail "unmount $name"
  wait_exit "${mnt_pid[$name]}" 30 "lungate mount $name, after the unmount," \
    "$TGT_DIR/$name.mount.log"
done
echo "test-fault-stall-mount: ok"
