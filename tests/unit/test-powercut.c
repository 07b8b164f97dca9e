/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The crypt layer over a model of a target with a volatile write cache
 * (issue 13, case 1), cut off from power at random instants.
 *
 * The model: a write is acknowledged into a cache; a flush, or a FUA
 * write for its own blocks, makes it stable.  At a power cut each logical
 * block (512 B or 4 KiB) the cache holds ends up as any one of its cached
 * versions or as its stable one, each block on its own, in any order; the
 * rest is lost, and every request from then on fails.  Single writes can
 * also be made to fail with EIO after landing in part.
 *
 * Threads write, zero, trim, read and flush units of their own (a unit is
 * only ever touched by one thread, so its history is a sequence); the
 * metadata blocks are shared.  After each cut the volume is opened again
 * and every unit must read as what it held at the last completed flush,
 * or as something written to it since, never fail; the one exception is a
 * unit whose own 4 KiB came back from the cut torn (sectors of different
 * writes, which only a 512 B LUN allows), as lungate-format(5) says.
 *
 * Variants replay: the target is back at once and the session logs in
 * and resends what it held (as iSCSI does), with many threads and a tiny
 * metadata cache.  After the model, single faults one at a time: the
 * metadata lost while its flush was being resent across a login, a flush
 * after a power loss that lost acknowledged writes, a power loss while
 * idle (tests by a hostile review of this code).
 *
 * LG_POWERCUT_ITERS sets the number of cuts per variant (contrib/powercut
 * runs many more than make check does).
 */
#include <config.h>

#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "crypt/crypt.h"
#include "crypt/header.h"
#include "dev/dev.h"
#include "util/log.h"

#define VOL_SIZE (3u << 20)
#define THREADS g_threads
#define MAXTHREADS 16
static int g_threads = 4;
static size_t g_cache = 8;
static bool g_replay;
#define CHUNK 8  /* units: a thread owns chunks (u / CHUNK) % THREADS */
#define MAXV 256 /* versions a unit can hold between two flushes */

/* ---- the volatile-cache device ---- */

struct pend {
  uint64_t blk;
  uint32_t owner; /* which write */
  uint8_t *data;
};

struct vcdev {
  struct lg_dev dev;
  pthread_mutex_t lock;
  unsigned gran;
  uint8_t *stable, *view;
  uint32_t *sowner, *vowner; /* per block: the write it came from */
  struct pend *p;
  size_t np, cap;
  bool dead;
  long ops, cut_at;
  unsigned fail_permille;
  unsigned rnd;
  uint32_t next_owner;
  uint64_t flushes, fuas, cuts, reconnects;
  struct lg_dev *top; /* of the stack over it (lg_dev_set_top) */
  bool replay;        /* at a cut the target comes straight back, the
                         session logs in and resends the command (iscsi) */
  long flush_cut_at;  /* cut at the n-th flush from now (0: off) */
  uint64_t cut_clock; /* model clock at the last cut */
  bool lose_all;      /* a cut loses every cached block */
  int64_t fail_off;   /* the next write at this offset fails, unlanded */
};
static void replay_login_locked (struct vcdev *v);

static unsigned
rnd_locked (struct vcdev *v, unsigned n)
{
  return (unsigned) rand_r (&v->rnd) % n;
}

static void
pend_add_locked (struct vcdev *v, uint64_t blk, uint32_t owner,
                 const uint8_t *data)
{
  if (v->np == v->cap) {
    v->cap = v->cap ? 2 * v->cap : 256;
    v->p = realloc (v->p, v->cap * sizeof *v->p);
    cr_assert_not_null (v->p);
  }
  v->p[v->np].blk = blk;
  v->p[v->np].owner = owner;
  v->p[v->np].data = malloc (v->gran);
  cr_assert_not_null (v->p[v->np].data);
  memcpy (v->p[v->np].data, data, v->gran);
  v->np++;
}

static void
pend_clear_locked (struct vcdev *v)
{
  for (size_t i = 0; i < v->np; i++)
    free (v->p[i].data);
  v->np = 0;
}

/* Power off: each cached block becomes one of its versions, or stays. */
static void
cut_locked (struct vcdev *v)
{
  bool *seen = calloc (lg_dev_size (&v->dev) / v->gran, 1);

  cr_assert_not_null (seen);
  for (size_t i = 0; i < v->np; i++) {
    uint64_t b = v->p[i].blk;
    size_t nver = 0, pick;

    if (seen[b])
      continue;
    seen[b] = true;
    for (size_t k = i; k < v->np; k++)
      nver += v->p[k].blk == b;
    pick = v->lose_all ? 0 : rnd_locked (v, (unsigned) nver + 1);
    if (pick == 0)
      continue; /* lost */
    for (size_t k = i; k < v->np; k++)
      if (v->p[k].blk == b && --pick == 0) {
        memcpy (v->stable + b * v->gran, v->p[k].data, v->gran);
        v->sowner[b] = v->p[k].owner;
        break;
      }
  }
  free (seen);
  pend_clear_locked (v);
  memcpy (v->view, v->stable, lg_dev_size (&v->dev));
  memcpy (v->vowner, v->sowner,
          lg_dev_size (&v->dev) / v->gran * sizeof *v->sowner);
  v->dead = true;
  v->cuts++;
}

