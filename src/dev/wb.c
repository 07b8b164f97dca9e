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
/* Writers: one per WB_JOIN of the buffer, from WB_WORKERS to
 * WB_MAX_WORKERS.  A 1 MiB write takes several round trips of R2Ts at
 * tgt's defaults (256 KiB bursts, one R2T outstanding): what fills a
 * long fat link (50 ms at 1 Gbit/s) is many such writes at once, as
 * many as the buffer holds. */
#define WB_WORKERS 16
#define WB_MAX_WORKERS 64

struct entry {
  struct entry *prev, *next;
  uint64_t seq, off;
  size_t count;
  bool busy;    /* a worker writes it */
  bool filling; /* its data is being copied in: not yet for a worker */
  bool urgent;  /* a request waits for it: written before older ones */
  uint8_t *data;
};

struct lg_wb {
  struct lg_dev *d;
  pthread_mutex_t lock;
  pthread_cond_t work, done;
  struct entry *head, *tail;
  size_t bytes, max;
  uint64_t seq;
  /* The first writer waiting for room: later writes leave it that much
   * (a large write is not starved by small ones). */
  bool room_waiter;
  size_t room_need;
  /* A write failed after a long wait (the target does not answer) or the
   * device is stopping: what is buffered fails at once, counted, and new
   * writes are written through, until the buffer is empty. */
  bool failing;
  /* A buffered write was refused with EPERM (another gateway took the
   * LUN or the volume), or a request found the device gone (ESHUTDOWN,
   * lg_wb_through): every write from then on is written through, so
   * that its own error is the client's at once.  For good: this device
   * is not written again (a LUN that comes back after ESHUTDOWN is
   * written through, slower, not wrongly). */
  bool through;
  uint64_t quiet_n, quiet_bytes, quiet_lo, quiet_hi;
  pthread_t th[WB_MAX_WORKERS];
  unsigned nth;
  bool stopping;
  atomic_uint_fast64_t writes, wbytes, waits, failures;
  /* The errno of the last buffered write that failed, and the stack's
   * own losses then (lg_wb_failed_errno). */
  atomic_int last_err;
  atomic_uint_fast64_t stack_losses_then;
};

static void *worker (void *arg);

