/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* lungate status: what this host mounts and serves through lungate, as
 * far as this user can see it (iscsiadm -m session, cryptsetup status);
 * and lungate umount DIR, the close verb.  Everything is found from the
 * outside: the lungate mounts in /proc/self/mounts and their .stats
 * (whose first lines name the daemon), the nbdkit processes that run the
 * lungate plugin, and the runtime directory's files that tie reservation
 * keys to processes (util/alive.h).  Main thread only.
 */
#include <config.h>

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <mntent.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cmd/cmd.h"
#include "util/alive.h"
#include "util/fmt.h"
#include "util/log.h"

#define MAX_KEYS 16

/* The daemons of the mounts listed (their pids): a daemon of another
 * mount namespace whose mount is visible here is not listed again. */
#define MAX_LISTED 256
static pid_t listed[MAX_LISTED];
static unsigned nlisted;

/* The reservation keys that process pid marked (util/alive.h). */
static int
keys_of (pid_t pid, uint64_t *keys, int max)
{
  char dir[PATH_MAX];
  struct dirent *e;
  DIR *d;
  int n = 0;

  if (lg_runtime_dir (dir, sizeof dir, false) < 0
      || (d = opendir (dir)) == NULL)
    return 0;
  while (n < max && (e = readdir (d)) != NULL) {
    uint64_t key;
    pid_t holder;

    if (sscanf (e->d_name, "lungate-%16" SCNx64 ".alive", &key) != 1)
      continue;
    /* The pid a file names counts only while its lock is held by that
     * process: a dead gateway's file stays (util/alive.h), and its pid
     * may be another process's now. */
    if (lg_alive_dead (key, &holder) == 0 && holder == pid
        && lg_alive_pid_holds (key, pid))
      keys[n++] = key;
  }
  closedir (d);
  return n;
}

/* When process pid started (seconds since the epoch), or 0. */
static time_t
started (pid_t pid)
{
  char path[64], buf[1024], *p;
  unsigned long long ticks = 0, btime = 0;
  FILE *f;

  snprintf (path, sizeof path, "/proc/%d/stat", (int) pid);
  if ((f = fopen (path, "re")) == NULL)
    return 0;
  p = fgets (buf, sizeof buf, f);
  fclose (f);
  /* After the command name (in parentheses, possibly with blanks), the
   * 20th field is the start time in clock ticks since boot. */
  if (p == NULL || (p = strrchr (buf, ')')) == NULL
      || sscanf (p + 2,
                 "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u "
                 "%*d %*d %*d %*d %*d %*d %llu",
                 &ticks)
          != 1)
    return 0;
  if ((f = fopen ("/proc/stat", "re")) == NULL)
    return 0;
  while (fgets (buf, sizeof buf, f))
    if (sscanf (buf, "btime %llu", &btime) == 1)
      break;
  fclose (f);
  return btime
      ? (time_t) (btime + ticks / (unsigned long long) sysconf (_SC_CLK_TCK))
      : 0;
}

static void
print_time (time_t t, bool json)
{
  char buf[64];
  struct tm tm;

  if (json) {
    printf ("%lld", (long long) t);
    return;
  }
  if (t == 0 || gmtime_r (&t, &tm) == NULL) {
    printf ("?");
    return;
  }
  strftime (buf, sizeof buf, "%Y-%m-%d %H:%M:%S UTC", &tm);
  printf ("%s", buf);
}

static void
print_keys (const uint64_t *keys, int n, bool json)
{
  if (json) {
    printf ("[");
    for (int i = 0; i < n; i++)
      printf ("%s\"0x%016" PRIx64 "\"", i ? ", " : "", keys[i]);
    printf ("]");
    return;
  }
  if (n == 0)
    return;
  printf ("  reservation key%s:", n > 1 ? "s" : "");
  for (int i = 0; i < n; i++)
    printf (" 0x%016" PRIx64, keys[i]);
  printf ("\n");
}

