/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* libFuzzer harness for the size parser of the command-line options
 * (--size, --seq-bs, --rand-bs): any bytes, never a crash, and a size that
 * parses is exactly what its digits and suffix say (checked again with
 * 128-bit arithmetic, so an overflow that slipped through would show). */
#include <config.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "util/fmt.h"

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
  char *s = malloc (size + 1);
  uint64_t v;

  if (s == NULL)
    return 0;
  memcpy (s, data, size);
  s[size] = '\0';
  if (lg_parse_size (s, &v) == 0) {
    unsigned __int128 n = 0;
    const char *p = s;
    unsigned shift = 0;

    for (; *p >= '0' && *p <= '9'; p++) {
      n = n * 10 + (unsigned) (*p - '0');
      if (n > UINT64_MAX)
        abort ();
    }
    if (p == s)
      abort ();
    switch (*p) {
    case 'k':
    case 'K':
      shift = 10;
      break;
    case 'm':
    case 'M':
      shift = 20;
      break;
    case 'g':
    case 'G':
      shift = 30;
      break;
    case 't':
    case 'T':
      shift = 40;
      break;
    case '\0':
      break;
    default:
      abort ();
    }
    if ((n << shift) != v)
      abort ();
  }
  free (s);
  return 0;
}