/* Counts a request; false (errno EIO) when the power is off, or goes off
 * now. */
static bool
power_locked (struct vcdev *v)
{
  if (!v->dead && ++v->ops == v->cut_at) {
    cut_locked (v);
    if (v->replay)
      replay_login_locked (v);
  }
  if (v->dead)
    errno = EIO;
  return !v->dead;
}

static int
vc_pread (struct lg_dev *d, void *buf, size_t n, uint64_t off)
{
  struct vcdev *v = (struct vcdev *) d;
  int r = -1;

  pthread_mutex_lock (&v->lock);
  if (power_locked (v)) {
    memcpy (buf, v->view + off, n);
    r = 0;
  }
  pthread_mutex_unlock (&v->lock);
  return r;
}

static int
vc_pwrite (struct lg_dev *d, const void *buf, size_t n, uint64_t off,
           unsigned flags)
{
  struct vcdev *v = (struct vcdev *) d;
  const uint8_t *src = buf;
  uint32_t owner;
  bool fail;
  int r = -1;

  cr_assert_eq (off % v->gran, 0);
  cr_assert_eq (n % v->gran, 0);
  pthread_mutex_lock (&v->lock);
  if (!power_locked (v))
    goto out;
  owner = ++v->next_owner;
  if (v->fail_off >= 0 && (uint64_t) v->fail_off == off) {
    v->fail_off = -1;
    errno = EIO;
    goto out;
  }
  fail = v->fail_permille && rnd_locked (v, 1000) < v->fail_permille;
  for (uint64_t b = off / v->gran; b < (off + n) / v->gran; b++) {
    const uint8_t *p = src + (b * v->gran - off);

    if (fail && rnd_locked (v, 2))
      continue; /* a failed write lands in part */
    memcpy (v->view + b * v->gran, p, v->gran);
    v->vowner[b] = owner;
    if ((flags & LG_FUA) && !fail) {
      /* Stable now; an older cached version never lands over it. */
      for (size_t i = 0; i < v->np; i++)
        if (v->p[i].blk == b) {
          free (v->p[i].data);
          v->p[i--] = v->p[--v->np];
        }
      memcpy (v->stable + b * v->gran, p, v->gran);
      v->sowner[b] = owner;
    }
    else
      pend_add_locked (v, b, owner, p);
  }
  if (flags & LG_FUA)
    v->fuas++;
  if (fail)
    errno = EIO;
  else
    r = 0;
out:
  pthread_mutex_unlock (&v->lock);
  return r;
}

static int
vc_flush (struct lg_dev *d)
{
  struct vcdev *v = (struct vcdev *) d;
  int r = -1;

  pthread_mutex_lock (&v->lock);
  if (v->flush_cut_at && --v->flush_cut_at == 0 && !v->dead) {
    cut_locked (v);
    if (v->replay)
      replay_login_locked (v);
  }
  if (power_locked (v)) {
    for (size_t i = 0; i < v->np; i++) {
      memcpy (v->stable + v->p[i].blk * v->gran, v->p[i].data, v->gran);
      v->sowner[v->p[i].blk] = v->p[i].owner;
    }
    pend_clear_locked (v);
    v->flushes++;
    r = 0;
  }
  pthread_mutex_unlock (&v->lock);
  return r;
}

static int
vc_zero (struct lg_dev *d, uint64_t n, uint64_t off, unsigned flags)
{
  uint8_t *z = calloc (1, (size_t) n);
  int r;

  cr_assert_not_null (z);
  r = vc_pwrite (d, z, (size_t) n, off, flags & LG_FUA);
  free (z);
  return r;
}

static void
vc_close (struct lg_dev *d)
{
  (void) d; /* the device outlives its openers: "the target" */
}

static void
vc_counters (const struct lg_dev *d, struct lg_dev_counters *c)
{
  c->transport.reconnects += ((const struct vcdev *) d)->reconnects;
}

static int
vc_set_top (struct lg_dev *d, struct lg_dev *top)
{
  ((struct vcdev *) d)->top = top;
  return 0;
}

static const struct lg_dev_ops vc_ops = {
  .name = "volatile-cache",
  .pread = vc_pread,
  .pwrite = vc_pwrite,
  .flush = vc_flush,
  .zero = vc_zero,
  .close = vc_close,
  .counters = vc_counters,
  .set_top = vc_set_top,
};

static struct vcdev vc;

