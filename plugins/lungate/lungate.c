/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* nbdkit-lungate-plugin: iSCSI LUNs as NBD exports.
 *
 * A thin adapter over the block-device interface (src/dev/): the config
 * callbacks collect the URL and login, after_fork logs in (one pool of
 * sessions per target, shared by its LUNs) and probes the LUNs, and each
 * NBD request becomes one lg_dev call.
 *
 * Threads: nbdkit's PARALLEL model; any number of requests from any
 * number of connections at once.  The pool and devices are created in
 * after_fork (threads do not survive nbdkit's fork to the background) and
 * are immutable until unload, so the callbacks share them without locks.
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <syslog.h>
#include <unistd.h>

#define NBDKIT_API_VERSION 2
#include <nbdkit-plugin.h>

#include <sodium.h>

#include "common/glue.h"
#include "dev/dev.h"
#include "dev/open.h"
#include "lungate/signals.h"
#include "util/alive.h"
#include "util/fmt.h"
#include "util/log.h"
#include "util/secret.h"

#define THREAD_MODEL NBDKIT_THREAD_MODEL_PARALLEL
#define DEFAULT_CONNECTIONS 4
/* Largest NBD request we advertise when the LUN sets no limit: requests
 * are split at the LUN's limit anyway. */
#define MAX_REQUEST (32u << 20)

/* Configuration, from the command line. */
static char *url;
static struct lg_url purl;
/* url= given again: more portals (paths) to the same target and LUN. */
static char *more_urls[LG_MAX_PORTALS - 1];
static unsigned n_more_urls;
static char portals[LG_MAX_PORTALS * (LG_URL_HOST_MAX + 11)];
static struct lg_login login;
static unsigned connections = DEFAULT_CONNECTIONS;

/* Key for lungate-formatted LUNs (sodium memory), if given. */
static uint8_t *keyfile; /* for every volume */
static char *passphrase;
static struct lg_keytab keytab; /* per LUN, and key-dir */
static char *key_dir;
/* stats-file=: where the counters are written too (absolute). */
static char *stats_file;
static size_t md_cache_blocks; /* 0: the crypt layer's default */
static size_t read_ahead = LG_READ_AHEAD_DEFAULT; /* readahead= */
static size_t write_behind; /* writebehind= (0: write through) */

/* After after_fork: the pool and one device stack per exported LUN. */
struct export
{
  struct lg_dev *dev;      /* the stack: crypt layer over the LUN, or the LUN */
  struct lg_lun_info info; /* what the LUN is */
  bool crypt;
  bool claimed; /* write access taken (claim_lock) */
  bool noted;   /* a reader was told of another writer (claim_lock) */
  /* The failed buffered writes (lg_dev_wb_failures) some client was told
   * of: a client that connects later hears of those nobody was told of
   * (a write that failed after its client left), as the kernel's next
   * opener does.  A possible loss at a target's restart is not its. */
  atomic_uint_fast64_t told_wb;
};
static struct lg_tgt *target;
/* takeover= and shared=: how the first writable connection to an export
 * claims it (lg_dev_claim).  One claim at a time. */
static unsigned claim_flags;
static pthread_mutex_t claim_lock = PTHREAD_MUTEX_INITIALIZER;
static size_t nexports;
static struct export *exports;
/* Disk LUNs of a target URL left out (no key, ...), and why: named when a
 * client asks for one; strict=true fails the start instead. */
struct left_out {
  int lun;
  char why[480];
};
static struct left_out *left;
static size_t nleft;
static bool strict;

struct handle {
  struct lg_dev *dev;
  const struct export *e;
  struct lg_nbdkit_gate gate; /* replies once the client is gone (glue.h) */
  /* The possible losses this client was told of (lg_dev_losses): every
   * connection open when one happens hears of it at its next flush. */
  atomic_uint_fast64_t seen_losses;
};

/* nbdkit -D lungate.verbose=1: trace every SCSI command (with nbdkit -v). */
NBDKIT_DLL_PUBLIC int lungate_debug_verbose = 0;

/* stats-file=: the lines of text, n bytes, replace the file's content at
 * once (a reader never sees half of it).  The temporary file beside it is
 * made with mkstemp (O_EXCL): a name planted there beforehand, such as a
 * symbolic link to another file, is never followed.  Said when it
 * cannot. */
static void
write_stats_file (const char *text, size_t n)
{
  char tmp[PATH_MAX];
  int fd;
  FILE *f;

  if (stats_file == NULL)
    return;
  if (snprintf (tmp, sizeof tmp, "%s.XXXXXX", stats_file) >= (int) sizeof tmp) {
    nbdkit_error ("stats-file: %s: the name is too long", stats_file);
    return;
  }
  if ((fd = mkstemp (tmp)) < 0) {
    nbdkit_error ("stats-file: a temporary file beside %s: %m", stats_file);
    return;
  }
  /* Counters, not secrets: readable as a file made with umask 022. */
  if (fchmod (fd, 0644) < 0 || (f = fdopen (fd, "w")) == NULL) {
    nbdkit_error ("stats-file: %s: %m", tmp);
    close (fd);
    unlink (tmp);
    return;
  }
  if (fwrite (text, 1, n, f) != n || fclose (f) != 0) {
    nbdkit_error ("stats-file: writing %s: %m", tmp);
    unlink (tmp);
    return;
  }
  if (rename (tmp, stats_file) < 0) {
    nbdkit_error ("stats-file: %s: %m", stats_file);
    unlink (tmp);
  }
}

/* The counters of every export, in the FUSE .stats format: on SIGUSR1
 * (signals.h), where nbdkit's messages go, and at exit on nbdkit's debug
 * channel (nbdkit -v): they are not errors.  With stats-file=, written
 * there too, one line an export, each time. */
static void
log_stats (const char *why)
{
  char *all = NULL;
  size_t alen = 0;
  FILE *fa = stats_file ? open_memstream (&all, &alen) : NULL;

  for (size_t i = 0; i < nexports; i++) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream (&buf, &len);

    if (f == NULL)
      return;
    fprintf (f, "stats (%s): export=lun%d lun=%s size=%" PRIu64 " ", why,
             exports[i].info.lun, exports[i].dev->name,
             lg_dev_size (exports[i].dev));
    lg_dev_stats_print (exports[i].dev, f);
    if (fclose (f) == 0 && fa && buf)
      fprintf (fa, "%s\n", buf);
    if (buf && strcmp (why, "exit") == 0)
      nbdkit_debug ("%s", buf);
    else if (buf)
      lg_nbdkit_say (LOG_NOTICE, buf);
    free (buf);
  }
  if (fa && fclose (fa) == 0)
    write_stats_file (all, alen);
  free (all);
}

