/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Output helpers.  Pure functions of their arguments: any thread. */
#include <config.h>

#include <limits.h>
#include <stdbool.h>
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

/* The length of the valid UTF-8 sequence at p (2 to 4 bytes: no
 * overlong form, no surrogate, nothing past U+10FFFF), or 0. */
static size_t
utf8_len (const unsigned char *p)
{
  size_t n = p[0] >= 0xf0 ? 4 : p[0] >= 0xe0 ? 3 : p[0] >= 0xc2 ? 2 : 0;

  if (n == 0 || p[0] > 0xf4)
    return 0;
  for (size_t i = 1; i < n; i++)
    if ((p[i] & 0xc0) != 0x80)
      return 0;
  if ((p[0] == 0xe0 && p[1] < 0xa0) || (p[0] == 0xed && p[1] >= 0xa0)
      || (p[0] == 0xf0 && p[1] < 0x90) || (p[0] == 0xf4 && p[1] >= 0x90))
    return 0;
  return n;
}

void
lg_json_string (FILE *f, const char *s)
{
  fputc ('"', f);
  for (const unsigned char *p = (const unsigned char *) s; *p; p++) {
    size_t n;

    if (*p == '"' || *p == '\\')
      fprintf (f, "\\%c", *p);
    else if (*p < 0x20 || *p == 0x7f)
      fprintf (f, "\\u%04x", *p);
    else if (*p < 0x80)
      fputc (*p, f);
    else if ((n = utf8_len (p)) > 0) {
      fwrite (p, 1, n, f); /* valid UTF-8 as it is */
      p += n - 1;
    }
    else
      fputs ("\\ufffd", f); /* a byte of no character */
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

/* Digits of base up to the first other character: a value for digit c,
 * or -1. */
static int
digit (char c, int base)
{
  int d = c >= '0' && c <= '9' ? c - '0' : -1;

  return d >= 0 && d < base ? d : -1;
}

int
lg_parse_long (const char *s, int base, long min, long max, long *out)
{
  const char *p = s;
  bool neg = *p == '-';
  long v = 0;

  if (base != 8 && base != 10)
    return -1;
  if (neg)
    p++;
  if (digit (*p, base) < 0)
    return -1;
  /* Accumulated negatively so that LONG_MIN parses too. */
  for (; *p && digit (*p, base) >= 0; p++) {
    int d = digit (*p, base);

    if (v < (LONG_MIN + d) / base)
      return -1;
    v = v * base - d;
  }
  if (*p != '\0')
    return -1;
  if (!neg) {
    if (v == LONG_MIN)
      return -1;
    v = -v;
  }
  if (v < min || v > max)
    return -1;
  *out = v;
  return 0;
}

int
lg_parse_long_list (const char *s, long min, long max, long *out, size_t maxn)
{
  size_t n = 0;
  char item[24];

  while (true) {
    size_t len = strcspn (s, ",");

    if (n == maxn || len == 0 || len >= sizeof item)
      return -1;
    memcpy (item, s, len);
    item[len] = '\0';
    if (lg_parse_long (item, 10, min, max, &out[n]) < 0)
      return -1;
    n++;
    if (s[len] == '\0')
      return (int) n;
    s += len + 1;
  }
}
