/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The read path: metadata (from the cache, else with the data in one
 * batch) and data, each unit opened under whichever slot authenticates
 * it; what is learnt goes back to the cache.  Also the scrub and repair
 * of lungate verify.  Stripe locks held shared (exclusive to repair). */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <sodium.h>

#include "crypt/crypt-int.h"
#include "util/log.h"

#define REPORTED_MS 10000 /* the same failure within this: said already */

static int64_t
mono_ms (void)
{
  struct timespec ts;

  clock_gettime (CLOCK_MONOTONIC, &ts);
  return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Units [u0, u0 + n) lie within (overlap: meet) a failure reported
 * lately; with note, if not, they are noted as reported now. */
static bool
reported (struct cdev *x, uint64_t u0, uint64_t n, bool note, bool overlap)
{
  int64_t now = mono_ms ();
  bool seen = false;
  const unsigned nbad = sizeof x->bad / sizeof x->bad[0];

  pthread_mutex_lock (&x->bad_lock);
  for (unsigned i = 0; i < nbad && !seen; i++) {
    uint64_t b0 = x->bad[i].u0, b1 = b0 + x->bad[i].n;

    seen = x->bad[i].n && now - x->bad[i].ms < REPORTED_MS
        && (overlap ? u0 < b1 && b0 < u0 + n : u0 >= b0 && u0 + n <= b1);
  }
  if (!seen && note) {
    x->bad[x->bad_next].u0 = u0;
    x->bad[x->bad_next].n = n;
    x->bad[x->bad_next].ms = now;
    x->bad_next = (x->bad_next + 1) % nbad;
  }
  pthread_mutex_unlock (&x->bad_lock);
  return seen;
}

static void
log_bad (struct cdev *x, uint64_t u0, uint64_t n)
{
  uint64_t sectors = LG_UNIT_SIZE / 512;
  const char *why;
  bool again;

  /* Say what is known: a fault is the likely cause where the volume was
   * left dirty or a write failed, tampering only where it was clean. */
  if (x->manage_dirty && !x->was_dirty && !atomic_load (&x->write_failed))
    why = "tampered with, or the wrong volume";
  else if (x->manage_dirty)
    why = "the gateway stopped uncleanly or a write failed; run lungate "
          "verify --repair";
  else if (!x->was_dirty)
    why = "tampered with, or the wrong volume (it was marked clean when "
          "opened; a writer that opened it since could also explain it)";
  else
    why = "a crash or failed write (the volume is marked dirty), or "
          "tampering; run lungate verify --repair";
  atomic_fetch_add (&x->auth_failures, n);
  again = reported (x, u0, n, true, false);
  lg_log (again ? LG_LOG_DEBUG : LG_LOG_ERROR,
          "%s: units %" PRIu64 "-%" PRIu64 " (exported bytes %" PRIu64
          "-%" PRIu64 ", 512-byte LBA %" PRIu64 "+%" PRIu64
          ") fail authentication under both slots: %s",
          x->dev.name, u0, u0 + n - 1, u0 * LG_UNIT_SIZE,
          (u0 + n) * LG_UNIT_SIZE - 1, u0 * sectors, n * sectors, why);
}

/* The metadata of a span for a reader (stripe locks held shared): pins
 * the cache entries (ents[], NULL where the cache is full) and copies the
 * blocks from the cache when all are there (returns true).  Otherwise the
 * caller reads them from disk and calls fill_md_cache. */
static bool
md_from_cache (struct cdev *x, const struct span *sp, uint8_t *md,
               struct mdent **ents, bool use_cache)
{
  uint64_t nb = sp->b1 - sp->b0 + 1;
  bool all = use_cache;

  for (uint64_t i = 0; i < nb; i++) {
    ents[i] = use_cache ? lgc_cache_get (&x->cache, sp->b0 + i) : NULL;
    all &= ents[i] != NULL && ents[i]->loaded;
  }
  if (!all)
    return false;
  for (uint64_t i = 0; i < nb; i++)
    memcpy (md + i * LG_MD_BLOCK, ents[i]->data, LG_MD_BLOCK);
  return true;
}

/* Entries are filled under the cache mutex: two readers may race to fill
 * one, with the same bytes; writers are excluded by the stripe locks. */
static void
fill_md_cache (struct cdev *x, const struct span *sp, const uint8_t *md,
               struct mdent **ents)
{
  uint64_t nb = sp->b1 - sp->b0 + 1;

  pthread_mutex_lock (&x->cache.lock);
  for (uint64_t i = 0; i < nb; i++)
    if (ents[i] && !ents[i]->loaded) {
      memcpy (ents[i]->data, md + i * LG_MD_BLOCK, LG_MD_BLOCK);
      ents[i]->known = ents[i]->cur = 0;
      ents[i]->loaded = true;
    }
  pthread_mutex_unlock (&x->cache.lock);
}

/* One read's state across the steps of lgc_read_units_locked. */
struct rreq {
  const struct span *sp;
  uint64_t n, nb;
  uint8_t *md;             /* the span's metadata blocks */
  uint8_t *ct;             /* what is stored (out itself in mac mode) */
  struct mdent **ents;     /* pinned; NULL where uncached */
  uint64_t *lknown, *lcur; /* learnt, per block, published at the end */
  bool changed;            /* repair: md changed, to be written */
};

#define MD_READS 6
int
lgc_read_md (struct cdev *x, uint8_t *md, uint64_t b0, uint64_t nb,
             const struct lg_dev_seg *segs, unsigned n)
{
  size_t len = nb * LG_MD_BLOCK;
  uint8_t *a = malloc (len), *b = malloc (len);
  struct lg_dev_seg all[4];
  int ret = -1;

  if (a == NULL || b == NULL || n > 2)
    goto out;
  all[0] = (struct lg_dev_seg){ md, len, md_off (x, b0) };
  all[1] = (struct lg_dev_seg){ a, len, md_off (x, b0) };
  for (unsigned i = 0; i < n; i++)
    all[2 + i] = segs[i];
  if (lg_dev_pread_multi (x->lower, all, 2 + n) < 0)
    goto out;
  /* md and a are the last two reads; b the next. */
  for (int reads = 2; memcmp (md, a, len) != 0; reads++) {
    if (reads == 2)
      lg_warn ("%s: metadata blocks %" PRIu64 "-%" PRIu64 " read twice "
               "differently (the link changed a bit?): reading them again",
               x->dev.name, b0, b0 + nb - 1);
    if (reads == MD_READS) {
      lg_error ("%s: metadata blocks %" PRIu64 "-%" PRIu64 " read "
                "differently %d times in a row: not used",
                x->dev.name, b0, b0 + nb - 1, MD_READS);
      errno = EIO;
      goto out;
    }
    if (lg_dev_pread (x->lower, b, len, md_off (x, b0)) < 0)
      goto out;
    if (memcmp (b, a, len) == 0)
      memcpy (md, b, len);
    else
      memcpy (md, a, len), memcpy (a, b, len);
  }
  ret = 0;
out:
  free (a);
  free (b);
  return ret;
}

/* Metadata from the cache when all of it is there, else with the data in
 * one batch: one round trip, not two. */
static int
rd_load (struct cdev *x, struct rreq *r, bool use_cache)
{
  const struct span *sp = r->sp;

  if (md_from_cache (x, sp, r->md, r->ents, use_cache))
    return lg_dev_pread (x->lower, r->ct, r->n * LG_UNIT_SIZE,
                         data_off (x, sp->u0));
  {
    struct lg_dev_seg data
        = { r->ct, r->n * LG_UNIT_SIZE, data_off (x, sp->u0) };

    if (lgc_read_md (x, r->md, sp->b0, r->nb, &data, 1) < 0)
      return -1;
  }
  fill_md_cache (x, sp, r->md, r->ents);
  return 0;
}

static void
blank_slot (struct rreq *r, uint8_t *blk, unsigned j, unsigned k)
{
  memset (blk + j * 2 * LG_SLOT_BYTES + k * LG_SLOT_BYTES, 0, LG_SLOT_BYTES);
  r->changed = true;
}

/* Repair of a unit whose slot cur authenticates it: a newer slot that
 * does not was left by a crash; clear it, so that the newer slot is
 * current again. */
static void
repair_stale (struct rreq *r, uint8_t *blk, unsigned j, int cur)
{
  struct slot sc, so;

  lgc_slot_get (blk, j, (unsigned) cur, &sc);
  lgc_slot_get (blk, j, (unsigned) (1 - cur), &so);
  if (!lgc_slot_empty (&so) && (so.seqflags >> 8) >= (sc.seqflags >> 8))
    blank_slot (r, blk, j, (unsigned) (1 - cur));
}

/* Unit u into o: true if it reads (authentic, or never written). */
static bool
rd_unit (struct cdev *x, struct rreq *r, uint64_t u, uint8_t *o, bool repair)
{
  uint64_t i = u / LG_UNITS_PER_MD - r->sp->b0;
  uint8_t *blk = r->md + i * LG_MD_BLOCK;
  unsigned j = (unsigned) (u % LG_UNITS_PER_MD);
  int cur;

  if (lgc_both_empty (blk, j)) {
    /* Never written: zeroes on a lazy volume; on a normal one format
     * sealed every unit, so empty metadata was wiped. */
    memset (o, 0, LG_UNIT_SIZE);
    return (x->h.flags & LG_HDR_FLAG_LAZY) != 0;
  }
  cur = lgc_current_slot (x, u, blk, j, r->ct + (u - r->sp->u0) * LG_UNIT_SIZE,
                          o);
  if (cur < 0 && lgc_first_write_failed (x, blk, j)) {
    /* The first write of a never-written unit failed after its metadata
     * (or crashed there): its old content, zeroes, stands.  (Blanking
     * the slot already read as zeroes: nothing is given away.)  A repair
     * blanks the failed slot: never written again. */
    struct slot s0;

    memset (o, 0, LG_UNIT_SIZE);
    lgc_slot_get (blk, j, 0, &s0);
    if (repair)
      blank_slot (r, blk, j, lgc_slot_empty (&s0) ? 1 : 0);
    return true;
  }
  if (cur < 0)
    return false;
  if (repair)
    repair_stale (r, blk, j, cur);
  if (r->ents[i]) {
    /* Learnt: the next write to this unit need not read it.  Noted here,
     * published under the cache mutex once per request. */
    r->lknown[i] |= UINT64_C (1) << j;
    if (cur)
      r->lcur[i] |= UINT64_C (1) << j;
  }
  return true;
}

/* The repaired metadata goes out (write locks held), and what was learnt
 * goes to the cache. */
static int
rd_finish (struct cdev *x, struct rreq *r, bool use_cache, uint64_t epoch)
{
  if (r->changed) {
    if (lgc_write_md (x, r->md, r->sp->b0, r->nb) < 0)
      return -1;
    /* The cached copies are stale now. */
    pthread_mutex_lock (&x->cache.lock);
    for (uint64_t i = 0; i < r->nb; i++)
      if (r->ents[i])
        r->ents[i]->loaded = false;
    pthread_mutex_unlock (&x->cache.lock);
  }
  if (use_cache) {
    pthread_mutex_lock (&x->cache.lock);
    for (uint64_t i = 0; i < r->nb; i++)
      if (r->ents[i] && r->lknown[i])
        lgc_learn (x, r->ents[i], epoch, r->lknown[i], r->lcur[i]);
    pthread_mutex_unlock (&x->cache.lock);
  }
  return 0;
}

/* Reads and authenticates whole units [u0, u1) into out (stripe locks
 * held by the caller).  Units that fail are zeroed and counted; returns
 * the number of bad units, or -1 on I/O error.  A scrub (use_cache false)
 * reads the metadata from disk, not from what this session remembers. */
static int64_t read_pass (struct cdev *x, const struct span *sp, uint8_t *out,
                          void (*bad) (void *, uint64_t, uint64_t),
                          void *opaque, bool use_cache, bool repair,
                          bool quiet);

/* The span's metadata blocks are dropped from the cache: one of them may
 * hold what a bit flipped on the wire made of it, and a write must not
 * put that back on the LUN. */
static void
forget_span (struct cdev *x, const struct span *sp)
{
  for (uint64_t b = sp->b0; b <= sp->b1; b++) {
    struct mdent *e = lgc_cache_get (&x->cache, b);

    if (e == NULL)
      continue;
    pthread_mutex_lock (&x->cache.lock);
    e->loaded = false;
    pthread_mutex_unlock (&x->cache.lock);
    lgc_cache_put (&x->cache, e);
  }
}

int64_t
lgc_read_units_locked (struct cdev *x, const struct span *sp, uint8_t *out,
                       void (*bad) (void *, uint64_t, uint64_t), void *opaque,
                       bool use_cache, bool repair)
{
  int64_t n;

  /* A unit that fails authentication is read again from the target,
   * metadata and data, before anything is concluded: plain TCP has no
   * data digest, and one flipped bit is no proof of tampering.  A repair
   * writes nothing on the strength of the first read. */
  if (repair) {
    n = read_pass (x, sp, out, NULL, NULL, false, false, true);
    if (n < 0)
      return n;
  }
  else {
    n = read_pass (x, sp, out, bad, opaque, use_cache, false, true);
    if (n <= 0)
      return n;
  }
  if (n > 0) {
    /* A span that holds a unit reported a moment ago: the kernel
     * reading it again.  (A unit beside it that fails once and then
     * reads well is then only in the debug log, and in .stats.) */
    lg_log (reported (x, sp->u0, sp->u1 - sp->u0, false, true) ? LG_LOG_DEBUG
                                                               : LG_LOG_WARN,
            "%s: %" PRId64 " unit%s of units %" PRIu64 "-%" PRIu64
            " failed authentication: reading them again from the target",
            x->dev.name, n, n == 1 ? "" : "s", sp->u0, sp->u1 - 1);
    forget_span (x, sp);
  }
  return read_pass (x, sp, out, bad, opaque, false, repair, false);
}

static int64_t
read_pass (struct cdev *x, const struct span *sp, uint8_t *out,
           void (*bad) (void *, uint64_t, uint64_t), void *opaque,
           bool use_cache, bool repair, bool quiet)
{
  struct rreq r = { .sp = sp };
  uint64_t epoch = lg_barrier_epoch (&x->bar);
  uint64_t run = 0, run_start = 0;
  int64_t nbad = -1;

  r.n = sp->u1 - sp->u0;
  r.nb = sp->b1 - sp->b0 + 1;
  r.md = malloc (r.nb * LG_MD_BLOCK);
  r.ct = x->h.mode == LG_MODE_AEAD ? malloc (r.n * LG_UNIT_SIZE) : out;
  r.ents = calloc (r.nb, sizeof *r.ents);
  r.lknown = calloc (r.nb, sizeof *r.lknown);
  r.lcur = calloc (r.nb, sizeof *r.lcur);
  if (r.md == NULL || r.ct == NULL || r.ents == NULL || r.lknown == NULL
      || r.lcur == NULL || rd_load (x, &r, use_cache) < 0)
    goto out;
  nbad = 0;
  for (uint64_t u = sp->u0; u < sp->u1; u++) {
    uint8_t *o = out + (u - sp->u0) * LG_UNIT_SIZE;
    bool ok = rd_unit (x, &r, u, o, repair);

    if (!ok) {
      memset (o, 0, LG_UNIT_SIZE);
      nbad++;
      if (run++ == 0)
        run_start = u;
    }
    if (run && (ok || u + 1 == sp->u1)) {
      if (!quiet) {
        log_bad (x, run_start, run);
        if (bad)
          bad (opaque, run_start, run);
      }
      run = 0;
    }
  }
  if (rd_finish (x, &r, use_cache, epoch) < 0)
    nbad = -1;

out:
  free (r.lknown);
  free (r.lcur);
  if (r.ents)
    for (uint64_t i = 0; i < r.nb; i++)
      lgc_cache_put (&x->cache, r.ents[i]);
  free (r.ents);
  free (r.md);
  if (r.ct != out)
    free (r.ct);
  return nbad;
}

/* What the cache holds is what is on the LUN only where nobody else
 * writes it: this process holds the LUN (claimed), or nothing below can
 * be claimed (the filter over another plugin).  A reader beside another
 * gateway (nbdkit -r, mount -o ro) reads the metadata with the data
 * every time: a cached slot the writer has replaced since would open
 * its new data wrongly (as a first write that failed: zeroes). */
static bool
trust_cache (const struct cdev *x)
{
  return x->dev.claimed || x->lower->claimed || x->lower->ops->claim == NULL;
}

static int
cdev_read_units (struct cdev *x, uint8_t *out, uint64_t u0, uint64_t u1)
{
  struct span sp;
  int64_t r;

  lgc_span_init (&sp, u0, u1);
  lgc_span_lock (x, &sp, false);
  r = lgc_read_units_locked (x, &sp, out, NULL, NULL, trust_cache (x), false);
  lgc_span_unlock (x, &sp);
  if (r != 0) {
    errno = EIO;
    return -1;
  }
  return 0;
}

int
lgc_pread (struct lg_dev *d, void *buf, size_t count, uint64_t off)
{
  struct cdev *x = to_cdev (d);
  uint64_t u0 = off / LG_UNIT_SIZE;
  uint64_t u1 = (off + count + LG_UNIT_SIZE - 1) / LG_UNIT_SIZE;
  uint8_t *tmp;
  int r;

  if (lgc_lower_check (x) < 0)
    return -1;
  if (off % LG_UNIT_SIZE == 0 && count % LG_UNIT_SIZE == 0)
    return cdev_read_units (x, buf, u0, u1);
  tmp = malloc ((u1 - u0) * LG_UNIT_SIZE);
  if (tmp == NULL)
    return -1;
  r = cdev_read_units (x, tmp, u0, u1);
  if (r == 0)
    memcpy (buf, tmp + off % LG_UNIT_SIZE, count);
  sodium_memzero (tmp, (u1 - u0) * LG_UNIT_SIZE);
  free (tmp);
  return r;
}