static void
stats_now (void)
{
  log_stats ("SIGUSR1");
}

static void
lungate_load (void)
{
  lg_log_set_sink (lg_nbdkit_log_sink);
  /* Debug messages go to nbdkit's debug channel (nbdkit -v); the trace
   * of every command only with -D lungate.verbose=1. */
  lg_log_set_level (LG_LOG_DEBUG);
  if (sodium_init () < 0)
    nbdkit_error ("cannot initialise libsodium");
  lg_login_init (&login);
}

/* A signal that stops nbdkit (signals.h): what still waits for the
 * target fails at once. */
static void
quit_now (void)
{
  lg_target_abandon (target, "nbdkit is stopping");
}

/* Stops every thread of ours and closes the devices: once, from unload
 * or at exit, whichever comes first (no session thread should outlive
 * the process's own exit handlers). */
static void
shut_down (void)
{
  static bool done;

  if (done)
    return;
  done = true;
  /* The next gateway of this host waits for the release (reserve.c). */
  lg_alive_closing ();
  lgp_signals_stop ();
  log_stats ("exit");
  for (size_t i = 0; i < nexports; i++)
    lg_dev_close (exports[i].dev);
  nexports = 0;
  free (exports);
  exports = NULL;
  free (left);
  left = NULL;
  nleft = 0;
  lg_target_close (target);
  target = NULL;
}

static void
lungate_unload (void)
{
  shut_down ();
  if (keyfile)
    sodium_free (keyfile);
  lg_keytab_clear (&keytab);
  free (key_dir);
  free (stats_file);
  lg_secret_free (passphrase);
  lg_url_clear (&purl);
  lg_login_clear (&login);
  free (url);
  for (unsigned i = 0; i < n_more_urls; i++)
    free (more_urls[i]);
}

/* readahead=, writebehind=: 0 (none), or a size from min to max. */
static int
buffer_size (const char *key, const char *value, int64_t min, int64_t max,
             size_t *out)
{
  int64_t sz = nbdkit_parse_size (value);

  if (sz < 0)
    return -1;
  if (sz != 0 && (sz < min || sz > max)) {
    nbdkit_error ("%s: 0 (none), or from %" PRId64 "K to %" PRId64 "G", key,
                  min >> 10, max >> 30);
    return -1;
  }
  *out = (size_t) sz;
  return 0;
}

static int
set_string (char **slot, const char *value)
{
  char *s = strdup (value);

  if (s == NULL) {
    nbdkit_error ("strdup: %m");
    return -1;
  }
  free (*slot);
  *slot = s;
  return 0;
}