static int
reader_pread (struct lg_dev_reader *r, void *buf, size_t n, uint64_t off)
{
  (void) r;
  return vc_pread (&vc.dev, buf, n, off);
}

static uint64_t clock_now_get_and_bump (void);
static int
nolock_pread (struct lg_dev_reader *r, void *buf, size_t n, uint64_t off)
{
  (void) r;
  memcpy (buf, vc.view + off, n);
  return 0;
}

/* the target is back at once; the session logs in, runs the login
 * check (vc.lock held: every other command waits, as on one session) and
 * then sends the command it held. */
static void
replay_login_locked (struct vcdev *v)
{
  struct lg_dev_reader rd = { .pread = nolock_pread };

  v->dead = false;
  v->reconnects++;
  v->cut_clock = clock_now_get_and_bump ();
  if (v->top)
    cr_assert_eq (lg_dev_reattach (v->top, &rd), 0);
}

/* The target is back after its power cut, and the gateway, which lived
 * through it, logs in again: the login check runs before anything. */
static void
vc_relogin (void)
{
  struct lg_dev_reader rd = { .pread = reader_pread };

  pthread_mutex_lock (&vc.lock);
  vc.dead = false;
  vc.reconnects++;
  pthread_mutex_unlock (&vc.lock);
  if (vc.top)
    cr_assert_eq (lg_dev_reattach (vc.top, &rd), 0);
}

static void
vc_init (unsigned gran, unsigned seed)
{
  size_t nb = VOL_SIZE / gran;

  memset (&vc, 0, sizeof vc);
  pthread_mutex_init (&vc.lock, NULL);
  vc.gran = gran;
  vc.stable = calloc (1, VOL_SIZE);
  vc.view = calloc (1, VOL_SIZE);
  vc.sowner = calloc (nb, sizeof *vc.sowner);
  vc.vowner = calloc (nb, sizeof *vc.vowner);
  cr_assert (vc.stable && vc.view && vc.sowner && vc.vowner);
  vc.dev.ops = &vc_ops;
  lg_dev_set_size (&vc.dev, VOL_SIZE);
  vc.dev.block_size = gran;
  vc.dev.max_io = 1 << 20;
  vc.dev.can_fua = true;
  vc.dev.volatile_cache = true;
  vc.cut_at = -1;
  vc.fail_off = -1;
  vc.rnd = seed;
  strcpy (vc.dev.name, "vcache");
}

/* ---- what each unit may hold ---- */

/* Version 0 is zeroes; version k > 0 of unit u is fill (u, k). */
struct unit {
  uint32_t floor; /* held at the last completed flush */
  uint32_t since[MAXV];
  uint64_t done_at[MAXV]; /* 0: not completed (failed, or running) */
  uint64_t began_at[MAXV];
  unsigned n;
};

static bool lenient_after_cut;
static struct unit *units;
static uint64_t nunits, data_off;
static pthread_mutex_t mlock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t clock_now;
static uint32_t next_version;

static void
fill (uint8_t *p, uint64_t u, uint32_t ver)
{
  if (ver == 0) {
    memset (p, 0, LG_UNIT_SIZE);
    return;
  }
  for (size_t i = 0; i < LG_UNIT_SIZE; i += 8) {
    uint64_t w = (u << 32 | ver) * UINT64_C (0x9e3779b97f4a7c15) + i;

    memcpy (p + i, &w, 8);
  }
}

/* Whether unit u's 4 KiB on the device come from one write. */
static bool
torn (const uint32_t *owner, uint64_t u)
{
  uint64_t b0 = (data_off + u * LG_UNIT_SIZE) / vc.gran;

  for (uint64_t b = b0 + 1; b < b0 + LG_UNIT_SIZE / vc.gran; b++)
    if (owner[b] != owner[b0])
      return true;
  return false;
}

static void
began (uint64_t u, uint32_t ver)
{
  struct unit *x = &units[u];

  pthread_mutex_lock (&mlock);
  if (x->n == MAXV) {
    /* Too long without a flush: forget the oldest uncompleted ones only
     * if it is safe... it is not; the threads flush often enough. */
    cr_assert_fail ("unit %lu: more than %d versions since a flush",
                    (unsigned long) u, MAXV);
  }
  x->since[x->n] = ver;
  x->done_at[x->n] = 0;
  x->began_at[x->n] = ++clock_now;
  x->n++;
  pthread_mutex_unlock (&mlock);
}

static void
completed (uint64_t u)
{
  pthread_mutex_lock (&mlock);
  units[u].done_at[units[u].n - 1] = ++clock_now;
  pthread_mutex_unlock (&mlock);
}

static uint64_t
clock_now_get_and_bump (void)
{
  uint64_t t;

  pthread_mutex_lock (&mlock);
  t = ++clock_now;
  pthread_mutex_unlock (&mlock);
  return t;
}

static uint64_t
flush_began (void)
{
  uint64_t t;

  pthread_mutex_lock (&mlock);
  t = ++clock_now;
  pthread_mutex_unlock (&mlock);
  return t;
}