/* One LUN line of .stats: "file=F lun=L size=N k=v ...". */
static void
print_lun (char *line, bool json, bool first)
{
  char *save = NULL, *tok;
  bool firstkv = true;

  line[strcspn (line, "\n")] = '\0';
  if (!json) {
    char file[512] = "", lun[512] = "", hs[32], vol[16] = "";
    uint64_t size = 0, r = 0, w = 0, err = 0, rc = 0, doubt = 0, lost = 0;

    for (tok = strtok_r (line, " ", &save); tok;
         tok = strtok_r (NULL, " ", &save))
      if (sscanf (tok, "file=%511s", file) == 1
          || sscanf (tok, "lun=%511s", lun) == 1
          || sscanf (tok, "size=%" SCNu64, &size) == 1
          || sscanf (tok, "read_ops=%" SCNu64, &r) == 1
          || sscanf (tok, "write_ops=%" SCNu64, &w) == 1
          || sscanf (tok, "errors=%" SCNu64, &err) == 1
          || sscanf (tok, "reconnects=%" SCNu64, &rc) == 1
          || sscanf (tok, "unconfirmed=%" SCNu64, &doubt) == 1
          || sscanf (tok, "losses=%" SCNu64, &lost) == 1
          || sscanf (tok, "volume=%15s", vol) == 1)
        continue;
    printf ("  %s: %s, %s; %" PRIu64 " reads, %" PRIu64 " writes, %" PRIu64
            " errors, %" PRIu64 " reconnections, %" PRIu64 " writes in doubt",
            file, lun, lg_human_size (size, hs, sizeof hs), r, w, err, rc,
            doubt);
    if (lost)
      printf (", %" PRIu64 " possible losses (see the log)", lost);
    if (strcmp (vol, "in-use") == 0)
      printf ("; volume in use (written: a clean unmount marks it clean)");
    else if (strcmp (vol, "dirty") == 0)
      printf ("; volume dirty (not closed cleanly, or a write failed: "
              "lungate verify checks it)");
    else if (strcmp (vol, "unknown") == 0)
      printf ("; volume state not known here (read-only: another gateway "
              "may write it; lungate info reads it)");
    else if (vol[0])
      printf ("; volume %s", vol);
    printf ("\n");
    return;
  }
  printf ("%s{", first ? "" : ", ");
  for (tok = strtok_r (line, " ", &save); tok;
       tok = strtok_r (NULL, " ", &save)) {
    char *eq = strchr (tok, '=');
    bool num = true;

    if (eq == NULL)
      continue;
    *eq = '\0';
    for (const char *p = eq + 1; *p; p++)
      num &= isdigit ((unsigned char) *p) != 0;
    printf ("%s", firstkv ? "" : ", ");
    lg_json_string (stdout, tok);
    printf (": ");
    if (num && eq[1])
      printf ("%s", eq + 1);
    else
      lg_json_string (stdout, eq + 1);
    firstkv = false;
  }
  printf ("}");
}

/* What reading a mount's .stats found. */
struct mstats {
  char *text;      /* malloc'd, NULL if not read */
  const char *why; /* then: why not ("dead": ENOTCONN) */
  int err;
  pid_t pid; /* the daemon, from the text; 0 not known */
  time_t since;
  char log[PATH_MAX]; /* where its messages go; "" not known */
};

#define STATS_TIMEOUT_MS 3000
#define STATS_MAX (1 << 20)

/* Reads dir/.stats in a child process, killed if the daemon does not
 * answer within STATS_TIMEOUT_MS (a stopped daemon would hold the reader
 * for ever). */
