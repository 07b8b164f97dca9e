/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* A progress line on stderr for long operations: rewritten in place on a
 * terminal, a line every 10% otherwise.  One operation at a time, from
 * one thread. */
#ifndef LG_PROGRESS_H
#define LG_PROGRESS_H

#include <stdint.h>

void lg_progress_start (const char *what);
void lg_progress (uint64_t done, uint64_t total);
void lg_progress_end (void);

#endif
