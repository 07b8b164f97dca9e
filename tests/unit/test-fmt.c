/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Output helpers. */
#include <config.h>

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>

#include "util/fmt.h"

Test (fmt, human_size)
{
  char b[32];

  cr_assert_str_eq (lg_human_size (0, b, sizeof b), "0 B");
  cr_assert_str_eq (lg_human_size (1023, b, sizeof b), "1023 B");
  cr_assert_str_eq (lg_human_size (1024, b, sizeof b), "1.00 KiB");
  cr_assert_str_eq (lg_human_size (1073741824, b, sizeof b), "1.00 GiB");
  cr_assert_str_eq (lg_human_size (17592186044416ULL, b, sizeof b),
                    "16.00 TiB");
}

Test (fmt, json_escapes)
{
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream (&buf, &len);

  lg_json_string (f, "a\"b\\c\n\x01");
  fclose (f);
  cr_assert_str_eq (buf, "\"a\\\"b\\\\c\\u000a\\u0001\"");
  free (buf);
}