static void
read_stats (const char *dir, struct mstats *ms)
{
  char path[PATH_MAX + 16], line[PATH_MAX + 16];
  int fds[2], st = 0, waited = 0;
  size_t len = 0;
  pid_t child;
  FILE *f;

  memset (ms, 0, sizeof *ms);
  snprintf (path, sizeof path, "%s/.stats", dir);
  if (pipe2 (fds, O_CLOEXEC) < 0) {
    ms->why = "cannot read it";
    ms->err = errno;
    return;
  }
  if ((child = fork ()) < 0) {
    ms->why = "cannot read it";
    ms->err = errno;
    close (fds[0]);
    close (fds[1]);
    return;
  }
  if (child == 0) {
    char buf[65536];
    ssize_t r;
    int fd = open (path, O_RDONLY | O_CLOEXEC);

    if (fd < 0)
      _exit (errno & 0x7f);
    while ((r = read (fd, buf, sizeof buf)) > 0)
      if (write (fds[1], buf, (size_t) r) != r)
        _exit (EPIPE);
    _exit (r < 0 ? errno & 0x7f : 0);
  }
  close (fds[1]);
  ms->text = malloc (STATS_MAX + 1);
  while (ms->text && len < STATS_MAX && waited < STATS_TIMEOUT_MS) {
    struct pollfd p = { .fd = fds[0], .events = POLLIN };
    ssize_t r;

    if (poll (&p, 1, 100) <= 0) {
      waited += 100;
      continue;
    }
    r = read (fds[0], ms->text + len, STATS_MAX - len);
    if (r <= 0)
      break;
    len += (size_t) r;
  }
  close (fds[0]);
  /* Not at its end in time (the pipe's end comes with the child's exit,
   * just before it can be waited for): the daemon does not answer. */
  if (waited >= STATS_TIMEOUT_MS) {
    /* A reader whose request the daemon took before it stopped cannot
     * die until the daemon answers: not waited for past a moment (init
     * reaps it once this process has ended). */
    kill (child, SIGKILL);
    for (int i = 0; i < 20 && waitpid (child, &st, WNOHANG) == 0; i++)
      usleep (10000);
    ms->why = "its daemon does not answer (stopped?)";
  }
  else if (waitpid (child, &st, 0) < 0) {
    ms->why = "cannot read it";
    ms->err = errno;
  }
  else if (!WIFEXITED (st) || WEXITSTATUS (st) != 0) {
    ms->err = WIFEXITED (st) ? WEXITSTATUS (st) : EIO;
    ms->why = ms->err == ENOTCONN ? "dead" : "cannot read it";
  }
  if (ms->why || ms->text == NULL) {
    free (ms->text);
    ms->text = NULL;
    if (ms->why == NULL)
      ms->why = "out of memory";
    return;
  }
  ms->text[len] = '\0';
  if ((f = fmemopen (ms->text, len + 1, "r")) == NULL)
    return;
  while (fgets (line, sizeof line, f) && line[0] == '#') {
    long pid;
    long long t;

    line[strcspn (line, "\n")] = '\0';
    if (sscanf (line, "# mount pid=%ld mounted=%lld", &pid, &t) == 2) {
      ms->pid = (pid_t) pid;
      ms->since = (time_t) t;
    }
    else if (strncmp (line, "# log ", 6) == 0)
      snprintf (ms->log, sizeof ms->log, "%s", line + 6);
  }
  fclose (f);
}

static bool
dead (const struct mstats *ms)
{
  return ms->text == NULL && strcmp (ms->why, "dead") == 0;
}

static int
print_mount (const struct mntent *m, bool json, bool first)
{
  char line[8192];
  uint64_t keys[MAX_KEYS];
  struct mstats ms;
  int nkeys;
  bool ro = hasmntopt (m, "ro") != NULL, firstlun = true;
  FILE *f = NULL;

  read_stats (m->mnt_dir, &ms);
  if (ms.pid > 0 && nlisted < MAX_LISTED)
    listed[nlisted++] = ms.pid;
  nkeys = ms.pid > 0 ? keys_of (ms.pid, keys, MAX_KEYS) : 0;
  if (ms.text)
    f = fmemopen (ms.text, strlen (ms.text) + 1, "r");
  if (json) {
    printf ("%s{\"dir\": ", first ? "" : ", ");
    lg_json_string (stdout, m->mnt_dir);
    printf (", \"source\": ");
    lg_json_string (stdout, m->mnt_fsname + 8);
    printf (", \"read_only\": %s, \"state\": \"%s\", \"pid\": %d, \"since\": ",
            ro ? "true" : "false",
            ms.text          ? "serving"
                : dead (&ms) ? "dead"
                             : "unknown",
            ms.pid > 0 ? (int) ms.pid : 0);
    print_time (ms.since, true);
    printf (", \"log\": ");
    lg_json_string (stdout, ms.log);
    printf (", \"reservation_keys\": ");
    print_keys (keys, nkeys, true);
    printf (", \"luns\": [");
  }
  else {
    printf ("mount %s (%s)\n  source: %s\n", m->mnt_dir, ro ? "ro" : "rw",
            m->mnt_fsname + 8);
    if (ms.pid > 0) {
      printf ("  daemon: pid %d, since ", (int) ms.pid);
      print_time (ms.since, false);
      printf ("\n");
    }
    else if (ms.text)
      printf ("  daemon: serving (its pid is not known)\n");
    else if (dead (&ms))
      printf ("  daemon: gone (a dead mount: fusermount3 -u %s)\n", m->mnt_dir);
    else
      printf ("  daemon: not known: .stats: %s%s%s\n", ms.why,
              ms.err ? ": " : "", ms.err ? strerror (ms.err) : "");
    if (ms.log[0])
      printf ("  log: %s\n", ms.log);
    print_keys (keys, nkeys, false);
  }
  while (f && fgets (line, sizeof line, f))
    if (strncmp (line, "file=", 5) == 0) {
      print_lun (line, json, firstlun);
      firstlun = false;
    }
  if (f)
    fclose (f);
  free (ms.text);
  if (json)
    printf ("]}");
  return 0;
}

