/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Output helpers.  Pure functions of their arguments: any thread. */
#include <config.h>

#include <stdio.h>
#include <string.h>

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

int
lg_parse_size (const char *s, uint64_t *out)
{
  uint64_t v = 0;
  unsigned shift = 0;
  const char *p = s;

  if (*p < '0' || *p > '9')
    return -1;
  for (; *p >= '0' && *p <= '9'; p++) {
    if (v > (UINT64_MAX - (uint64_t) (*p - '0')) / 10)
      return -1;
    v = v * 10 + (uint64_t) (*p - '0');
  }
  switch (*p) {
  case '\0':
    break;
  case 'k':
  case 'K':
    shift = 10;
    p++;
    break;
  case 'm':
  case 'M':
    shift = 20;
    p++;
    break;
  case 'g':
  case 'G':
    shift = 30;
    p++;
    break;
  case 't':
  case 'T':
    shift = 40;
    p++;
    break;
  default:
    return -1;
  }
  if (shift
      && (strcmp (p, "") == 0 || strcmp (p, "iB") == 0 || strcmp (p, "B") == 0))
    p += strlen (p);
  if (*p != '\0' || (shift && v > (UINT64_MAX >> shift)))
    return -1;
  *out = v << shift;
  return 0;
}
