/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Exercises the block-device interface against a real target and checks
 * every byte twice: through the device, and in the target's backing file.
 *
 *   iotest URL BACKING-FILE [CONNECTIONS]
 *
 * Unaligned writes from several threads into the same blocks (each thread
 * its own bytes), a request larger than the maximum transfer length, trim,
 * zero with and without may_trim, extents, flush, and out-of-range
 * requests.  Exits 0 when every check passed.
 */
#include <config.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dev/iscsi.h"
#include "iscsi/pool.h"
#include "iscsi/url.h"
#include "util/log.h"

#define REGION (12u << 20) /* the part of the LUN the test uses */
#define THREADS 4

static struct lg_dev *dev;
static uint8_t *shadow; /* what the region must hold */
static int backing = -1;
static int failures;

#define CHECK(cond, ...)                                                       \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf (stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                    \
      fprintf (stderr, __VA_ARGS__);                                           \
      fputc ('\n', stderr);                                                    \
      failures++;                                                              \
    }                                                                          \
  } while (0)

static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;

static uint64_t
rnd (void)
{
  /* xorshift64*: reproducible test data, not cryptography. */
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return rng_state * 2685821657736338717ULL;
}

static void
fill (uint8_t *p, size_t n, uint64_t seed)
{
  for (size_t i = 0; i < n; i++)
    p[i] = (uint8_t) ((seed >> (8 * (i % 8))) + i * 31);
}

/* Compares the region through the device and in the backing file. */
static void
verify (const char *when)
{
  uint8_t *buf = malloc (REGION);

  if (lg_dev_pread (dev, buf, REGION, 0) < 0)
    CHECK (0, "%s: read of the region failed: %m", when);
  else if (memcmp (buf, shadow, REGION) != 0) {
    size_t i = 0;

    while (buf[i] == shadow[i])
      i++;
    CHECK (0, "%s: device differs at byte %zu", when, i);
  }
  if (lg_dev_flush (dev) < 0)
    CHECK (0, "%s: flush failed: %m", when);
  if (pread (backing, buf, REGION, 0) != (ssize_t) REGION)
    CHECK (0, "%s: reading the backing file: %m", when);
  else if (memcmp (buf, shadow, REGION) != 0) {
    size_t i = 0;

    while (buf[i] == shadow[i])
      i++;
    CHECK (0, "%s: backing file differs at byte %zu", when, i);
  }
  free (buf);
}

/* Each thread writes the bytes i with i % THREADS == id of a band of
 * blocks, one small unaligned write at a time: every write shares its
 * block with the other threads' writes, so a lost RMW update shows. */
struct worker {
  int id;
  int errors;
};

static void *
rmw_worker (void *arg)
{
  struct worker *w = arg;
  const uint64_t base = 1u << 20, len = 64 * 1024;

  for (uint64_t off = base + (uint64_t) w->id; off < base + len;
       off += THREADS) {
    uint8_t b = (uint8_t) (off * 7 + 1);

    if (lg_dev_pwrite (dev, &b, 1, off, 0) < 0)
      w->errors++;
  }
  return NULL;
}

static int
count_extent (void *opaque, uint64_t off, uint64_t len, bool hole)
{
  uint64_t *c = opaque;

  (void) off;
  if (hole)
    c[0] += len;
  else
    c[1] += len;
  return 0;
}

/* 2 and 3: random unaligned writes, then reads, of odd lengths. */
static void
odd_lengths (uint8_t *buf)
{
  for (int i = 0; i < 300; i++) {
    uint64_t len = 1 + rnd () % 20000;
    uint64_t off = rnd () % (REGION - len);

    fill (buf, len, rnd ());
    memcpy (shadow + off, buf, len);
    CHECK (lg_dev_pwrite (dev, buf, len, off, i % 7 == 0 ? LG_FUA : 0) == 0,
           "write %" PRIu64 "+%" PRIu64 ": %m", off, len);
  }
  verify ("after unaligned writes");

  /* Reads. */
  for (int i = 0; i < 300; i++) {
    uint64_t len = 1 + rnd () % 20000;
    uint64_t off = rnd () % (REGION - len);

    memset (buf, 0xee, len);
    CHECK (lg_dev_pread (dev, buf, len, off) == 0, "read: %m");
    CHECK (memcmp (buf, shadow + off, len) == 0,
           "read %" PRIu64 "+%" PRIu64 " differs", off, len);
  }
}

/* 4: concurrent read-modify-writes into the same blocks. */
static void
concurrent_rmw (void)
{
  pthread_t t[THREADS];
  struct worker w[THREADS];

  for (int i = 0; i < THREADS; i++) {
    w[i].id = i;
    w[i].errors = 0;
    pthread_create (&t[i], NULL, rmw_worker, &w[i]);
  }
  for (int i = 0; i < THREADS; i++) {
    pthread_join (t[i], NULL);
    CHECK (w[i].errors == 0, "RMW worker %d: %d errors", i, w[i].errors);
  }
  for (uint64_t off = 1u << 20; off < (1u << 20) + 64 * 1024; off++)
    shadow[off] = (uint8_t) (off * 7 + 1);
  verify ("after concurrent RMW");
}

