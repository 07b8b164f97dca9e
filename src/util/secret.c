/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Reading secrets.  read(2) goes straight into the sodium_malloc'd buffer:
 * stdio would keep a copy in its own buffer that nobody wipes.  Called from
 * the command's main thread (or the plugin's config callback) only.
 */
#include <config.h>

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
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

/* Reads at most one line from fd.  A read a signal interrupts is tried
 * again, unless stop is set (a prompt's). */
static char *
read_line (int fd, const char *what, const volatile sig_atomic_t *stop)
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
    ssize_t r;

    /* A prompt's signal may come just before the read: it is seen
     * within 100 ms rather than never. */
    if (stop) {
      struct pollfd p = { .fd = fd, .events = POLLIN };

      while (!*stop && poll (&p, 1, 100) == 0)
        ;
      if (*stop) {
        saved = EINTR;
        goto err;
      }
    }
    r = read (fd, buf + len, 1);

    if (r < 0 && errno == EINTR && !(stop && *stop))
      continue;
    if (r < 0 && errno == EINTR) {
      saved = EINTR; /* the prompt says nothing: the signal speaks */
      goto err;
    }
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
  return read_line (fd, what, NULL);
}

char *
lg_secret_from_file (const char *path)
{
  char *s;
  int fd, saved;

  if (strcmp (path, "-") == 0)
    return read_line (STDIN_FILENO, "standard input", NULL);
  fd = open (path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    saved = errno;
    lg_error ("%s: %s", path, strerror (saved));
    errno = saved;
    return NULL;
  }
  s = read_line (fd, path, NULL);
  saved = errno;
  close (fd);
  errno = saved;
  return s;
}

static volatile sig_atomic_t prompt_signal;

static void
on_prompt_signal (int sig)
{
  prompt_signal = sig;
}

/* Asks n questions on the terminal with echo off all along (what is typed
 * ahead, a pasted pair, is kept), into out[].  A signal that would end
 * the process (Ctrl-C, SIGTERM, SIGHUP, SIGQUIT) restores the terminal
 * first and is then raised again, as if it had come after.  0, or -1
 * with errno (the answers freed). */
static int
ask (const char *const *prompts, char **out, unsigned n)
{
  static const int sigs[] = { SIGINT, SIGTERM, SIGHUP, SIGQUIT };
  struct sigaction sa, old[sizeof sigs / sizeof sigs[0]];
  bool caught[sizeof sigs / sizeof sigs[0]] = { false };
  struct termios t, noecho;
  unsigned i = 0;
  int fd, saved = 0, restore = 0, sig;

  fd = open ("/dev/tty", O_RDWR | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) {
    saved = errno;
    lg_error ("cannot prompt for a secret: /dev/tty: %s", strerror (saved));
    errno = saved;
    return -1;
  }
  prompt_signal = 0;
  memset (&sa, 0, sizeof sa);
  sigemptyset (&sa.sa_mask);
  sa.sa_handler = on_prompt_signal; /* no SA_RESTART: read returns */
  for (size_t k = 0; k < sizeof sigs / sizeof sigs[0]; k++)
    if (sigaction (sigs[k], NULL, &old[k]) == 0 && old[k].sa_handler != SIG_IGN)
      caught[k] = sigaction (sigs[k], &sa, NULL) == 0;
  /* Echo off before the first prompt shows: what is typed once it shows
   * is neither echoed nor flushed. */
  if (tcgetattr (fd, &t) == 0) {
    noecho = t;
    noecho.c_lflag &= ~(tcflag_t) ECHO;
    restore = tcsetattr (fd, TCSAFLUSH, &noecho) == 0;
  }
  for (; i < n && !prompt_signal; i++) {
    if (write (fd, prompts[i], strlen (prompts[i])) < 0) {
      /* the prompt is a courtesy; reading still works */
    }
    out[i] = read_line (fd, "terminal", &prompt_signal);
    if (write (fd, "\n", 1) < 0) {}
    if (out[i] == NULL) {
      saved = errno;
      break;
    }
  }
  if (restore)
    tcsetattr (fd, TCSANOW, &t);
  close (fd);
  sig = prompt_signal;
  for (size_t k = 0; k < sizeof sigs / sizeof sigs[0]; k++)
    if (caught[k])
      sigaction (sigs[k], &old[k], NULL);
  if (i == n && sig == 0)
    return 0;
  while (i-- > 0)
    lg_secret_free (out[i]);
  if (sig) {
    raise (sig); /* the terminal is as it was: now the signal acts */
    saved = EINTR;
  }
  errno = saved;
  return -1;
}

char *
lg_secret_prompt (const char *prompt)
{
  char *s;

  return ask (&prompt, &s, 1) == 0 ? s : NULL;
}

char *
lg_secret_prompt_twice (const char *prompt, const char *again)
{
  const char *prompts[2] = { prompt, again };
  char *s[2];
  size_t len;

  if (ask (prompts, s, 2) < 0)
    return NULL;
  len = strlen (s[0]);
  if (len != strlen (s[1]) || sodium_memcmp (s[0], s[1], len) != 0) {
    lg_error ("the two passphrases differ: nothing was changed");
    lg_secret_free (s[0]);
    lg_secret_free (s[1]);
    errno = EINVAL;
    return NULL;
  }
  lg_secret_free (s[1]);
  return s[0];
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
