#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# The kernel's own target (LIO, booted by functions-lio.sh) with nothing
# but the URL: info says which optional commands the LUN really accepted
# (LIO 6.1 advertises GET LBA STATUS with LBPME and refuses it); fio's
# random writes, verified while they run and after, through the plugin and
# through the mount (default pool of 4 sessions), across a target-group
# outage; 100 mutual-CHAP logins in a row (LIO pads its last login
# response with stale bytes from the 11th on), one-way CHAP, ext4 via
# fuse2fs on the mount over mutual CHAP; an encrypted volume on the
# 4 KiB LUN with verify; trim and zero; the header digest.
. "${srcdir:-.}/functions-nbd.sh"
. "${srcdir:-.}/functions-lio.sh"
lio_enter_netns "$@"
require_lungate_plugin
require_nbd_python
require fio nbdcopy fusermount3 mountpoint fuse2fs mkfs.ext4 e2fsck
[ -c /dev/fuse ] || skip "no /dev/fuse"
lio_start
TGT_DIR=$(scratch_dir)
dir=$TGT_DIR
url="iscsi://$LIO_PORTAL/$LIO_PLAIN/0"
mnt=$dir/mnt
mount_points "$mnt"

# 1. info: GET LBA STATUS refused, said so; the LUN without a serial.
"$LUNGATE" info "$url" >"$dir/info" || fail "info"
grep -q "^refused: get-lba-status (advertised by LBPME: .*ILLEGAL.REQUEST" "$dir/info" \
  || { cat "$dir/info"; fail "info does not say that GET LBA STATUS was refused"; }
grep -q "^supports:.*get-lba-status" "$dir/info" && fail "info lists a refused get-lba-status"
"$LUNGATE" info --json "$url" | grep -q '"refused": {"get-lba-status": "CHECK CONDITION' \
  || fail "info --json does not name the refused command"
"$LUNGATE" info "iscsi://$LIO_PORTAL/$LIO_PLAIN/2" >"$dir/info2" || fail "info on the LUN without a serial"
echo "lio: info (refused get-lba-status)       ok"

# outage_after SECONDS: in the background, the target group goes away for
# 4 s after SECONDS; its pid in outage_pid.
outage_after ()
{
  ( sleep "$1"; lio_ctl tpg plain disable >/dev/null; sleep 4
    lio_ctl tpg plain enable >/dev/null ) &
  outage_pid=$!
}

# fio_ok JSON: no errors, something written and verified.  (How much
# is the machine's business: three CI runs side by side read back
# 1000 KiB in the 10 s, and a 1 MiB floor failed them.)
fio_ok ()
{
  "$NBD_PYTHON" - "$1" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for j in d["jobs"]:
    assert j["error"] == 0, j["error"]
    assert j["write"]["io_bytes"] > 0, j["write"]["io_bytes"]
    assert j["read"]["io_bytes"] > 0, j["read"]["io_bytes"]
PY
}

# Ten seconds of writes, each read back and checked (verify_backlog) as
# they go and all again at the end; the outage from the 2nd to the 6th.
fio_args=(--rw=randwrite --bsrange=4k-64k --size=16m --time_based --runtime=10
  --verify=crc32c --verify_backlog=16 --verify_state_save=0 --verify_fatal=1
  --do_verify=1 --output-format=json)

# 2. Through the plugin: random writes at iodepth 16, verified as they go
# and at the end, with the target group away for 4 s in the middle.
outage_after 2
NBD_RUN_TIMEOUT=300 nbd_run "url=$url" -- \
  fio --name=lio --ioengine=nbd --uri='$uri' --iodepth=16 "${fio_args[@]}" \
  --output="$dir/fio-nbd.json" 2>"$dir/fio-nbd.err" \
  || { cat "$dir/fio-nbd.err" "$dir/fio-nbd.json"; fail "fio through the plugin"; }
wait "$outage_pid"
fio_ok "$dir/fio-nbd.json" || fail "fio through the plugin reported errors"
grep -q "RESERVATION CONFLICT\|lost its reservation" "$dir/fio-nbd.err" \
  && { cat "$dir/fio-nbd.err"; fail "the plugin met a reservation conflict"; }
grep -q "connection lost" "$dir/fio-nbd.err" \
  || { cat "$dir/fio-nbd.err"; fail "the outage did not reach the plugin"; }
echo "lio: fio verify via plugin, outage       ok"

# 3. Through the mount, the same.
"$LUNGATE" mount -f "$url" "$mnt" 2>"$dir/mount.log" &
mpid=$!
on_exit kill -9 "$mpid"
for _ in $(seq 100); do [ -e "$mnt/lun0" ] && break; sleep 0.1; done
[ -e "$mnt/lun0" ] || { cat "$dir/mount.log"; fail "the mount did not come up"; }
# An fsync every 8 writes, so that writes reach the target during the
# outage (not only the page cache), and one at the end, after it.
outage_after 2
with_timeout 300 fio --name=lio --ioengine=psync --filename="$mnt/lun0" \
  --offset=32m --fsync=8 "${fio_args[@]}" --output="$dir/fio-mnt.json" \
  || { cat "$dir/fio-mnt.json" "$dir/mount.log"; fail "fio through the mount"; }
