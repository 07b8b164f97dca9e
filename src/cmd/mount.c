/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* lungate mount: LUNs as files in a FUSE mount.  A LUN URL gives DIR/lunN,
 * a target URL one DIR/lunN per disk LUN, a portal URL DIR/IQN/lunN for
 * every target discovery finds.  Main thread, then libfuse's workers. */
#include <config.h>

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <fcntl.h>
#include <limits.h>
#include <mntent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/fmt.h"
#include "cmd/cmd.h"
#include "dev/open.h"
#include "fuse/fs.h"
#include "util/alive.h"
#include "util/log.h"

enum {
  OPT_CONNECTIONS = OPT_LOGIN_LAST + 1,
  OPT_MODE,
  OPT_UID,
  OPT_GID,
  OPT_NONEMPTY,
  OPT_KEY_DIR,
  OPT_LOG,
  OPT_STRICT,
  OPT_READ_AHEAD,
  OPT_WRITE_BEHIND,
};

static const char usage[]
    = "Usage: lungate mount [OPTIONS] URL DIR\n"
      "\n"
      "Mount LUNs as files: a LUN URL gives DIR/lunN, a target URL one\n"
      "DIR/lunN per disk LUN, a portal URL DIR/TARGET-IQN/lunN for every "
      "target.\n"
      "Runs in the background unless -f; unmount with fusermount3 -u DIR.\n"
      "DIR/.stats shows per-LUN counters.\n"
      "\n"
      "Options:\n"
      "  -f, --foreground             stay in the foreground\n"
      "  --log stderr|syslog|FILE     where messages go (default: stderr\n"
      "                               with -f; else syslog when /dev/log\n"
      "                               exists, else RUNTIME_DIR/mount.log)\n"
      "  -o OPT[,OPT...]              mount options: ro, allow_other (with\n"
      "                               default_permissions), "
      "default_permissions,\n"
      "                               direct_io\n"
      "  --connections N              iSCSI connections per target (default "
      "4)\n"
      "  --mode MODE                  file mode, octal (default 0600)\n"
      "  --uid UID, --gid GID         owner of the files (default: yours)\n"
      "  --takeover                   the gateway holding a LUN is gone:\n"
      "                               preempt its reservation\n"
      "  --shared                     plain LUNs: no exclusive write access\n"
      "                               (cluster file systems; refused for\n"
      "                               lungate volumes)\n"
      "  --read-ahead SIZE            read up to SIZE ahead of a reader that\n"
      "                               goes forward (default 32M; 0: none)\n"
      "  --write-behind SIZE          acknowledge writes once buffered, up\n"
      "                               to SIZE per LUN, until a flush\n"
      "                               (default 0: write through)\n"
      "  --nonempty                   mount on a directory that is not empty\n"
      "  --strict                     a target or portal URL: fail when a\n"
      "                               disk LUN or a target cannot be mounted\n"
      "                               (a volume without its key, ...)\n"
      "  --key-file lunN=FILE         the key of LUN N's volume (repeat per\n"
      "                               LUN; a FILE alone keys every volume)\n"
      "  --key-dir DIR                DIR/UUID is the key file of the volume\n"
      "                               UUID (lungate info shows it)\n"
      "  -h, --help                   this help\n"
      "\n";

#define MAX_TARGETS 64

struct plan_lun {
  int target;
  int lun;
};

struct mount_plan {
  struct lg_url *u;
  const struct lg_login *login;
  const struct lg_keytab *tab;
  unsigned connections;
  bool read_only;
  bool strict; /* --strict: nothing left out */
  size_t ntargets;
  char *targets[MAX_TARGETS];
  int dirs[MAX_TARGETS]; /* fs directory per target, 0 = root */
  size_t nluns;
  struct plan_lun luns[1024];
  struct lg_tgt *pools[MAX_TARGETS];
};

/* Opens LUN lun of target t as what it is: through the crypt layer, with
 * its key from the table, when it holds a lungate header.  With a target
 * or portal URL a plain LUN stays plain even when a key for every volume
 * was given; with a LUN URL a key for a plain LUN is an error.  A plain
 * LUN's file follows a resize of the LUN. */
