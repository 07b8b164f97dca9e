#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# tests/tools/fsx (random writes, reads, mmap writes and reads, punched
# holes, zeroed ranges, fsyncs and reopens, each checked against a shadow
# copy) on a mounted LUN file: plain and encrypted, through the page cache
# and with -o direct_io (where mmap is refused and left out), with a fixed
# seed per case.  After the unmount the target itself is checked: a plain
# LUN's backing file holds exactly the shadow; an encrypted LUN, mounted
# again, reads exactly the shadow.  A longer run: contrib/bench/soak-fsx.
. "${srcdir:-.}/functions.sh"
require_lungate
require fusermount3 mountpoint cmp
[ -c /dev/fuse ] || skip "no /dev/fuse"
fsx=${top_builddir:-..}/tests/tools/fsx
[ -x "$fsx" ] || fail "$fsx is not built (make check builds it)"
# FSX_OPS and FSX_SEED (the first case's seed; the others count on from
# it): contrib/bench/soak-fsx runs longer and with other seeds.
ops=${FSX_OPS:-1500}
seed=${FSX_SEED:-101}
tgt_start
t=iqn.2026-12.org.lungate:fsx
tgt_add_target 1 "$t"
tgt_add_lun 1 1 24M
tgt_lun_params 1 1 thin_provisioning=1
tgt_add_lun 1 2 24M
tgt_lun_params 1 2 thin_provisioning=1
tgt_allow 1 ALL
head -c 32 /dev/urandom >"$TGT_DIR/key"
"$LUNGATE" format --key-file "$TGT_DIR/key" "iscsi://$TGT_PORTAL/$t/2" >/dev/null \
  || fail "format LUN 2"
m=$TGT_DIR/m
mount_points "$m"
len=$((16 << 20))

# fsx_case NAME LUN SEED [MOUNT-OPTION...]
fsx_case ()
{
  local name=$1 lun=$2 seed=$3 url mmap=()
  shift 3
  url="iscsi://$TGT_PORTAL/$t/$lun"
  [ "$lun" = 1 ] || set -- "$@" --key-file "$TGT_DIR/key"
  case " $* " in *" direct_io "*) mmap=(-M) ;; esac
  "$LUNGATE" mount "$@" "$url" "$m" || fail "$name: mount"
  "$fsx" -S "$seed" -N "$ops" -l "$len" "${mmap[@]}" -o "$TGT_DIR/shadow" \
    "$m/lun$lun" >"$TGT_DIR/fsx.out" 2>&1 \
    || { cat "$TGT_DIR/fsx.out"; fail "$name: fsx found a difference or an error"; }
  cat "$TGT_DIR/fsx.out"
  fusermount3 -u "$m" || fail "$name: unmount"
  for _ in $(seq 100); do pgrep -f "lungate mount .*$url" >/dev/null || break; sleep 0.1; done
  if [ "$lun" = 1 ]; then
    cmp -n "$len" "$TGT_DIR/shadow" "$(tgt_lun_file 1 1)" \
      || fail "$name: the LUN's backing file differs from what fsx wrote"
  else
    "$LUNGATE" mount -o ro --key-file "$TGT_DIR/key" "$url" "$m" || fail "$name: mount again"
    cmp -n "$len" "$TGT_DIR/shadow" "$m/lun$lun" \
      || { fusermount3 -u "$m"; fail "$name: the volume, mounted again, differs from what fsx wrote"; }
    fusermount3 -u "$m" || fail "$name: unmount again"
    for _ in $(seq 100); do pgrep -f "lungate mount .*$url" >/dev/null || break; sleep 0.1; done
  fi
}

fsx_case plain-pagecache 1 "$seed"
fsx_case plain-direct_io 1 $((seed + 1)) -o direct_io
fsx_case crypt-pagecache 2 $((seed + 2))
fsx_case crypt-direct_io 2 $((seed + 3)) -o direct_io
echo "test-mount-fsx: ok"
