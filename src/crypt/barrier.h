/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Group-committed flushes of a lower device with a volatile write cache.
 *
 * Every lower write the crypt layer makes outside FUA gets a generation
 * when it completes (lg_barrier_done).  lg_barrier_wait (b, g) returns
 * once a flush that began after write g completed has succeeded: write g
 * is then on stable media.  Concurrent waiters share flushes: at most one
 * runs at a time, and one that began late enough serves everyone waiting.
 *
 * A login of the lower device (a target may have lost power: what its
 * cache held is gone) makes every flush still running count for nothing,
 * and lg_barrier_epoch changes: a caller that decided something from what
 * it believed durable before the login decides again.
 *
 * Threads: any.  b->lock is taken briefly, never across I/O.
 */
#ifndef LG_CRYPT_BARRIER_H
#define LG_CRYPT_BARRIER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "dev/dev.h"

struct lg_barrier {
  struct lg_dev *lower;
  pthread_mutex_t lock;
  pthread_cond_t cond;
  atomic_uint_fast64_t gen;   /* of the last completed write */
  atomic_uint_fast64_t acked; /* ... of those lg_barrier_done counted */
  atomic_uint inflight;       /* writes between issuing and done */
  atomic_uint_fast64_t epoch; /* logins of the lower device */
  uint64_t durable;           /* every write up to this gen is stable */
  bool flushing;
  bool lost;            /* a login came while writes were not yet stable */
  atomic_uint checking; /* logins being checked (lg_barrier_login) */
  atomic_uint_fast64_t losses; /* times lost was set */
  uint64_t flushes;            /* flushes sent (for tests and the stats) */
};

void lg_barrier_init (struct lg_barrier *b, struct lg_dev *lower);
void lg_barrier_destroy (struct lg_barrier *b);

/* A write is about to be sent; lg_barrier_done follows, once.  A login
 * in between counts as a loss (lg_barrier_lost): the target may have
 * taken the write into its cache and lost it, its answer still on the
 * way. */
void lg_barrier_issuing (struct lg_barrier *b);

/* A write completed (or failed, having perhaps landed): its generation. */
uint64_t lg_barrier_done (struct lg_barrier *b);

/* Whether write g is known stable now, without waiting. */
bool lg_barrier_is_durable (struct lg_barrier *b, uint64_t g);

/* Waits until write g is stable, sending a flush if none that would do is
 * running.  0, or -1 with errno from the failed flush. */
int lg_barrier_wait (struct lg_barrier *b, uint64_t g);

/* Everything completed so far is stable: a flush that began now. */
int lg_barrier_flush (struct lg_barrier *b);

/* The lower device logged in again: a new epoch, and a login being
 * checked until lg_barrier_checked.  True when writes were not yet
 * stable then: unless the target kept its state, they may have been
 * lost with its cache. */
bool lg_barrier_login (struct lg_barrier *b);

/* The login's check is over; lost: writes may have been lost, which
 * lg_barrier_lost says once. */
void lg_barrier_checked (struct lg_barrier *b, bool lost);

/* Whether writes were perhaps lost at a login since the last call; a
 * login being checked is waited for first (up to 30 s, then it counts
 * as a loss), as it may be the one that finds the target restarted. */
bool lg_barrier_lost (struct lg_barrier *b);

static inline uint64_t
lg_barrier_epoch (struct lg_barrier *b)
{
  return atomic_load (&b->epoch);
}

#endif