static struct lg_dev *
open_lun (struct mount_plan *m, struct lg_tgt *t, int lun, bool read_only,
          char *err, size_t errlen)
{
  return lg_target_open_lun (
      t, lun,
      LG_OPEN_FOLLOW_RESIZE | (read_only ? LG_OPEN_READ_ONLY : 0)
          | (m->u->kind == LG_URL_LUN ? LG_OPEN_NAMED : 0),
      m->tab, 0, NULL, NULL, err, errlen);
}

/* Logs in to every target and lists its disk LUNs, checking the keys of
 * formatted ones, before anything is mounted: errors come out here. */
static int
make_plan (struct mount_plan *m)
{
  char err[512];

  if (m->u->kind == LG_URL_PORTAL) {
    struct lg_target_list *l
        = lg_discover (m->login, m->u->portal, err, sizeof err);

    if (l == NULL) {
      lg_error ("%s", err);
      return -1;
    }
    if (l->n > MAX_TARGETS && m->strict) {
      lg_error ("%s: %zu targets, more than the %d a mount takes "
                "(--strict)",
                m->u->portal, l->n, MAX_TARGETS);
      lg_target_list_free (l);
      return -1;
    }
    if (l->n > MAX_TARGETS)
      lg_warn ("%s: %zu targets; mounting the first %d", m->u->portal, l->n,
               MAX_TARGETS);
    for (size_t i = 0; i < l->n && m->ntargets < MAX_TARGETS; i++)
      if ((m->targets[m->ntargets++] = strdup (l->t[i].name)) == NULL) {
        lg_target_list_free (l);
        lg_error ("out of memory");
        return -1;
      }
    lg_target_list_free (l);
    if (m->ntargets == 0) {
      lg_error ("%s: no targets", m->u->portal);
      return -1;
    }
  }
  else if ((m->targets[m->ntargets++] = strdup (m->u->target)) == NULL) {
    lg_error ("out of memory");
    return -1;
  }

  for (size_t t = 0; t < m->ntargets; t++) {
    struct lg_tgt *p = lg_target_open (m->login, m->u->portal, m->targets[t], 1,
                                       err, sizeof err);
    int *luns = NULL;
    size_t n = 0;

    if (p == NULL && m->u->kind == LG_URL_PORTAL && m->strict) {
      lg_error ("%s: cannot be mounted (--strict): %s", m->targets[t], err);
      return -1;
    }
    if (p == NULL && m->u->kind == LG_URL_PORTAL) {
      lg_error ("%s: not mounted: %s", m->targets[t], err);
      free (m->targets[t]);
      m->targets[t] = NULL; /* the other targets of the portal still are */
      continue;
    }
    if (p == NULL) {
      lg_error ("%s", err);
      return -1;
    }
    if (lg_target_luns (p, m->u, &luns, &n, err, sizeof err) < 0) {
      lg_error ("%s", err);
      lg_target_close (p);
      return -1;
    }
    for (size_t i = 0; i < n && m->nluns < 1024; i++) {
      struct lg_dev *d = open_lun (m, p, luns[i], true, err, sizeof err);

      if (d == NULL && m->u->kind == LG_URL_LUN) {
        lg_error ("%s", err);
        free (luns);
        lg_target_close (p);
        return -1;
      }
      /* Not a disk (the controller LUN) is no news; a disk that cannot be
       * served is (issue 27, item 10: a capacity past 2^63 bytes left only
       * "no disk LUN to mount"); the other LUNs still are mounted. */
      if (d == NULL) {
        if (errno != ENOTBLK && m->strict) {
          lg_error ("%s: LUN %d cannot be mounted (--strict): %s",
                    m->targets[t], luns[i], err);
          free (luns);
          lg_target_close (p);
          return -1;
        }
        if (errno != ENOTBLK)
          lg_error ("not mounting LUN %d: %s", luns[i], err);
        continue;
      }
      lg_dev_close (d);
      m->luns[m->nluns].target = (int) t;
      m->luns[m->nluns].lun = luns[i];
      m->nluns++;
    }
    free (luns);
    lg_target_close (p);
  }
  if (m->nluns == 0) {
    lg_error ("%s: no disk LUN to mount", m->u->portal);
    return -1;
  }
  return 0;
}

