/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Fences (fence.h): a list of doubts under a mutex, and a condition
 * variable that wakes the submitters waiting on them.  The list is short
 * (the writes caught in one fault) and empty on the way of every request
 * that is not: lg_fence_count is read without the lock first. */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "iscsi/fence.h"

struct lg_fence {
  pthread_mutex_t lock;
  pthread_cond_t cond; /* CLOCK_MONOTONIC */
  struct lg_doubt *head;
  atomic_uint n;
  /* A doubt could not be recorded (out of memory): every write waiting
   * here fails from then on (fence.h). */
  atomic_bool broken;
};

int64_t
lg_mono_ms (void)
{
  struct timespec ts;

  clock_gettime (CLOCK_MONOTONIC, &ts);
  return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

struct lg_fence *
lg_fence_new (void)
{
  struct lg_fence *f = calloc (1, sizeof *f);
  pthread_condattr_t a;

  if (f == NULL)
    return NULL;
  pthread_mutex_init (&f->lock, NULL);
  pthread_condattr_init (&a);
  pthread_condattr_setclock (&a, CLOCK_MONOTONIC);
  pthread_cond_init (&f->cond, &a);
  pthread_condattr_destroy (&a);
  atomic_init (&f->n, 0);
  atomic_init (&f->broken, false);
  return f;
}

void
lg_fence_free (struct lg_fence *f)
{
  if (f == NULL)
    return;
  while (f->head) {
    struct lg_doubt *d = f->head;

    f->head = d->next;
    free (d);
  }
  pthread_cond_destroy (&f->cond);
  pthread_mutex_destroy (&f->lock);
  free (f);
}

struct lg_doubt *
lg_fence_add (struct lg_fence *f, int lun, uint64_t lba, uint64_t nblocks)
{
  struct lg_doubt *d = calloc (1, sizeof *d);

  if (d == NULL) {
    /* Counted, so that no write passes lg_fence_count's hint. */
    if (!atomic_exchange (&f->broken, true))
      atomic_fetch_add (&f->n, 1);
    return NULL;
  }
  d->lun = lun;
  d->lba = lba;
  d->nblocks = nblocks;
  pthread_mutex_lock (&f->lock);
  d->next = f->head;
  if (f->head)
    f->head->prev = d;
  f->head = d;
  atomic_fetch_add (&f->n, 1);
  pthread_mutex_unlock (&f->lock);
  return d;
}

void
lg_fence_remove (struct lg_fence *f, struct lg_doubt *d)
{
  pthread_mutex_lock (&f->lock);
  if (d->prev)
    d->prev->next = d->next;
  else
    f->head = d->next;
  if (d->next)
    d->next->prev = d->prev;
  atomic_fetch_sub (&f->n, 1);
  pthread_cond_broadcast (&f->cond);
  pthread_mutex_unlock (&f->lock);
  free (d);
}

void
lg_fence_make_permanent (struct lg_fence *f, struct lg_doubt *d)
{
  pthread_mutex_lock (&f->lock);
  d->permanent = true;
  pthread_cond_broadcast (&f->cond);
  pthread_mutex_unlock (&f->lock);
}

unsigned
lg_fence_count_lun (struct lg_fence *f, int lun)
{
  unsigned n = 0;

  pthread_mutex_lock (&f->lock);
  for (const struct lg_doubt *d = f->head; d; d = d->next)
    n += d->lun == lun;
  if (atomic_load (&f->broken))
    n++;
  pthread_mutex_unlock (&f->lock);
  return n;
}

unsigned
lg_fence_count (const struct lg_fence *f)
{
  return atomic_load (&f->n);
}

static bool
overlaps (const struct lg_doubt *d, int lun, uint64_t lba, uint64_t nblocks)
{
  return d->lun == lun && lba < d->lba + d->nblocks && d->lba < lba + nblocks;
}

/* The first doubt that overlaps, or NULL (f->lock held). */
static const struct lg_doubt *
find_locked (const struct lg_fence *f, int lun, uint64_t lba, uint64_t nblocks)
{
  for (const struct lg_doubt *d = f->head; d; d = d->next)
    if (overlaps (d, lun, lba, nblocks))
      return d;
  return NULL;
}

int
lg_fence_wait (struct lg_fence *f, int lun, uint64_t lba, uint64_t nblocks,
               int64_t deadline_ms, char *msg, size_t len)
{
  const struct lg_doubt *d;
  struct timespec ts = { .tv_sec = deadline_ms / 1000,
                         .tv_nsec = (deadline_ms % 1000) * 1000000 };
  int r = 0;

  pthread_mutex_lock (&f->lock);
  if (atomic_load (&f->broken)) {
    snprintf (msg, len,
              "LUN %d LBA %" PRIu64 "+%" PRIu64 ": refused: a write of unknown "
              "outcome could not be fenced (out of memory), so no write goes "
              "out any more",
              lun, lba, nblocks);
    pthread_mutex_unlock (&f->lock);
    return -1;
  }
  while ((d = find_locked (f, lun, lba, nblocks)) != NULL) {
    if (d->permanent) {
      snprintf (msg, len,
                "LUN %d LBA %" PRIu64 "+%" PRIu64 " is fenced: an earlier "
                "write there (LBA %" PRIu64 "+%" PRIu64 ") may still execute "
                "and the target could not confirm that it cannot",
                lun, lba, nblocks, d->lba, d->nblocks);
      r = -1;
      break;
    }
    if (deadline_ms >= 0 && lg_mono_ms () >= deadline_ms) {
      snprintf (msg, len,
                "LUN %d LBA %" PRIu64 "+%" PRIu64 ": held past the outage "
                "budget behind an earlier write there (LBA %" PRIu64 "+%" PRIu64
                ") whose outcome the target has not confirmed",
                lun, lba, nblocks, d->lba, d->nblocks);
      r = -1;
      break;
    }
    if (deadline_ms < 0)
      pthread_cond_wait (&f->cond, &f->lock);
    else
      pthread_cond_timedwait (&f->cond, &f->lock, &ts);
  }
  pthread_mutex_unlock (&f->lock);
  return r;
}

static uint64_t
be (const uint8_t *p, int n)
{
  uint64_t v = 0;

  for (int i = 0; i < n; i++)
    v = v << 8 | p[i];
  return v;
}

bool
lg_cdb_write_range (const uint8_t *cdb, uint64_t *lba, uint64_t *nblocks)
{
  switch (cdb[0]) {
  case 0x2a: /* WRITE(10) */
  case 0x2e: /* WRITE AND VERIFY(10) */
    *lba = be (cdb + 2, 4);
    *nblocks = be (cdb + 7, 2);
    break;
  case 0xaa: /* WRITE(12) */
    *lba = be (cdb + 2, 4);
    *nblocks = be (cdb + 6, 4);
    break;
  case 0x8a: /* WRITE(16) */
  case 0x8e: /* WRITE AND VERIFY(16) */
  case 0x93: /* WRITE SAME(16) */
    *lba = be (cdb + 2, 8);
    *nblocks = be (cdb + 10, 4);
    break;
  case 0x89: /* COMPARE AND WRITE */
    *lba = be (cdb + 2, 8);
    *nblocks = cdb[13];
    break;
  case 0x41: /* WRITE SAME(10) */
  case 0x42: /* UNMAP: the ranges are in the parameter list */
  case 0x04: /* FORMAT UNIT */
    *lba = 0;
    *nblocks = UINT64_MAX;
    return true;
  default:
    return false;
  }
  /* A count of 0 means "to the end" for WRITE SAME; fence it all. */
  if (*nblocks == 0 || *lba > UINT64_MAX - *nblocks)
    *nblocks = UINT64_MAX - *lba;
  return true;
}