/* A flush that began at t completed: what completed before t is the new
 * floor of each unit. */
static void
flush_completed (uint64_t t)
{
  pthread_mutex_lock (&mlock);
  for (uint64_t u = 0; u < nunits; u++) {
    struct unit *x = &units[u];
    int last = -1;

    for (unsigned k = 0; k < x->n; k++)
      if (x->done_at[k]
          && x->done_at[k] < t
          /* Replayed: a write that began before the last cut may have
           * been lost with the cache (its flush's EIO may have gone to
           * another thread). */
          && (!lenient_after_cut || x->began_at[k] > vc.cut_clock))
        last = (int) k;
    if (last < 0)
      continue;
    x->floor = x->since[last];
    memmove (x->since, x->since + last + 1,
             (x->n - (unsigned) last - 1) * sizeof *x->since);
    memmove (x->done_at, x->done_at + last + 1,
             (x->n - (unsigned) last - 1) * sizeof *x->done_at);
    memmove (x->began_at, x->began_at + last + 1,
             (x->n - (unsigned) last - 1) * sizeof *x->began_at);
    x->n -= (unsigned) last + 1;
  }
  pthread_mutex_unlock (&mlock);
}

/* Which version buf is, of those unit u may hold; -1 if none.  With
 * exact, only the newest completed one will do (read your writes). */
static int64_t
which (uint64_t u, const uint8_t *buf, bool exact)
{
  uint8_t want[LG_UNIT_SIZE];
  struct unit *x = &units[u];
  int64_t r = -1;

  pthread_mutex_lock (&mlock);
  if (exact && x->n > 0 && x->done_at[x->n - 1]) {
    fill (want, u, x->since[x->n - 1]);
    r = memcmp (want, buf, LG_UNIT_SIZE) == 0 ? (int64_t) x->since[x->n - 1]
                                              : -1;
    goto out;
  }
  fill (want, u, x->floor);
  if (memcmp (want, buf, LG_UNIT_SIZE) == 0) {
    r = x->floor;
    goto out;
  }
  for (unsigned k = 0; k < x->n; k++) {
    fill (want, u, x->since[k]);
    if (memcmp (want, buf, LG_UNIT_SIZE) == 0) {
      r = x->since[k];
      goto out;
    }
  }
out:
  pthread_mutex_unlock (&mlock);
  return r;
}

/* ---- the workload ---- */

static struct lg_dev *cd;
static struct lg_header hdr;
static uint8_t *mk;
static atomic_uint_fast64_t violations, torn_seen, ops_done;
static char why[256];

static bool
dead (void)
{
  bool r;

  pthread_mutex_lock (&vc.lock);
  r = vc.dead;
  pthread_mutex_unlock (&vc.lock);
  return r;
}

static void
violation (const char *what, uint64_t u, long a)
{
  if (atomic_fetch_add (&violations, 1) == 0)
    snprintf (why, sizeof why, "unit %lu %s (%ld)", (unsigned long) u, what, a);
}

/* For the log of a failure: which version, ever, buf is, and what unit u
 * may hold. */
static void
explain_read (uint64_t u, const uint8_t *buf)
{
  uint8_t want[LG_UNIT_SIZE];
  long ver = -1;

  for (uint32_t v = 0; v <= next_version && ver < 0; v++) {
    fill (want, u, v);
    if (memcmp (want, buf, LG_UNIT_SIZE) == 0)
      ver = (long) v;
  }
  pthread_mutex_lock (&mlock);
  fprintf (stderr,
           "unit %lu read as version %ld; floor %u, since:", (unsigned long) u,
           ver, units[u].floor);
  for (unsigned k = 0; k < units[u].n; k++)
    fprintf (stderr, " %u%s", units[u].since[k],
             units[u].done_at[k] ? "" : "(not done)");
  fprintf (stderr, "; last cut at clock %lu\n", (unsigned long) vc.cut_clock);
  pthread_mutex_unlock (&mlock);
}

/* Reads units [u, u+n) and checks each (one by one after a failure, to
 * tell a torn unit from a broken promise). */
static void
check_read (uint64_t u, unsigned n, bool exact)
{
  uint8_t *buf = malloc ((size_t) n * LG_UNIT_SIZE);

  cr_assert_not_null (buf);
  if (lg_dev_pread (cd, buf, (size_t) n * LG_UNIT_SIZE, u * LG_UNIT_SIZE)
      == 0) {
    for (unsigned k = 0; k < n; k++)
      if (which (u + k, buf + k * LG_UNIT_SIZE, exact) < 0) {
        if (atomic_load (&violations) == 0)
          explain_read (u + k, buf + k * LG_UNIT_SIZE);
        violation ("reads as none of its versions (exact)", u + k,
                   (long) exact);
      }
  }
  else if (n > 1)
    for (unsigned k = 0; k < n; k++)
      check_read (u + k, 1, exact);
  else if (!dead ()) {
    bool t;

    pthread_mutex_lock (&vc.lock);
    t = torn (vc.vowner, u);
    pthread_mutex_unlock (&vc.lock);
    if (t)
      atomic_fetch_add (&torn_seen, 1);
    else
      violation ("fails to read, and is not torn (errno)", u, errno);
  }
  free (buf);
}

