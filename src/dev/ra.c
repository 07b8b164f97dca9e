/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Read-ahead for the top of a stack: see ra.h.  One stream per device:
 * the position a reader reached (next), the bytes it read in order
 * (seq), the window it has earned (window).  The chunks are aligned to
 * their size; a chunk is free, queued for a worker, being read, ready,
 * or failed.  A chunk dropped while being read is marked stale and freed
 * when its read ends. */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dev/dev.h"
#include "dev/ra.h"
#include "util/hooks.h"
#include "util/log.h"

#define RA_CHUNK (1u << 20)
/* Bytes read in order before anything is read ahead. */
#define RA_TRIGGER (256u << 10)
/* Reads in flight: each worker reads a chunk in one request, and the
 * link idles a round trip each time they all finish together, so what is
 * in flight must outlast a round trip several times (8 MiB: 6.7 round
 * trips of 10 ms at 1 Gbit/s, 86-89% of the link; four gave 76-79%:
 * contrib/bench/RESULTS.md).  One worker a chunk of the window, from
 * RA_WORKERS to RA_MAX_WORKERS: at 50 ms and 1 Gbit/s (6 MB in flight)
 * a window of 32 MiB read by 32 workers gave 75% of the link where 8 MiB
 * by 8 gave 60%.  At 50 ms and 100 Mbit/s 32 MiB is 2.7 s of the link,
 * more than RA_MAX_AGE_MS: chunks expired before they were used (1.8
 * MB/s against 9.5) until the window was bounded by the stream's rate
 * (RA_SPAN_SHARE); with that bound the default is 32 MiB
 * (LG_READ_AHEAD_DEFAULT; contrib/bench/link, NOTES.md). */
#define RA_WORKERS 8
#define RA_MAX_WORKERS 32
#define RA_MAX_AGE_MS 2000
/* The window is at most what the stream read in this share of the age
 * limit, at the rate it has read since it began (at least two chunks):
 * a chunk at the far end of the window is then used about that long
 * after its read was sent, well before it expires, on any link.  Without
 * the bound a 32 MiB window on a 5 MB/s link read 500 MB ahead for a
 * 24 MiB copy, 93% of it dropped unread, and the reads queued behind one
 * another held a connection's keepalive answer past its 6 s
 * (tests/test-ra-slow-link.sh). */
#define RA_SPAN_SHARE 2
/* A chunk that came after the age limit, dropped as it came: the link is
 * too slow for the chunk (at 4 Mbit/s a 1 MiB chunk takes 2.1 s), and the
 * reader's next request would send the same reads again (37 MiB read
 * ahead, all dropped, for a 2 MiB copy that took 83 s;
 * tests/test-ra-too-slow.sh).  Nothing is read ahead for this many age
 * limits after it; then the window tries again. */
#define RA_LATE_PAUSE 4

enum cstate { C_FREE, C_QUEUED, C_READING, C_READY, C_FAILED };

struct chunk {
  enum cstate st;
  bool stale, used;
  uint64_t off;
  size_t len;
  uint64_t ready_ms;
  uint8_t *buf;
};

struct lg_ra {
  struct lg_dev *d;
  pthread_mutex_t lock;
  pthread_cond_t work, done;
  size_t chunk, n;
  struct chunk *c;
  pthread_t th[RA_MAX_WORKERS];
  unsigned nth;
  bool stopping, started;
  uint64_t max_age_ms;
  uint64_t next, seq, window;
  uint64_t since_ms; /* when the stream began */
  uint64_t late_ms;  /* when a chunk last came late (0: never) */
  atomic_uint_fast64_t hits, read_bytes, used_bytes, wasted_bytes;
};

static uint64_t
now_ms (void)
{
  return lg_dev_now_us () / 1000;
}

