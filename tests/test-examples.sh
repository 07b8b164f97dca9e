#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# Every example command of README and the man pages runs as printed
# (issue 15): they are extracted from the documents, their placeholders
# rewritten to a private tgtd and scratch directories, and run; each must
# exit 0 without a sanitizer report.  An example that cannot run here is
# in the table NOT_RUNNABLE below with its reason; an example that is
# neither run nor listed fails the test, so that a new example must be
# made runnable or listed.  (tests/test-info.sh checks that the output
# shown for lungate info is what it prints; this test checks the commands.)
#
# What is an example: in README, the lines of an indented (4 spaces) code
# block; in man/*.pod, the lines of a verbatim paragraph outside SYNOPSIS.
# In a block with "$ " prompts only the prompted lines are commands (the
# rest is output); in other blocks a line is a command when its first word
# is a command (COMMAND_WORDS in the extractor).  A line ending in a
# backslash continues on the next one; in a block without prompts, lines
# indented deeper than the block belong to the command above them.
#
# Rewrites: the example portals (192.0.2.1, 192.0.2.2: a second path to
# the same target, here the same portal; 127.0.0.1:26080 and
# 127.0.0.1:3260, the quickstart's; iscsi://HOST) become the private
# tgtd's; TARGET-IQN, /LUN become iqn.2026-11.org.example:store, /1; the
# targets of the documents (store, scratch, vm, the quickstart's) exist
# under their own names; /etc/lungate/, /run/user/1000/, /backup/, /srv/
# become directories under the scratch directory and HOME is a scratch
# home (so ~/ is); nbd://localhost is the Unix socket of the server the
# last server example started; "nbdkit lungate" and
# --filter=lungate-crypt are the built plugin and filter (through an
# nbdkit wrapper on PATH, as is lungate); lungate bench runs with
# --time 0.5 (the default, 5 s per workload, would take minutes).
#
# Server examples (nbdkit without --run) run in the background with
# -f --exit-with-parent (and -U SOCKET unless they name one), are checked
# with nbdinfo, and serve the client examples after them; they stop at the
# end of their block unless the next block talks to nbd://localhost.
# Before each block that starts without a server, the LUNs of the
# example targets are zeroed, so that a block does not see what the one
# before it left (an earlier mkfs, format or bench); mounts left by a
# block are unmounted at its end.
. "${srcdir:-.}/functions-nbd.sh"
require_lungate_plugin
require python3 nbdinfo nbdcopy qemu-img mkfs.ext4 fuse2fs fusermount3
[ -f "${LUNGATE_FILTER:-}" ] || fail "LUNGATE_FILTER not built"
[ -c /dev/fuse ] || skip "no /dev/fuse"
top=${top_srcdir:-..}

# ---------------------------------------------------------------------------
# The examples that cannot run here: a fixed string of the example (as
# printed), then why.  Each entry must match at least one example.
NOT_RUNNABLE=(
  './contrib/check'
  'is the suite itself (both builds, every test)'
  './contrib/quickstart'
  'builds the tree from scratch in _build/quick of the source tree (autoreconf -fi, configure, make: minutes); tests/test-info.sh checks the output it shows'
  'make check'
  'builds the tree and runs the suite itself'
  'sudo make install'
  'builds the tree and installs it into the system (tests/test-install.sh checks the install)'
  './configure --prefix=$HOME/x'
  'builds the tree again (tests/test-install.sh does that install)'
  'url=...'
  'url=... is a placeholder'
  'dpkg-buildpackage'
  'builds the Debian package (contrib/check does, and runs lintian)'
  '/usr/share/doc/lungate/examples/store.conf'
  'needs the package installed (tests/test-systemd.sh checks the units)'
  'systemctl enable'
  'needs systemd as the init system, and root'
  'qemu-system-x86_64'
  'boots a virtual machine'
  'nbd-client'
  'needs the nbd kernel module and /dev/nbd devices (none here)'
  'kill -USR1 $(pidof nbdkit)'
  'signals every nbdkit on the machine (tests/test-stats.sh checks SIGUSR1 on one)'
  'storage.example.org'
  'a remote NBD server'
  "sh -c 'lungate mount iscsi://HOST/IQN/1 /mnt/x &&"
  'the pattern runs in tests/test-fuse-hints.sh, as an ordinary user in a user namespace'
)