static void
do_write (uint64_t u, unsigned n, int kind)
{
  uint8_t *buf = malloc ((size_t) n * LG_UNIT_SIZE);
  uint32_t ver[CHUNK];
  int r;

  cr_assert_not_null (buf);
  for (unsigned k = 0; k < n; k++) {
    pthread_mutex_lock (&mlock);
    ver[k] = kind == 0 ? ++next_version : 0u;
    pthread_mutex_unlock (&mlock);
    fill (buf + k * LG_UNIT_SIZE, u + k, ver[k]);
    began (u + k, ver[k]);
  }
  if (kind == 0)
    r = lg_dev_pwrite (cd, buf, (size_t) n * LG_UNIT_SIZE, u * LG_UNIT_SIZE, 0);
  else if (kind == 1)
    r = lg_dev_zero (cd, (uint64_t) n * LG_UNIT_SIZE, u * LG_UNIT_SIZE, 0);
  else
    r = lg_dev_trim (cd, (uint64_t) n * LG_UNIT_SIZE, u * LG_UNIT_SIZE, 0);
  if (r == 0)
    for (unsigned k = 0; k < n; k++)
      completed (u + k);
  free (buf);
}

struct worker {
  int id;
  unsigned rnd;
};

static void *
work (void *arg)
{
  struct worker *w = arg;
  uint64_t chunks = nunits / CHUNK;

  for (int i = 0; i < 200 && !dead (); i++) {
    uint64_t c = (uint64_t) rand_r (&w->rnd) % (chunks / THREADS) * THREADS
        + (uint64_t) w->id;
    unsigned off = (unsigned) rand_r (&w->rnd) % CHUNK;
    unsigned n = 1 + (unsigned) rand_r (&w->rnd) % (CHUNK - off);
    unsigned op = (unsigned) rand_r (&w->rnd) % 100;
    uint64_t u = c * CHUNK + off;

    if (u + n > nunits)
      continue;
    if (op < 55)
      do_write (u, n, 0);
    else if (op < 65)
      do_write (u, n, 1);
    else if (op < 75)
      do_write (u, n, 2);
    else if (op < 90)
      check_read (u, n, !lenient_after_cut);
    else {
      uint64_t t = flush_began ();

      if (lg_dev_flush (cd) == 0)
        flush_completed (t);
    }
    atomic_fetch_add (&ops_done, 1);
  }
  return NULL;
}

static void
quiet (enum lg_log_level level, const char *msg)
{
  if (getenv ("LG_POWERCUT_LOG"))
    fprintf (stderr, "LOG %d %s\n", level, msg);
}

static void
open_cd (void)
{
  char err[256];
  struct lg_header now;

  /* As the gateway does: the header as it is on the LUN now. */
  cr_assert_eq (lg_header_read (&vc.dev, &now, err, sizeof err), 0, "%s", err);
  cr_assert_eq (lg_header_check_mac (&now, mk), 0);
  cd = lg_crypt_open (&vc.dev, false, &now, mk, g_cache, true, err, sizeof err);
  cr_assert_not_null (cd, "%s", err);
}

/* What the stable copy holds for unit u, for the log of a failure. */
static void
explain (uint64_t u)
{
  const uint8_t *m = vc.stable + hdr.md_offset
      + (u / LG_UNITS_PER_MD) * LG_MD_BLOCK
      + (u % LG_UNITS_PER_MD) * 2 * LG_SLOT_BYTES;
  uint64_t s0, s1;

  memcpy (&s0, m + 40, 8);
  memcpy (&s1, m + LG_SLOT_BYTES + 40, 8);
  fprintf (
      stderr,
      "unit %lu: slot 0 seq|flags %#lx, slot 1 %#lx, data %s, floor "
      "version %u, %u since\n",
      (unsigned long) u, (unsigned long) s0, (unsigned long) s1,
      sodium_is_zero (vc.stable + data_off + u * LG_UNIT_SIZE, LG_UNIT_SIZE)
          ? "zeroes"
          : "not zeroes",
      units[u].floor, units[u].n);
}

/* After power comes back: every unit reads as one of its versions (torn
 * ones aside), which becomes its floor.  Torn ones are written afresh.
 * When the gateway lived through the cut, the check reads through a
 * device of its own: reads teach a device which slots are current, and
 * what the gateway believes after the login is what is under test. */
