/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* libFuzzer harness for the URL parser: any bytes, never a crash, and a
 * URL that parses formats back to something that parses the same. */
#include <config.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "iscsi/url.h"

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
  char *s = malloc (size + 1);
  char err[256], again[1024];
  struct lg_url u, v;

  if (s == NULL)
    return 0;
  memcpy (s, data, size);
  s[size] = '\0';
  if (lg_url_parse (s, &u, err, sizeof err) == 0) {
    lg_url_format (&u, again, sizeof again);
    if (lg_url_parse (again, &v, err, sizeof err) != 0)
      abort ();
    if (strcmp (u.portal, v.portal) != 0 || strcmp (u.target, v.target) != 0
        || u.lun != v.lun || u.kind != v.kind)
      abort ();
    lg_url_clear (&v);
    lg_url_clear (&u);
  }
  free (s);
  return 0;
}