# ---------------------------------------------------------------------------
# The private target, with the targets of the documents.
tgt_start
P=$TGT_PORTAL
store=iqn.2026-11.org.example:store
tgt_add_target 1 iqn.2026-11.org.lungate:quickstart
tgt_add_lun 1 1 1G
tgt_lun_params 1 1 thin_provisioning=1
tgt_add_lun 1 2 256M
tgt_lun_params 1 2 thin_provisioning=1
tgt_add_target 2 "$store"
tgt_add_target 3 iqn.2026-11.org.example:scratch
tgt_add_target 4 iqn.2026-11.org.example:vm
# The LUNs zeroed before each block: TID LUN SIZE.
EXAMPLE_LUNS=("2 1 256M" "2 2 256M" "3 1 256M" "4 1 64M")
for l in "${EXAMPLE_LUNS[@]}"; do
  read -r tid lun size <<<"$l"
  tgt_add_lun "$tid" "$lun" "$size"
  tgt_lun_params "$tid" "$lun" thin_provisioning=1
done
for tid in 1 2 3 4; do tgt_allow "$tid" ALL; done
# CHAP on the store target only for the examples that log in with it.
chap_secret=example-chap-secret
tgt_chap 2 gateway "$chap_secret"
tgtadm_ --mode account --op unbind --tid 2 --user gateway \
  || fail "cannot unbind the CHAP account"

# Scratch tree: W/etc stands for /etc/lungate, and so on.
W=$TGT_DIR/ex
mkdir -p "$W/bin" "$W/etc" "$W/run" "$W/backup" "$W/srv" "$W/home"
for d in lun target portal fs; do mkdir -p "$W/home/$d"; done
(umask 077
 printf '%s\n' "$chap_secret" >"$W/home/.chap"
 printf '%s\n' "$chap_secret" >"$W/etc/store.chap"
 head -c 32 /dev/urandom >"$W/etc/store.key"
 printf 'an example passphrase\n' >"$W/etc/vol.pass")
# The quickstart's LUN 2 is formatted (README shows its header).
head -c 32 /dev/urandom >"$W/quickstart.key"
with_timeout 60 "$LUNGATE" format --key-file "$W/quickstart.key" \
  "iscsi://$P/iqn.2026-11.org.lungate:quickstart/2" >/dev/null 2>&1 \
  || fail "cannot format the quickstart's LUN 2"

