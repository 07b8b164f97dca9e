/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Logging sink.  The level and the sink are set once at start-up, before
 * any worker thread exists, and only read afterwards.
 */
#include <config.h>

#include <stdarg.h>
#include <stdio.h>

#include "util/log.h"

static lg_log_sink *sink;
static enum lg_log_level max_level = LG_LOG_WARN;

void
lg_log_set_sink (lg_log_sink *s)
{
  sink = s;
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
   * threads do not interleave. */
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
  (sink ? sink : default_sink) (level, safe);
}
