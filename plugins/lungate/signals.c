/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The plugin's signals (signals.h).  A handler only sets a flag and
 * writes a byte down the pipe; the byte wakes the thread, the flags say
 * what for (a full pipe loses a byte, never a signal). */
#include <config.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <string.h>
#include <unistd.h>

#include "lungate/signals.h"

static const int quit_signals[] = { SIGTERM, SIGINT, SIGQUIT, SIGHUP };
#define NQUIT (sizeof quit_signals / sizeof quit_signals[0])
static struct sigaction nbdkit_action[NQUIT];
static bool quit_armed;

/* The pipe is made before nbdkit forks, and the other process keeps its
 * write end: the thread ends on a byte of 0, never on an end of file. */
static int wake[2] = { -1, -1 };
static volatile sig_atomic_t quit_asked, stats_asked, ready;
static pthread_t thread;
static bool running;
static lgp_signal_fn *on_quit_fn, *on_stats_fn;

static void
poke (char c)
{
  if (write (wake[1], &c, 1) < 0) {
    /* Full: the thread has bytes to read and will see the flags. */
  }
}

static void
on_usr1 (int sig)
{
  int saved = errno;

  (void) sig;
  stats_asked = 1;
  poke (1);
  errno = saved;
}

static void
on_quit (int sig)
{
  int saved = errno;

  quit_asked = 1;
  poke (1);
  for (size_t i = 0; i < NQUIT; i++)
    if (quit_signals[i] == sig) {
      if (nbdkit_action[i].sa_handler == SIG_DFL
          || nbdkit_action[i].sa_handler == SIG_IGN) {
        sigaction (sig, &nbdkit_action[i], NULL);
        raise (sig);
      }
      else
        nbdkit_action[i].sa_handler (sig);
    }
  errno = saved;
}

static void *
loop (void *arg)
{
  bool quit_done = false;
  char c = 1;

  (void) arg;
  while (c != 0) {
    if (read (wake[0], &c, 1) != 1) {
      if (errno == EINTR)
        continue;
      break;
    }
    if (quit_asked && !quit_done) {
      quit_done = true;
      on_quit_fn ();
    }
    if (stats_asked && ready && c != 0) {
      stats_asked = 0;
      on_stats_fn ();
    }
  }
  return NULL;
}

void
lgp_signals_arm (void)
{
  struct sigaction sa;

  if (wake[1] >= 0 || pipe2 (wake, O_CLOEXEC) < 0)
    return;
  fcntl (wake[1], F_SETFL, O_NONBLOCK);
  memset (&sa, 0, sizeof sa);
  sa.sa_handler = on_usr1;
  sa.sa_flags = SA_RESTART;
  sigemptyset (&sa.sa_mask);
  sigaction (SIGUSR1, &sa, NULL);
}

void
lgp_signals_start (lgp_signal_fn *quit, lgp_signal_fn *stats)
{
  struct sigaction sa;

  if (wake[0] < 0 || running)
    return;
  on_quit_fn = quit;
  on_stats_fn = stats;
  if (pthread_create (&thread, NULL, loop, NULL) != 0) {
    signal (SIGUSR1, SIG_IGN);
    return;
  }
  running = true;
  memset (&sa, 0, sizeof sa);
  sa.sa_handler = on_quit;
  sigemptyset (&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (size_t i = 0; i < NQUIT; i++)
    sigaction (quit_signals[i], &sa, &nbdkit_action[i]);
  quit_armed = true;
}

void
lgp_signals_ready (void)
{
  ready = 1;
  if (running)
    poke (1);
}

void
lgp_signals_stop (void)
{
  char c = 0;

  if (quit_armed)
    for (size_t i = 0; i < NQUIT; i++)
      sigaction (quit_signals[i], &nbdkit_action[i], NULL);
  quit_armed = false;
  if (wake[1] >= 0)
    signal (SIGUSR1, SIG_IGN);
  if (running) {
    /* The write end does not block: a full pipe waits for the thread. */
    while (write (wake[1], &c, 1) < 0 && (errno == EAGAIN || errno == EINTR))
      usleep (1000);
    pthread_join (thread, NULL);
    running = false;
  }
  if (wake[0] >= 0) {
    close (wake[0]);
    close (wake[1]);
    wake[0] = wake[1] = -1;
  }
}
