/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Write-behind for the top of a stack: see wb.h.  The buffered writes
 * are a list in the order they came (each with a sequence number, for
 * flushes), none overlapping another: a write that overlaps one waits
 * for it.  A worker takes the oldest write no worker has, with the
 * writes that follow it on the device, and removes them once written. */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "dev/dev.h"
#include "dev/ra.h"
#include "dev/wb.h"
#include "util/log.h"

/* Writes that follow each other are joined up to this many bytes. */
#define WB_JOIN (1u << 20)
#define WB_JOIN_MAX 256 /* writes in one join */
#define WB_WORKERS 16

struct entry {
  struct entry *prev, *next;
  uint64_t seq, off;
  size_t count;
  bool busy; /* a worker writes it */
  uint8_t data[];
};

struct lg_wb {
  struct lg_dev *d;
  pthread_mutex_t lock;
  pthread_cond_t work, done;
  struct entry *head, *tail;
  size_t bytes, max;
  uint64_t seq;
  pthread_t th[WB_WORKERS];
  unsigned nth;
  bool stopping;
  atomic_uint_fast64_t writes, wbytes, waits, failures;
};

static void *worker (void *arg);

struct lg_wb *
lg_wb_new (struct lg_dev *d, size_t max)
{
  struct lg_wb *wb = calloc (1, sizeof *wb);

  if (wb == NULL)
    return NULL;
  wb->d = d;
  wb->max = max;
  pthread_mutex_init (&wb->lock, NULL);
  pthread_cond_init (&wb->work, NULL);
  pthread_cond_init (&wb->done, NULL);
  for (unsigned i = 0; i < WB_WORKERS; i++)
    if (pthread_create (&wb->th[wb->nth], NULL, worker, wb) == 0)
      wb->nth++;
  if (wb->nth == 0) {
    lg_wb_free (wb);
    errno = EAGAIN;
    return NULL;
  }
  return wb;
}

void
lg_wb_free (struct lg_wb *wb)
{
  if (wb == NULL)
    return;
  /* The workers write what is left before they stop. */
  pthread_mutex_lock (&wb->lock);
  wb->stopping = true;
  pthread_cond_broadcast (&wb->work);
  pthread_mutex_unlock (&wb->lock);
  for (unsigned i = 0; i < wb->nth; i++)
    pthread_join (wb->th[i], NULL);
  pthread_cond_destroy (&wb->work);
  pthread_cond_destroy (&wb->done);
  pthread_mutex_destroy (&wb->lock);
  free (wb);
}

/* Whether a buffered write overlaps [off, off+count) (wb->lock held). */
static bool
overlapped (const struct lg_wb *wb, uint64_t count, uint64_t off)
{
  for (const struct entry *e = wb->head; e; e = e->next)
    if (e->off < off + count && off < e->off + e->count)
      return true;
  return false;
}

bool
lg_wb_overlaps (struct lg_wb *wb, uint64_t count, uint64_t off)
{
  bool r;

  pthread_mutex_lock (&wb->lock);
  r = overlapped (wb, count, off);
  pthread_mutex_unlock (&wb->lock);
  return r;
}

void
lg_wb_wait_range (struct lg_wb *wb, uint64_t count, uint64_t off)
{
  pthread_mutex_lock (&wb->lock);
  while (overlapped (wb, count, off))
    pthread_cond_wait (&wb->done, &wb->lock);
  pthread_mutex_unlock (&wb->lock);
}

void
lg_wb_drain (struct lg_wb *wb)
{
  uint64_t seq;
  bool older;

  pthread_mutex_lock (&wb->lock);
  seq = wb->seq;
  do {
    older = false;
    for (const struct entry *e = wb->head; e && !older; e = e->next)
      older = e->seq <= seq;
    if (older)
      pthread_cond_wait (&wb->done, &wb->lock);
  } while (older);
  pthread_mutex_unlock (&wb->lock);
}

int
lg_wb_write (struct lg_wb *wb, const void *buf, size_t count, uint64_t off,
             unsigned flags)
{
  struct entry *e = NULL;
  bool waited = false;

  if (!(flags & LG_FUA) && count <= wb->max / 2)
    e = malloc (sizeof *e + count);
  if (e == NULL) {
    lg_wb_wait_range (wb, count, off);
    return 0;
  }
  memcpy (e->data, buf, count);
  e->off = off;
  e->count = count;
  e->busy = false;
  e->next = NULL;
  pthread_mutex_lock (&wb->lock);
  for (;;) {
    if (overlapped (wb, count, off))
      ;
    else if (wb->bytes + count > wb->max)
      waited = true;
    else
      break;
    pthread_cond_wait (&wb->done, &wb->lock);
  }
  e->seq = ++wb->seq;
  e->prev = wb->tail;
  if (wb->tail)
    wb->tail->next = e;
  else
    wb->head = e;
  wb->tail = e;
  wb->bytes += count;
  pthread_cond_signal (&wb->work);
  pthread_mutex_unlock (&wb->lock);
  atomic_fetch_add (&wb->writes, 1);
  atomic_fetch_add (&wb->wbytes, count);
  if (waited)
    atomic_fetch_add (&wb->waits, 1);
  return 1;
}