struct lg_ra *
lg_ra_new (struct lg_dev *d, size_t max)
{
  struct lg_ra *ra;
  size_t chunk = RA_CHUNK, bs = d->block_size ? d->block_size : 512;
  const char *age;

  if (max / 2 < chunk)
    chunk = max / 2;
  chunk -= chunk % bs;
  if (chunk == 0 || max / chunk < 2) {
    errno = EINVAL;
    return NULL;
  }
  ra = calloc (1, sizeof *ra);
  if (ra == NULL)
    return NULL;
  ra->n = max / chunk;
  ra->c = calloc (ra->n, sizeof *ra->c);
  if (ra->c == NULL) {
    free (ra);
    return NULL;
  }
  ra->d = d;
  ra->chunk = chunk;
  ra->max_age_ms = RA_MAX_AGE_MS;
  /* Tests stretch it, so that only a reattach can drop a chunk. */
  if ((age = lg_test_hook ("LUNGATE_TEST_RA_AGE_MS")) != NULL)
    ra->max_age_ms = strtoull (age, NULL, 10);
  ra->window = 2 * chunk;
  pthread_mutex_init (&ra->lock, NULL);
  pthread_cond_init (&ra->work, NULL);
  pthread_cond_init (&ra->done, NULL);
  return ra;
}

void
lg_ra_free (struct lg_ra *ra)
{
  if (ra == NULL)
    return;
  pthread_mutex_lock (&ra->lock);
  ra->stopping = true;
  pthread_cond_broadcast (&ra->work);
  pthread_mutex_unlock (&ra->lock);
  for (unsigned i = 0; i < ra->nth; i++)
    pthread_join (ra->th[i], NULL);
  for (size_t i = 0; i < ra->n; i++)
    free (ra->c[i].buf);
  free (ra->c);
  pthread_cond_destroy (&ra->work);
  pthread_cond_destroy (&ra->done);
  pthread_mutex_destroy (&ra->lock);
  free (ra);
}

/* Frees chunk c (ra->lock held), counting what was read and never used. */
static void
release (struct lg_ra *ra, struct chunk *c)
{
  if (c->st == C_READING) {
    c->stale = true;
    return;
  }
  if (c->st == C_READY && !c->used)
    atomic_fetch_add (&ra->wasted_bytes, c->len);
  c->st = C_FREE;
  c->stale = c->used = false;
}

/* A chunk read (or that failed) too long ago: its age counts from when
 * its read was issued, since the target read the data then. */
static bool
expired (const struct lg_ra *ra, const struct chunk *c, uint64_t now)
{
  return (c->st == C_READY || c->st == C_FAILED)
      && now - c->ready_ms > ra->max_age_ms;
}

/* The live chunk at off, or NULL. */
static struct chunk *
find (struct lg_ra *ra, uint64_t off)
{
  for (size_t i = 0; i < ra->n; i++) {
    struct chunk *c = &ra->c[i];

    if (c->st != C_FREE && !c->stale && c->off == off)
      return c;
  }
  return NULL;
}

/* A slot for a new chunk: free, or one the stream left behind, or one
 * that expired or failed; NULL when every slot is still ahead. */
static struct chunk *
slot (struct lg_ra *ra, uint64_t now)
{
  struct chunk *best = NULL;

  for (size_t i = 0; i < ra->n; i++) {
    struct chunk *c = &ra->c[i];

    if (c->st == C_FREE)
      return c;
    if (c->st == C_READING || c->st == C_QUEUED)
      continue;
    if (expired (ra, c, now) || c->off + c->len + ra->chunk <= ra->next)
      best = c;
  }
  if (best)
    release (ra, best);
  return best && best->st == C_FREE ? best : NULL;
}

static void *worker (void *arg);

/* Queues the chunks of the window ahead of the stream (ra->lock held),
 * unless a chunk came late a short while ago (RA_LATE_PAUSE). */
static void
schedule (struct lg_ra *ra)
{
  uint64_t size = lg_dev_size (ra->d), now = now_ms ();
  uint64_t o = ra->next - ra->next % ra->chunk;
  uint64_t end = ra->next + ra->window;
  bool queued = false;

  if (ra->late_ms && now - ra->late_ms < RA_LATE_PAUSE * ra->max_age_ms)
    return;

  for (; o < end && o < size; o += ra->chunk) {
    struct chunk *c = find (ra, o);

    /* A chunk that failed stays, unread again, until it expires or is
     * dropped: the reader's own read says why (and a unit that fails
     * authentication is not read again for nothing). */
    if (c && !expired (ra, c, now))
      continue;
    if (c)
      release (ra, c);
    if ((c = slot (ra, now)) == NULL)
      break;
    if (c->buf == NULL && (c->buf = malloc (ra->chunk)) == NULL)
      break;
    c->st = C_QUEUED;
    c->off = o;
    c->len = size - o < ra->chunk ? (size_t) (size - o) : ra->chunk;
    queued = true;
  }
  if (!queued)
    return;
  if (!ra->started) {
    ra->started = true;
    unsigned want = ra->n < RA_WORKERS ? RA_WORKERS
        : ra->n > RA_MAX_WORKERS       ? RA_MAX_WORKERS
                                       : (unsigned) ra->n;

    for (unsigned i = 0; i < want; i++)
      if (pthread_create (&ra->th[ra->nth], NULL, worker, ra) == 0)
        ra->nth++;
  }
  if (ra->nth == 0) {
    /* No thread to read them: nothing is read ahead. */
    for (size_t i = 0; i < ra->n; i++)
      if (ra->c[i].st == C_QUEUED)
        release (ra, &ra->c[i]);
    return;
  }
  pthread_cond_broadcast (&ra->work);
}

