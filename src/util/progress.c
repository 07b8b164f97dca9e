/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Progress line.  Main thread only. */
#include <config.h>

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include "util/fmt.h"
#include "util/log.h"
#include "util/progress.h"

/* Off a terminal: a line every 10%, and at least this often. */
#define LINE_EVERY_S 5.0

static const char *label;
static const char *hint;
static double hint_after;
static uint64_t unit_bytes;
static bool tty, shown, hinted, json;
static int last_decile;
static double last_time, last_line, start_time;

static double
now (void)
{
  struct timespec ts;

  clock_gettime (CLOCK_MONOTONIC, &ts);
  return (double) ts.tv_sec + (double) ts.tv_nsec / 1e9;
}

void
lg_progress_set_json (bool on)
{
  json = on;
}

bool
lg_progress_json (void)
{
  return json;
}

void
lg_progress_start_bytes (const char *what, uint64_t unit)
{
  label = what;
  unit_bytes = unit;
  tty = !json && isatty (STDERR_FILENO);
  shown = hinted = false;
  last_decile = -1;
  start_time = last_time = last_line = now ();
}

void
lg_progress_start (const char *what)
{
  lg_progress_start_bytes (what, 0);
}

void
lg_progress_hint (const char *text, double seconds)
{
  hint = text;
  hint_after = seconds;
}

/* ", 123.4 MiB/s, 2m05s left" (nothing until a rate is known). */
static void
rate_eta (char *buf, size_t len, uint64_t done, uint64_t total, double t,
          double *eta)
{
  double dt = t - start_time, rate = dt > 0.5 ? (double) done / dt : 0;
  unsigned long left;

  *eta = -1;
  buf[0] = '\0';
  if (rate <= 0 || done >= total)
    return;
  *eta = (double) (total - done) / rate;
  left = (unsigned long) *eta;
  if (unit_bytes)
    snprintf (buf, len, ", %.1f MiB/s, %lum%02lus left",
              rate * (double) unit_bytes / 1048576.0, left / 60, left % 60);
  else
    snprintf (buf, len, ", %.0f/s, %lum%02lus left", rate, left / 60,
              left % 60);
}

/* {"operation": LABEL, then the caller's members, then "}\n". */
static void
json_open (void)
{
  fputs ("{\"operation\": ", stderr);
  lg_json_string (stderr, label);
}

static void
json_line (uint64_t done, uint64_t total, double pct, double t)
{
  double dt = t - start_time, rate = dt > 0.5 ? (double) done / dt : 0;

  json_open ();
  fprintf (stderr,
           ", \"done\": %llu, \"total\": %llu, \"percent\": %.1f, "
           "\"elapsed_s\": %.1f",
           (unsigned long long) done, (unsigned long long) total, pct, dt);
  if (unit_bytes)
    fprintf (stderr, ", \"unit_bytes\": %llu", (unsigned long long) unit_bytes);
  if (rate > 0 && done < total)
    fprintf (stderr, ", \"rate_per_s\": %.1f, \"eta_s\": %.1f", rate,
             (double) (total - done) / rate);
  fputs ("}\n", stderr);
}

void
lg_progress (uint64_t done, uint64_t total)
{
  double t = now (), eta,
         pct = total ? 100.0 * (double) done / (double) total : 100.0;
  int decile = (int) (pct / 10);
  char re[80];

  if (lg_log_get_level () < LG_LOG_INFO)
    return;
  if (tty && t - last_time < 0.25 && done < total)
    return;
  if (!tty && decile == last_decile && t - last_line < LINE_EVERY_S)
    return;
  rate_eta (re, sizeof re, done, total, t, &eta);
  if (json) {
    json_line (done, total, pct, t);
    last_decile = decile;
    last_line = t;
  }
  else if (tty) {
    fprintf (stderr, "\r%s: %5.1f%% (%llu/%llu%s)\033[K", label, pct,
             (unsigned long long) done, (unsigned long long) total, re);
    shown = true;
  }
  else {
    fprintf (stderr, "%s: %.0f%% (%llu/%llu%s)\n", label, pct,
             (unsigned long long) done, (unsigned long long) total, re);
    last_decile = decile;
    last_line = t;
  }
  last_time = t;
  if (hint && !hinted && eta > hint_after) {
    if (json) {
      json_open ();
      fputs (", \"hint\": ", stderr);
      lg_json_string (stderr, hint);
      fputs ("}\n", stderr);
    }
    else
      fprintf (stderr, "%s%s: %s\n", tty ? "\n" : "", label, hint);
    hinted = true;
  }
}

static void
clear (void)
{
  int saved = errno;

  if (tty && shown)
    fprintf (stderr, "\n");
  errno = saved;
  label = NULL;
  hint = NULL;
}

void
lg_progress_abandon (void)
{
  int saved = errno;

  if (json && label && lg_log_get_level () >= LG_LOG_INFO) {
    json_open ();
    fputs (", \"finished\": false}\n", stderr);
  }
  errno = saved;
  clear ();
}

void
lg_progress_end (void)
{
  const char *l = label;

  if (json && l && lg_log_get_level () >= LG_LOG_INFO) {
    json_open ();
    fprintf (stderr, ", \"finished\": true, \"elapsed_s\": %.1f}\n",
             now () - start_time);
  }
  clear ();
  if (lg_log_get_level () >= LG_LOG_INFO && l && !json)
    fprintf (stderr, "%s: done in %.1f s\n", l, now () - start_time);
}