/* 5: zero, with and without may_trim, aligned and not. */
static void
zeroes (void)
{
  CHECK (lg_dev_zero (dev, 3 * 65536 + 123, 2 * 65536 + 7, 0) == 0, "zero: %m");
  memset (shadow + 2 * 65536 + 7, 0, 3 * 65536 + 123);
  CHECK (lg_dev_zero (dev, 1 << 20, 4 << 20, LG_MAY_TRIM) == 0,
         "zero may_trim: %m");
  memset (shadow + (4 << 20), 0, 1 << 20);
  verify ("after zero");
}

/* 6: trim is a hint, but on a thin LUN with LBPRZ the range reads as
 * zeroes and GET LBA STATUS reports it deallocated. */
static void
trim (void)
{
  if (dev->can_trim && lg_iscsi_dev_info (dev)->lbprz) {
    uint64_t c[2] = { 0, 0 };

    CHECK (lg_dev_trim (dev, 2 << 20, 8 << 20, 0) == 0, "trim: %m");
    memset (shadow + (8 << 20), 0, 2 << 20);
    verify ("after trim");
    CHECK (lg_dev_extents (dev, 2 << 20, 8 << 20, count_extent, c) == 0,
           "extents: %m");
    printf ("iotest: trimmed 2 MiB: %" PRIu64 " hole, %" PRIu64 " data\n", c[0],
            c[1]);
    CHECK (c[0] == 2 << 20 && c[1] == 0,
           "trimmed range: %" PRIu64 " bytes hole, %" PRIu64 " data", c[0],
           c[1]);
    c[0] = c[1] = 0;
    CHECK (lg_dev_extents (dev, 1 << 20, 0, count_extent, c) == 0,
           "extents: %m");
    CHECK (c[1] == 1 << 20, "written range: %" PRIu64 " data", c[1]);
  }
  else
    printf ("iotest: LUN is not thin-provisioned: trim checks skipped\n");
}

/* 7: out of range requests fail cleanly with EINVAL. */
static void
out_of_range (uint8_t *buf)
{
  errno = 0;
  CHECK (lg_dev_pread (dev, buf, 512, lg_dev_size (dev) - 100) == -1
             && errno == EINVAL,
         "read past the end: errno %d", errno);
  errno = 0;
  CHECK (lg_dev_pwrite (dev, buf, 512, UINT64_MAX - 10, 0) == -1
             && errno == EINVAL,
         "write at 2^64: errno %d", errno);
  CHECK (lg_dev_pread (dev, buf, 4096, lg_dev_size (dev) - 4096) == 0,
         "read of the last block: %m");
}

int
main (int argc, char **argv)
{
  struct lg_login login;
  struct lg_url u;
  struct lg_pool *p;
  char err[512];
  unsigned conns = argc > 3 ? (unsigned) atoi (argv[3]) : 4;
  uint8_t *buf;

  if (argc < 3) {
    fprintf (stderr, "usage: iotest URL BACKING-FILE [CONNECTIONS]\n");
    return 2;
  }
  lg_log_set_level (LG_LOG_WARN);
  if (lg_url_parse (argv[1], &u, err, sizeof err) < 0 || u.kind != LG_URL_LUN) {
    fprintf (stderr, "iotest: bad URL: %s\n", err);
    return 2;
  }
  backing = open (argv[2], O_RDONLY);
  if (backing < 0) {
    perror (argv[2]);
    return 2;
  }
  lg_login_init (&login);
  p = lg_pool_open (&login, u.portal, u.target, conns, err, sizeof err);
  if (p == NULL) {
    fprintf (stderr, "iotest: %s\n", err);
    return 1;
  }
  dev = lg_iscsi_dev_open (p, true, u.lun, false, err, sizeof err);
  if (dev == NULL) {
    fprintf (stderr, "iotest: %s\n", err);
    lg_pool_close (p);
    return 1;
  }
  printf ("iotest: %s: %" PRIu64 " bytes, %u-byte blocks, max I/O %u, "
          "%u connections\n",
          dev->name, lg_dev_size (dev), dev->block_size, dev->max_io, conns);
  if (lg_dev_size (dev) < 2 * (uint64_t) REGION) {
    fprintf (stderr, "iotest: the LUN must hold at least %u bytes\n",
             2 * REGION);
    return 2;
  }
  shadow = calloc (1, REGION);
  buf = malloc (REGION);

  /* 1. One large aligned write, bigger than the maximum transfer length
   * (split and issued in parallel), then back. */
  fill (shadow, REGION, 1);
  CHECK (lg_dev_pwrite (dev, shadow, REGION, 0, 0) == 0, "big write: %m");
  verify ("after the big write");

  odd_lengths (buf);
  concurrent_rmw ();
  zeroes ();
  trim ();
  out_of_range (buf);

  verify ("at the end");
  lg_dev_close (dev);
  lg_login_clear (&login);
  lg_url_clear (&u);
  close (backing);
  free (buf);
  free (shadow);
  printf ("iotest: %s\n", failures ? "FAILED" : "all checks passed");
  return failures ? 1 : 0;
}
