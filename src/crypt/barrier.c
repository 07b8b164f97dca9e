/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Group-committed flushes: see barrier.h. */
#include <config.h>

#include <errno.h>
#include <unistd.h>

#include "crypt/barrier.h"

void
lg_barrier_init (struct lg_barrier *b, struct lg_dev *lower)
{
  b->lower = lower;
  pthread_mutex_init (&b->lock, NULL);
  pthread_cond_init (&b->cond, NULL);
  /* Generation 1 stands for whatever the device held at open: it may sit
   * in the target's cache still (a gateway that stopped before its
   * flush), so the first barrier flushes once. */
  atomic_init (&b->gen, 1);
  atomic_init (&b->acked, 0);
  atomic_init (&b->inflight, 0);
  atomic_init (&b->epoch, 0);
  atomic_init (&b->checking, 0);
  atomic_init (&b->losses, 0);
  b->durable = 0;
  b->flushing = false;
  b->lost = false;
  b->flushes = 0;
}

void
lg_barrier_destroy (struct lg_barrier *b)
{
  pthread_cond_destroy (&b->cond);
  pthread_mutex_destroy (&b->lock);
}

void
lg_barrier_issuing (struct lg_barrier *b)
{
  atomic_fetch_add (&b->inflight, 1);
}

uint64_t
lg_barrier_done (struct lg_barrier *b)
{
  uint64_t g = atomic_fetch_add (&b->gen, 1) + 1, a = atomic_load (&b->acked);

  while (a < g && !atomic_compare_exchange_weak (&b->acked, &a, g))
    ;
  atomic_fetch_sub (&b->inflight, 1);
  return g;
}

bool
lg_barrier_is_durable (struct lg_barrier *b, uint64_t g)
{
  bool r;

  pthread_mutex_lock (&b->lock);
  r = b->durable >= g;
  pthread_mutex_unlock (&b->lock);
  return r;
}

/* Sends one flush covering every write completed before it began (lock
 * held on entry and on return, dropped across the flush). */
static int
flush_locked (struct lg_barrier *b)
{
  uint64_t start = atomic_load (&b->gen), epoch = atomic_load (&b->epoch);
  int r, saved;

  b->flushing = true;
  b->flushes++;
  pthread_mutex_unlock (&b->lock);
  r = lg_dev_flush (b->lower);
  saved = errno;
  pthread_mutex_lock (&b->lock);
  b->flushing = false;
  /* A login while it ran: the cache it flushed may not be the one that
   * held our writes. */
  if (r == 0 && epoch == atomic_load (&b->epoch) && start > b->durable)
    b->durable = start;
  pthread_cond_broadcast (&b->cond);
  errno = saved;
  return r;
}

int
lg_barrier_wait (struct lg_barrier *b, uint64_t g)
{
  int r = 0;

  pthread_mutex_lock (&b->lock);
  while (b->durable < g) {
    if (b->flushing) {
      /* The running flush may have begun before g completed; wait for
       * it, then look again (another may be needed). */
      pthread_cond_wait (&b->cond, &b->lock);
      continue;
    }
    if ((r = flush_locked (b)) < 0)
      break;
  }
  pthread_mutex_unlock (&b->lock);
  return r;
}

int
lg_barrier_flush (struct lg_barrier *b)
{
  /* A generation of its own, so that the flush begins after the call;
   * not a write (acked stays). */
  return lg_barrier_wait (b, atomic_fetch_add (&b->gen, 1) + 1);
}

bool
lg_barrier_login (struct lg_barrier *b)
{
  bool unstable;

  pthread_mutex_lock (&b->lock);
  atomic_fetch_add (&b->epoch, 1);
  atomic_fetch_add (&b->checking, 1);
  unstable
      = b->durable < atomic_load (&b->acked) || atomic_load (&b->inflight) > 0;
  pthread_mutex_unlock (&b->lock);
  return unstable;
}

void
lg_barrier_checked (struct lg_barrier *b, bool lost)
{
  pthread_mutex_lock (&b->lock);
  if (lost) {
    b->lost = true;
    atomic_fetch_add (&b->losses, 1);
  }
  atomic_fetch_sub (&b->checking, 1);
  pthread_mutex_unlock (&b->lock);
}

bool
lg_barrier_lost (struct lg_barrier *b)
{
  bool r;

  /* A login being checked may be the one that finds the target
   * restarted: its word first (a check that takes 30 s counts as a
   * loss). */
  for (int ms = 0; atomic_load (&b->checking) > 0; ms++) {
    if (ms == 30000) {
      pthread_mutex_lock (&b->lock);
      b->lost = true;
      atomic_fetch_add (&b->losses, 1);
      pthread_mutex_unlock (&b->lock);
      break;
    }
    usleep (1000);
  }
  pthread_mutex_lock (&b->lock);
  r = b->lost;
  b->lost = false;
  pthread_mutex_unlock (&b->lock);
  return r;
}
