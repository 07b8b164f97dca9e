/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The metadata cache (a clock over pinned entries, one per metadata
 * block, hashed by block number), what its entries know of current slots,
 * and the striped locks a request holds on its metadata blocks.  See
 * crypt-int.h for the lock order. */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "crypt/crypt-int.h"
#include "util/log.h"

int
lgc_cache_init (struct mdcache *c, size_t n)
{
  pthread_mutex_init (&c->lock, NULL);
  c->n = n;
  c->hand = 0;
  c->floor = 1; /* see lg_barrier_init */
  c->buckets = malloc (2 * n * sizeof *c->buckets);
  c->e = calloc (n, sizeof *c->e);
  if (c->buckets == NULL || c->e == NULL)
    return -1;
  for (size_t i = 0; i < 2 * n; i++)
    c->buckets[i] = -1;
  return 0;
}

void
lgc_cache_destroy (struct mdcache *c)
{
  free (c->buckets);
  free (c->e);
  pthread_mutex_destroy (&c->lock);
}

static size_t
bucket_of (const struct mdcache *c, uint64_t b)
{
  return (size_t) ((b * UINT64_C (0x9e3779b97f4a7c15)) >> 20) % (2 * c->n);
}

static void
unlink_entry_locked (struct mdcache *c, int idx)
{
  int *pp = &c->buckets[bucket_of (c, c->e[idx].block)];

  while (*pp != -1 && *pp != idx)
    pp = &c->e[*pp].next;
  if (*pp == idx)
    *pp = c->e[idx].next;
}

/* The pinned entry for block b (maybe not loaded), or NULL when every
 * entry is pinned (the caller works uncached). */
struct mdent *
lgc_cache_get (struct mdcache *c, uint64_t b)
{
  size_t bk = bucket_of (c, b);
  struct mdent *e = NULL;

  pthread_mutex_lock (&c->lock);
  for (int i = c->buckets[bk]; i != -1; i = c->e[i].next)
    if (c->e[i].block == b) {
      e = &c->e[i];
      goto found;
    }
  /* Clock: one sweep over the entries, at most twice round. */
  for (size_t tries = 0; tries < 2 * c->n; tries++) {
    size_t i = c->hand;

    c->hand = (c->hand + 1) % c->n;
    if (c->e[i].pins)
      continue;
    if (c->e[i].used && c->e[i].ref) {
      c->e[i].ref = false;
      continue;
    }
    if (c->e[i].used) {
      unlink_entry_locked (c, (int) i);
      for (unsigned j = 0; j < LG_UNITS_PER_MD; j++)
        if (c->e[i].dgen[j] > c->floor)
          c->floor = c->e[i].dgen[j];
    }
    e = &c->e[i];
    e->used = true;
    e->loaded = false;
    e->block = b;
    e->known = e->cur = 0;
    for (unsigned j = 0; j < LG_UNITS_PER_MD; j++)
      e->dgen[j] = c->floor;
    e->next = c->buckets[bk];
    c->buckets[bk] = (int) i;
    goto found;
  }
  pthread_mutex_unlock (&c->lock);
  return NULL;

found:
  if (e->pins == 0 && e->lgen != c->gen) {
    e->loaded = false;
    e->known = 0;
  }
  e->lgen = c->gen;
  e->pins++;
  e->ref = true;
  pthread_mutex_unlock (&c->lock);
  return e;
}

void
lgc_cache_forget (struct mdcache *c)
{
  pthread_mutex_lock (&c->lock);
  c->gen++;
  pthread_mutex_unlock (&c->lock);
}

void
lgc_cache_put (struct mdcache *c, struct mdent *e)
{
  if (e == NULL)
    return;
  pthread_mutex_lock (&c->lock);
  e->pins--;
  pthread_mutex_unlock (&c->lock);
}

/* What e knows of its units' current slots: nothing learnt before the
 * lower device's last login counts (a target that lost power lost what
 * its cache held). */
uint64_t
lgc_known_of (struct cdev *x, const struct mdent *e)
{
  return e->kepoch == lg_barrier_epoch (&x->bar) ? e->known : 0;
}

/* Notes that the units in bits have slot 1 current where cur says so, as
 * learnt from I/O that began in epoch (nothing, if a login came since).
 * Under the block's write lock, or the cache mutex for a reader. */
void
lgc_learn (struct cdev *x, struct mdent *e, uint64_t epoch, uint64_t bits,
           uint64_t cur)
{
  if (epoch != lg_barrier_epoch (&x->bar))
    return;
  if (e->kepoch != epoch) {
    e->known = 0;
    e->kepoch = epoch;
  }
  e->known |= bits;
  e->cur = (e->cur & ~bits) | (cur & bits);
}

void
lgc_span_init (struct span *sp, uint64_t u0, uint64_t u1)
{
  sp->u0 = u0;
  sp->u1 = u1;
  sp->b0 = u0 / LG_UNITS_PER_MD;
  sp->b1 = (u1 - 1) / LG_UNITS_PER_MD;
  memset (sp->stripes, 0, sizeof sp->stripes);
  for (uint64_t b = sp->b0; b <= sp->b1 && b < sp->b0 + STRIPES; b++)
    sp->stripes[(b % STRIPES) / 8] |= (uint8_t) (1u << (b % 8));
}

void
lgc_span_lock (struct cdev *x, const struct span *sp, bool write)
{
  for (unsigned i = 0; i < STRIPES; i++)
    if (sp->stripes[i / 8] & (1u << (i % 8))) {
      if (write)
        pthread_rwlock_wrlock (&x->stripe[i]);
      else
        pthread_rwlock_rdlock (&x->stripe[i]);
    }
}

void
lgc_span_unlock (struct cdev *x, const struct span *sp)
{
  for (unsigned i = STRIPES; i-- > 0;)
    if (sp->stripes[i / 8] & (1u << (i % 8)))
      pthread_rwlock_unlock (&x->stripe[i]);
}