static int
parse_seconds (const char *key, const char *value, int min, int *out)
{
  long v;

  if (lg_parse_long (value, 10, min >= 0 ? min : LONG_MIN, 86400, &v) < 0) {
    if (min < 0)
      nbdkit_error ("%s: '%s' is not a number of seconds up to 86400 "
                    "(negative: wait for ever)",
                    key, value);
    else
      nbdkit_error ("%s: '%s' is not a number of seconds from %d to 86400", key,
                    value, min);
    return -1;
  }
  /* min < 0: any negative number means for ever. */
  if (v < 0)
    v = -1;
  *out = (int) v;
  return 0;
}

static int
lungate_config (const char *key, const char *value)
{
  if (strcmp (key, "url") == 0) {
    if (url == NULL)
      return set_string (&url, value);
    if (n_more_urls == LG_MAX_PORTALS - 1) {
      nbdkit_error ("url: at most %d portals", LG_MAX_PORTALS);
      return -1;
    }
    return set_string (&more_urls[n_more_urls++], value);
  }
  if (strcmp (key, "user") == 0)
    return set_string (&login.user, value);
  if (strcmp (key, "password") == 0)
    return lg_nbdkit_read_secret (key, value, &login.secret);
  if (strcmp (key, "target-user") == 0)
    return set_string (&login.target_user, value);
  if (strcmp (key, "target-password") == 0)
    return lg_nbdkit_read_secret (key, value, &login.target_secret);
  if (strcmp (key, "initiator") == 0) {
    if (strncmp (value, "iqn.", 4) && strncmp (value, "eui.", 4)
        && strncmp (value, "naa.", 4)) {
      nbdkit_error ("initiator: '%s' is not an iSCSI name", value);
      return -1;
    }
    return set_string (&login.initiator_name, value);
  }
  if (strcmp (key, "connections") == 0) {
    if (nbdkit_parse_unsigned (key, value, &connections) < 0)
      return -1;
    if (connections < 1 || connections > LG_POOL_MAX) {
      nbdkit_error ("connections: must be from 1 to %d", LG_POOL_MAX);
      return -1;
    }
    return 0;
  }
  if (strcmp (key, "header-digest") == 0) {
    if (strcmp (value, "none") == 0)
      login.header_digest = false;
    else if (strcmp (value, "crc32c") == 0)
      login.header_digest = true;
    else {
      nbdkit_error ("header-digest: '%s': want none or crc32c", value);
      return -1;
    }
    return 0;
  }
  if (strcmp (key, "key-file") == 0)
    return lg_keytab_add (&keytab, value, &keyfile);
  if (strcmp (key, "key-dir") == 0)
    return set_string (&key_dir, value);
  if (strcmp (key, "stats-file") == 0) {
    /* nbdkit changes to / when it goes into the background. */
    char *abs = nbdkit_absolute_path (value);

    if (abs == NULL)
      return -1;
    free (stats_file);
    stats_file = abs;
    return 0;
  }
  if (strcmp (key, "passphrase") == 0)
    return lg_nbdkit_read_secret (key, value, &passphrase);
  if (strcmp (key, "metadata-cache") == 0) {
    int64_t sz = nbdkit_parse_size (value);

    if (sz < 0)
      return -1;
    if (sz < LG_MD_BLOCK * 4 || sz > (INT64_C (1) << 32)) {
      nbdkit_error ("metadata-cache: from 16K to 4G");
      return -1;
    }
    md_cache_blocks = (size_t) (sz / LG_MD_BLOCK);
    return 0;
  }
  if (strcmp (key, "readahead") == 0)
    return buffer_size (key, value, LG_READ_AHEAD_MIN, LG_READ_AHEAD_MAX,
                        &read_ahead);
  if (strcmp (key, "writebehind") == 0)
    return buffer_size (key, value, LG_WRITE_BEHIND_MIN, LG_WRITE_BEHIND_MAX,
                        &write_behind);
  if (strcmp (key, "takeover") == 0 || strcmp (key, "shared") == 0) {
    unsigned flag = key[0] == 't' ? LG_CLAIM_TAKEOVER : LG_CLAIM_SHARED;
    int b = nbdkit_parse_bool (value);

    if (b < 0)
      return -1;
    claim_flags = b ? claim_flags | flag : claim_flags & ~flag;
    return 0;
  }
  if (strcmp (key, "strict") == 0) {
    int b = nbdkit_parse_bool (value);

    if (b < 0)
      return -1;
    strict = b;
    return 0;
  }
  if (strcmp (key, "timeout") == 0)
    return parse_seconds (key, value, -1, &login.io_timeout);
  if (strcmp (key, "connect-timeout") == 0)
    return parse_seconds (key, value, 1, &login.connect_timeout);
  nbdkit_error ("unknown parameter '%s'", key);
  return -1;
}