/* In the serving process (after the fork to the background): the pools
 * and devices, and the files. */
static int
ready (struct lg_fs *fs, void *opaque)
{
  struct mount_plan *m = opaque;
  char err[512], name[32];

  for (size_t t = 0; t < m->ntargets; t++) {
    if (m->targets[t] == NULL)
      continue; /* left out (make_plan said why) */
    m->pools[t] = lg_target_open (m->login, m->u->portal, m->targets[t],
                                  m->connections, err, sizeof err);
    if (m->pools[t] == NULL) {
      lg_error ("%s", err);
      return -1;
    }
    m->dirs[t] = m->u->kind == LG_URL_PORTAL
        ? lg_fs_add_dir (fs, 0, m->targets[t])
        : 0;
  }
  for (size_t i = 0; i < m->nluns; i++) {
    struct lg_dev *d = open_lun (m, m->pools[m->luns[i].target], m->luns[i].lun,
                                 m->read_only, err, sizeof err);

    if (d == NULL) {
      lg_error ("%s", err);
      return -1;
    }
    if (m->read_only)
      lg_dev_note_reader (d);
    if (lg_dev_claim (d, lg_cmd_claim_flags, err, sizeof err) < 0) {
      lg_error ("%s", err);
      lg_dev_close (d);
      return -1;
    }
    snprintf (name, sizeof name, "lun%d", m->luns[i].lun);
    if (lg_fs_add_file (fs, m->dirs[m->luns[i].target], name, d) < 0) {
      lg_dev_close (d);
      return -1;
    }
  }
  return 0;
}

/* Signalled, unmounted, or signalled and written back (now false): what
 * waits for a target, the final flush too, waits at most
 * LG_FS_STOP_BUDGET_S.  Signalled again (now): it fails at once. */
static void
stopping (void *opaque, bool now)
{
  struct mount_plan *m = opaque;

  for (size_t t = 0; t < m->ntargets; t++)
    if (now)
      lg_target_abandon (m->pools[t], "unmounting");
    else
      lg_target_hurry (m->pools[t], LG_FS_STOP_BUDGET_S);
}

/* The mount's source in /proc/mounts: the URL without credentials, with
 * only characters that need no escaping there nor in a -o option. */
static void
mount_source (const struct lg_url *u, char *buf, size_t len)
{
  char lun[16] = "";

  if (u->kind == LG_URL_LUN)
    snprintf (lun, sizeof lun, "/%d", u->lun);
  snprintf (buf, len, "lungate:iscsi://%s%s%s%s", u->portal,
            u->kind == LG_URL_PORTAL ? "" : "/",
            u->kind == LG_URL_PORTAL ? "" : u->target, lun);
  for (char *p = buf; *p; p++)
    if (!(isalnum ((unsigned char) *p) || strchr (":/._-[]@", *p)))
      *p = '_';
}

/* The lungate mount on abs, if there is one: its source into src. */
static bool
lungate_mount_on (const char *abs, char *src, size_t len)
{
  FILE *f = setmntent ("/proc/self/mounts", "r");
  struct mntent *m;
  bool found = false;

  if (f == NULL)
    return false;
  /* getmntent decodes the kernel's escapes (a space is \040). */
  while ((m = getmntent (f)) != NULL)
    if (strcmp (m->mnt_dir, abs) == 0
        && strncmp (m->mnt_fsname, "lungate:", 8) == 0) {
      snprintf (src, len, "%s", m->mnt_fsname + 8);
      found = true;
    }
  endmntent (f);
  return found;
}

/* DIR must be an empty directory (unless nonempty); abs gets its
 * absolute path, which the background process, in /, can still unmount. */