#define MAX_ARGS 256

/* The command line of process pid, split into args (pointing into buf,
 * at most MAX_ARGS): their number, 0 if not known. */
static size_t
cmdline_of (pid_t pid, char *buf, size_t size, const char **args)
{
  char path[64];
  size_t len, n = 0;
  FILE *f;

  snprintf (path, sizeof path, "/proc/%d/cmdline", (int) pid);
  if ((f = fopen (path, "re")) == NULL)
    return 0;
  len = fread (buf, 1, size - 1, f);
  fclose (f);
  buf[len] = '\0';
  for (size_t i = 0; i < len && n < MAX_ARGS; i += strlen (buf + i) + 1)
    args[n++] = buf + i;
  return n;
}

/* " ARG", its control characters and backslashes as \xNN: another
 * user's command line does not write on this terminal. */
static void
print_arg (const char *arg)
{
  putchar (' ');
  for (const unsigned char *p = (const unsigned char *) arg; *p; p++)
    if (iscntrl (*p) || *p == '\\')
      printf ("\\x%02x", *p);
    else
      putchar (*p);
}

/* A process as JSON: pid, since, reservation_keys, args. */
static void
print_process_json (pid_t pid, const uint64_t *keys, int nkeys,
                    const char *const *args, size_t nargs, bool first)
{
  printf ("%s{\"pid\": %d, \"since\": ", first ? "" : ", ", (int) pid);
  print_time (started (pid), true);
  printf (", \"reservation_keys\": ");
  print_keys (keys, nkeys, true);
  printf (", \"args\": [");
  for (size_t i = 1; i < nargs; i++) {
    printf ("%s", i > 1 ? ", " : "");
    lg_json_string (stdout, args[i]);
  }
  printf ("]}");
}

/* The nbdkit processes that run the lungate plugin. */
static int
print_nbdkits (bool json)
{
  DIR *d = opendir ("/proc");
  struct dirent *e;
  int n = 0;

  if (d == NULL)
    return 0;
  while ((e = readdir (d)) != NULL) {
    char buf[8192];
    const char *args[MAX_ARGS];
    size_t nargs;
    bool nbdkit = false, plugin = false;
    uint64_t keys[MAX_KEYS];
    pid_t pid = (pid_t) atoi (e->d_name);
    int nkeys;

    if (pid <= 0 || (nargs = cmdline_of (pid, buf, sizeof buf, args)) == 0)
      continue;
    for (size_t i = 0; i < nargs; i++) {
      const char *base = strrchr (args[i], '/');

      base = base ? base + 1 : args[i];
      nbdkit |= strcmp (base, "nbdkit") == 0;
      plugin |= nbdkit
          && (strcmp (args[i], "lungate") == 0
              || strcmp (base, "nbdkit-lungate-plugin.so") == 0);
    }
    if (!plugin)
      continue;
    nkeys = keys_of (pid, keys, MAX_KEYS);
    if (json)
      print_process_json (pid, keys, nkeys, args, nargs, n == 0);
    else {
      printf ("nbd (nbdkit) pid %d, since ", (int) pid);
      print_time (started (pid), false);
      printf ("\n");
      for (size_t i = 1; i < nargs; i++)
        if (strncmp (args[i], "url=", 4) == 0)
          printf ("  url: %s\n", args[i] + 4);
        else if ((strcmp (args[i], "-U") == 0
                  || strcmp (args[i], "--unix") == 0)
                 && i + 1 < nargs)
          printf ("  unix socket: %s\n", args[i + 1]);
        else if ((strcmp (args[i], "-p") == 0
                  || strcmp (args[i], "--port") == 0)
                 && i + 1 < nargs)
          printf ("  port: %s\n", args[i + 1]);
      print_keys (keys, nkeys, false);
    }
    n++;
  }
  closedir (d);
  return n;
}