static void
check_all (bool survived)
{
  uint8_t buf[LG_UNIT_SIZE];
  struct lg_dev *rd = cd;
  struct lg_dev *top = vc.top;

  if (survived) {
    char err[256];
    struct lg_header now;

    cr_assert_eq (lg_header_read (&vc.dev, &now, err, sizeof err), 0, "%s",
                  err);
    rd = lg_crypt_open (&vc.dev, false, &now, mk, 8, false, err, sizeof err);
    cr_assert_not_null (rd, "%s", err);
  }

  for (uint64_t u = 0; u < nunits; u++) {
    int64_t v = -1;

    if (lg_dev_pread (rd, buf, sizeof buf, u * LG_UNIT_SIZE) == 0) {
      v = which (u, buf, false);
      if (v < 0 && atomic_load (&violations) == 0)
        explain_read (u, buf);
      if (v < 0)
        violation ("after the cut, reads as none of its versions (floor)", u,
                   (long) units[u].floor);
    }
    else if (torn (vc.sowner, u))
      atomic_fetch_add (&torn_seen, 1);
    else {
      explain (u);
      violation ("after the cut, fails to read (errno)", u, errno);
    }
    units[u].n = 0;
    if (v >= 0)
      units[u].floor = (uint32_t) v;
    else {
      units[u].floor = 0;
      int zr = lg_dev_zero (cd, LG_UNIT_SIZE, u * LG_UNIT_SIZE, 0);
      cr_assert_eq (zr, 0, "zero: %s (%s)", strerror (errno), why);
    }
  }
  if (rd != cd) {
    lg_dev_close (rd);
    vc.top = top;
  }
  /* After a cut the gateway lived through, the first flush says that
   * acknowledged writes may be lost (EIO, once); the next succeeds. */
  if (lg_dev_flush (cd) < 0)
    cr_assert (survived, "flush failed after a fresh open");
  cr_assert_eq (lg_dev_flush (cd), 0);
}

/* A formatted volume (lazy: header only) on a fresh device, no cut
 * scheduled. */
static void
setup (uint32_t mode, bool lazy, unsigned gran, unsigned seed)
{
  char err[256];

  cr_assert_geq (sodium_init (), 0);
  lg_log_set_sink (quiet);
  vc_init (gran, seed);
  memset (&hdr, 0, sizeof hdr);
  cr_assert_eq (lg_header_geometry (&hdr, VOL_SIZE), 0);
  hdr.version = LG_HDR_VERSION;
  hdr.mode = mode;
  hdr.flags = lazy ? LG_HDR_FLAG_LAZY : 0;
  randombytes_buf (hdr.uuid, sizeof hdr.uuid);
  mk = sodium_malloc (LG_KEY_BYTES);
  crypto_kdf_keygen (mk);
  {
    uint8_t kf[LG_KEY_BYTES];

    randombytes_buf (kf, sizeof kf);
    cr_assert_eq (lg_keyslot_set_keyfile (&hdr, 0, mk, kf), 0);
  }
  lg_header_set_mac (&hdr, mk);
  cr_assert_eq (lg_header_write (&vc.dev, &hdr), 0);
  nunits = hdr.nunits;
  data_off = hdr.data_offset;
  cr_assert_eq (data_off % LG_UNIT_SIZE, 0);
  units = calloc (nunits, sizeof *units);
  cr_assert_not_null (units);
  if (!lazy) {
    cd = lg_crypt_open (&vc.dev, false, &hdr, mk, 0, false, err, sizeof err);
    cr_assert_not_null (cd, "%s", err);
    cr_assert_eq (lg_crypt_init_units (cd, 0, nunits, NULL), 0);
    lg_dev_close (cd);
    cd = NULL;
  }
  cr_assert_eq (vc_flush (&vc.dev), 0);
}

/* relogin: half the cuts are lived through by the gateway (the target
 * alone lost power), the others stop it too. */