static int
check_dir (const char *dir, bool nonempty, char *abs)
{
  struct stat st;
  DIR *d;
  struct dirent *e;
  char src[1024];
  int n = 0;

  if (realpath (dir, abs) == NULL || stat (abs, &st) < 0) {
    if (errno == ENOTCONN)
      lg_error ("%s: a dead mount (its daemon is gone): unmount it with "
                "fusermount3 -u %s",
                dir, dir);
    else
      lg_error ("%s: %m", dir);
    return -1;
  }
  if (!S_ISDIR (st.st_mode)) {
    lg_error ("%s: not a directory: the mount point must be an empty "
              "directory",
              dir);
    return -1;
  }
  if (lungate_mount_on (abs, src, sizeof src)) {
    lg_error ("%s: lungate has %s mounted there already: unmount it first "
              "(lungate umount %s), or choose another directory",
              dir, src, dir);
    return -1;
  }
  if (nonempty || (d = opendir (abs)) == NULL)
    return 0;
  while ((e = readdir (d)) != NULL)
    n += strcmp (e->d_name, ".") != 0 && strcmp (e->d_name, "..") != 0;
  closedir (d);
  if (n > 0) {
    lg_error ("%s: the directory is not empty: the mount would hide what is "
              "in it (--nonempty mounts anyway)",
              dir);
    return -1;
  }
  return 0;
}

/* The same URL must not be mounted twice on one host. */
static int
check_mounted (const char *source)
{
  FILE *f = setmntent ("/proc/self/mounts", "r");
  struct mntent *m;
  int r = 0;

  if (f == NULL)
    return 0;
  while (r == 0 && (m = getmntent (f)) != NULL)
    if (strcmp (m->mnt_fsname, source) == 0) {
      lg_error ("%s is mounted already on %s (unmount it with fusermount3 "
                "-u '%s')",
                source + strlen ("lungate:"), m->mnt_dir, m->mnt_dir);
      r = -1;
    }
  endmntent (f);
  return r;
}

/* A number from min to max in base, or -1 (said why). */
static long
parse_num (const char *opt, const char *arg, int base, long min, long max)
{
  long v;

  if (lg_parse_long (arg, base, min, max, &v) < 0) {
    if (base == 8)
      lg_error ("%s: '%s' is not an octal number from %#lo to %#lo", opt, arg,
                min, max);
    else
      lg_error ("%s: '%s' is not a number from %ld to %ld", opt, arg, min, max);
    return -1;
  }
  return v;
}

/* Where messages go (--log WHERE, or the default for the foreground or
 * the background): fo->log_fd and fo->log_syslog for the background,
 * applied at once in the foreground.  0, or -1 (said why). */