/* A lungate mount daemon: a lungate process whose first word that is
 * not an option is "mount". */
static bool
mount_daemon (const char *const *args, size_t nargs)
{
  const char *base;
  size_t i = 1;

  if (nargs < 2)
    return false;
  base = strrchr (args[0], '/');
  if (strcmp (base ? base + 1 : args[0], "lungate") != 0)
    return false;
  while (i < nargs && args[i][0] == '-')
    i++;
  return i < nargs && strcmp (args[i], "mount") == 0;
}

/* The lungate mount daemons in other mount namespaces than this one
 * (unshare -m, a container): their mounts are not in /proc/self/mounts,
 * and fusermount3 cannot reach them, but they hold their LUNs. */
static int
print_elsewhere (bool json)
{
  struct stat self;
  DIR *d = opendir ("/proc");
  struct dirent *e;
  int n = 0;

  if (d == NULL || stat ("/proc/self/ns/mnt", &self) < 0) {
    if (d)
      closedir (d);
    return 0;
  }
  while ((e = readdir (d)) != NULL) {
    char buf[8192], path[64];
    const char *args[MAX_ARGS];
    uint64_t keys[MAX_KEYS];
    pid_t pid = (pid_t) atoi (e->d_name);
    struct stat ns;
    size_t nargs;
    int nkeys;

    bool seen = false;

    for (unsigned i = 0; i < nlisted; i++)
      seen |= listed[i] == pid;
    if (seen || pid <= 0
        || (nargs = cmdline_of (pid, buf, sizeof buf, args)) == 0
        || !mount_daemon (args, nargs))
      continue;
    snprintf (path, sizeof path, "/proc/%d/ns/mnt", (int) pid);
    /* Not to be told (another user's): not listed. */
    if (stat (path, &ns) < 0
        || (ns.st_dev == self.st_dev && ns.st_ino == self.st_ino))
      continue;
    nkeys = keys_of (pid, keys, MAX_KEYS);
    if (json)
      print_process_json (pid, keys, nkeys, args, nargs, n == 0);
    else {
      printf ("mount daemon pid %d in another mount namespace, since ",
              (int) pid);
      print_time (started (pid), false);
      printf ("\n  command:");
      for (size_t i = 0; i < nargs; i++)
        print_arg (args[i]);
      printf ("\n  its mount is not visible here; stop it with: kill %d "
              "(it unmounts, writes back and releases its LUNs)\n",
              (int) pid);
      print_keys (keys, nkeys, false);
    }
    n++;
  }
  closedir (d);
  return n;
}

static const char status_usage[]
    = "Usage: lungate status [--json]\n"
      "\n"
      "What this host mounts and serves through lungate, as far as this\n"
      "user can see: each lungate mount (its directory, source URL,\n"
      "daemon, log, reservation keys, and each LUN with its counters and,\n"
      "for a volume, its state), each nbdkit running the lungate plugin\n"
      "(its URL, socket or port), and the mount daemons of other mount\n"
      "namespaces (not visible here, still holding their LUNs).\n"
      "\n"
      "Options:\n"
      "  --json                       one JSON object on standard output\n"
      "  -v, -q                       as before the command\n"
      "  -h, --help                   this help\n";