struct lg_wb *
lg_wb_new (struct lg_dev *d, size_t max)
{
  struct lg_wb *wb = calloc (1, sizeof *wb);
  size_t want = max / WB_JOIN;

  if (wb == NULL)
    return NULL;
  if (want < WB_WORKERS)
    want = WB_WORKERS;
  if (want > WB_MAX_WORKERS)
    want = WB_MAX_WORKERS;
  wb->d = d;
  wb->max = max;
  pthread_mutex_init (&wb->lock, NULL);
  pthread_cond_init (&wb->work, NULL);
  pthread_cond_init (&wb->done, NULL);
  for (size_t i = 0; i < want; i++)
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

/* Whether a buffered write overlaps [off, off+count) (wb->lock held);
 * when urge, those writes go before older ones (a request waits). */
static bool
overlapped (struct lg_wb *wb, uint64_t count, uint64_t off, bool urge)
{
  bool r = false;

  for (struct entry *e = wb->head; e; e = e->next)
    if (e->off < off + count && off < e->off + e->count) {
      r = true;
      if (!urge)
        break;
      if (!e->urgent && !e->busy) {
        e->urgent = true;
        pthread_cond_signal (&wb->work);
      }
    }
  return r;
}

bool
lg_wb_overlaps (struct lg_wb *wb, uint64_t count, uint64_t off)
{
  bool r;

  pthread_mutex_lock (&wb->lock);
  r = overlapped (wb, count, off, false);
  pthread_mutex_unlock (&wb->lock);
  return r;
}

void
lg_wb_wait_range (struct lg_wb *wb, uint64_t count, uint64_t off)
{
  pthread_mutex_lock (&wb->lock);
  while (overlapped (wb, count, off, true))
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

/* Takes e out of the list (wb->lock held). */
static void
unlink_entry (struct lg_wb *wb, struct entry *e)
{
  if (e->prev)
    e->prev->next = e->next;
  else
    wb->head = e->next;
  if (e->next)
    e->next->prev = e->prev;
  else
    wb->tail = e->prev;
  wb->bytes -= e->count;
  if (wb->head == NULL)
    wb->failing = false;
}

int
lg_wb_write (struct lg_wb *wb, const void *buf, size_t count, uint64_t off,
             unsigned flags)
{
  struct entry *e = NULL;
  bool waited = false, mine = false;

  if (!(flags & LG_FUA) && count <= wb->max / 2)
    e = calloc (1, sizeof *e);
  if (e == NULL) {
    lg_wb_wait_range (wb, count, off);
    return 0;
  }
  pthread_mutex_lock (&wb->lock);
  for (;;) {
    size_t leave = wb->room_waiter && !mine ? wb->room_need : 0;

    if (overlapped (wb, count, off, true))
      ; /* waits for those writes, taking no room from anyone */
    else if (wb->bytes + count + leave <= wb->max)
      break;
    else {
      waited = true;
      if (!wb->room_waiter) {
        wb->room_waiter = mine = true;
        wb->room_need = count;
      }
    }
    pthread_cond_wait (&wb->done, &wb->lock);
  }
  if (mine) {
    wb->room_waiter = false;
    pthread_cond_broadcast (&wb->done); /* the room it kept is free */
  }
  if (wb->failing || wb->through) {
    /* Written through: its own error is the client's at once. */
    pthread_mutex_unlock (&wb->lock);
    free (e);
    return 0;
  }
  /* In the list before its data is copied (outside the lock): room
   * reserved, and the writes that overlap it wait for it. */
  e->off = off;
  e->count = count;
  e->filling = true;
  e->seq = ++wb->seq;
  e->prev = wb->tail;
  if (wb->tail)
    wb->tail->next = e;
  else
    wb->head = e;
  wb->tail = e;
  wb->bytes += count;
  pthread_mutex_unlock (&wb->lock);
  e->data = malloc (count);
  if (e->data)
    memcpy (e->data, buf, count);
  pthread_mutex_lock (&wb->lock);
  if (e->data == NULL) {
    unlink_entry (wb, e);
    pthread_cond_broadcast (&wb->done);
    pthread_mutex_unlock (&wb->lock);
    free (e);
    return 0; /* out of memory: written through */
  }
  e->filling = false;
  pthread_cond_signal (&wb->work);
  pthread_cond_broadcast (&wb->done); /* a read waiting for its data */
  pthread_mutex_unlock (&wb->lock);
  atomic_fetch_add (&wb->writes, 1);
  atomic_fetch_add (&wb->wbytes, count);
  if (waited)
    atomic_fetch_add (&wb->waits, 1);
  return 1;
}

struct lg_wb_snap {
  size_t n;
  struct {
    uint64_t off;
    size_t count;
    uint8_t *data;
  } part[];
};

struct lg_wb_snap *
lg_wb_snapshot (struct lg_wb *wb, uint64_t count, uint64_t off)
{
  struct lg_wb_snap *snap = NULL;
  size_t n = 0, i = 0;
  bool filling;

  pthread_mutex_lock (&wb->lock);
  do {
    filling = false;
    n = 0;
    for (const struct entry *e = wb->head; e; e = e->next)
      if (e->off < off + count && off < e->off + e->count) {
        n++;
        filling |= e->filling;
      }
    if (filling)
      pthread_cond_wait (&wb->done, &wb->lock);
  } while (filling);
  if (n == 0) {
    pthread_mutex_unlock (&wb->lock);
    return NULL;
  }
  snap = malloc (sizeof *snap + n * sizeof snap->part[0]);
  for (const struct entry *e = wb->head; snap && e; e = e->next) {
    uint64_t lo, hi;

    if (!(e->off < off + count && off < e->off + e->count))
      continue;
    lo = e->off > off ? e->off : off;
    hi = e->off + e->count < off + count ? e->off + e->count : off + count;
    snap->part[i].off = lo;
    snap->part[i].count = (size_t) (hi - lo);
    snap->part[i].data = malloc (snap->part[i].count);
    if (snap->part[i].data == NULL)
      break;
    memcpy (snap->part[i].data, e->data + (lo - e->off), snap->part[i].count);
    i++;
  }
  if (snap)
    snap->n = i;
  pthread_mutex_unlock (&wb->lock);
  if (snap == NULL || i < n) {
    /* Out of memory: wait for those writes instead. */
    lg_wb_snap_apply (snap, NULL, 0, 0);
    lg_wb_wait_range (wb, count, off);
    return NULL;
  }
  return snap;
}

void
lg_wb_snap_apply (struct lg_wb_snap *snap, void *buf, uint64_t count,
                  uint64_t off)
{
  if (snap == NULL)
    return;
  for (size_t i = 0; i < snap->n; i++) {
    if (buf && snap->part[i].off >= off
        && snap->part[i].off + snap->part[i].count <= off + count)
      memcpy ((uint8_t *) buf + (snap->part[i].off - off), snap->part[i].data,
              snap->part[i].count);
    free (snap->part[i].data);
  }
  free (snap);
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

  for (struct entry *x = e; x; x = x->next)
    if (x->urgent && !x->busy && !x->filling) {
      e = x;
      break;
    }
  while (e && (e->busy || e->filling))
    e = e->next;
  if (e == NULL)
    return 0;
  e->busy = true;
  batch[0] = last = e;
  end = e->off + e->count;
  for (n = 1; n < WB_JOIN_MAX; n++) {
    struct entry *x = last->next;

    /* The next one in the list usually follows on the device too. */
    if (x == NULL || x->busy || x->filling || x->off != end)
      for (x = wb->head; x; x = x->next)
        if (!x->busy && !x->filling && x->off == end)
          break;
    if (x == NULL || end - batch[0]->off + x->count > WB_JOIN)
      break;
    x->busy = true;
    batch[n] = last = x;
    end += x->count;
  }
  return n;
}

/* Failed at once, not written (wb->failing): counted, and said once in
 * all (wb->lock held). */
static void
fail_quietly (struct lg_wb *wb, uint64_t off, size_t len)
{
  atomic_fetch_add (&wb->failures, 1);
  if (wb->quiet_n == 0 || off < wb->quiet_lo)
    wb->quiet_lo = off;
  if (wb->quiet_n == 0 || off + len - 1 > wb->quiet_hi)
    wb->quiet_hi = off + len - 1;
  wb->quiet_n++;
  wb->quiet_bytes += len;
}

/* What fail_quietly counted, in one line (wb->lock held). */
static void
say_quiet (struct lg_wb *wb)
{
  if (wb->quiet_n == 0)
    return;
  lg_error ("%s: %" PRIu64 " more writes acknowledged before they reached "
            "the device (write-behind), %" PRIu64 " bytes within bytes %" PRIu64
            "-%" PRIu64 ", were not written: the target had given no "
            "answer to one, or the device was closing",
            wb->d->name, wb->quiet_n, wb->quiet_bytes, wb->quiet_lo,
            wb->quiet_hi);
  wb->quiet_n = wb->quiet_bytes = 0;
}

/* Writes batch (n writes that follow each other), in one command when
 * memory allows.  Returns whether the rest should fail at once: the
 * target gave no answer (a command timed out and was aborted, or the
 * connection was lost, while it ran), the device is closing, or this
 * gateway may no longer write it (EPERM: another took the LUN or the
 * volume; the writes after it would fail the same).  An answer that is
 * an error (a bad sector, a full thin LUN), however slow, fails that
 * write only.  *failed is its errno, 0 when it succeeded. */
static bool
write_batch (struct lg_wb *wb, struct entry **batch, unsigned n, int *failed)
{
  struct lg_dev *d = wb->d;
  struct lg_dev_transport t0, t1;
  uint64_t off = batch[0]->off;
  size_t len = 0;
  uint8_t *buf = NULL;
  int r = 0, err = 0;

  for (unsigned i = 0; i < n; i++)
    len += batch[i]->count;
  lg_dev_transport (d, &t0);
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
  *failed = 0;
  if (r == 0)
    return false;
  *failed = err = err ? err : EIO;
  atomic_store (&wb->stack_losses_then, lg_dev_stack_losses (d));
  atomic_store (&wb->last_err, err);
  atomic_fetch_add (&wb->failures, 1);
  lg_error ("%s: writes acknowledged before they reached the device "
            "(write-behind) failed, bytes %" PRIu64 "-%" PRIu64
            ": %s: those bytes may hold older data; the next flush of "
            "each client fails",
            d->name, off, off + len - 1, strerror (err));
  lg_dev_transport (d, &t1);
  return err == ESHUTDOWN || err == EPERM || t1.timeouts != t0.timeouts
      || t1.reconnects != t0.reconnects;
}

static void *
worker (void *arg)
{
  struct lg_wb *wb = arg;
  struct entry *batch[WB_JOIN_MAX];

  pthread_mutex_lock (&wb->lock);
  for (;;) {
    unsigned n = take (wb, batch);
    bool failed;
    int err;

    if (n == 0) {
      if (wb->stopping)
        break;
      pthread_cond_wait (&wb->work, &wb->lock);
      continue;
    }
    /* More for the others. */
    pthread_cond_signal (&wb->work);
    if (wb->failing)
      for (unsigned i = 0; i < n; i++)
        fail_quietly (wb, batch[i]->off, batch[i]->count);
    else {
      pthread_mutex_unlock (&wb->lock);
      failed = write_batch (wb, batch, n, &err);
      pthread_mutex_lock (&wb->lock);
      if (failed)
        wb->failing = true;
      /* This batch's own errno: another worker may have stored its own
       * in last_err meanwhile. */
      if (failed && (err == EPERM || err == ESHUTDOWN))
        wb->through = true;
    }
    for (unsigned i = 0; i < n; i++) {
      unlink_entry (wb, batch[i]);
      free (batch[i]->data);
      free (batch[i]);
    }
    if (wb->head == NULL)
      say_quiet (wb);
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
lg_wb_through (struct lg_wb *wb)
{
  pthread_mutex_lock (&wb->lock);
  wb->through = true;
  pthread_mutex_unlock (&wb->lock);
}

int
lg_wb_failed_errno (struct lg_wb *wb, uint64_t stack_losses)
{
  int err = atomic_load (&wb->last_err);

  if (stack_losses != atomic_load (&wb->stack_losses_then))
    return EIO;
  return err == EPERM || err == ENOSPC ? err : EIO;
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