static void
run (uint32_t mode, bool lazy, unsigned gran, unsigned fail_permille,
     bool relogin)
{
  long iters = getenv ("LG_POWERCUT_ITERS")
      ? strtol (getenv ("LG_POWERCUT_ITERS"), NULL, 10)
      : 60;
  unsigned seed = (unsigned) randombytes_random ();

  setup (mode, lazy, gran, seed);

  for (long it = 0; it < iters && atomic_load (&violations) == 0; it++) {
    pthread_t t[MAXTHREADS];
    struct worker w[MAXTHREADS];
    bool survive = relogin && it % 2 == 1;
    bool survived = cd != NULL;

    if (cd == NULL)
      open_cd ();
    check_all (survived);
    pthread_mutex_lock (&vc.lock);
    vc.fail_permille = fail_permille;
    vc.cut_at = vc.ops + 1 + rnd_locked (&vc, 1500);
    vc.replay = g_replay;
    lenient_after_cut = g_replay;
    pthread_mutex_unlock (&vc.lock);
    for (int i = 0; i < THREADS; i++) {
      w[i].id = i;
      w[i].rnd = seed + (unsigned) (it * THREADS + i);
      pthread_create (&t[i], NULL, work, &w[i]);
    }
    for (int i = 0; i < THREADS; i++)
      pthread_join (t[i], NULL);
    pthread_mutex_lock (&vc.lock);
    vc.replay = false;
    if (!vc.dead)
      cut_locked (&vc);
    vc.fail_permille = 0;
    vc.cut_at = -1;
    pthread_mutex_unlock (&vc.lock);
    if (survive) {
      vc_relogin ();
      continue;
    }
    lg_dev_close (cd);
    cd = NULL;
    pthread_mutex_lock (&vc.lock);
    vc.dead = false;
    pthread_mutex_unlock (&vc.lock);
  }
  fprintf (stderr,
           "powercut %s%s %u B fail %u/1000: %lu cuts, %lu ops, %lu flushes, "
           "%lu FUA writes, %lu torn units seen (seed %u)\n",
           mode == LG_MODE_AEAD ? "aead" : "mac", lazy ? " lazy" : "", gran,
           fail_permille, (unsigned long) vc.cuts,
           (unsigned long) atomic_load (&ops_done), (unsigned long) vc.flushes,
           (unsigned long) vc.fuas, (unsigned long) atomic_load (&torn_seen),
           seed);
  if (cd)
    lg_dev_close (cd);
  cr_assert_eq (atomic_load (&violations), 0, "%s (seed %u, cut %lu)", why,
                seed, (unsigned long) vc.cuts);
  cr_assert_gt (vc.cuts, 0);
  if (gran == LG_UNIT_SIZE)
    cr_assert_eq (atomic_load (&torn_seen), 0);
  sodium_free (mk);
}

TestSuite (powercut, .timeout = 600);

Test (powercut, aead_4k)
{
  run (LG_MODE_AEAD, false, 4096, 0, false);
}
Test (powercut, aead_512)
{
  run (LG_MODE_AEAD, false, 512, 0, false);
}
Test (powercut, mac_4k)
{
  run (LG_MODE_MAC, false, 4096, 0, false);
}
Test (powercut, aead_lazy_4k)
{
  run (LG_MODE_AEAD, true, 4096, 0, false);
}
Test (powercut, mac_lazy_512)
{
  run (LG_MODE_MAC, true, 512, 0, false);
}
Test (powercut, aead_4k_failing_writes)
{
  run (LG_MODE_AEAD, false, 4096, 20, false);
}
Test (powercut, aead_lazy_4k_failing_writes)
{
  run (LG_MODE_AEAD, true, 4096, 20, false);
}
Test (powercut, mac_512_failing_writes)
{
  run (LG_MODE_MAC, false, 512, 20, false);
}
Test (powercut, aead_4k_target_alone)
{
  run (LG_MODE_AEAD, false, 4096, 0, true);
}
Test (powercut, mac_lazy_4k_target_alone_failing_writes)
{
  run (LG_MODE_MAC, true, 4096, 20, true);
}

/* ---- single faults, one at a time ---- */

static int
wr (struct lg_dev *d, uint64_t u, uint32_t ver)
{
  uint8_t buf[LG_UNIT_SIZE];

  fill (buf, u, ver);
  return lg_dev_pwrite (d, buf, sizeof buf, u * LG_UNIT_SIZE, 0);
}

/* -1: read failed; else the version (0..) it matches, 999 for none */
static long
rd_ver (struct lg_dev *d, uint64_t u, uint32_t maxver)
{
  uint8_t buf[LG_UNIT_SIZE], want[LG_UNIT_SIZE];

  if (lg_dev_pread (d, buf, sizeof buf, u * LG_UNIT_SIZE) < 0)
    return -1;
  for (uint32_t v = 0; v <= maxver; v++) {
    fill (want, u, v);
    if (memcmp (want, buf, sizeof buf) == 0)
      return v;
  }
  return 999;
}

static long
fresh_read (uint64_t u, uint32_t maxver)
{
  char err[256];
  struct lg_header now;
  struct lg_dev *d;
  long v;

  cr_assert_eq (lg_header_read (&vc.dev, &now, err, sizeof err), 0, "%s", err);
  d = lg_crypt_open (&vc.dev, false, &now, mk, 8, false, err, sizeof err);
  cr_assert_not_null (d, "%s", err);
  v = rd_ver (d, u, maxver);
  lg_dev_close (d);
  return v;
}

/* The target loses power while the flush after a write's metadata is in
 * flight; the session logs in again and sends the flush again, which
 * succeeds.  The metadata it was to make stable is gone, yet the write
 * goes on to write its data: the unit fails authentication for good. */