static int
lungate_config_complete (void)
{
  char err[256];

  if (url == NULL) {
    nbdkit_error ("url=iscsi://HOST[:PORT]/TARGET-IQN[/LUN] is required");
    return -1;
  }
  if (lg_url_parse (url, &purl, err, sizeof err) < 0) {
    nbdkit_error ("invalid URL '%s': %s", url, err);
    return -1;
  }
  if (purl.kind == LG_URL_PORTAL) {
    nbdkit_error ("url: '%s' names a portal: add the target IQN (and "
                  "optionally the LUN)",
                  url);
    return -1;
  }
  snprintf (portals, sizeof portals, "%s", purl.portal);
  for (unsigned i = 0; i < n_more_urls; i++) {
    struct lg_url u;

    if (lg_url_parse (more_urls[i], &u, err, sizeof err) < 0) {
      nbdkit_error ("invalid URL '%s': %s", more_urls[i], err);
      return -1;
    }
    if (strcmp (u.target, purl.target) != 0 || u.lun != purl.lun) {
      nbdkit_error ("url: '%s' is not another path to %s%s: every url= must "
                    "name the same target and LUN",
                    more_urls[i], purl.target,
                    purl.lun >= 0 ? " and the same LUN" : "");
      lg_url_clear (&u);
      return -1;
    }
    if (strlen (portals) + strlen (u.portal) + 2 <= sizeof portals) {
      strcat (portals, " ");
      strcat (portals, u.portal);
    }
    lg_url_clear (&u);
  }
  if (purl.user && login.user == NULL
      && set_string (&login.user, purl.user) < 0)
    return -1;
  if (purl.password) {
    /* As the command warns: the URL is in nbdkit's command line. */
    lg_nbdkit_say (LOG_WARNING,
                   "a password in the URL is visible to other "
                   "users in the process list: prefer "
                   "password=+FILE");
    if (login.secret == NULL) {
      login.secret = purl.password;
      purl.password = NULL;
    }
  }
  if ((login.user == NULL) != (login.secret == NULL)) {
    nbdkit_error ("CHAP needs both user= and password=");
    return -1;
  }
  if ((login.target_user == NULL) != (login.target_secret == NULL)
      || (login.target_user && login.user == NULL)) {
    nbdkit_error ("mutual CHAP needs target-user=, target-password=, "
                  "user= and password=");
    return -1;
  }
  return 0;
}

#define lungate_config_help                                                    \
  "url=iscsi://HOST[:PORT]/TARGET-IQN[/LUN] (required)\n"                      \
  "                     A LUN, or a target: one export per LUN.  Again:\n"     \
  "                     another portal (path) to the same target.\n"           \
  "user=USER            CHAP user name.\n"                                     \
  "password=SECRET      CHAP secret (-: prompt, +FILE, -FD).\n"                \
  "target-user=USER     Mutual CHAP: the target's user name.\n"                \
  "target-password=SECRET  Mutual CHAP: the target's secret.\n"                \
  "initiator=IQN        Initiator name (default\n"                             \
  "                     iqn.2026-11.org.lungate:HOSTNAME).\n"                  \
  "connections=N        iSCSI connections in the pool (default 4).\n"          \
  "header-digest=none|crc32c  Header digest (default none).\n"                 \
  "timeout=SECONDS      Outage budget: fail requests with EIO after the\n"     \
  "                     target is unreachable this long (default 60;\n"        \
  "                     0: at once; -1: wait for ever).\n"                     \
  "connect-timeout=SECONDS  Login timeout (default 10).\n"                     \
  "key-file=[lunN:]FILE Key of a lungate-formatted LUN (32 bytes); with\n"     \
  "                     lunN:, for LUN N only (repeat for each).\n"            \
  "key-dir=DIR          DIR/UUID holds the key of the volume UUID.\n"          \
  "passphrase=SECRET    Passphrase of a lungate-formatted LUN\n"               \
  "                     (-: prompt, +FILE, -FD).\n"                            \
  "metadata-cache=SIZE  Crypt metadata cache per LUN (default 16M).\n"         \
  "readahead=SIZE       Read up to SIZE ahead of a client that reads in\n"     \
  "                     order, per LUN (default 32M; 0: none).\n"              \
  "writebehind=SIZE     Acknowledge writes once buffered, up to SIZE per\n"    \
  "                     LUN, until a flush (default 0: write through).\n"      \
  "stats-file=PATH      Write the counters there too, on SIGUSR1 and at "      \
  "exit.\n"                                                                    \
  "takeover=true        Preempt the gateway that holds a LUN (it is gone).\n"  \
  "shared=true          Plain LUNs: take no exclusive write access (for\n"     \
  "                     cluster file systems; refused for lungate volumes).\n" \
  "strict=true          Target URL: fail the start when a disk LUN cannot\n"   \
  "                     be served (a volume without its key, ...)."

