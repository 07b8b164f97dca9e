/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The one logging sink of the core library.  Every layer reports through
 * lg_log; the command routes it to stderr, the nbdkit plugin to
 * nbdkit_error / nbdkit_debug.  Any thread may call it; the sink must be
 * thread-safe (both of ours are).
 */
#ifndef LG_LOG_H
#define LG_LOG_H

#include <stdbool.h>
#include <stddef.h>

enum lg_log_level {
  LG_LOG_ERROR = 0,
  LG_LOG_WARN = 1,
  LG_LOG_INFO = 2,
  LG_LOG_DEBUG = 3,
  LG_LOG_TRACE = 4, /* every SCSI command, and libiscsi's own log */
};

typedef void lg_log_sink (enum lg_log_level level, const char *msg);

/* Install a sink (NULL restores the default: stderr) and the highest level
 * that reaches it. */
void lg_log_set_sink (lg_log_sink *sink);
void lg_log_set_level (enum lg_log_level max);
enum lg_log_level lg_log_get_level (void);

/* The default sink puts the time and the process ID on each line (a log
 * file), or not (a terminal). */
void lg_log_stamp (bool on);

/* From now on to syslog (the journal where there is one), as
 * lungate[PID], facility user. */
void lg_log_to_syslog (void);

void lg_log (enum lg_log_level level, const char *fmt, ...)
    __attribute__ ((format (printf, 2, 3)));

/* Copies in to out (len bytes with the NUL), each control byte (below
 * 0x20, and 0x7f) written as \xNN; cut to fit. */
void lg_escape_controls (char *out, size_t len, const char *in);

#define lg_error(...) lg_log (LG_LOG_ERROR, __VA_ARGS__)
#define lg_warn(...) lg_log (LG_LOG_WARN, __VA_ARGS__)
#define lg_info(...) lg_log (LG_LOG_INFO, __VA_ARGS__)
#define lg_debug(...) lg_log (LG_LOG_DEBUG, __VA_ARGS__)
#define lg_trace(...) lg_log (LG_LOG_TRACE, __VA_ARGS__)

#endif