wait "$outage_pid"
fio_ok "$dir/fio-mnt.json" || fail "fio through the mount reported errors"
with_timeout 120 dd if=/dev/null of="$mnt/lun0" conv=notrunc,fsync status=none \
  || { cat "$dir/mount.log"; fail "fsync after the outage"; }
grep -q "connection lost" "$dir/mount.log" \
  || { cat "$dir/mount.log"; fail "the outage did not reach the mount"; }
fusermount3 -u "$mnt" || fail "unmount"
wait_exit "$mpid" 30 "the mount"
grep -q "RESERVATION CONFLICT\|lost its reservation" "$dir/mount.log" \
  && { cat "$dir/mount.log"; fail "the mount met a reservation conflict"; }
res=$("$LUNGATE" info "$url" | sed -n 's/^reservation: //p')
[ "$res" = "not reserved" ] \
  || { cat "$dir/mount.log"; fail "the mount left the LUN reserved: $res"; }
echo "lio: fio verify via mount, outage        ok"

# 4. 100 mutual-CHAP logins in a row.
mkdir -p "$dir/fsck"
curl="iscsi://$LIO_PORTAL/$LIO_CHAP/0"
sec=$(secret_file "$LIO_CHAP_SECRET")
tsec=$(secret_file "$LIO_CHAP_TSECRET")
mchap=(--user "$LIO_CHAP_USER" --password-file "$sec"
  --target-user "$LIO_CHAP_TUSER" --target-password-file "$tsec")
for i in $(seq 100); do
  "$LUNGATE" info "${mchap[@]}" "$curl" >/dev/null 2>"$dir/chap.err" \
    || { cat "$dir/chap.err"; fail "mutual-CHAP login $i of 100 failed"; }
done
echo "lio: 100 mutual-CHAP logins              ok"
# A wrong target secret is refused: mutual CHAP checks the target.
bad=$(secret_file wrong-secret-0000)
"$LUNGATE" info --user "$LIO_CHAP_USER" --password-file "$sec" \
  --target-user "$LIO_CHAP_TUSER" --target-password-file "$bad" "$curl" \
  >/dev/null 2>&1 && fail "a target with another secret was accepted"

# One-way CHAP is accepted too.
"$LUNGATE" info --user "$LIO_CHAP_USER" --password-file "$sec" "$curl" \
  >/dev/null 2>"$dir/chap1.err" || { cat "$dir/chap1.err"; fail "one-way CHAP"; }
# ext4 through the mount over mutual CHAP: a tree in, remounted, compared,
# e2fsck clean.
fuse_fsck "$dir/fsck" "$curl" "${mchap[@]}" || fail "mutual CHAP: FUSE fsck round trip"
echo "lio: CHAP one-way, ext4 over mutual      ok"

# 5. An encrypted volume on the 4 KiB LUN, through the plugin; verify.
vurl="iscsi://$LIO_PORTAL/$LIO_PLAIN/1"
key=$dir/key; head -c 32 /dev/urandom >"$key"
"$LUNGATE" format --mode aead --key-file "$key" "$vurl" >/dev/null 2>"$dir/format.err" \
  || { cat "$dir/format.err"; fail "format on LIO"; }
head -c 4M /dev/urandom >"$dir/in"
nbd_run "url=$vurl" "key-file=$key" -- nbdcopy --requests=16 "$dir/in" '$uri' \
  || fail "copying into the volume"
nbd_run -r "url=$vurl" "key-file=$key" -- nbdcopy '$uri' "$dir/out" \
  || fail "copying out of the volume"
cmp -n 4194304 "$dir/in" "$dir/out" || fail "the volume does not read back"
"$LUNGATE" verify --key-file "$key" "$vurl" >/dev/null 2>"$dir/verify.err" \
  || { cat "$dir/verify.err"; fail "verify on LIO"; }
echo "lio: aead volume, verify                 ok"

# 6. Trim and zero on LUN 0 (UNMAP; what a trimmed range reads is the
# target's choice, a zeroed one reads zeros), with the header digest on.
cat >"$dir/tz.py" <<'PY'
import nbd, sys
h = nbd.NBD(); h.connect_uri(sys.argv[1])
o = 60 << 20
h.pwrite(b"\x55" * 1048576, o); h.flush()
h.trim(262144, o); h.zero(262144, o + 524288); h.flush()
d = h.pread(1048576, o)
assert d[524288:786432] == bytes(262144), "zeroed range not zero"
assert d[262144:524288] == b"\x55" * 262144, "untouched range changed"
assert d[786432:] == b"\x55" * 262144, "untouched tail changed"
PY
nbd_run "url=$url" header-digest=crc32c -- "$NBD_PYTHON" "$dir/tz.py" '$uri' \
  || fail "trim and zero with the header digest"
echo "lio: trim, zero, header digest           ok"
