/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* libFuzzer harness for the option parsers of the command and the plugin
 * (numbers: timeouts, descriptors, slots, modes, LUN numbers in export
 * names; lists: --depths).  The first input byte picks the base and the
 * range, the rest is the option's value.  Never a crash, and a value that
 * parses is exactly what its digits say (checked again with 128-bit
 * arithmetic), inside the range; a list that parses has as many items as
 * commas plus one, each in range. */
#include <config.h>

#include <limits.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "util/fmt.h"

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size);

static const struct {
  int base;
  long min, max;
} ranges[] = {
  { 10, -1, 86400 },
  { 10, 1, 3600 },
  { 10, 0, INT_MAX },
  { 8, 0, 07777 },
  { 10, LONG_MIN, LONG_MAX },
  { 8, LONG_MIN, LONG_MAX },
  { 10, 1, 256 },
  { 10, 0, 7 },
};

static void
check_long (const char *s, int base, long min, long max)
{
  long v = 0;
  __int128 n = 0;
  const char *p = s;
  bool neg = false;

  if (lg_parse_long (s, base, min, max, &v) < 0)
    return;
  if (*p == '-') {
    neg = true;
    p++;
  }
  if (*p == '\0')
    abort ();
  for (; *p; p++) {
    if (*p < '0' || *p >= '0' + base)
      abort ();
    n = n * base + (*p - '0');
    if (n > (__int128) LONG_MAX + 1)
      abort ();
  }
  if (neg)
    n = -n;
  if (n != v || v < min || v > max)
    abort ();
}

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
  char *s;
  long list[8];
  int k;

  if (size < 1)
    return 0;
  s = malloc (size);
  if (s == NULL)
    return 0;
  memcpy (s, data + 1, size - 1);
  s[size - 1] = '\0';
  {
    unsigned r = data[0] % (sizeof ranges / sizeof *ranges);

    check_long (s, ranges[r].base, ranges[r].min, ranges[r].max);
  }
  k = lg_parse_long_list (s, 1, 256, list, data[0] % 8 + 1);
  if (k >= 0) {
    size_t commas = 0;

    for (const char *p = s; *p; p++)
      commas += *p == ',';
    if (k < 1 || (size_t) k != commas + 1 || k > data[0] % 8 + 1)
      abort ();
    for (int i = 0; i < k; i++)
      if (list[i] < 1 || list[i] > 256)
        abort ();
  }
  free (s);
  return 0;
}