static int
open_log (const char *where, bool foreground, struct lg_fs_opts *fo)
{
  char path[PATH_MAX];
  struct stat st;

  /* A log on a pipe whose reader left loses its lines, not the mount,
   * from the first line on (-v -v logs before the FUSE handlers). */
  signal (SIGPIPE, SIG_IGN);
  if (where == NULL)
    where = foreground                                           ? "stderr"
        : (stat ("/dev/log", &st) == 0 && S_ISSOCK (st.st_mode)) ? "syslog"
                                                                 : NULL;
  if (where && strcmp (where, "stderr") == 0) {
    fo->log_fd = STDERR_FILENO;
    snprintf (fo->log_name, sizeof fo->log_name, "stderr");
    return 0;
  }
  if (where && strcmp (where, "syslog") == 0) {
    if (stat ("/dev/log", &st) < 0 || !S_ISSOCK (st.st_mode))
      lg_warn ("--log syslog: no syslog runs here (no /dev/log): the "
               "mount's messages are lost; use --log FILE");
    if (foreground)
      lg_log_to_syslog ();
    fo->log_syslog = true;
    snprintf (fo->log_name, sizeof fo->log_name, "syslog");
    return 0;
  }
  if (where == NULL) {
    if (lg_runtime_dir (path, sizeof path, true) < 0) {
      lg_warn ("no syslog and no runtime directory (%m): the background "
               "mount's messages are lost; use --log FILE");
      return 0;
    }
    strncat (path, "/mount.log", sizeof path - strlen (path) - 1);
    where = path;
  }
  /* O_NONBLOCK: a FIFO nobody reads is refused (ENXIO), not waited
   * for; writes block again after. */
  fo->log_fd = open (
      where, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOCTTY | O_NONBLOCK,
      0600);
  if (fo->log_fd < 0) {
    lg_error ("--log %s: cannot open the log file: %s", where,
              errno == ENXIO ? "a FIFO with no reader" : strerror (errno));
    return -1;
  }
  /* A FIFO or socket that is not read would stop the mount at its next
   * line: there lines are dropped instead (writes stay non-blocking). */
  if (fstat (fo->log_fd, &st) == 0 && !S_ISFIFO (st.st_mode)
      && !S_ISSOCK (st.st_mode))
    fcntl (fo->log_fd, F_SETFL, fcntl (fo->log_fd, F_GETFL) & ~O_NONBLOCK);
  if (foreground) {
    if (dup2 (fo->log_fd, STDERR_FILENO) < 0) {
      lg_error ("--log %s: %m", where);
      close (fo->log_fd);
      fo->log_fd = -1;
      return -1;
    }
    lg_log_stamp (true);
  }
  /* The daemon's working directory is /: the file by its whole name. */
  if (realpath (where, fo->log_name) == NULL)
    snprintf (fo->log_name, sizeof fo->log_name, "%s", where);
  return 0;
}

/* What the command line asks for. */
struct mount_args {
  struct lg_login login;
  struct lg_keytab tab;
  struct lg_cmd_keys keys;
  struct lg_fs_opts fo;
  const char *log; /* --log, or NULL */
  bool foreground, allow_other, default_perms, mode_set, nonempty, strict;
  unsigned connections;
};

/* -o OPT[,OPT...]: 0, or -1 (said why). */
static int
parse_o (struct mount_args *a, const char *arg)
{
  char *copy = strdup (arg), *save = NULL;
  int r = 0;

  if (copy == NULL)
    return -1;
  for (char *o = strtok_r (copy, ",", &save); o && r == 0;
       o = strtok_r (NULL, ",", &save)) {
    if (strcmp (o, "ro") == 0)
      a->fo.read_only = true;
    else if (strcmp (o, "rw") == 0)
      a->fo.read_only = false;
    else if (strcmp (o, "allow_other") == 0)
      a->allow_other = true;
    else if (strcmp (o, "default_permissions") == 0)
      a->default_perms = true;
    else if (strcmp (o, "direct_io") == 0)
      a->fo.direct_io = true;
    else {
      lg_error ("-o: unknown mount option '%s'", o);
      r = -1;
    }
  }
  free (copy);
  return r;
}

/* --read-ahead, --write-behind: 0 (none), or a size from min to max.  0,
 * or -1 (said why). */
static int
buffer_size (const char *opt, const char *arg, uint64_t min, uint64_t max,
             size_t *out)
{
  uint64_t sz;

  if (lg_parse_size (arg, &sz) < 0 || (sz != 0 && (sz < min || sz > max))) {
    lg_error ("%s: 0 (none), or a size from %" PRIu64 "K to %" PRIu64
              "G, not '%s'",
              opt, min >> 10, max >> 30, arg);
    return -1;
  }
  *out = (size_t) sz;
  return 0;
}