static const struct lg_keytab *
keys (void)
{
  keytab.all.keyfile = keyfile;
  keytab.all.passphrase = passphrase;
  keytab.dir = key_dir;
  return &keytab;
}

/* Before nbdkit forks to the background (and before --run starts its
 * command): log in once and look at the LUN, so that a wrong URL, secret
 * or LUN stops nbdkit at once with the reason instead of failing every
 * client later.  The session closes again: threads do not survive the
 * fork. */
static int
lungate_get_ready (void)
{
  struct lg_tgt *t;
  struct lg_dev *d;
  char err[512];

  if (lungate_debug_verbose)
    lg_log_set_level (LG_LOG_TRACE);
  lgp_signals_arm ();

  t = lg_target_open (&login, portals, purl.target, 1, err, sizeof err);
  if (t == NULL) {
    nbdkit_error ("%s", err);
    return -1;
  }
  /* A LUN URL: the LUN, and the key too: a wrong one is an error now,
   * not at first read. */
  d = purl.kind != LG_URL_LUN
      ? NULL
      : lg_target_open_lun (t, purl.lun, LG_OPEN_READ_ONLY | LG_OPEN_NAMED,
                            keys (), 0, NULL, NULL, err, sizeof err);
  if (purl.kind == LG_URL_LUN && d == NULL)
    nbdkit_error ("%s", err);
  lg_dev_close (d);
  lg_target_close (t);
  return purl.kind == LG_URL_LUN && d == NULL ? -1 : 0;
}

/* Opens LUN lun's stack (the crypt layer on it when the LUN is a lungate
 * volume), and adds the export.  0, or -1 with errno and err set. */
static int
add_export (int lun, char *err, size_t errlen)
{
  struct export *e = &exports[nexports];

  e->dev = lg_target_open_lun (
      target, lun, purl.kind == LG_URL_LUN ? LG_OPEN_NAMED : 0, keys (),
      md_cache_blocks, &e->info, &e->crypt, err, errlen);
  if (e->dev == NULL)
    return -1;
  e->dev->loss_tracked = true; /* durable () */
  atomic_init (&e->told_wb, 0);
  /* Out of memory it only reads nothing ahead. */
  if (lg_dev_read_ahead (e->dev, read_ahead) < 0)
    nbdkit_debug ("%s: no read-ahead: %m", e->dev->name);
  if (lg_dev_write_behind (e->dev, write_behind) < 0)
    nbdkit_debug ("%s: no write-behind: %m", e->dev->name);
  nexports++;
  return 0;
}

/* Why the exports could not be opened, in captive mode (after_fork). */
static char start_err[512];

static int
start_failed (const char *why)
{
  nbdkit_error ("%s", why);
  snprintf (start_err, sizeof start_err, "%s", why);
  return -1;
}

/* Under nbdkit --run (1.32), the parent process runs the command and
 * keeps the listening socket: if the server child exits, the command's
 * connection waits in the backlog for ever (doc/nbdkit-bugs.md, 2). */
static bool
captive (void)
{
  char path[64], comm[32] = "";
  FILE *f;

  snprintf (path, sizeof path, "/proc/%ld/comm", (long) getppid ());
  f = fopen (path, "r");
  if (f == NULL)
    return false;
  if (fgets (comm, sizeof comm, f) == NULL)
    comm[0] = '\0';
  fclose (f);
  return strncmp (comm, "nbdkit", 6) == 0;
}

