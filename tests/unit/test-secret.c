/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Secrets come from files and fds, first line only, never empty. */
#include <config.h>

#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/secret.h"

static char path[64];

static void
write_file (const char *content, size_t len)
{
  int fd;

  strcpy (path, "/tmp/lg-secret-XXXXXX");
  fd = mkstemp (path);
  cr_assert_geq (fd, 0);
  cr_assert_eq (write (fd, content, len), (ssize_t) len);
  close (fd);
}

static void
cleanup (void)
{
  if (path[0])
    unlink (path);
}

TestSuite (secret, .fini = cleanup);

Test (secret, first_line_without_newline)
{
  char *s;

  write_file ("hunter2hunter2\nsecond line\n", 27);
  s = lg_secret_from_file (path);
  cr_assert_not_null (s);
  cr_assert_str_eq (s, "hunter2hunter2");
  lg_secret_free (s);
}

Test (secret, crlf_and_no_newline)
{
  char *s;

  write_file ("abc\r\n", 5);
  s = lg_secret_from_file (path);
  cr_assert_str_eq (s, "abc");
  lg_secret_free (s);
  unlink (path);
  write_file ("xyz", 3);
  s = lg_secret_from_file (path);
  cr_assert_str_eq (s, "xyz");
  lg_secret_free (s);
}

Test (secret, empty_is_an_error)
{
  write_file ("\n", 1);
  errno = 0;
  cr_assert_null (lg_secret_from_file (path));
  cr_assert_eq (errno, EINVAL);
}

Test (secret, too_long_is_an_error)
{
  char *big = malloc (LG_SECRET_MAX + 10);

  memset (big, 'x', LG_SECRET_MAX + 10);
  write_file (big, LG_SECRET_MAX + 10);
  free (big);
  cr_assert_null (lg_secret_from_file (path));
  cr_assert_eq (errno, EINVAL);
}

Test (secret, missing_file)
{
  cr_assert_null (lg_secret_from_file ("/nonexistent/secret"));
  cr_assert_eq (errno, ENOENT);
}

Test (secret, from_fd)
{
  int p[2];
  char *s;

  cr_assert_eq (pipe (p), 0);
  cr_assert_eq (write (p[1], "piped\n", 6), 6);
  close (p[1]);
  s = lg_secret_from_fd (p[0], "test");
  close (p[0]);
  cr_assert_str_eq (s, "piped");
  lg_secret_free (s);
}
