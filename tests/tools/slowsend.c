/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* slowsend: an LD_PRELOAD library for nbdkit in the tests.  A send() or
 * write() to a socket that fails with EPIPE or ECONNRESET (the client is
 * gone) returns only after SLOWSEND_MS milliseconds (default 300).  That
 * widens, from microseconds to a time every thread of a loaded machine
 * gets to run in, the window in which nbdkit 1.32 sends a second reply
 * after a first one failed and closed the socket (connections.c:
 * "raw_send_socket: Assertion 'sock >= 0' failed"), so that a test can
 * show what the plugin does about it.  Nothing else is changed. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static void
stall_if_gone (ssize_t r, int e)
{
  const char *ms = getenv ("SLOWSEND_MS");
  long n = ms ? strtol (ms, NULL, 10) : 300;
  struct timespec ts = { n / 1000, (n % 1000) * 1000000L };

  if (r < 0 && (e == EPIPE || e == ECONNRESET))
    while (nanosleep (&ts, &ts) < 0 && errno == EINTR)
      ;
}

ssize_t
send (int fd, const void *buf, size_t len, int flags)
{
  static ssize_t (*real) (int, const void *, size_t, int);
  ssize_t r;
  int e;

  if (real == NULL)
    real = (ssize_t (*) (int, const void *, size_t, int)) dlsym (RTLD_NEXT,
                                                                 "send");
  r = real (fd, buf, len, flags);
  e = errno;
  stall_if_gone (r, e);
  errno = e;
  return r;
}

ssize_t
write (int fd, const void *buf, size_t len)
{
  static ssize_t (*real) (int, const void *, size_t);
  struct stat st;
  ssize_t r;
  int e;

  if (real == NULL)
    real = (ssize_t (*) (int, const void *, size_t)) dlsym (RTLD_NEXT, "write");
  r = real (fd, buf, len);
  e = errno;
  if (r < 0 && fstat (fd, &st) == 0 && S_ISSOCK (st.st_mode))
    stall_if_gone (r, e);
  errno = e;
  return r;
}