/* Opens the pool and the devices: once, after nbdkit forked. */
static int
open_exports (void)
{
  char err[512];
  int *luns = NULL;
  size_t n = 0;

  target = lg_target_open (&login, portals, purl.target, connections, err,
                           sizeof err);
  if (target == NULL)
    return start_failed (err);
  /* Before the LUNs are opened: nbdkit already listens, and a SIGTERM
   * while a target that stopped answering holds the opening would else
   * wait out the whole outage budget. */
  lgp_signals_start (quit_now, stats_now);
  if (lg_target_luns (target, &purl, &luns, &n, err, sizeof err) < 0)
    return start_failed (err);
  exports = calloc (n ? n : 1, sizeof *exports);
  left = calloc (n ? n : 1, sizeof *left);
  if (exports == NULL || left == NULL) {
    free (luns);
    return start_failed ("out of memory");
  }
  for (size_t i = 0; i < n; i++) {
    if (add_export (luns[i], err, sizeof err) == 0)
      continue;
    /* A LUN URL must work; in a target, LUNs that are not disks (the
     * controller at LUN 0) are simply not exported. */
    if (purl.kind == LG_URL_LUN) {
      free (luns);
      return start_failed (err);
    }
    if (errno == ENOTBLK) {
      nbdkit_debug ("not exporting LUN %d: %s", luns[i], err);
      continue;
    }
    if (strict) {
      char why[600];

      snprintf (why, sizeof why, "LUN %d cannot be served (strict=true): %s",
                luns[i], err);
      free (luns);
      return start_failed (why);
    }
    nbdkit_error ("not exporting LUN %d: %s", luns[i], err);
    left[nleft].lun = luns[i];
    snprintf (left[nleft].why, sizeof left[nleft].why, "%s", err);
    nleft++;
  }
  free (luns);
  if (nexports == 0) {
    snprintf (err, sizeof err, "%s: the target has no disk LUN to export",
              purl.target);
    return start_failed (err);
  }
  return 0;
}

static int
lungate_after_fork (void)
{
  if (open_exports () < 0) {
    if (!captive ())
      return -1; /* nbdkit exits with the reason */
    /* Under --run: stay up with no export, so that the command's open
     * fails with the reason instead of waiting for ever. */
    nexports = 0;
  }
  lgp_signals_ready ();
  atexit (shut_down);
  return 0;
}

static int
lungate_list_exports (int readonly, int is_tls, struct nbdkit_exports *e)
{
  (void) readonly;
  (void) is_tls;
  for (size_t i = 0; i < nexports; i++) {
    const struct lg_lun_info *li = &exports[i].info;
    char name[32], desc[160], hs[32];

    snprintf (name, sizeof name, "lun%d", li->lun);
    snprintf (desc, sizeof desc, "%s %s, %s, %u-byte blocks%s", li->vendor,
              li->product,
              lg_human_size (lg_dev_size (exports[i].dev), hs, sizeof hs),
              exports[i].dev->block_size,
              exports[i].crypt ? ", lungate volume" : "");
    if (nbdkit_add_export (e, name, desc) < 0)
      return -1;
  }
  return 0;
}

static const char *
lungate_default_export (int readonly, int is_tls)
{
  static char name[32];

  (void) readonly;
  (void) is_tls;
  /* Captive with nothing open (after_fork): the open says why. */
  if (nexports == 0)
    return "";
  snprintf (name, sizeof name, "lun%d", exports[0].info.lun);
  return name;
}

/* Finds the export an export name asks for. */
static const struct export *
find_export (const char *name)
{
  long lun;

  if (nexports == 0)
    return NULL;
  if (name[0] == '\0')
    return &exports[0];
  if (strncmp (name, "lun", 3) != 0)
    return NULL;
  if (lg_parse_long (name + 3, 10, 0, INT_MAX, &lun) < 0)
    return NULL;
  for (size_t i = 0; i < nexports; i++)
    if (exports[i].info.lun == lun)
      return &exports[i];
  return NULL;
}

/* The first writable connection to an export takes write access to its
 * LUN, for as long as nbdkit runs: a second gateway is refused here,
 * before anything is written (dev/reserve.h). */
static int
claim (const struct export *ce)
{
  struct export *e = (struct export *) ce;
  char err[512];
  int r = 0;

  pthread_mutex_lock (&claim_lock);
  if (!e->claimed) {
    if (lg_dev_claim (e->dev, claim_flags, err, sizeof err) < 0) {
      int saved = errno;

      nbdkit_error ("%s", err);
      errno = saved == EBUSY ? EPERM : saved;
      r = -1;
    }
    else
      e->claimed = true;
  }
  pthread_mutex_unlock (&claim_lock);
  return r;
}

/* The first read-only connection to an export another gateway writes:
 * say what that means. */
static void
note_reader (const struct export *ce)
{
  struct export *e = (struct export *) ce;

  pthread_mutex_lock (&claim_lock);
  if (!e->noted && !e->claimed)
    lg_dev_note_reader (e->dev);
  e->noted = true;
  pthread_mutex_unlock (&claim_lock);
}