/* One option of mount's own: 0, or -1 (said why). */
static int
mount_option (struct mount_args *a, int c, const char *arg)
{
  long v;

  switch (c) {
  case 'f':
    a->foreground = true;
    return 0;
  case 'o':
    return parse_o (a, arg);
  case OPT_CONNECTIONS:
    if ((v = parse_num ("--connections", arg, 10, 1, LG_POOL_MAX)) < 0)
      return -1;
    a->connections = (unsigned) v;
    return 0;
  case OPT_MODE:
    if ((v = parse_num ("--mode", arg, 8, 0, 07777)) < 0)
      return -1;
    a->fo.file_mode = (mode_t) v;
    a->mode_set = true;
    return 0;
  case OPT_UID:
    if ((v = parse_num ("--uid", arg, 10, 0, INT_MAX)) < 0)
      return -1;
    a->fo.uid = (uid_t) v;
    return 0;
  case OPT_GID:
    if ((v = parse_num ("--gid", arg, 10, 0, INT_MAX)) < 0)
      return -1;
    a->fo.gid = (gid_t) v;
    return 0;
  case OPT_NONEMPTY:
    a->nonempty = true;
    return 0;
  case OPT_STRICT:
    a->strict = true;
    return 0;
  case OPT_READ_AHEAD:
    return buffer_size ("--read-ahead", arg, LG_READ_AHEAD_MIN,
                        LG_READ_AHEAD_MAX, &a->fo.read_ahead);
  case OPT_WRITE_BEHIND:
    return buffer_size ("--write-behind", arg, LG_WRITE_BEHIND_MIN,
                        LG_WRITE_BEHIND_MAX, &a->fo.write_behind);
  case OPT_KEY_DIR:
    a->tab.dir = arg;
    return 0;
  }
  return -1;
}

/* mount's own options (lg_cmd_spec.option). */
static int
mount_own_option (void *args, int c, const char *arg)
{
  struct mount_args *a = args;

  switch (c) {
  case 'f':
  case 'o':
  case OPT_CONNECTIONS:
  case OPT_MODE:
  case OPT_UID:
  case OPT_GID:
  case OPT_NONEMPTY:
  case OPT_STRICT:
  case OPT_READ_AHEAD:
  case OPT_WRITE_BEHIND:
  case OPT_KEY_DIR:
    if (mount_option (a, c, arg) < 0)
      return LG_EXIT_USAGE; /* a malformed value */
    return 0;
  case OPT_LOG:
    if (arg[0] == '\0')
      return lg_usage_error ("mount", "--log: stderr, syslog or a file");
    /* Its name is a line of .stats (lungate status reads it). */
    for (const char *p = arg; *p; p++)
      if (iscntrl ((unsigned char) *p))
        return lg_usage_error ("mount",
                               "--log: a file name with a control "
                               "character (a newline?)");
    a->log = arg;
    return 0;
  default:
    return -1;
  }
}

/* The options and the two arguments: -1 to go on, else the exit
 * status. */
static int
parse_args (int argc, char **argv, struct mount_args *a)
{
  static const struct option opts[] = {
    LG_LOGIN_OPTIONS,
    LG_KEY_OPTIONS,
    { "foreground", no_argument, NULL, 'f' },
    { "connections", required_argument, NULL, OPT_CONNECTIONS },
    { "mode", required_argument, NULL, OPT_MODE },
    { "uid", required_argument, NULL, OPT_UID },
    { "gid", required_argument, NULL, OPT_GID },
    LG_CLAIM_OPTIONS,
    { "shared", no_argument, NULL, OPT_SHARED },
    { "nonempty", no_argument, NULL, OPT_NONEMPTY },
    { "strict", no_argument, NULL, OPT_STRICT },
    { "read-ahead", required_argument, NULL, OPT_READ_AHEAD },
    { "write-behind", required_argument, NULL, OPT_WRITE_BEHIND },
    { "key-dir", required_argument, NULL, OPT_KEY_DIR },
    { "log", required_argument, NULL, OPT_LOG },
    { "help", no_argument, NULL, 'h' },
    { NULL, 0, NULL, 0 },
  };
  static const struct lg_cmd_spec spec = {
    "mount",
    opts,
    "fo:",
    usage,
    LG_HELP_KEYS | LG_HELP_LOGIN,
    2,
    "a URL and a directory",
    mount_own_option,
  };
  int status = lg_cmd_parse (&spec, argc, argv, &a->login, &a->keys, a);

  if (status >= 0)
    return status;
  if (a->allow_other && !a->default_perms) {
    lg_error ("-o allow_other needs -o default_permissions too: otherwise "
              "every user could write the LUNs");
    return LG_EXIT_FAIL;
  }
  if (!a->mode_set && a->fo.read_only)
    a->fo.file_mode = 0400;
  return -1;
}