static _Thread_local bool is_worker;

bool
lg_ra_worker (void)
{
  return is_worker;
}

static void *
worker (void *arg)
{
  struct lg_ra *ra = arg;

  is_worker = true;
  pthread_mutex_lock (&ra->lock);
  while (!ra->stopping) {
    struct chunk *c = NULL;
    int r;

    for (size_t i = 0; i < ra->n; i++)
      if (ra->c[i].st == C_QUEUED && (c == NULL || ra->c[i].off < c->off))
        c = &ra->c[i];
    if (c == NULL) {
      pthread_cond_wait (&ra->work, &ra->lock);
      continue;
    }
    c->st = C_READING;
    c->ready_ms = now_ms ();
    pthread_mutex_unlock (&ra->lock);
    r = ra->d->ops->pread (ra->d, c->buf, c->len, c->off);
    pthread_mutex_lock (&ra->lock);
    atomic_fetch_add (&ra->read_bytes, c->len);
    c->st = r == 0 ? C_READY : C_FAILED;
    if (r == 0 && expired (ra, c, now_ms ())) {
      /* Too slow a link for the chunk: what waits to be read would
       * come as late; the reader reads it. */
      ra->late_ms = now_ms ();
      for (size_t i = 0; i < ra->n; i++)
        if (ra->c[i].st == C_QUEUED)
          release (ra, &ra->c[i]);
    }
    if (c->stale)
      release (ra, c);
    pthread_cond_broadcast (&ra->done);
  }
  pthread_mutex_unlock (&ra->lock);
  return NULL;
}

/* Follows the stream (ra->lock held).  A read that starts near where
 * the last one ended and goes past it continues the stream (FUSE and NBD
 * requests may come a little out of order); a read inside what was read
 * changes nothing; any other starts a new stream, which has read nothing
 * in order yet.  So one large read, random reads and a reader going
 * backwards are never read ahead of. */
static void
note (struct lg_ra *ra, size_t count, uint64_t off)
{
  uint64_t end = off + count;
  uint64_t slack = 2 * (uint64_t) ra->chunk;
  /* Behind: a request that came late; ahead: only as far as a few
   * requests that overtook it. */
  bool near = ra->next != 0 && off + slack >= ra->next
      && off <= ra->next + ra->chunk / 2;

  if (near && end > ra->next) {
    ra->seq += end - (off > ra->next ? off : ra->next);
    ra->next = end;
  }
  else if (!near || end + slack < ra->next) {
    ra->seq = 0;
    ra->next = end;
    ra->window = 2 * ra->chunk;
    ra->since_ms = now_ms ();
    /* The last stream's buffers go back, unless still in use. */
    for (size_t i = 0; i < ra->n; i++)
      if (ra->c[i].st == C_FREE) {
        free (ra->c[i].buf);
        ra->c[i].buf = NULL;
      }
  }
  if (ra->seq >= RA_TRIGGER)
    schedule (ra);
}

enum look { MISS, WAIT, HIT };

/* Whether the chunks hold all of [off, off+count) (ra->lock held). */
static enum look
look (struct lg_ra *ra, size_t count, uint64_t off)
{
  uint64_t now = now_ms (), end = off + count;
  enum look r = HIT;

  for (uint64_t o = off - off % ra->chunk; o < end; o += ra->chunk) {
    struct chunk *c = find (ra, o);

    if (c == NULL || c->st == C_FAILED || expired (ra, c, now)
        || c->off + c->len < (end < o + ra->chunk ? end : o + ra->chunk))
      return MISS;
    if (c->st != C_READY)
      r = WAIT;
  }
  return r;
}

