/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Reading secrets.  read(2) goes straight into the sodium_malloc'd buffer:
 * stdio would keep a copy in its own buffer that nobody wipes.  Called from
 * the command's main thread (or the plugin's config callback) only.
 */
#include <config.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <termios.h>
#include <unistd.h>

#include <sodium.h>

#include "util/log.h"
#include "util/secret.h"

void
lg_secret_free (char *secret)
{
  if (secret)
    sodium_free (secret); /* wipes before freeing */
}

/* Reads at most one line from fd. */
static char *
read_line (int fd, const char *what)
{
  char *buf;
  size_t len = 0;
  int saved;

  if (sodium_init () < 0) {
    errno = ENOMEM;
    return NULL;
  }
  buf = sodium_malloc (LG_SECRET_MAX + 1);
  if (buf == NULL) {
    lg_error ("%s: cannot allocate secure memory: %m", what);
    return NULL;
  }
  while (len < LG_SECRET_MAX) {
    ssize_t r = read (fd, buf + len, 1);

    if (r < 0 && errno == EINTR)
      continue;
    if (r < 0) {
      saved = errno;
      lg_error ("%s: read: %s", what, strerror (saved));
      goto err;
    }
    if (r == 0 || buf[len] == '\n')
      break;
    len++;
  }
  if (len == LG_SECRET_MAX) {
    saved = EINVAL;
    lg_error ("%s: secret longer than %d bytes", what, LG_SECRET_MAX);
    goto err;
  }
  if (len > 0 && buf[len - 1] == '\r')
    len--;
  buf[len] = '\0';
  if (len == 0) {
    saved = EINVAL;
    lg_error ("%s: the secret is empty", what);
    goto err;
  }
  return buf;

err:
  sodium_free (buf);
  errno = saved;
  return NULL;
}

char *
lg_secret_from_fd (int fd, const char *what)
{
  return read_line (fd, what);
}

char *
lg_secret_from_file (const char *path)
{
  char *s;
  int fd, saved;

  if (strcmp (path, "-") == 0)
    return read_line (STDIN_FILENO, "standard input");
  fd = open (path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    saved = errno;
    lg_error ("%s: %s", path, strerror (saved));
    errno = saved;
    return NULL;
  }
  s = read_line (fd, path);
  saved = errno;
  close (fd);
  errno = saved;
  return s;
}

char *
lg_secret_prompt (const char *prompt)
{
  struct termios old, noecho;
  char *s;
  int fd, saved, restore = 0;

  fd = open ("/dev/tty", O_RDWR | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) {
    saved = errno;
    lg_error ("cannot prompt for a secret: /dev/tty: %s", strerror (saved));
    errno = saved;
    return NULL;
  }
  /* Echo off before the prompt shows: what is typed once it shows is
   * neither echoed nor flushed. */
  if (tcgetattr (fd, &old) == 0) {
    noecho = old;
    noecho.c_lflag &= ~(tcflag_t) ECHO;
    restore = tcsetattr (fd, TCSAFLUSH, &noecho) == 0;
  }
  if (write (fd, prompt, strlen (prompt))
      < 0) { /* the prompt is a courtesy; reading still works */
  }
  s = read_line (fd, "terminal");
  saved = errno;
  if (restore)
    tcsetattr (fd, TCSAFLUSH, &old);
  if (write (fd, "\n", 1) < 0) {}
  close (fd);
  errno = saved;
  return s;
}

char *
lg_secret_prompt_twice (const char *prompt, const char *again)
{
  char *a = lg_secret_prompt (prompt), *b;
  size_t len;
  int saved;

  if (a == NULL)
    return NULL;
  b = lg_secret_prompt (again);
  if (b == NULL) {
    saved = errno;
    lg_secret_free (a);
    errno = saved;
    return NULL;
  }
  len = strlen (a);
  if (len != strlen (b) || sodium_memcmp (a, b, len) != 0) {
    lg_error ("the two passphrases differ: nothing was changed");
    lg_secret_free (a);
    lg_secret_free (b);
    errno = EINVAL;
    return NULL;
  }
  lg_secret_free (b);
  return a;
}

char *
lg_secret_dup (const char *src)
{
  size_t len = strlen (src);
  char *s;

  if (sodium_init () < 0 || len > LG_SECRET_MAX) {
    errno = EINVAL;
    return NULL;
  }
  s = sodium_malloc (len + 1);
  if (s == NULL)
    return NULL;
  memcpy (s, src, len + 1);
  return s;
}
