/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Ctrl-C, SIGTERM and SIGHUP during a long command (format, verify): the
 * first asks it to stop at its next piece, so that it releases its
 * reservation and leaves the LUN as its man page says; the command then
 * dies of that signal, as a shell expects.  A second one kills at once.
 * A signal ignored when lungate started (a background job of a script,
 * nohup) stays ignored.  Main thread; the handler only stores. */
#include <config.h>

#include <signal.h>
#include <string.h>

#include "cmd/cmd.h"
#include "util/alive.h"

static volatile sig_atomic_t stop_signal;

static void
on_stop (int sig)
{
  stop_signal = sig;
}

void
lg_cmd_catch_stop (void)
{
  static const int sigs[] = { SIGINT, SIGTERM, SIGHUP };

  for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
    struct sigaction sa, old;

    if (sigaction (sigs[i], NULL, &old) == 0 && old.sa_handler == SIG_IGN)
      continue;
    memset (&sa, 0, sizeof sa);
    sa.sa_handler = on_stop;
    sa.sa_flags = SA_RESETHAND; /* the second one kills */
    sigemptyset (&sa.sa_mask);
    sigaction (sigs[i], &sa, NULL);
  }
}

int
lg_cmd_stopped (void)
{
  return stop_signal;
}

void
lg_cmd_die_if_stopped (void)
{
  int sig = stop_signal;

  if (sig == 0)
    return;
  /* Dying of it skips atexit: the runtime files go first (what the
   * command could not release keeps them, lg_alive_keep). */
  lg_alive_exit ();
  signal (sig, SIG_DFL);
  raise (sig);
}