int
lg_cmd_status (int argc, char **argv)
{
  static const struct option opts[] = {
    { "json", no_argument, NULL, OPT_JSON },
    { "verbose", no_argument, NULL, 'v' },
    { "quiet", no_argument, NULL, 'q' },
    { "help", no_argument, NULL, 'h' },
    { NULL, 0, NULL, 0 },
  };
  static const struct lg_cmd_spec spec = {
    "status", opts, NULL, status_usage, 0, 0, NULL, lg_cmd_set_flag,
  };
  bool json = false;
  FILE *mf;
  struct mntent *m;
  int status, nmounts = 0, nnbd;

  if ((status = lg_cmd_parse (&spec, argc, argv, NULL, NULL, &json)) >= 0)
    return status;
  if (json)
    printf ("{\"mounts\": [");
  if ((mf = setmntent ("/proc/self/mounts", "r")) != NULL) {
    while ((m = getmntent (mf)) != NULL)
      if (strncmp (m->mnt_fsname, "lungate:", 8) == 0)
        print_mount (m, json, nmounts++ == 0);
    endmntent (mf);
  }
  if (json)
    printf ("], \"nbd\": [");
  nnbd = print_nbdkits (json);
  if (json)
    printf ("], \"other_namespaces\": [");
  nnbd += print_elsewhere (json);
  if (json)
    printf ("]}\n");
  else if (nmounts + nnbd == 0)
    printf ("lungate mounts and serves nothing here (that this user can "
            "see)\n");
  return LG_EXIT_OK;
}

/* ---- lungate umount ---- */

static const char umount_usage[]
    = "Usage: lungate umount [OPTIONS] DIR\n"
      "\n"
      "Unmount a lungate mount (fusermount3 -u), then wait until its daemon\n"
      "has written back what was cached, flushed every LUN and released\n"
      "its reservations, and exited.\n"
      "\n"
      "Options:\n"
      "  -v, -q                       as before the command\n"
      "  -h, --help                   this help\n";

/* Process pid has not ended yet (a zombie has), and is not another
 * process that got its number. */
static bool
still_lungate (pid_t pid)
{
  char path[64], buf[512], *p;
  FILE *f;
  size_t n;

  if (kill (pid, 0) < 0 && errno == ESRCH)
    return false;
  snprintf (path, sizeof path, "/proc/%d/stat", (int) pid);
  if ((f = fopen (path, "re")) == NULL)
    return false;
  n = fread (buf, 1, sizeof buf - 1, f);
  fclose (f);
  buf[n] = '\0';
  if ((p = strrchr (buf, ')')) != NULL && p[1] == ' ' && p[2] == 'Z')
    return false;
  /* An empty command line: still exiting (its memory already gone). */
  snprintf (path, sizeof path, "/proc/%d/cmdline", (int) pid);
  if ((f = fopen (path, "re")) == NULL)
    return false;
  n = fread (buf, 1, sizeof buf - 1, f);
  fclose (f);
  buf[n] = '\0';
  return n == 0 || strstr (buf, "lungate") != NULL;
}

/* The lungate mount on dir (its path made absolute), if any. */
static bool
find_mount (const char *dir, char *abs, size_t len)
{
  FILE *f;
  struct mntent *m;
  bool found = false;

  if (realpath (dir, abs) == NULL) {
    /* A dead mount cannot be resolved (ENOTCONN): take the text, without
     * the slashes a completion adds. */
    size_t n;

    if (dir[0] == '/')
      snprintf (abs, len, "%s", dir);
    else {
      char cwd[PATH_MAX];

      if (getcwd (cwd, sizeof cwd) == NULL)
        return false;
      snprintf (abs, len, "%s/%s", cwd, dir);
    }
    for (n = strlen (abs); n > 1 && abs[n - 1] == '/'; n--)
      abs[n - 1] = '\0';
  }
  if ((f = setmntent ("/proc/self/mounts", "r")) == NULL)
    return false;
  while (!found && (m = getmntent (f)) != NULL)
    found = strcmp (m->mnt_dir, abs) == 0
        && strncmp (m->mnt_fsname, "lungate:", 8) == 0;
  endmntent (f);
  return found;
}

/* Says which processes hold files (or their working directory) under
 * dir, the reasons fusermount3 -u says the mount is busy. */
static void
say_holders (const char *dir)
{
  size_t n = strlen (dir);
  unsigned said = 0;
  struct dirent *p;
  DIR *proc = opendir ("/proc");

  if (proc == NULL)
    return;
  while (said < 10 && (p = readdir (proc)) != NULL) {
    char path[300], link[PATH_MAX];
    struct dirent *f;
    DIR *fds;
    ssize_t k;

    if (p->d_name[0] < '1' || p->d_name[0] > '9')
      continue;
    snprintf (path, sizeof path, "/proc/%s/fd", p->d_name);
    if ((fds = opendir (path)) == NULL)
      continue;
    while (said < 10 && (f = readdir (fds)) != NULL) {
      snprintf (path, sizeof path, "/proc/%s/fd/%s", p->d_name, f->d_name);
      if ((k = readlink (path, link, sizeof link - 1)) <= 0)
        continue;
      link[k] = '\0';
      if (strncmp (link, dir, n) == 0 && (link[n] == '/' || link[n] == '\0')) {
        lg_error ("%s: held by process %s: %s", dir, p->d_name, link);
        said++;
      }
    }
    closedir (fds);
  }
  closedir (proc);
}