/* The oldest write no worker has, marked as taken, with the writes that
 * follow it on the device (up to WB_JOIN bytes) in batch; their count
 * (wb->lock held).  0: none. */
static unsigned
take (struct lg_wb *wb, struct entry **batch)
{
  struct entry *e = wb->head, *last;
  uint64_t end;
  unsigned n;

  while (e && e->busy)
    e = e->next;
  if (e == NULL)
    return 0;
  e->busy = true;
  batch[0] = last = e;
  end = e->off + e->count;
  for (n = 1; n < WB_JOIN_MAX; n++) {
    struct entry *x = last->next;

    /* The next one in the list usually follows on the device too. */
    if (x == NULL || x->busy || x->off != end)
      for (x = wb->head; x; x = x->next)
        if (!x->busy && x->off == end)
          break;
    if (x == NULL || end - batch[0]->off + x->count > WB_JOIN)
      break;
    x->busy = true;
    batch[n] = last = x;
    end += x->count;
  }
  return n;
}

/* Writes batch (n writes that follow each other), in one command when
 * memory allows. */
static void
write_batch (struct lg_wb *wb, struct entry **batch, unsigned n)
{
  struct lg_dev *d = wb->d;
  uint64_t off = batch[0]->off;
  size_t len = 0;
  uint8_t *buf = NULL;
  int r = 0, err = 0;

  for (unsigned i = 0; i < n; i++)
    len += batch[i]->count;
  if (n > 1 && (buf = malloc (len)) != NULL) {
    size_t at = 0;

    for (unsigned i = 0; i < n; i++) {
      memcpy (buf + at, batch[i]->data, batch[i]->count);
      at += batch[i]->count;
    }
    r = d->ops->pwrite (d, buf, len, off, 0);
    err = errno;
    free (buf);
  }
  else
    for (unsigned i = 0; i < n && r == 0; i++) {
      r = d->ops->pwrite (d, batch[i]->data, batch[i]->count, batch[i]->off, 0);
      err = errno;
    }
  /* Read ahead over it while it ran: either version (ra.h). */
  if (d->ra)
    lg_ra_drop (d->ra, len, off);
  if (r < 0) {
    atomic_fetch_add (&wb->failures, 1);
    lg_error ("%s: writes acknowledged before they reached the device "
              "(write-behind) failed, bytes %" PRIu64 "-%" PRIu64
              ": %s: those bytes may hold older data; the next flush of "
              "each client fails",
              d->name, off, off + len - 1, strerror (err ? err : EIO));
  }
}

static void *
worker (void *arg)
{
  struct lg_wb *wb = arg;
  struct entry *batch[WB_JOIN_MAX];

  pthread_mutex_lock (&wb->lock);
  for (;;) {
    unsigned n = take (wb, batch);

    if (n == 0) {
      if (wb->stopping)
        break;
      pthread_cond_wait (&wb->work, &wb->lock);
      continue;
    }
    /* More for the others. */
    pthread_cond_signal (&wb->work);
    pthread_mutex_unlock (&wb->lock);
    write_batch (wb, batch, n);
    pthread_mutex_lock (&wb->lock);
    for (unsigned i = 0; i < n; i++) {
      struct entry *e = batch[i];

      if (e->prev)
        e->prev->next = e->next;
      else
        wb->head = e->next;
      if (e->next)
        e->next->prev = e->prev;
      else
        wb->tail = e->prev;
      wb->bytes -= e->count;
      free (e);
    }
    pthread_cond_broadcast (&wb->done);
  }
  pthread_mutex_unlock (&wb->lock);
  return NULL;
}

uint64_t
lg_wb_failures (const struct lg_wb *wb)
{
  return atomic_load (&wb->failures);
}

void
lg_wb_stats_print (const struct lg_wb *wb, FILE *f)
{
  struct lg_wb *w = (struct lg_wb *) wb; /* the lock, for the depth */
  size_t depth;

  pthread_mutex_lock (&w->lock);
  depth = w->bytes;
  pthread_mutex_unlock (&w->lock);
  fprintf (f,
           " wb_writes=%" PRIu64 " wb_bytes=%" PRIu64 " wb_depth_bytes=%zu"
           " wb_waits=%" PRIu64 " wb_failures=%" PRIu64,
           (uint64_t) atomic_load (&wb->writes),
           (uint64_t) atomic_load (&wb->wbytes), depth,
           (uint64_t) atomic_load (&wb->waits),
           (uint64_t) atomic_load (&wb->failures));
}
