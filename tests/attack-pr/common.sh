# Shared helpers for the attack scripts (sourced).
srcdir=/work/main/tests
. "$srcdir/functions-nbd.sh"
require_lungate_plugin
require_nbd_python
gw ()
{
  local n=$1 s=$TGT_DIR/$1.sock
  shift
  rm -f "$s"
  "${NBDKIT[@]}" -f -U "$s" "$LUNGATE_PLUGIN" "$@" 2>>"$TGT_DIR/$n.log" &
  eval "pid_$n=$!"
  on_exit kill -9 "$!"
  for _ in $(seq 100); do [ -S "$s" ] && return 0; sleep 0.1; done
  fail "gateway $n did not start"
}
# io NAME OP UNIT [BYTE] [ro]
io ()
{
  env -u LD_PRELOAD "$NBD_PYTHON" - "$TGT_DIR/$1.sock" "$2" "$3" "${4:-0}" <<'PY'
import nbd, sys
sock, op, u, b = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
try:
    h = nbd.NBD(); h.connect_uri("nbd+unix:///?socket=" + sock)
    if op == "write":
        h.pwrite(bytes([b]) * 4096, u * 4096); h.flush()
        print("ok")
    else:
        print(h.pread(4096, u * 4096)[0])
except nbd.Error as e:
    print("nbd error:", e.errno or e.string, file=sys.stderr)
    print(e.errno or "error")
    sys.exit(3)
PY
}
