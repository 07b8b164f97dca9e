/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Output helpers.  Pure functions of their arguments: any thread. */
#include <config.h>

#include <stdio.h>

#include "util/fmt.h"

const char *
lg_human_size (uint64_t bytes, char *buf, size_t len)
{
  static const char *const unit[]
      = { "B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB" };
  double v = (double) bytes;
  int i = 0;

  while (v >= 1024 && i < 6) {
    v /= 1024;
    i++;
  }
  if (i == 0)
    snprintf (buf, len, "%llu B", (unsigned long long) bytes);
  else
    snprintf (buf, len, "%.2f %s", v, unit[i]);
  return buf;
}

void
lg_json_string (FILE *f, const char *s)
{
  fputc ('"', f);
  for (const unsigned char *p = (const unsigned char *) s; *p; p++) {
    if (*p == '"' || *p == '\\')
      fprintf (f, "\\%c", *p);
    else if (*p < 0x20 || *p >= 0x7f)
      fprintf (f, "\\u%04x", *p);
    else
      fputc (*p, f);
  }
  fputc ('"', f);
}
