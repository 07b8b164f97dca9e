/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* latprobe: request latencies through the iSCSI block device, to catch a
 * request that waits for a nap or a poll timeout (selfpoll.c).
 *
 *   latprobe URL CONNECTIONS SCENARIO N GAP_MS BYTES [THREADS]
 *
 * SCENARIO: sync (lg_dev_pread), async (lg_dev_start_rw, the done callback
 * posts a semaphore), syncw / asyncw (writes), mix (THREADS-1 threads of
 * sync reads and one of async reads at once).  Each thread does N requests
 * of BYTES at random aligned offsets in the first 32 MiB, GAP_MS apart.
 * Prints the slowest request and how many took over 50 ms; exits 1 when
 * any took over LATPROBE_MAX_MS (default 50). */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dev/iscsi.h"
#include "iscsi/pool.h"
#include "iscsi/url.h"
#include "util/log.h"

static struct lg_dev *dev;
static int n_req, gap_ms;
static size_t bytes;
static int64_t max_ok_ms = 50;
static atomic_int slow, errors;
static _Atomic int64_t worst_us;

static int64_t
now_us (void)
{
  struct timespec ts;

  clock_gettime (CLOCK_MONOTONIC, &ts);
  return (int64_t) ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

struct areq {
  sem_t sem;
  int err;
};

static void
done (void *opaque, int err)
{
  struct areq *a = opaque;

  a->err = err;
  sem_post (&a->sem);
}

static void
note (const char *what, int i, int64_t us)
{
  int64_t w = atomic_load (&worst_us);

  while (us > w && !atomic_compare_exchange_weak (&worst_us, &w, us))
    ;
  if (us > max_ok_ms * 1000) {
    atomic_fetch_add (&slow, 1);
    fprintf (stderr, "latprobe: %s request %d took %.1f ms\n", what, i,
             us / 1000.0);
  }
}

struct job {
  bool async, write;
  bool fixed; /* one request at 48 MiB, not timed (a stalled one) */
  unsigned seed;
};

static void *
run (void *arg)
{
  struct job *j = arg;
  uint8_t *buf = aligned_alloc (4096, bytes);
  uint64_t span = 32u << 20;

  memset (buf, 0x5a, bytes);
  if (j->fixed) {
    if (lg_dev_pread (dev, buf, 4096, 48u << 20) < 0)
      atomic_fetch_add (&errors, 1);
    free (buf);
    return NULL;
  }
  if (getenv ("LATPROBE_START_MS"))
    usleep ((useconds_t) atoi (getenv ("LATPROBE_START_MS")) * 1000);
  for (int i = 0; i < n_req; i++) {
    uint64_t off
        = ((uint64_t) rand_r (&j->seed) % ((span - bytes) / 4096)) * 4096;
    int64_t t0 = now_us ();
    int r;

    if (j->async) {
      struct areq a;

      sem_init (&a.sem, 0, 0);
      a.err = 0;
      r = lg_dev_start_rw (dev, j->write, buf, bytes, off, 0, done, &a);
      if (r == 0) {
        while (sem_wait (&a.sem) < 0 && errno == EINTR)
          ;
        r = a.err ? -1 : 0;
      }
      sem_destroy (&a.sem);
    }
    else
      r = j->write ? lg_dev_pwrite (dev, buf, bytes, off, 0)
                   : lg_dev_pread (dev, buf, bytes, off);
    if (r < 0)
      atomic_fetch_add (&errors, 1);
    note (j->async ? "async" : "sync", i, now_us () - t0);
    if (gap_ms)
      usleep ((useconds_t) gap_ms * 1000);
  }
  free (buf);
  return NULL;
}

int
main (int argc, char **argv)
{
  struct lg_login login;
  struct lg_url u;
  struct lg_pool *p;
  char err[512];
  const char *sc;
  int threads = 1;
  pthread_t t[64];
  struct job jobs[64];

  if (argc < 7) {
    fprintf (stderr,
             "usage: latprobe URL CONNS SCENARIO N GAP_MS BYTES "
             "[THREADS]\n");
    return 2;
  }
  if (getenv ("LATPROBE_MAX_MS"))
    max_ok_ms = atoll (getenv ("LATPROBE_MAX_MS"));
  sc = argv[3];
  n_req = atoi (argv[4]);
  gap_ms = atoi (argv[5]);
  bytes = (size_t) strtoull (argv[6], NULL, 0);
  if (argc > 7)
    threads = atoi (argv[7]);
  if (threads < 1 || threads > 64)
    return 2;
  lg_log_set_level (getenv ("LATPROBE_DEBUG") ? LG_LOG_DEBUG : LG_LOG_WARN);
  if (lg_url_parse (argv[1], &u, err, sizeof err) < 0 || u.kind != LG_URL_LUN) {
    fprintf (stderr, "latprobe: bad URL: %s\n", err);
    return 2;
  }
  lg_login_init (&login);
  p = lg_pool_open (&login, u.portal, u.target, (unsigned) atoi (argv[2]), err,
                    sizeof err);
  if (p == NULL) {
    fprintf (stderr, "latprobe: %s\n", err);
    lg_login_clear (&login);
    return 1;
  }
  dev = lg_iscsi_dev_open (p, false, u.lun, false, err, sizeof err);
  if (dev == NULL) {
    fprintf (stderr, "latprobe: %s\n", err);
    lg_pool_close (p);
    lg_login_clear (&login);
    return 1;
  }
  for (int i = 0; i < threads; i++) {
    jobs[i].seed = 12345u + (unsigned) i;
    /* stall-X: thread 0 reads 48 MiB once (the target stalls it), the
     * others do X. */
    const char *x = strncmp (sc, "stall-", 6) == 0 ? sc + 6 : sc;

    jobs[i].fixed = x != sc && i == 0;
    jobs[i].write = strcmp (x, "syncw") == 0 || strcmp (x, "asyncw") == 0;
    jobs[i].async = strcmp (x, "async") == 0 || strcmp (x, "asyncw") == 0
        || (strcmp (x, "mix") == 0 && i == threads - 1);
    pthread_create (&t[i], NULL, run, &jobs[i]);
  }
  if (strcmp (sc, "stall-close") == 0) {
    /* The device (and its pool) closed while thread 0 still waits for
     * its stalled read: that read must fail, with nothing of the closed
     * session touched after (session.h: a command pending at close
     * fails). */
    int64_t t0;

    usleep ((useconds_t) gap_ms * 1000);
    t0 = now_us ();
    lg_pool_close (p);
    fprintf (stderr, "latprobe: lg_pool_close took %.1f ms\n",
             (now_us () - t0) / 1000.0);
    p = NULL;
  }
  for (int i = 0; i < threads; i++)
    pthread_join (t[i], NULL);
  if (p == NULL) {
    /* dev is not closed: its pool is gone. */
    printf ("latprobe: closed with a read pending: %d errors\n",
            atomic_load (&errors));
    lg_login_clear (&login);
    return atomic_load (&errors) == 1 ? 0 : 1;
  }
  printf ("latprobe: %s: %d x %d requests of %zu bytes: slowest %.1f ms, "
          "%d over %" PRId64 " ms, %d errors\n",
          sc, threads, n_req, bytes, atomic_load (&worst_us) / 1000.0,
          atomic_load (&slow), max_ok_ms, atomic_load (&errors));
  lg_dev_close (dev);
  lg_pool_close (p);
  lg_login_clear (&login);
  return atomic_load (&slow) || atomic_load (&errors) ? 1 : 0;
}
