/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The waiting submitter polls.  Handing every reply from the loop thread
 * to the thread that waits for it costs a wake-up per request, the
 * largest cost of a small request on a loaded machine (contrib/bench/
 * NOTES.md).  So a thread that waits for one command polls the session's
 * socket itself when nobody else does, services it, and finds its own
 * reply done with no thread woken; replies for others it completes as the
 * loop thread would.
 *
 * Who polls the socket (s->poller, under s->lock): nobody, the loop
 * thread, or one waiting submitter.  The loop thread naps on its eventfd
 * alone (still servicing once a SERVICE_INTERVAL_MS for keepalives and
 * timeouts) while a submitter polls, or while nothing is in flight; a
 * submitter that stops polling with commands still in flight wakes it.
 * A command completed by another thread while its submitter polls pokes
 * that poll through s->pefd.
 *
 * Threads: any submitter, without s->lock; it takes the lock to service
 * as the loop thread does. */
#include <config.h>

#include <errno.h>
#include <poll.h>
#include <unistd.h>

#include "iscsi/relay.h"
#include "iscsi/selfpoll.h"
#include "iscsi/session-int.h"
#include "util/log.h"

/* A poll this long at most, then a look at the session again. */
#define SELFPOLL_MS 100

/* The waiter this thread polls for, while it services. */
static _Thread_local struct lg_waiter *self;

void
lg_s_poke (struct lg_session *s, struct lg_waiter *w)
{
  if (self != w)
    lg_s_efd_post (s->pefd);
}

/* Takes the poller's part for w (s->lock not held): false when the
 * session is not up or somebody else polls. */
static bool
take (struct lg_session *s, struct lg_waiter *w)
{
  bool ok;

  pthread_mutex_lock (&s->lock);
  ok = s->up && !s->broken && !atomic_load (&s->stopping)
      && s->poller == POLLER_NONE;
  if (ok) {
    s->poller = POLLER_SUBMITTER;
    atomic_store (&w->polling, true);
    atomic_fetch_add (&s->npollers, 1);
  }
  pthread_mutex_unlock (&s->lock);
  return ok;
}

/* Gives the part up (s->lock held): the loop thread polls again if
 * anything is left in flight. */
static void
give_up (struct lg_session *s, struct lg_waiter *w)
{
  atomic_store (&w->polling, false);
  s->poller = POLLER_NONE;
  if (s->loop_napping && !lg_s_idle (s))
    lg_s_wake (s);
}

/* One poll and one service, for w (the poller's part taken); false when
 * the session went down or is stopping (the loop thread's business). */
static bool
serve_once (struct lg_session *s, struct lg_waiter *w)
{
  struct pollfd pfd[3];
  unsigned n, gen;
  bool up;

  pthread_mutex_lock (&s->lock);
  lg_s_poll_set (s, pfd, &n);
  pfd[1].fd = s->pefd;
  gen = s->ctx_gen;
  pthread_mutex_unlock (&s->lock);
  if (poll (pfd, n, SELFPOLL_MS) < 0 && errno != EINTR)
    lg_debug ("%s: poll: %m", s->portal);
  if (pfd[1].revents & POLLIN)
    lg_s_efd_drain (s->pefd);
  pthread_mutex_lock (&s->lock);
  /* What the poll saw is of these sockets only if they are still the
   * session's (the connection may have been lost and made again). */
  if (s->up && !s->broken && s->ctx_gen == gen
      && (pfd[0].revents != 0 || (n == 3 && pfd[2].revents != 0))) {
    self = w;
    if (lg_s_service (s, pfd[0].revents) < 0 || s->broken) {
      char why[256];

      lg_s_connection_lost (s, lg_s_why (s, why, sizeof why));
    }
    self = NULL;
  }
  up = s->up && !s->broken && !atomic_load (&s->stopping);
  pthread_mutex_unlock (&s->lock);
  return up;
}

void
lg_s_wait_polling (struct lg_session *s, struct lg_waiter *w)
{
  if (!take (s, w))
    return;
  /* The pending count is read after w->polling was set (take): a
   * completion after this read sees polling and pokes. */
  while (atomic_load (&w->pending) > 0 && serve_once (s, w))
    ;
  pthread_mutex_lock (&s->lock);
  give_up (s, w);
  pthread_mutex_unlock (&s->lock);
  /* The last touch of s: lg_session_close waits for it. */
  atomic_fetch_sub (&s->npollers, 1);
}

bool
lg_s_idle (struct lg_session *s)
{
  return s->inflight == NULL && s->delayed == NULL && s->tmfs == NULL
      && !(iscsi_which_events (s->ctx) & POLLOUT)
      && !(s->relay && (lg_relay_net_events (s->relay) & POLLOUT));
}