/* Mounts the LUNs m plans at dir, as source, and serves them until
 * unmounted: 0, or -1 (said why). */
static int
serve (struct mount_plan *m, const struct mount_args *a, const char *dir,
       const char *source)
{
  struct lg_fs *fs = lg_fs_new (&a->fo);
  char *fargv[8];
  int fargc = 0, r, failed;
  char mount_opts[384];

  if (fs == NULL)
    return -1;
  lg_fs_on_stop (fs, stopping, m);
  /* Sized for every option at once (64 bytes cut default_permissions). */
  snprintf (mount_opts, sizeof mount_opts, "fsname=%s,subtype=lungate%s%s%s",
            source, a->fo.read_only ? ",ro" : "",
            a->allow_other ? ",allow_other" : "",
            a->default_perms ? ",default_permissions" : "");
  fargv[fargc++] = (char *) "lungate";
  fargv[fargc++] = (char *) "-o";
  fargv[fargc++] = mount_opts;
  r = lg_fs_run (fs, dir, fargc, fargv, a->foreground, ready, m);
  if ((failed = lg_fs_free (fs)) > 0) {
    char why[160];

    /* For lungate umount, which waits for this process but cannot see
     * its exit status. */
    snprintf (why, sizeof why,
              "%d LUN%s could not be written back or flushed at the end "
              "(see the mount's log): data may be lost",
              failed, failed == 1 ? "" : "s");
    lg_error ("%s: %s", dir, why);
    if (lg_alive_failed_write (why) < 0)
      lg_debug ("%s: recording the failure for lungate umount: %m", dir);
    r = -1;
  }
  return r;
}

int
lg_cmd_mount (int argc, char **argv)
{
  struct mount_args a = {
    .fo = { .file_mode = 0600,
            .uid = getuid (),
            .gid = getgid (),
            .log_fd = -1,
            .read_ahead = LG_READ_AHEAD_DEFAULT },
    .connections = 4,
  };
  struct lg_url u = { 0 };
  struct mount_plan *m = NULL;
  char dir[PATH_MAX], source[200];
  int status;

  a.keys.tab = &a.tab;
  if (lg_login_init (&a.login) < 0)
    return LG_EXIT_FAIL;
  if ((status = parse_args (argc, argv, &a)) >= 0)
    goto out;
  status = LG_EXIT_FAIL;
  if (open_log (a.log, a.foreground, &a.fo) < 0)
    goto out;
  if ((status = lg_cmd_prepare (argv[optind], &u, &a.login)) != 0)
    goto out;
  status = LG_EXIT_FAIL;
  mount_source (&u, source, sizeof source);
  /* The passphrase once the directory is known good, named by the URL
   * without its credentials. */
  if (check_dir (argv[optind + 1], a.nonempty, dir) < 0
      || check_mounted (source) < 0
      || lg_cmd_keys_ask (&a.keys, source + strlen ("lungate:"), false) != 0)
    goto out;

  m = calloc (1, sizeof *m);
  if (m == NULL)
    goto out;
  m->u = &u;
  m->login = &a.login;
  a.tab.all.keyfile = a.keys.keyfile;
  a.tab.all.passphrase = a.keys.passphrase;
  m->tab = &a.tab;
  m->connections = a.connections;
  m->read_only = a.fo.read_only;
  m->strict = a.strict;
  if (make_plan (m) == 0 && serve (m, &a, dir, source) == 0)
    status = LG_EXIT_OK;

out:
  if (m) {
    for (size_t t = 0; t < m->ntargets; t++) {
      lg_target_close (m->pools[t]);
      free (m->targets[t]);
    }
    free (m);
  }
  lg_cmd_keys_clear (&a.keys);
  lg_keytab_clear (&a.tab);
  lg_url_clear (&u);
  lg_login_clear (&a.login);
  return status;
}
