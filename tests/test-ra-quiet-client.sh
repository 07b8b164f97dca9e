#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# A client's failed command is an error in the log, whichever thread
# completes it.  A read-ahead worker's own failed read is logged as
# debug (a2bd180: no client asked for it), but a worker waiting for its
# 1 MiB read polls its session itself (selfpoll.c) and completes the
# other commands' replies there too: a mount client's failed WRITE,
# completed on such a worker, was logged at debug as "(read ahead)"
# (found by helper-44's review: 99 of 13,300 failed writes in 15 s, 50
# of 7,700 in 10 s; none with --read-ahead 0).  Here tgtd runs under
# tests/tools/faultio.so, failing every write to the LUN's last 8 MiB;
# a mount with -o direct_io and the default read-ahead has one reader
# streaming the first 48 MiB and two writers sending 4 KiB writes that
# fail, for 10 s.  No WRITE may be logged as read ahead.
. "${srcdir:-.}/functions-fault.sh"
require_lungate
require fusermount3
[ -c /dev/fuse ] || skip "no /dev/fuse"
fault_tgt_start
iqn=iqn.2026-12.org.lungate:raquiet
tgt_add_target 1 "$iqn"
tgt_add_lun 1 1 64M
tgt_allow 1 ALL
head -c 56M /dev/urandom | dd of="$(tgt_lun_file 1 1)" conv=notrunc status=none
# Every write to the last 8 MiB fails on the target (MEDIUM ERROR).
fault_rule "op=write path=lun-1-1 off=$((56 << 20))-$((64 << 20)) action=fail:5 count=0"
u="iscsi://$TGT_PORTAL/$iqn/1"
mnt=$TGT_DIR/m
mkdir "$mnt"
"$LUNGATE" -v mount -f --log "$TGT_DIR/log" -o direct_io "$u" "$mnt" &
mpid=$!
on_exit fusermount3 -u -z "$mnt"
for _ in $(seq 100); do mountpoint -q "$mnt" && break; sleep 0.1; done
mountpoint -q "$mnt" || { cat "$TGT_DIR/log"; fail "mount"; }
python3 - "$mnt/lun1" 10 <<'PY'
import os, sys, threading, time
f, dur = sys.argv[1], float(sys.argv[2])
stop = time.time() + dur
def reader():
    fd = os.open(f, os.O_RDONLY)
    while time.time() < stop:
        for o in range(0, 48 << 20, 128 << 10):
            os.pread(fd, 128 << 10, o)
            if time.time() >= stop: break
    os.close(fd)
fails = [0, 0]
def writer():
    fd = os.open(f, os.O_WRONLY)
    buf = b"w" * 4096
    i = 0
    while time.time() < stop:
        try:
            os.pwrite(fd, buf, (56 << 20) + (i % 2048) * 4096); fails[1] += 1
        except OSError:
            fails[0] += 1
        i += 1
    os.close(fd)
ts = [threading.Thread(target=reader), threading.Thread(target=writer), threading.Thread(target=writer)]
for t in ts: t.start()
for t in ts: t.join()
print("writes failed=%d succeeded=%d" % tuple(fails))
PY
fusermount3 -u "$mnt"
wait "$mpid" 2>/dev/null
err=$(grep "WRITE(16)" "$TGT_DIR/log" | grep -vc "debug:")
quiet=$(grep -c "WRITE(16) .*(read ahead)" "$TGT_DIR/log")
echo "client WRITE failures logged as error: $err; logged at debug as '(read ahead)': $quiet"
grep -m3 "WRITE(16) .*(read ahead)" "$TGT_DIR/log"
grep "WRITE(16)" "$TGT_DIR/log" | grep -v "debug:" | head -n 2
[ "$quiet" -eq 0 ] || fail "a client's failed WRITE was logged at debug as a read-ahead read"
echo "test-ra-quiet-client: ok"
