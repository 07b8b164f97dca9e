/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Progress line.  Main thread only. */
#include <config.h>

#include <stdbool.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include "util/log.h"
#include "util/progress.h"

static const char *label;
static bool tty, shown;
static int last_decile;
static double last_time, start_time;

static double
now (void)
{
  struct timespec ts;

  clock_gettime (CLOCK_MONOTONIC, &ts);
  return (double) ts.tv_sec + (double) ts.tv_nsec / 1e9;
}

void
lg_progress_start (const char *what)
{
  label = what;
  tty = isatty (STDERR_FILENO);
  shown = false;
  last_decile = -1;
  start_time = last_time = now ();
}

void
lg_progress (uint64_t done, uint64_t total)
{
  double t = now (),
         pct = total ? 100.0 * (double) done / (double) total : 100.0;
  int decile = (int) (pct / 10);

  if (lg_log_get_level () < LG_LOG_INFO)
    return;
  if (tty) {
    if (t - last_time < 0.25 && done < total)
      return;
    fprintf (stderr, "\r%s: %5.1f%% (%llu/%llu)", label, pct,
             (unsigned long long) done, (unsigned long long) total);
    shown = true;
  }
  else if (decile != last_decile) {
    fprintf (stderr, "%s: %d%% (%llu/%llu)\n", label, decile * 10,
             (unsigned long long) done, (unsigned long long) total);
    last_decile = decile;
  }
  last_time = t;
}

void
lg_progress_end (void)
{
  if (tty && shown)
    fprintf (stderr, "\n");
  if (lg_log_get_level () >= LG_LOG_INFO && label)
    fprintf (stderr, "%s: done in %.1f s\n", label, now () - start_time);
  label = NULL;
}