# lungate and nbdkit as the documents name them (NBDKIT ends with the
# word nbdkit, which the wrapper must not find again on PATH).
real_nbdkit=("${NBDKIT[@]}")
real_nbdkit[${#real_nbdkit[@]} - 1]=$(command -v nbdkit)
ln -s "$LUNGATE" "$W/bin/lungate"
{
  printf '#!/bin/bash\n'
  printf '# nbdkit with the built plugin and filter under their names.\n'
  printf 'args=()\n'
  printf 'for a; do\n'
  printf '  case $a in\n'
  printf '    lungate) a=%q ;;\n' "$LUNGATE_PLUGIN"
  printf '    --filter=lungate-crypt) a=--filter=%q ;;\n' "$LUNGATE_FILTER"
  printf '  esac\n'
  printf '  args+=("$a")\n'
  printf 'done\n'
  printf 'exec %s "${args[@]}"\n' "$(printf '%q ' "${real_nbdkit[@]}")"
} >"$W/bin/nbdkit"
chmod +x "$W/bin/nbdkit"

# ---------------------------------------------------------------------------
# Extraction: records DOC, LINE, BLOCK, TEXT, each ended by a NUL.
extract ()
{
  python3 - "$@" <<'PY'
import os, re, sys
COMMAND_WORDS = {
    "lungate", "nbdkit", "nbdinfo", "nbdcopy", "nbdsh", "nbdfuse",
    "nbd-client", "qemu-img", "qemu-io", "qemu-nbd", "qemu-system-x86_64",
    "mkfs.ext4", "/sbin/mkfs.ext4", "fuse2fs", "fusermount3", "e2fsck", "head", "kill", "cat",
    "ls", "mkdir", "truncate", "dd", "cp", "install", "systemctl", "sudo",
    "unshare", "autoreconf", "./configure", "make", "dpkg-buildpackage",
    "apt", "apt-get", "fio", "iscsi-ls", "iscsi-inq", "iscsi-readcapacity16",
}
def is_command(word):
    return (word in COMMAND_WORDS
            or re.fullmatch(r"(\./)?contrib/[\w./-]*\w", word) is not None)

def blocks_readme(lines):
    block, start, prev_blank = [], 0, True
    for n, l in enumerate(lines, 1):
        if l.startswith("    ") and l.strip() and (block or prev_blank):
            if not block:
                start = n
            block.append((n, l))
        else:
            if block:
                yield start, block
            block = []
        prev_blank = not l.strip()
    if block:
        yield start, block

def blocks_pod(lines):
    head, block, start = "", [], 0
    for n, l in enumerate(lines, 1):
        if l.startswith("=head1"):
            head = l.split(None, 1)[1].strip() if " " in l else ""
        if l[:1] in (" ", "\t") and l.strip():
            if not block:
                start = n
            block.append((n, l))
        elif block:
            if head != "SYNOPSIS":
                yield start, block
            block = []
    if block and head != "SYNOPSIS":
        yield start, block

def commands(block):
    indent = lambda l: len(l) - len(l.lstrip())
    prompts = any(l.lstrip().startswith("$ ") for _, l in block)
    base = min(indent(l) for _, l in block)
    out, cur, cont = [], None, False
    for n, l in block:
        s = l.strip()
        if cont:
            cur[1] += "\n" + l
        elif prompts:
            cur = [n, s[2:]] if s.startswith("$ ") else None
            if cur:
                out.append(cur)
        elif indent(l) == base:
            cur = [n, s] if is_command(s.split()[0]) else None
            if cur:
                out.append(cur)
        elif cur:
            cur[1] += "\n" + l
        cont = cur is not None and s.endswith("\\")
    return out

for path in sys.argv[1:]:
    lines = open(path).read().split("\n")
    gen = blocks_pod if path.endswith(".pod") else blocks_readme
    doc = os.path.basename(path)
    for start, block in gen(lines):
        for n, text in commands(block):
            sys.stdout.write(f"{doc}\0{n}\0{start}\0{text}\0")
PY
}

# ---------------------------------------------------------------------------
# Running.

SERVER_PID=
SERVER_SOCK=
SERVER_LOG=
n_run=0
n_listed=0
declare -A listed_used

sanitizer_check ()          # FILE WHAT
{
  if grep -Eq 'AddressSanitizer|LeakSanitizer|runtime error:' "$1"; then
    cat "$1" >&2
    fail "$2: sanitizer report"
  fi
}

kill_quietly ()             # PID
{
  kill -9 "$1" 2>/dev/null || true
}

stop_server ()
{
  [ -n "$SERVER_PID" ] || return 0
  nbd_stop "$SERVER_PID"
  sanitizer_check "$SERVER_LOG" "server of $SERVER_WHERE"
  SERVER_PID='' SERVER_SOCK=''
}

# Unmount what the examples left mounted under W (deepest first) and wait
# for the mount processes to go, so that the next block can open the LUNs.
unmount_all ()
{
  local m n p busy
  while read -r m; do
    fusermount3 -u "$m" 2>/dev/null || fusermount3 -uz "$m" 2>/dev/null || true
  done < <(awk -v w="$W/" 'index($2, w) == 1 { print $2 }' /proc/self/mounts \
             | sort -r)
  for n in $(seq 100); do
    busy=
    for p in /proc/[0-9]*; do
      [ "$(cat "$p/comm" 2>/dev/null)" = lungate ] || continue
      tr '\0' ' ' <"$p/cmdline" 2>/dev/null | grep -qF -- "$W/" && busy=1
    done
    [ -z "$busy" ] && return 0
    sleep 0.1
  done
  fail "lungate mount processes still run after unmounting"
}
on_exit unmount_all

reset_luns ()
{
  local l tid lun size f
  for l in "${EXAMPLE_LUNS[@]}"; do
    read -r tid lun size <<<"$l"
    f=$(tgt_lun_file "$tid" "$lun")
    { truncate -s 0 "$f" && truncate -s "$size" "$f"; } || fail "cannot zero $f"
  done
}

rewrite ()                  # TEXT: prints the command to run
{
  local c=$1
  c=${c//iscsi:\/\/HOST\/TARGET-IQN\/LUN/iscsi://$P/$store/1}
  c=${c//iscsi:\/\/HOST\/TARGET-IQN/iscsi://$P/$store}
  c=${c//iscsi:\/\/HOST/iscsi://$P}
  c=${c//192.0.2.1/$P}
  c=${c//192.0.2.2/$P}
  c=${c//127.0.0.1:26080/$P}
  c=${c//127.0.0.1:3260/$P}
  c=${c//\/etc\/lungate\//$W/etc/}
  c=${c//\/run\/user\/1000\//$W/run/}
  c=${c//\/backup\//$W/backup/}
  c=${c//\/srv\//$W/srv/}
  c=${c//.\/_build\/quick\/plugins\/lungate\/.libs\/nbdkit-lungate-plugin.so/$LUNGATE_PLUGIN}
  c=${c//lungate bench /lungate bench --time 0.5 --size 32M }
  printf '%s\n' "$c"
}

# Files the examples expect: an image for the filter, made by lungate
# format on a file, with the key or passphrase the example gives.
fixtures ()                 # COMMAND (rewritten), in the example's cwd
{
  local c img secret
  # One line, single spaces.
  c=$(tr -s ' ' <<<"${1//$'\\\n'/ }")
  if [[ $c =~ file\ ([^ ]+)\ key-file=([^ ]+) ]]; then
    img=${BASH_REMATCH[1]} secret=${BASH_REMATCH[2]}
    [ -f "$secret" ] || head -c 32 /dev/urandom >"$secret"
    [ -f "$img" ] || { truncate -s 32M "$img" \
      && "$LUNGATE" format --key-file "$secret" "$img" >/dev/null 2>&1; } \
      || fail "cannot make $img for the filter"
  fi
  if [[ $c =~ file\ ([^ ]+)\ .*passphrase=\+([^ ]+) ]]; then
    img=${BASH_REMATCH[1]} secret=${BASH_REMATCH[2]}
    [ -f "$img" ] || { truncate -s 32M "$img" \
      && "$LUNGATE" format --argon2 interactive --passphrase-file "$secret" \
           "$img" >/dev/null 2>&1; } \
      || fail "cannot make $img for the filter"
  fi
  if [[ $c == *"key-file=$W/etc/store.key"* ]]; then
    with_timeout 60 "$LUNGATE" format --key-file "$W/etc/store.key" \
      "iscsi://$P/$store/2" >/dev/null 2>&1 \
      || fail "cannot format $store/2 with store.key"
  fi
}

chap ()                     # bind|unbind
{
  tgtadm_ --mode account --op "$1" --tid 2 --user gateway \
    || fail "CHAP $1 failed"
}

run_example ()              # WHERE TEXT
{
  local where=$1 text=$2 c err rc=0 sock uses_chap='' n
  c=$(rewrite "$text")
  if [[ $c == *gateway@* || $c == *"--user gateway"* ]]; then
    uses_chap=1
  fi
  fixtures "$c"
  [ -n "$uses_chap" ] && chap bind
  if [[ $c == nbd://localhost* || $c == *[\ \']nbd://localhost* ]]; then
    [ -n "$SERVER_SOCK" ] || fail "$where: nbd://localhost, but no server example before it"
    c=$(sed -E "s#nbd://localhost/([A-Za-z0-9_-]+)#nbd+unix:///\\1?socket=$SERVER_SOCK#g
                s#nbd://localhost#nbd+unix:///?socket=$SERVER_SOCK#g" <<<"$c")
  fi
  printf '\n%s:\n$ %s\n' "$where" "$c"
  err=$W/stderr
  if [[ $c == nbdkit\ * && $c != *--run* ]]; then
    # A server.
    stop_server
    if [[ $c =~ -U\ ([^ -][^ ]*) ]]; then
      sock=${BASH_REMATCH[1]}
      c="nbdkit -f --exit-with-parent ${c#nbdkit }"
    else
      sock=$W/nbd.sock
      c="nbdkit -f --exit-with-parent -U $sock ${c#nbdkit }"
    fi
    rm -f "$sock"
    SERVER_LOG=$W/server.$n_run.log SERVER_WHERE=$where
    bash -c "exec $c" </dev/null >"$SERVER_LOG" 2>&1 &
    SERVER_PID=$! SERVER_SOCK=$sock
    on_exit kill_quietly "$SERVER_PID"
    for n in $(seq 200); do
      [ -S "$sock" ] && break
      _lg_alive "$SERVER_PID" || break
      sleep 0.1
    done
    if ! [ -S "$sock" ] || ! _lg_alive "$SERVER_PID"; then
      cat "$SERVER_LOG" >&2
      fail "$where: the server did not start"
    fi
    with_timeout 30 nbdinfo --list "nbd+unix:///?socket=$sock" >"$W/list" 2>&1 \
      || { cat "$W/list" "$SERVER_LOG" >&2; fail "$where: nbdinfo --list on the server failed"; }
  else
    with_timeout 60 bash -c "$c" </dev/null >"$W/stdout" 2>"$err" || rc=$?
    cat "$W/stdout" "$err"
    [ "$rc" -eq 0 ] || fail "$where: exit status $rc"
    sanitizer_check "$err" "$where"
  fi
  [ -n "$uses_chap" ] && chap unbind
  n_run=$((n_run + 1))
}

listed ()                   # TEXT: is it listed?  (sets reason)
{
  local i
  for ((i = 0; i < ${#NOT_RUNNABLE[@]}; i += 2)); do
    if [[ $1 == *"${NOT_RUNNABLE[i]}"* ]]; then
      listed_used[$i]=1
      reason=${NOT_RUNNABLE[i + 1]}
      return 0
    fi
  done
  return 1
}

export HOME=$W/home PATH=$W/bin:$PATH
# The script example of lungate(1) checks "$url".
export url="iscsi://$P/$store/1"
prev_doc='' prev_block=''
docs=("$top/README" "$top"/man/*.pod)
exec 3< <(extract "${docs[@]}")
while IFS= read -r -d '' doc <&3 && IFS= read -r -d '' line <&3 \
      && IFS= read -r -d '' block <&3 && IFS= read -r -d '' text <&3; do
  where="$doc:$line"
  if [ "$doc" != "$prev_doc" ] || [ "$block" != "$prev_block" ]; then
    if [ "$doc" != "$prev_doc" ] || [[ $text != *nbd://localhost* ]]; then
      stop_server
    fi
    unmount_all
    [ -z "$SERVER_PID" ] && reset_luns
    if [ "$doc" != "$prev_doc" ]; then
      mkdir -p "$W/cwd/$doc"
      cd "$W/cwd/$doc" || fail "cd"
    fi
    prev_doc=$doc prev_block=$block
  fi
  if listed "$text"; then
    printf '\n%s: not run: %s\n  %s\n' "$where" "$reason" "${text//$'\n'/$'\n  '}"
    n_listed=$((n_listed + 1))
    continue
  fi
  run_example "$where" "$text"
done
exec 3<&-
stop_server
unmount_all
cd "$W" || fail "cd"

for ((i = 0; i < ${#NOT_RUNNABLE[@]}; i += 2)); do
  [ -n "${listed_used[$i]:-}" ] \
    || fail "NOT_RUNNABLE lists '${NOT_RUNNABLE[i]}', which no example has any more"
done
[ "$n_run" -gt 20 ] || fail "only $n_run examples run: is the extraction broken?"
echo
echo "test-examples: $n_run run, $n_listed not runnable (listed)"
