/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Logging sink.  The level is set once at start-up, before any worker
 * thread exists, and only read afterwards; the sink may change later (a
 * mount that goes to the background switches to its log), so it is
 * atomic.
 */
#include <config.h>

#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

#include "util/log.h"

static _Atomic (lg_log_sink *) sink;
static atomic_bool stamped;
static enum lg_log_level max_level = LG_LOG_WARN;

void
lg_log_set_sink (lg_log_sink *s)
{
  atomic_store (&sink, s);
}

void
lg_log_stamp (bool on)
{
  atomic_store (&stamped, on);
}

static void
syslog_sink (enum lg_log_level level, const char *msg)
{
  static const int prio[] = {
    [LG_LOG_ERROR] = LOG_ERR,   [LG_LOG_WARN] = LOG_WARNING,
    [LG_LOG_INFO] = LOG_INFO,   [LG_LOG_DEBUG] = LOG_DEBUG,
    [LG_LOG_TRACE] = LOG_DEBUG,
  };

  syslog (prio[level], "%s", msg);
}

void
lg_log_to_syslog (void)
{
  openlog ("lungate", LOG_PID | LOG_NDELAY, LOG_USER);
  lg_log_set_sink (syslog_sink);
}

void
lg_log_set_level (enum lg_log_level max)
{
  max_level = max;
}

enum lg_log_level
lg_log_get_level (void)
{
  return max_level;
}

static void
default_sink (enum lg_log_level level, const char *msg)
{
  static const char *const prefix[] = {
    [LG_LOG_ERROR] = "",        [LG_LOG_WARN] = "warning: ", [LG_LOG_INFO] = "",
    [LG_LOG_DEBUG] = "debug: ", [LG_LOG_TRACE] = "trace: ",
  };

  /* One fprintf per line: stdio locks the stream, so lines from several
   * threads do not interleave.  A log file has the time and the process
   * on each line. */
  if (atomic_load (&stamped)) {
    struct timespec ts;
    struct tm tm;
    char when[32] = "";

    clock_gettime (CLOCK_REALTIME, &ts);
    if (localtime_r (&ts.tv_sec, &tm))
      strftime (when, sizeof when, "%Y-%m-%d %H:%M:%S", &tm);
    fprintf (stderr, "%s.%03ld lungate[%ld]: %s%s\n", when,
             ts.tv_nsec / 1000000, (long) getpid (), prefix[level], msg);
  }
  else
    fprintf (stderr, "lungate: %s%s\n", prefix[level], msg);
}

void
lg_escape_controls (char *out, size_t len, const char *in)
{
  size_t o = 0;

  for (const unsigned char *p = (const unsigned char *) in; *p; p++) {
    if (*p < 0x20 || *p == 0x7f) {
      if (o + 4 >= len)
        break;
      snprintf (out + o, 5, "\\x%02x", *p);
      o += 4;
    }
    else {
      if (o + 1 >= len)
        break;
      out[o++] = (char) *p;
    }
  }
  out[o] = '\0';
}

/* Messages carry text from the target and from libiscsi (SendTargets
 * names, INQUIRY strings, error texts): control bytes are escaped, so that
 * none reaches a terminal or a log as a control sequence. */
void
lg_log (enum lg_log_level level, const char *fmt, ...)
{
  char buf[1024], safe[1024];
  va_list ap;

  if (level > max_level)
    return;
  va_start (ap, fmt);
  vsnprintf (buf, sizeof buf, fmt, ap);
  va_end (ap);
  lg_escape_controls (safe, sizeof safe, buf);
  lg_log_sink *s = atomic_load (&sink);

  (s ? s : default_sink) (level, safe);
}
