/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Output helpers. */
#include <config.h>

#include <criterion/criterion.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "util/fmt.h"
#include "util/log.h"

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

/* Valid UTF-8 passes as it is; a byte of no character (a lone
 * continuation, an overlong form, a surrogate, a cut sequence) becomes
 * U+FFFD.  (It wrote each byte as \u00XX: "café" read back "cafÃ©".) */
Test (fmt, json_utf8)
{
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream (&buf, &len);

  lg_json_string (f,
                  "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x92\xbe|\x80|\xc0\xaf|"
                  "\xed\xa0\x80|\xe2\x82|\x7f");
  fclose (f);
  cr_assert_str_eq (buf,
                    "\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x92\xbe|\\ufffd|"
                    "\\ufffd\\ufffd|\\ufffd\\ufffd\\ufffd|\\ufffd\\ufffd|"
                    "\\u007f\"");
  free (buf);
}

Test (fmt, parse_size)
{
  uint64_t v = 7;

  cr_assert_eq (lg_parse_size ("0", &v), 0);
  cr_assert_eq (v, 0);
  cr_assert_eq (lg_parse_size ("4096", &v), 0);
  cr_assert_eq (v, 4096);
  cr_assert_eq (lg_parse_size ("128K", &v), 0);
  cr_assert_eq (v, 131072);
  cr_assert_eq (lg_parse_size ("4KiB", &v), 0);
  cr_assert_eq (v, 4096);
  cr_assert_eq (lg_parse_size ("1g", &v), 0);
  cr_assert_eq (v, UINT64_C (1) << 30);
  cr_assert_eq (lg_parse_size ("16T", &v), 0);
  cr_assert_eq (v, UINT64_C (16) << 40);
  cr_assert_eq (lg_parse_size ("18446744073709551615", &v), 0);
  cr_assert_eq (v, UINT64_MAX);
  v = 7;
  /* Overflows, junk, empty, signs, a suffix without digits: refused, and
   * the output untouched. */
  cr_assert_eq (lg_parse_size ("18446744073709551616", &v), -1);
  cr_assert_eq (lg_parse_size ("16777216T", &v), -1);
  cr_assert_eq (lg_parse_size ("", &v), -1);
  cr_assert_eq (lg_parse_size ("-1", &v), -1);
  cr_assert_eq (lg_parse_size ("K", &v), -1);
  cr_assert_eq (lg_parse_size ("12Q", &v), -1);
  cr_assert_eq (lg_parse_size ("12KB5", &v), -1);
  cr_assert_eq (lg_parse_size (" 12", &v), -1);
  cr_assert_eq (v, 7);
}

Test (fmt, parse_long)
{
  long v = 12345;
  char buf[32];

  cr_assert_eq (lg_parse_long ("0", 10, 0, 10, &v), 0);
  cr_assert_eq (v, 0);
  cr_assert_eq (lg_parse_long ("-1", 10, -1, 86400, &v), 0);
  cr_assert_eq (v, -1);
  cr_assert_eq (lg_parse_long ("0755", 8, 0, 07777, &v), 0);
  cr_assert_eq (v, 0755);
  cr_assert_eq (lg_parse_long ("7", 10, 1, 7, &v), 0);
  cr_assert_eq (v, 7);
  snprintf (buf, sizeof buf, "%ld", LONG_MIN);
  cr_assert_eq (lg_parse_long (buf, 10, LONG_MIN, LONG_MAX, &v), 0);
  cr_assert_eq (v, LONG_MIN);
  snprintf (buf, sizeof buf, "%ld", LONG_MAX);
  cr_assert_eq (lg_parse_long (buf, 10, LONG_MIN, LONG_MAX, &v), 0);
  cr_assert_eq (v, LONG_MAX);
  v = 99;
  /* Each refused, v untouched. */
  const char *bad10[] = { "",
                          "-",
                          " 1",
                          "+1",
                          "1 ",
                          "1x",
                          "0x10",
                          "8",
                          "-2",
                          "1e3",
                          "9223372036854775808",
                          "-9223372036854775809",
                          "99999999999999999999" };
  for (size_t i = 0; i < sizeof bad10 / sizeof *bad10; i++)
    cr_assert_eq (lg_parse_long (bad10[i], 10, -1, 7, &v), -1, "'%s'",
                  bad10[i]);
  cr_assert_eq (lg_parse_long ("0778", 8, 0, 07777, &v), -1);
  cr_assert_eq (lg_parse_long ("10000", 8, 0, 07777, &v), -1);
  cr_assert_eq (lg_parse_long ("1", 16, 0, 10, &v), -1);
  cr_assert_eq (v, 99);
}

Test (fmt, parse_long_list)
{
  long v[4] = { 0 };

  cr_assert_eq (lg_parse_long_list ("1,32", 1, 256, v, 4), 2);
  cr_assert_eq (v[0], 1);
  cr_assert_eq (v[1], 32);
  cr_assert_eq (lg_parse_long_list ("256", 1, 256, v, 4), 1);
  cr_assert_eq (v[0], 256);
  cr_assert_eq (lg_parse_long_list ("1,2,3,4", 1, 256, v, 4), 4);
  cr_assert_eq (v[3], 4);
  const char *bad[] = { "",
                        ",",
                        "1,",
                        ",1",
                        "1,,2",
                        "0",
                        "257",
                        "1;2",
                        "1, 2",
                        "1,2,3,4,5",
                        "100000000000000000000000000000" };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
    cr_assert_eq (lg_parse_long_list (bad[i], 1, 256, v, 4), -1, "'%s'",
                  bad[i]);
}

/* Text from the target reaches the log with its control bytes escaped:
 * no terminal escape sequence gets through. */
static char last[1100];

static void
keep (enum lg_log_level level, const char *msg)
{
  (void) level;
  snprintf (last, sizeof last, "%s", msg);
}

Test (fmt, log_escapes_control_bytes)
{
  char b[16];

  lg_log_set_sink (keep);
  lg_log_set_level (LG_LOG_INFO);
  lg_error ("target says: %s", "\x1b]0;pwned\x07\x1b[31mred\r\n");
  cr_assert_str_eq (last,
                    "target says: \\x1b]0;pwned\\x07\\x1b[31mred\\x0d\\x0a");
  lg_escape_controls (b, sizeof b,
                      "abc\x1b\x7f"
                      "def");
  cr_assert_str_eq (b, "abc\\x1b\\x7fdef");
  lg_escape_controls (b, 6, "ab\x01zzzz"); /* cut, never a half escape */
  cr_assert_str_eq (b, "ab");
  lg_log_set_sink (NULL);
}