/* The largest window the stream has earned (ra->lock held): every
 * chunk, but no more than the stream reads in a share of the age limit
 * at its rate so far, and at least two chunks. */
static uint64_t
window_bound (const struct lg_ra *ra)
{
  uint64_t most = ra->n * ra->chunk, ms = now_ms () - ra->since_ms;
  uint64_t by_rate = ra->seq * (ra->max_age_ms / RA_SPAN_SHARE) / (ms ? ms : 1);

  if (by_rate < 2 * (uint64_t) ra->chunk)
    by_rate = 2 * (uint64_t) ra->chunk;
  return by_rate < most ? by_rate : most;
}

/* Copies [off, off+count) out of the chunks (ra->lock held, look said
 * HIT), and lets the window grow. */
static void
copy_out (struct lg_ra *ra, uint8_t *buf, size_t count, uint64_t off)
{
  uint64_t end = off + count;

  for (uint64_t o = off; o < end;) {
    struct chunk *c = find (ra, o - o % ra->chunk);
    uint64_t in = o - c->off;
    size_t n = (size_t) (c->len - in < end - o ? c->len - in : end - o);

    memcpy (buf + (o - off), c->buf + in, n);
    c->used = true;
    o += n;
  }
  atomic_fetch_add (&ra->hits, 1);
  atomic_fetch_add (&ra->used_bytes, count);
  ra->window *= 2;
  if (ra->window > window_bound (ra))
    ra->window = window_bound (ra);
}

static bool
any_live (struct lg_ra *ra)
{
  for (size_t i = 0; i < ra->n; i++)
    if (ra->c[i].st != C_FREE)
      return true;
  return false;
}

static int
serve (struct lg_ra *ra, void *buf, size_t count, uint64_t off, bool wait)
{
  enum look l;
  bool live;

  pthread_mutex_lock (&ra->lock);
  live = any_live (ra);
  pthread_mutex_unlock (&ra->lock);
  /* What the chunks hold is served only while the device is the one
   * opened (a LUN swapped under a running session).  The check may probe
   * the LUN, so only the path that may wait serves from the chunks:
   * lg_ra_try_read sends such reads there. */
  if (live && wait && lg_dev_revalidate (ra->d) < 0) {
    int saved = errno;

    lg_ra_drop (ra, 0, 0);
    errno = saved;
    return -1;
  }
  pthread_mutex_lock (&ra->lock);
  note (ra, count, off);
  while ((l = look (ra, count, off)) == WAIT && wait)
    pthread_cond_wait (&ra->done, &ra->lock);
  if (l == HIT && wait)
    copy_out (ra, buf, count, off);
  pthread_mutex_unlock (&ra->lock);
  return l == MISS ? 0 : wait ? 1 : 2;
}

int
lg_ra_read (struct lg_ra *ra, void *buf, size_t count, uint64_t off)
{
  return serve (ra, buf, count, off, true);
}

int
lg_ra_try_read (struct lg_ra *ra, void *buf, size_t count, uint64_t off)
{
  return serve (ra, buf, count, off, false);
}

void
lg_ra_drop (struct lg_ra *ra, uint64_t count, uint64_t off)
{
  pthread_mutex_lock (&ra->lock);
  for (size_t i = 0; i < ra->n; i++) {
    struct chunk *c = &ra->c[i];

    if (c->st == C_FREE)
      continue;
    if (count == 0 || (c->off < off + count && off < c->off + c->len))
      release (ra, c);
  }
  /* Waiters on a chunk just dropped look again (and read the device). */
  pthread_cond_broadcast (&ra->done);
  pthread_mutex_unlock (&ra->lock);
}

void
lg_ra_stats_print (const struct lg_ra *ra, FILE *f)
{
  fprintf (f,
           " ra_hits=%" PRIu64 " ra_read_bytes=%" PRIu64
           " ra_used_bytes=%" PRIu64 " ra_wasted_bytes=%" PRIu64,
           (uint64_t) atomic_load (&ra->hits),
           (uint64_t) atomic_load (&ra->read_bytes),
           (uint64_t) atomic_load (&ra->used_bytes),
           (uint64_t) atomic_load (&ra->wasted_bytes));
}
