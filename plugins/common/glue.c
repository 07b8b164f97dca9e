/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Shared by the plugin and the filter (each links its own copy).  Any
 * thread. */
#include <config.h>

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

#define NBDKIT_API_VERSION 2
#include <nbdkit-plugin.h>

#include <sodium.h>

#include "common/glue.h"
#include "dev/dev.h"
#include "util/secret.h"

/* Where nbdkit sends its own messages (nbdkit(1), --log): nbdkit 1.32 has
 * no level between error and debug, so a warning is written where nbdkit
 * would write an error, tagged "warning:" (or "notice:") instead. */
enum log_to { LOG_TO_STDERR, LOG_TO_SYSLOG, LOG_TO_NULL };
const char *lg_nbdkit_who = "lungate";
static enum log_to log_to;
static pthread_once_t log_to_once = PTHREAD_ONCE_INIT;

/* --log=stderr|syslog|null (or --log VALUE) in nbdkit's arguments; by
 * default, as nbdkit does: syslog once it has gone into the background,
 * which leaves its stderr on /dev/null (or closed). */
static void
log_to_find (void)
{
  char args[8192];
  const char *v = NULL;
  struct stat st, null;
  ssize_t n = 0;
  int fd = open ("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);

  if (fd >= 0) {
    n = read (fd, args, sizeof args - 1);
    close (fd);
  }
  if (n > 0)
    args[n] = '\0';
  for (ssize_t i = 0; i < n; i += (ssize_t) strlen (args + i) + 1) {
    if (strncmp (args + i, "--log=", 6) == 0)
      v = args + i + 6;
    else if (strcmp (args + i, "--log") == 0 && i + 6 < n)
      v = args + i + 6;
  }
  if (v != NULL) {
    log_to = strcmp (v, "syslog") == 0 ? LOG_TO_SYSLOG
        : strcmp (v, "null") == 0      ? LOG_TO_NULL
                                       : LOG_TO_STDERR;
    if (strcmp (v, "default") != 0)
      return;
  }
  log_to = LOG_TO_STDERR;
  if (fstat (STDERR_FILENO, &st) < 0
      || (stat ("/dev/null", &null) == 0 && S_ISCHR (st.st_mode)
          && st.st_rdev == null.st_rdev))
    log_to = LOG_TO_SYSLOG;
}

void
lg_nbdkit_say (int priority, const char *msg)
{
  const char *tag = priority == LOG_WARNING ? "warning" : "notice";
  char line[4096];
  int n;

  pthread_once (&log_to_once, log_to_find);
  switch (log_to) {
  case LOG_TO_SYSLOG:
    syslog (priority, "%s: %s: %s", lg_nbdkit_who, tag, msg);
    break;
  case LOG_TO_STDERR:
    /* One write, so that lines of several threads do not mix. */
    n = snprintf (line, sizeof line, "nbdkit: %s: %s: %s\n", lg_nbdkit_who, tag,
                  msg);
    if (n >= (int) sizeof line) {
      n = (int) sizeof line - 1;
      line[n - 1] = '\n';
    }
    if (n > 0 && write (STDERR_FILENO, line, (size_t) n) < 0)
      break; /* nowhere to say it */
    break;
  case LOG_TO_NULL:
    break;
  }
}

void
lg_nbdkit_log_sink (enum lg_log_level level, const char *msg)
{
  if (level == LG_LOG_ERROR)
    nbdkit_error ("%s", msg);
  else if (level == LG_LOG_WARN)
    lg_nbdkit_say (LOG_WARNING, msg);
  else
    nbdkit_debug ("%s", msg);
}

int
lg_nbdkit_read_secret (const char *key, const char *value, char **slot)
{
  char *tmp = NULL;
  char *s;

  /* nbdkit_read_password hands back ordinary malloc'd memory: move the
   * secret into sodium memory and wipe the original at once. */
  if (nbdkit_read_password (value, &tmp) < 0)
    return -1;
  s = lg_secret_dup (tmp);
  sodium_memzero (tmp, strlen (tmp));
  free (tmp);
  if (s == NULL) {
    nbdkit_error ("%s: cannot store the secret", key);
    return -1;
  }
  lg_secret_free (*slot);
  *slot = s;
  return 0;
}

unsigned
lg_nbdkit_dev_flags (uint32_t flags)
{
  return ((flags & NBDKIT_FLAG_FUA) ? LG_FUA : 0)
      | ((flags & NBDKIT_FLAG_MAY_TRIM) ? LG_MAY_TRIM : 0)
      | ((flags & NBDKIT_FLAG_FAST_ZERO) ? LG_FAST_ZERO : 0);
}

/* ---- the reply gate (glue.h) ---- */

static pthread_key_t gate_key;
static pthread_once_t gate_once = PTHREAD_ONCE_INIT;

/* The thread that went through the gate has ended: nbdkit is done with
 * its reply. */
static void
gate_thread_ended (void *v)
{
  struct lg_nbdkit_gate *g = v;

  pthread_mutex_lock (&g->lock);
  /* Still the passer (a later thread may have gone on after the wait). */
  if (g->passing && pthread_equal (g->passer, pthread_self ())) {
    g->passing = false;
    pthread_cond_broadcast (&g->cond);
  }
  pthread_mutex_unlock (&g->lock);
}

static void
gate_key_make (void)
{
  if (pthread_key_create (&gate_key, gate_thread_ended) != 0)
    abort ();
}

/* <0, 0, >0: t before, at, after now (CLOCK_MONOTONIC). */
static int
timespec_cmp_now (const struct timespec *t)
{
  struct timespec now;

  clock_gettime (CLOCK_MONOTONIC, &now);
  if (t->tv_sec != now.tv_sec)
    return t->tv_sec < now.tv_sec ? -1 : 1;
  return t->tv_nsec < now.tv_nsec ? -1 : t->tv_nsec > now.tv_nsec;
}

void
lg_nbdkit_gate_init (struct lg_nbdkit_gate *g)
{
  pthread_condattr_t ca;

  pthread_once (&gate_once, gate_key_make);
  pthread_mutex_init (&g->lock, NULL);
  pthread_condattr_init (&ca);
  pthread_condattr_setclock (&ca, CLOCK_MONOTONIC);
  pthread_cond_init (&g->cond, &ca);
  pthread_condattr_destroy (&ca);
  g->gone = g->passing = false;
}

void
lg_nbdkit_gate_pass (struct lg_nbdkit_gate *g)
{
  bool gone;

  /* This thread went through and still holds the gate (a connection
   * served by one thread, or a filter calling us again for the same
   * request): go on.  A thread that went through and lost the gate to a
   * waiter after LG_GATE_WAIT_MS (a filter held it up) waits again: its
   * reply must not race the new passer's (the second hostile review of
   * e2e7e78). */
  pthread_mutex_lock (&g->lock);
  if (g->passing && pthread_equal (g->passer, pthread_self ())) {
    pthread_mutex_unlock (&g->lock);
    return;
  }
  gone = g->gone;
  pthread_mutex_unlock (&g->lock);
  /* 0 s: returns at once, -1 (and logs it once) when the client has
   * closed, the connection is ending or the server stops. */
  if (!gone && nbdkit_nanosleep (0, 0) == 0)
    return;
  pthread_mutex_lock (&g->lock);
  g->gone = true;
  while (g->passing) {
    struct timespec until = g->passed;

    until.tv_nsec += (LG_GATE_WAIT_MS % 1000) * 1000000L;
    until.tv_sec += LG_GATE_WAIT_MS / 1000 + until.tv_nsec / 1000000000L;
    until.tv_nsec %= 1000000000L;
    if (pthread_cond_timedwait (&g->cond, &g->lock, &until) == ETIMEDOUT
        && g->passing && timespec_cmp_now (&until) <= 0)
      break; /* the passer is held up by something else: go on */
  }
  g->passing = true;
  g->passer = pthread_self ();
  clock_gettime (CLOCK_MONOTONIC, &g->passed);
  pthread_setspecific (gate_key, g);
  pthread_mutex_unlock (&g->lock);
}

void
lg_nbdkit_gate_destroy (struct lg_nbdkit_gate *g)
{
  /* .close runs on the connection's thread, which may have served
   * requests itself (a serial connection): it must not call back. */
  if (pthread_getspecific (gate_key) == g)
    pthread_setspecific (gate_key, NULL);
  pthread_cond_destroy (&g->cond);
  pthread_mutex_destroy (&g->lock);
}