Test (powercut, md_lost_across_login)
{
  long v;
  int r;

  setup (LG_MODE_AEAD, false, 4096, 1);
  open_cd ();
  cr_assert_eq (wr (cd, 5, 1), 0);
  cr_assert_eq (lg_dev_flush (cd), 0);
  pthread_mutex_lock (&vc.lock);
  vc.replay = true;
  vc.lose_all = true;
  vc.flush_cut_at = 1; /* the flush of write_md */
  pthread_mutex_unlock (&vc.lock);
  r = wr (cd, 5, 2);
  fprintf (stderr, "md_lost_across_login: write returned %d, %lu cuts\n", r,
           (unsigned long) vc.cuts);
  cr_assert_eq (vc.cuts, 1);
  v = rd_ver (cd, 5, 2);
  fprintf (stderr, "  read through the gateway: %ld\n", v);
  cr_assert_eq (lg_dev_flush (cd), 0);
  v = fresh_read (5, 2);
  fprintf (stderr, "  read by a fresh open: %ld (-1 = EIO)\n", v);
  cr_expect (v == 1 || v == 2,
             "unit 5 reads as %ld (-1 = EIO): neither old nor new", v);
  lg_dev_close (cd);
  cd = NULL;
}

/* A write completes into the target's cache; the target loses power and
 * comes back; the gateway logs in again; the client's flush then succeeds
 * though the acknowledged data is gone. */
Test (powercut, flush_ok_after_loss)
{
  long v;
  int r;

  setup (LG_MODE_AEAD, false, 4096, 1);
  open_cd ();
  cr_assert_eq (wr (cd, 7, 1), 0);
  cr_assert_eq (lg_dev_flush (cd), 0);
  cr_assert_eq (wr (cd, 7, 2), 0); /* data in the cache only */
  pthread_mutex_lock (&vc.lock);
  vc.replay = true;
  vc.lose_all = true;
  vc.flush_cut_at = 1; /* the client's flush */
  pthread_mutex_unlock (&vc.lock);
  r = lg_dev_flush (cd);
  v = rd_ver (cd, 7, 2);
  fprintf (stderr,
           "flush_ok_after_loss: flush returned %d, %lu cuts; unit reads "
           "as version %ld (wrote 2 before the flush)\n",
           r, (unsigned long) vc.cuts, v);
  cr_expect (r != 0 || v == 2,
             "flush succeeded but the unit written before it reads as %ld", v);
  lg_dev_close (cd);
  cd = NULL;
}

/* The model with the target back at once after each cut: the session
 * logs in and resends what it held (as iSCSI does), with many threads and
 * a metadata cache of one or two blocks (evicted all the time, and full
 * of pinned entries). */
static void
variant (int threads, size_t cache, bool replay)
{
  g_threads = threads;
  g_cache = cache;
  g_replay = replay;
}

Test (powercut, aead_4k_replayed_tiny_cache)
{
  variant (8, 1, true);
  run (LG_MODE_AEAD, false, 4096, 0, false);
}
Test (powercut, mac_lazy_4k_replayed_failing_writes)
{
  variant (4, 2, true);
  run (LG_MODE_MAC, true, 4096, 20, false);
}
Test (powercut, aead_lazy_512_replayed_target_alone)
{
  variant (6, 2, true);
  run (LG_MODE_AEAD, true, 512, 20, true);
}

/* The target loses power while the gateway is idle (nothing in flight):
 * the session logs in again with nothing held.  The reattach lifecycle
 * still runs (the pool checks every LUN it serves after every login), so
 * the crypt layer starts a new barrier epoch before anything is sent.
 * Before it did (when a login with nothing held ran no check and the
 * crypt layer only reread the header on its next request), the gateway
 * still "knew" unit 9's newer slot was current, overwrote the slot that
 * authenticates what the disk holds, and when that write's data failed
 * the unit was neither old nor new. */
Test (powercut, idle_reconnect)
{
  long v;

  setup (LG_MODE_AEAD, false, 4096, 1);
  open_cd ();
  cr_assert_eq (wr (cd, 9, 1), 0);
  cr_assert_eq (lg_dev_flush (cd), 0);
  cr_assert_eq (wr (cd, 9, 2), 0); /* data acknowledged, in the cache */
  pthread_mutex_lock (&vc.lock);
  vc.lose_all = true;
  cut_locked (&vc);          /* power cut, nothing in flight */
  replay_login_locked (&vc); /* logged in again; nothing was held */
  vc.fail_off = (int64_t) (data_off + 9 * LG_UNIT_SIZE);
  pthread_mutex_unlock (&vc.lock);
  cr_assert_neq (wr (cd, 9, 3), 0); /* its data write fails */
  v = rd_ver (cd, 9, 3);
  fprintf (stderr,
           "idle_reconnect: after the failed write unit 9 reads %ld "
           "(-1 = EIO; 1 or 3 expected)\n",
           v);
  cr_expect (v == 1 || v == 3, "unit 9 reads as %ld (-1 = EIO)", v);
  lg_dev_close (cd);
  cd = NULL;
}
