/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The plugin's signals, set up in one place: one pipe and one thread.
 *
 * SIGTERM, SIGINT, SIGQUIT, SIGHUP: nbdkit waits for the requests in the
 * plugin before it exits on a signal, and requests waiting for a target
 * that is gone would hold it up to the outage budget.  So the plugin's
 * handler runs first (it wakes the thread, which calls quit: the plugin
 * fails what waits at once), then nbdkit's own.
 *
 * SIGUSR1: the thread calls stats, once the exports are ready; a signal
 * that came before waits until then.  Its handler goes in before nbdkit
 * listens (get_ready): nbdkit binds its socket before after_fork, so a
 * SIGUSR1 sent as soon as the socket appears would otherwise find the
 * default action and kill nbdkit.
 *
 * Threads: nbdkit's main thread calls these, in this order; quit and
 * stats run on the thread of this file. */
#ifndef LGP_SIGNALS_H
#define LGP_SIGNALS_H

typedef void lgp_signal_fn (void);

/* get_ready: the pipe, and SIGUSR1's handler. */
void lgp_signals_arm (void);

/* after_fork, before the LUNs open: the thread, and the handlers of the
 * signals that stop nbdkit. */
void lgp_signals_start (lgp_signal_fn *quit, lgp_signal_fn *stats);

/* The exports are open: stats from now on, and now for a SIGUSR1 that
 * waited. */
void lgp_signals_ready (void);

/* nbdkit's handlers back, SIGUSR1 ignored, the thread ended. */
void lgp_signals_stop (void);

#endif
