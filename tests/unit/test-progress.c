/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Progress off a terminal: the rate and the time left once known, a line
 * at least every few seconds, and the hint once the time left is long
 * (issue 15, item 9). */
#include <config.h>

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/log.h"
#include "util/progress.h"

static char *
run (void (*body) (void))
{
  char path[] = "/tmp/lungate-progress.XXXXXX";
  int fd = mkstemp (path), saved = dup (2);
  static char out[4096];
  ssize_t n;

  cr_assert (fd >= 0 && saved >= 0);
  lg_log_set_level (LG_LOG_INFO);
  fflush (stderr);
  dup2 (fd, 2);
  body ();
  fflush (stderr);
  dup2 (saved, 2);
  close (saved);
  n = pread (fd, out, sizeof out - 1, 0);
  out[n > 0 ? n : 0] = '\0';
  close (fd);
  unlink (path);
  return out;
}

static void
slow (void)
{
  lg_progress_start_bytes ("format: sealing units", 4096);
  lg_progress_hint ("use --lazy", 2);
  lg_progress (1, 100000);
  usleep (700 * 1000);
  lg_progress (5, 100000); /* same decile, under 5 s: no line */
  lg_progress (10001, 100000);
  lg_progress_end ();
}

Test (progress, rate_eta_hint)
{
  char *out = run (slow);

  cr_assert (strstr (out, "format: sealing units: 0% (1/100000)\n"), "%s", out);
  cr_assert (!strstr (out, "(5/100000"), "%s", out);
  cr_assert (strstr (out, "format: sealing units: 10% (10001/100000, "), "%s",
             out);
  cr_assert (strstr (out, " MiB/s, "), "%s", out);
  cr_assert (strstr (out, "s left)\n"), "%s", out);
  cr_assert (strstr (out, "format: sealing units: use --lazy\n"), "%s", out);
  cr_assert (strstr (out, "format: sealing units: done in "), "%s", out);
}