static void *
lungate_open (int readonly)
{
  const char *name = nbdkit_export_name ();
  struct handle *h;
  const struct export *e = find_export (name ? name : "");

  if (start_err[0]) {
    nbdkit_error ("the gateway could not start: %s", start_err);
    errno = EIO;
    return NULL;
  }
  if (e == NULL) {
    long lun;

    if (name && strncmp (name, "lun", 3) == 0
        && lg_parse_long (name + 3, 10, 0, INT_MAX, &lun) == 0)
      for (size_t i = 0; i < nleft; i++)
        if (left[i].lun == lun) {
          nbdkit_error ("export '%s' is not served: %s", name, left[i].why);
          errno = ENOENT;
          return NULL;
        }
    nbdkit_error ("export '%s' does not exist: exports are lun<N>, see "
                  "nbdinfo --list",
                  name);
    errno = ENOENT;
    return NULL;
  }
  if (!readonly && claim (e) < 0)
    return NULL;
  if (readonly)
    note_reader (e);
  h = malloc (sizeof *h);
  if (h == NULL) {
    nbdkit_error ("malloc: %m");
    return NULL;
  }
  h->e = e;
  h->dev = e->dev;
  atomic_init (&h->seen_losses,
               lg_dev_losses (e->dev)
                   - (lg_dev_wb_failures (e->dev) - atomic_load (&e->told_wb)));
  lg_nbdkit_gate_init (&h->gate);
  return h;
}

static void
lungate_close (void *handle)
{
  struct handle *h = handle;

  lg_nbdkit_gate_destroy (&h->gate);
  free (h);
}

/* A request callback's result, through the reply gate (glue.h). */
static int
reply (struct handle *h, int r)
{
  int e = errno;

  lg_nbdkit_gate_pass (&h->gate);
  errno = e;
  return r;
}

static const char *
lungate_export_description (void *handle)
{
  struct handle *h = handle;
  const struct lg_lun_info *li = &h->e->info;

  return nbdkit_printf_intern ("%s LUN %d: %s %s", purl.target, li->lun,
                               li->vendor, li->product);
}

static int64_t
lungate_get_size (void *handle)
{
  struct handle *h = handle;

  return (int64_t) lg_dev_size (h->dev);
}

static int
lungate_block_size (void *handle, uint32_t *minimum, uint32_t *preferred,
                    uint32_t *maximum)
{
  struct handle *h = handle;
  const struct lg_lun_info *li = &h->e->info;
  uint64_t max = MAX_REQUEST;

  if (h->e->crypt) {
    /* Units are 4 KiB; smaller writes are read-modify-write. */
    *minimum = *preferred = LG_UNIT_SIZE;
    *maximum = MAX_REQUEST;
    return 0;
  }
  *minimum = h->dev->block_size;
  *preferred = h->dev->pref_block_size > 4096 ? h->dev->pref_block_size : 4096;
  if (li->max_xfer_blocks
      && (uint64_t) li->max_xfer_blocks * li->block_size < max)
    max = (uint64_t) li->max_xfer_blocks * li->block_size;
  if (max < *preferred)
    max = *preferred;
  *maximum = (uint32_t) max;
  return 0;
}

static int
lungate_can_write (void *handle)
{
  struct handle *h = handle;

  return !h->dev->read_only;
}

static int
lungate_can_flush (void *handle)
{
  (void) handle;
  return 1;
}

static int
lungate_can_fua (void *handle)
{
  (void) handle;
  /* The device writes with FUA, or follows the write with SYNCHRONIZE
   * CACHE: either way the write is durable when we answer. */
  return NBDKIT_FUA_NATIVE;
}

static int
lungate_can_trim (void *handle)
{
  struct handle *h = handle;

  return h->dev->can_trim;
}

static int
lungate_can_zero (void *handle)
{
  (void) handle;
  return 1;
}

static int
lungate_can_fast_zero (void *handle)
{
  struct handle *h = handle;

  /* Fast only where WRITE SAME can deallocate (on a lungate volume too:
   * its stored bytes are zeroed under a ZERO slot); elsewhere zeroing is
   * writing, and a fast-zero request fails at once with ENOTSUP. */
  return h->dev->can_fast_zero;
}

static int
lungate_can_extents (void *handle)
{
  struct handle *h = handle;

  return h->dev->can_extents;
}

static int
lungate_can_multi_conn (void *handle)
{
  (void) handle;
  /* Every connection reaches the same LUN, and SYNCHRONIZE CACHE makes
   * durable every write the LUN has completed, whichever session carried
   * it: a flush on one connection covers writes acknowledged on all. */
  return 1;
}

static int
lungate_can_cache (void *handle)
{
  (void) handle;
  return NBDKIT_CACHE_NONE;
}

static int
lungate_pread (void *handle, void *buf, uint32_t count, uint64_t offset,
               uint32_t flags)
{
  struct handle *h = handle;

  (void) flags;
  return reply (h, lg_dev_pread (h->dev, buf, count, offset));
}

static int durable (struct handle *h, int r, bool claims);

