/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* A progress line on stderr for long operations, with the rate and the
 * time left: rewritten in place on a terminal, a line every 10% (and at
 * least every 5 s) otherwise.  One operation at a time, from one
 * thread. */
#ifndef LG_PROGRESS_H
#define LG_PROGRESS_H

#include <stdbool.h>
#include <stdint.h>

/* JSON lines instead (--progress-json): each progress line, the hint and
 * the end are one JSON object a line on stderr, at the cadence of the
 * lines off a terminal. */
void lg_progress_set_json (bool on);
bool lg_progress_json (void);
void lg_progress_start (const char *what);
/* The same, counting in units of unit bytes: the rate is in MiB/s. */
void lg_progress_start_bytes (const char *what, uint64_t unit);
/* Once the time left exceeds seconds, text is printed once (until
 * lg_progress_end). */
void lg_progress_hint (const char *text, double seconds);
void lg_progress (uint64_t done, uint64_t total);
void lg_progress_end (void);
/* Ends it without the "done" line: it failed or was stopped, and the
 * caller says so.  errno is kept. */
void lg_progress_abandon (void);

#endif