static int
run_fusermount (const char *dir, bool quiet)
{
  pid_t pid = fork ();
  int st;

  if (pid < 0) {
    lg_error ("fork: %m");
    return -1;
  }
  if (pid == 0) {
    if (quiet) {
      int null = open ("/dev/null", O_WRONLY | O_CLOEXEC);

      if (null >= 0)
        dup2 (null, STDERR_FILENO);
    }
    execlp ("fusermount3", "fusermount3", "-u", "--", dir, (char *) NULL);
    lg_error ("fusermount3: %m");
    _exit (127);
  }
  while (waitpid (pid, &st, 0) < 0)
    if (errno != EINTR)
      return -1;
  return WIFEXITED (st) && WEXITSTATUS (st) == 0 ? 0 : -1;
}

int
lg_cmd_umount (int argc, char **argv)
{
  static const struct option opts[] = {
    { "verbose", no_argument, NULL, 'v' },
    { "quiet", no_argument, NULL, 'q' },
    { "help", no_argument, NULL, 'h' },
    { NULL, 0, NULL, 0 },
  };
  static const struct lg_cmd_spec spec = {
    "umount", opts, NULL, umount_usage, 0, 1, "a mount directory", NULL,
  };
  char abs[PATH_MAX];
  struct mstats ms;
  pid_t pid;
  int status;

  if ((status = lg_cmd_parse (&spec, argc, argv, NULL, NULL, NULL)) >= 0)
    return status;
  if (!find_mount (argv[optind], abs, sizeof abs)) {
    lg_error ("%s: not a lungate mount (lungate status lists them)",
              argv[optind]);
    return LG_EXIT_FAIL;
  }
  read_stats (abs, &ms);
  free (ms.text);
  pid = ms.pid;
  /* Unmounting a mount whose daemon cannot be waited for would return
   * while it still writes back: said, not done. */
  if (!ms.text && !dead (&ms)) {
    lg_error ("%s: cannot tell its daemon (.stats: %s%s%s): not unmounted; "
              "fusermount3 -u %s unmounts without waiting",
              abs, ms.why, ms.err ? ": " : "", ms.err ? strerror (ms.err) : "",
              abs);
    return LG_EXIT_FAIL;
  }
  if (ms.text && pid == 0)
    lg_warn ("%s: its daemon is not known (an older lungate): this waits "
             "for the unmount only",
             abs);
  /* A file just closed may hold the mount a moment longer (its release
   * in flight): busy is asked again for 2 s before it is an answer. */
  for (int i = 0; run_fusermount (abs, i < 20) < 0; i++) {
    if (i == 20) {
      say_holders (abs);
      lg_error ("%s: fusermount3 -u failed (a file open there? see above)",
                abs);
      return LG_EXIT_FAIL;
    }
    usleep (100 * 1000);
  }
  if (pid <= 0) {
    lg_info ("%s: unmounted%s", abs,
             dead (&ms) ? "; its daemon was already gone" : "");
    return LG_EXIT_OK;
  }
  for (unsigned s = 0; still_lungate (pid); s++) {
    if (s > 0 && s % 50 == 0)
      lg_info ("%s: waiting for the daemon (pid %d) to write back and "
               "release its LUNs (%u s)",
               abs, (int) pid, s / 10);
    usleep (100 * 1000);
  }
  {
    char why[256];

    if (lg_alive_failed_take (pid, why, sizeof why) == 1) {
      lg_error ("%s: unmounted, but the daemon (pid %d) reported at its "
                "end: %s",
                abs, (int) pid, why);
      return LG_EXIT_FAIL;
    }
  }
  lg_info ("%s: unmounted; the daemon (pid %d) has exited", abs, (int) pid);
  return LG_EXIT_OK;
}