static int
lungate_pwrite (void *handle, const void *buf, uint32_t count, uint64_t offset,
                uint32_t flags)
{
  struct handle *h = handle;

  /* A FUA write's own data is durable when it succeeds: a possible loss
   * of earlier writes is the next flush's to report (an EIO here would
   * be taken for this write's, and the flush would then succeed). */
  return reply (
      h,
      lg_dev_pwrite (h->dev, buf, count, offset, lg_nbdkit_dev_flags (flags)));
}

/* A flush succeeded: unless a possible loss came since this client last
 * heard of one (another client's flush may have been told first). */
static int
durable (struct handle *h, int r, bool claims)
{
  uint64_t now, seen;

  if (!claims)
    return r;
  now = lg_dev_losses (h->dev);
  seen = atomic_exchange (&h->seen_losses, now);
  if (now != seen)
    atomic_store (&((struct export *) h->e)->told_wb,
                  lg_dev_wb_failures (h->dev));
  if (r == 0 && now != seen) {
    nbdkit_error ("%s: writes acknowledged and not yet flushed may be lost "
                  "(the target may have restarted, or a buffered write "
                  "failed: the log says which; reported to another client "
                  "first): write them again",
                  h->dev->name);
    errno = lg_dev_loss_errno (h->dev);
    return -1;
  }
  return r;
}

static int
lungate_flush (void *handle, uint32_t flags)
{
  struct handle *h = handle;

  (void) flags;
  return reply (h, durable (h, lg_dev_flush (h->dev), true));
}

static int
lungate_trim (void *handle, uint32_t count, uint64_t offset, uint32_t flags)
{
  struct handle *h = handle;

  return reply (
      h, lg_dev_trim (h->dev, count, offset, lg_nbdkit_dev_flags (flags)));
}

static int
lungate_zero (void *handle, uint32_t count, uint64_t offset, uint32_t flags)
{
  struct handle *h = handle;

  return reply (
      h, lg_dev_zero (h->dev, count, offset, lg_nbdkit_dev_flags (flags)));
}

struct extents_call {
  struct nbdkit_extents *e;
  bool holes_zero;
};

static int
add_extent (void *opaque, uint64_t offset, uint64_t length, bool is_hole)
{
  const struct extents_call *c = opaque;
  uint32_t type = 0;

  /* A hole reads as zeroes only on an LBPRZ LUN; elsewhere copying tools
   * must still read it. */
  if (is_hole)
    type = NBDKIT_EXTENT_HOLE | (c->holes_zero ? NBDKIT_EXTENT_ZERO : 0);
  return nbdkit_add_extent (c->e, offset, length, type);
}

static int
lungate_extents (void *handle, uint32_t count, uint64_t offset, uint32_t flags,
                 struct nbdkit_extents *e)
{
  struct handle *h = handle;

  struct extents_call c = { e, h->dev->holes_zero };

  (void) flags;
  return reply (h, lg_dev_extents (h->dev, count, offset, add_extent, &c));
}

static void
lungate_dump_plugin (void)
{
  printf ("lungate_libiscsi=%s\n", LG_LIBISCSI_VERSION);
  printf ("lungate_libsodium=%s\n", sodium_version_string ());
}

static struct nbdkit_plugin plugin = {
  .name = "lungate",
  .longname = "lungate iSCSI gateway",
  .version = PACKAGE_VERSION,
  .description = "Serve iSCSI LUNs over NBD (userspace, libiscsi)",
  .load = lungate_load,
  .unload = lungate_unload,
  .config = lungate_config,
  .config_complete = lungate_config_complete,
  .config_help = lungate_config_help,
  .magic_config_key = "url",
  .get_ready = lungate_get_ready,
  .after_fork = lungate_after_fork,
  .list_exports = lungate_list_exports,
  .default_export = lungate_default_export,
  .open = lungate_open,
  .close = lungate_close,
  .export_description = lungate_export_description,
  .get_size = lungate_get_size,
  .block_size = lungate_block_size,
  .can_write = lungate_can_write,
  .can_flush = lungate_can_flush,
  .can_fua = lungate_can_fua,
  .can_trim = lungate_can_trim,
  .can_zero = lungate_can_zero,
  .can_fast_zero = lungate_can_fast_zero,
  .can_extents = lungate_can_extents,
  .can_multi_conn = lungate_can_multi_conn,
  .can_cache = lungate_can_cache,
  .pread = lungate_pread,
  .pwrite = lungate_pwrite,
  .flush = lungate_flush,
  .trim = lungate_trim,
  .zero = lungate_zero,
  .extents = lungate_extents,
  .dump_plugin = lungate_dump_plugin,
  .errno_is_preserved = 1,
};

struct nbdkit_plugin *plugin_init (void);
NBDKIT_REGISTER_PLUGIN (plugin)
