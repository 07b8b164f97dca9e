/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The write path, and zero and trim.  Under the write lock of the
 * metadata block: put the new nonce and tag in the slot that does NOT
 * authenticate what is on the LUN now (known from this session, or found
 * by reading and checking the old data), write the metadata block, wait
 * for it, then write the data.  A crash at any point leaves the old data
 * with its old slot, or the new data with its new slot.  Over a volatile
 * write cache two barriers keep that true through a power loss of the
 * target (lungate-format(5), "Target power loss"): the metadata is
 * flushed before the data goes out, and a unit's previous data is
 * flushed before the slot that authenticates it is overwritten. */
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
#include "crypt/owner.h"
#include "util/log.h"

/* Everything written so far is stable on return. */
int
lgc_lower_flush (struct cdev *x)
{
  return x->ordered ? lg_barrier_flush (&x->bar) : lg_dev_flush (x->lower);
}

/* A flush asked for above: as lgc_lower_flush, and EIO (once) when the
 * target logged in again while acknowledged writes were not yet stable,
 * as it may have lost them (a power cut with a volatile cache). */
static int
client_flush (struct cdev *x)
{
  if (lgc_lower_flush (x) < 0)
    return -1;
  if (x->ordered && lg_barrier_lost (&x->bar) && !x->dev.loss_tracked) {
    lg_error ("%s: the target logged in again before writes it had "
              "acknowledged were flushed: they may be lost (a power cut of "
              "a volatile write cache)",
              x->dev.name);
    errno = EIO;
    return -1;
  }
  return 0;
}

/* A write failed between its metadata and its data: from now on the
 * newer slot of a unit is not to be trusted, in this session and (the
 * header stays dirty) the next. */
void
lgc_write_failed (struct cdev *x)
{
  atomic_store (&x->write_failed, true);
  atomic_store (&x->trust_newer, false);
  atomic_store (&x->clean_at_close, false);
}

/* ---- ordering over a volatile cache ---- */

/* Before a write overwrites the other slot of the units of sp: the data
 * their current slot authenticates must be stable, or a power cut could
 * leave that data's older version under two slots that fit neither.  One
 * flush, shared with every writer waiting (barrier.c), and only when some
 * unit was written since the last. */
static int
data_stable (struct cdev *x, const struct span *sp, struct mdent **ents)
{
  uint64_t need = 0;

  for (uint64_t u = sp->u0; u < sp->u1; u++) {
    struct mdent *e = ents[u / LG_UNITS_PER_MD - sp->b0];
    uint64_t g = e ? e->dgen[u % LG_UNITS_PER_MD] : atomic_load (&x->bar.gen);

    if (g > need)
      need = g;
  }
  if (lg_barrier_is_durable (&x->bar, need))
    return 0;
  return lg_barrier_wait (&x->bar, need);
}

/* The data of sp was written (or the write failed, having perhaps landed
 * in part): not stable until the next flush. */
static void
data_written (struct cdev *x, const struct span *sp, struct mdent **ents)
{
  uint64_t g;

  if (!x->ordered)
    return;
  g = lg_barrier_done (&x->bar);
  for (uint64_t u = sp->u0; u < sp->u1; u++) {
    struct mdent *e = ents[u / LG_UNITS_PER_MD - sp->b0];

    if (e)
      e->dgen[u % LG_UNITS_PER_MD] = g;
    else {
      /* Not tracked: whatever entry holds this block next inherits it. */
      pthread_mutex_lock (&x->cache.lock);
      if (g > x->cache.floor)
        x->cache.floor = g;
      pthread_mutex_unlock (&x->cache.lock);
    }
  }
}

/* Writes nb metadata blocks from block b0; over a volatile cache they are
 * stable on return.  A flush shared with the other writers, not FUA:
 * most targets do not say they honour FUA (tgt does not), and lg_dev
 * emulates it with a flush per write. */
int
lgc_write_md (struct cdev *x, const uint8_t *md, uint64_t b0, uint64_t nb)
{
  for (int tries = 0; tries < 5; tries++) {
    uint64_t epoch = lg_barrier_epoch (&x->bar);

    if (lg_dev_pwrite (x->lower, md, nb * LG_MD_BLOCK, md_off (x, b0), 0) < 0)
      return -1;
    if (!x->ordered)
      return 0;
    if (lg_barrier_flush (&x->bar) < 0)
      return -1;
    /* A login since the write (its resent flush succeeds on a target
     * that may have lost the write with its cache): write it again.  The
     * slots it keeps still stand for stable data (data_stable). */
    if (lg_barrier_epoch (&x->bar) == epoch)
      return 0;
  }
  lg_error ("%s: the metadata at %" PRIu64 "+%" PRIu64
            " could not be made stable: the target kept logging in again",
            x->dev.name, md_off (x, b0), nb * LG_MD_BLOCK);
  errno = EIO;
  return -1;
}

/* One write's state across the steps of write_units_locked. */
struct wreq {
  const struct span *sp;
  uint64_t n, nb;
  uint8_t *md;            /* the span's metadata blocks, changed in place */
  uint8_t *old, *scratch; /* the stored data, where it had to be read */
  uint8_t *ct;            /* aead: the ciphertext */
  struct mdent **ents;    /* pinned; NULL where the cache is full */
};

static bool
unit_known (struct cdev *x, const struct wreq *w, uint64_t u)
{
  struct mdent *e = w->ents[u / LG_UNITS_PER_MD - w->sp->b0];

  return e && e->loaded
      && (lgc_known_of (x, e) & (UINT64_C (1) << (u % LG_UNITS_PER_MD)));
}

/* Metadata: from the cache where loaded, else from disk.  Which slot is
 * current, where this session does not know and the volume is dirty:
 * read the old data and see which slot authenticates it (the trap: after
 * an unclean stop the newer slot may be the one that does not).  Both
 * reads go in one batch, after the data the current slots stand for is
 * stable (data_stable). */
static int
wr_load (struct cdev *x, struct wreq *w)
{
  const struct span *sp = w->sp;
  bool need_md = false, need_old = false;
  struct lg_dev_seg segs[2];
  unsigned ns = 0;

  for (uint64_t i = 0; i < w->nb; i++) {
    w->ents[i] = lgc_cache_get (&x->cache, sp->b0 + i);
    need_md |= w->ents[i] == NULL || !w->ents[i]->loaded;
  }
  if (x->ordered && data_stable (x, sp, w->ents) < 0)
    return -1;
  for (uint64_t u = sp->u0;
       u < sp->u1 && !atomic_load (&x->trust_newer) && !need_old; u++)
    need_old = !unit_known (x, w, u);
  if (need_old) {
    w->old = malloc (w->n * LG_UNIT_SIZE);
    w->scratch = malloc (LG_UNIT_SIZE);
    if (w->old == NULL || w->scratch == NULL)
      return -1;
    segs[ns++] = (struct lg_dev_seg){ w->old, w->n * LG_UNIT_SIZE,
                                      data_off (x, sp->u0) };
  }
  if (need_md ? lgc_read_md (x, w->md, sp->b0, w->nb, segs, ns) < 0
              : ns && lg_dev_pread_multi (x->lower, segs, ns) < 0)
    return -1;
  for (uint64_t i = 0; i < w->nb; i++) {
    struct mdent *e = w->ents[i];
    uint8_t *blk = w->md + i * LG_MD_BLOCK;

    if (e && e->loaded)
      memcpy (blk, e->data, LG_MD_BLOCK);
    else if (e) {
      memcpy (e->data, blk, LG_MD_BLOCK);
      e->loaded = true;
      e->known = e->cur = 0;
    }
  }
  return 0;
}

static uint64_t
seq_of (const struct slot *s)
{
  return s->seqflags >> 8;
}

/* The current slot of unit u (the one its new slot must not replace). */
static int
wr_current (struct cdev *x, const struct wreq *w, uint64_t u)
{
  uint64_t i = u / LG_UNITS_PER_MD - w->sp->b0;
  unsigned j = (unsigned) (u % LG_UNITS_PER_MD);
  const uint8_t *blk = w->md + i * LG_MD_BLOCK;
  struct slot s0, s1;
  int cur;

  lgc_slot_get (blk, j, 0, &s0);
  lgc_slot_get (blk, j, 1, &s1);
  if (unit_known (x, w, u))
    return (w->ents[i]->cur >> j) & 1 ? 1 : 0;
  if (lgc_slot_empty (&s0) && lgc_slot_empty (&s1))
    return 1; /* write slot 0 */
  if (w->old == NULL)
    /* A clean volume (the old data was not read): the newer slot is the
     * current one. */
    return seq_of (&s1) > seq_of (&s0) ? 1 : 0;
  cur = lgc_current_slot (x, u, blk, j, w->old + (u - w->sp->u0) * LG_UNIT_SIZE,
                          w->scratch);
  if (cur < 0 && (x->h.flags & LG_HDR_FLAG_LAZY)
      && (lgc_slot_empty (&s0) || lgc_slot_empty (&s1)))
    /* A failed first write on a lazy volume: the empty slot stands for
     * what reads now (zeroes, see lgc_read_units_locked); keep it. */
    return lgc_slot_empty (&s0) ? 0 : 1;
  if (cur < 0)
    /* Neither authenticates (tampered): either slot may go; keep the
     * newer one. */
    return seq_of (&s1) > seq_of (&s0) ? 1 : 0;
  return cur;
}

/* Seals every unit of the span (in; NULL: ZERO slots) into the slot that
 * is not current. */
static void
wr_seal (struct cdev *x, struct wreq *w, const uint8_t *in)
{
  for (uint64_t u = w->sp->u0; u < w->sp->u1; u++) {
    uint64_t k = u - w->sp->u0, i = u / LG_UNITS_PER_MD - w->sp->b0;
    unsigned j = (unsigned) (u % LG_UNITS_PER_MD);
    uint8_t *blk = w->md + i * LG_MD_BLOCK;
    int cur = wr_current (x, w, u);
    struct slot s0, s1, ns;
    uint64_t seq;

    lgc_slot_get (blk, j, 0, &s0);
    lgc_slot_get (blk, j, 1, &s1);
    seq = (seq_of (&s0) > seq_of (&s1) ? seq_of (&s0) : seq_of (&s1)) + 1;
    if (seq > SEQ_MAX)
      seq = 1; /* XXX: 2^56 writes to one unit */
    lgc_seal (x, u, (seq << 8) | (in ? 0 : SLOT_FLAG_ZERO),
              in ? in + k * LG_UNIT_SIZE : NULL,
              w->ct ? w->ct + k * LG_UNIT_SIZE : NULL, &ns);
    lgc_slot_put (blk, j, (unsigned) (1 - cur), &ns);
  }
}

/* The data write failed (it may have landed in part): the units' slots
 * are unknown again. */
static void
wr_forget (struct wreq *w)
{
  for (uint64_t u = w->sp->u0; u < w->sp->u1; u++) {
    struct mdent *e = w->ents[u / LG_UNITS_PER_MD - w->sp->b0];

    if (e)
      e->known &= ~(UINT64_C (1) << (u % LG_UNITS_PER_MD));
  }
}

/* Now the new slots are current (learnt as of epoch: see lgc_learn). */
static void
wr_publish (struct cdev *x, struct wreq *w, uint64_t epoch)
{
  for (uint64_t u = w->sp->u0; u < w->sp->u1; u++) {
    uint64_t i = u / LG_UNITS_PER_MD - w->sp->b0;
    unsigned j = (unsigned) (u % LG_UNITS_PER_MD);
    struct slot s0, s1;

    if (w->ents[i] == NULL)
      continue;
    lgc_slot_get (w->md + i * LG_MD_BLOCK, j, 0, &s0);
    lgc_slot_get (w->md + i * LG_MD_BLOCK, j, 1, &s1);
    lgc_learn (x, w->ents[i], epoch, UINT64_C (1) << j,
               seq_of (&s1) > seq_of (&s0) ? UINT64_C (1) << j : 0);
  }
}

/* 1. the metadata, stable (over a volatile cache), and wait; 2. the
 * data.  ZERO slots hold only over zeroed data (deallocated where the LUN
 * allows): until that succeeds the old slots still stand. */
static int
wr_store (struct cdev *x, struct wreq *w, const uint8_t *in, bool trim)
{
  const struct span *sp = w->sp;
  uint64_t epoch;
  int saved;

  if (lgc_write_md (x, w->md, sp->b0, w->nb) < 0) {
    /* What reached the disk is unknown: forget the cached blocks. */
    saved = errno;
    for (uint64_t i = 0; i < w->nb; i++)
      if (w->ents[i])
        w->ents[i]->loaded = false;
    lgc_write_failed (x);
    errno = saved;
    return -1;
  }
  for (uint64_t i = 0; i < w->nb; i++)
    if (w->ents[i])
      memcpy (w->ents[i]->data, w->md + i * LG_MD_BLOCK, LG_MD_BLOCK);
  epoch = lg_barrier_epoch (&x->bar);
  if (x->ordered)
    lg_barrier_issuing (&x->bar);
  if ((in ? lg_dev_pwrite (x->lower, w->ct ? w->ct : in, w->n * LG_UNIT_SIZE,
                           data_off (x, sp->u0), 0)
          : lg_dev_zero (x->lower, w->n * LG_UNIT_SIZE, data_off (x, sp->u0),
                         trim ? LG_MAY_TRIM : 0))
      < 0) {
    saved = errno;
    data_written (x, sp, w->ents);
    wr_forget (w);
    lgc_write_failed (x);
    errno = saved;
    return -1;
  }
  data_written (x, sp, w->ents);
  wr_publish (x, w, epoch);
  return 0;
}

static void
wr_free (struct cdev *x, struct wreq *w)
{
  if (w->ents)
    for (uint64_t i = 0; i < w->nb; i++)
      lgc_cache_put (&x->cache, w->ents[i]);
  free (w->ents);
  free (w->md);
  if (w->old)
    sodium_memzero (w->old, w->n * LG_UNIT_SIZE);
  free (w->old);
  if (w->scratch)
    sodium_memzero (w->scratch, LG_UNIT_SIZE);
  free (w->scratch);
  free (w->ct);
}

/* Writes whole units [u0, u1) from in (NULL: ZERO units, and the data is
 * trimmed when trim is set).  Stripe write locks held by the caller. */
static int
write_units_locked (struct cdev *x, const struct span *sp, const uint8_t *in,
                    bool trim)
{
  struct wreq w = { .sp = sp };
  int r = -1, saved = ENOMEM;

  w.n = sp->u1 - sp->u0;
  w.nb = sp->b1 - sp->b0 + 1;
  w.md = malloc (w.nb * LG_MD_BLOCK);
  w.ents = calloc (w.nb, sizeof *w.ents);
  if (in && x->h.mode == LG_MODE_AEAD)
    w.ct = malloc (w.n * LG_UNIT_SIZE);
  if (w.md == NULL || w.ents == NULL
      || (in && x->h.mode == LG_MODE_AEAD && w.ct == NULL))
    goto out;
  if (wr_load (x, &w) == 0) {
    wr_seal (x, &w, in);
    r = wr_store (x, &w, in, trim);
  }
  saved = errno;

out:
  wr_free (x, &w);
  if (r < 0)
    errno = saved;
  return r;
}

/* Before every write: the owner record is still ours (crypt/owner.h);
 * before the first write of the session: the header says dirty. */
int
lgc_ensure_dirty (struct cdev *x)
{
  int r = 0;

  if (x->owner && lg_owner_lost (x->owner)) {
    errno = EPERM;
    return -1;
  }

  if (!x->manage_dirty || atomic_load (&x->marked))
    return 0;
  pthread_mutex_lock (&x->dirty_lock);
  if (!atomic_load (&x->marked)) {
    if (!x->was_dirty && lgc_set_dirty (x, true) < 0) {
      lg_error ("%s: cannot mark the volume open for writing: %m", x->dev.name);
      r = -1;
    }
    else
      atomic_store (&x->marked, true);
  }
  pthread_mutex_unlock (&x->dirty_lock);
  return r;
}

int
lgc_pwrite (struct lg_dev *d, const void *buf, size_t count, uint64_t off,
            unsigned flags)
{
  struct cdev *x = to_cdev (d);
  uint64_t u0 = off / LG_UNIT_SIZE;
  uint64_t u1 = (off + count + LG_UNIT_SIZE - 1) / LG_UNIT_SIZE;
  struct span sp;
  uint8_t *tmp = NULL;
  const uint8_t *src = buf;
  int r = -1, saved;

  if (lgc_lower_check (x) < 0 || lgc_ensure_dirty (x) < 0)
    return -1;
  lgc_span_init (&sp, u0, u1);
  lgc_span_lock (x, &sp, true);
  if (off % LG_UNIT_SIZE != 0 || count % LG_UNIT_SIZE != 0) {
    /* Partial units: merge into the old plaintext of the edge units,
     * under the same write locks. */
    size_t n = (size_t) (u1 - u0) * LG_UNIT_SIZE;
    struct span edge;

    tmp = malloc (n);
    if (tmp == NULL)
      goto out;
    /* Only the units covered in part: one covered whole is rewritten,
     * even if what it held no longer authenticates. */
    lgc_span_init (&edge, u0, u0 + 1);
    if ((off % LG_UNIT_SIZE != 0 || (u1 - u0 == 1))
        && lgc_read_units_locked (x, &edge, tmp, NULL, NULL, true, false) != 0)
      goto eio;
    if (u1 - 1 > u0 && (off + count) % LG_UNIT_SIZE != 0) {
      lgc_span_init (&edge, u1 - 1, u1);
      if (lgc_read_units_locked (x, &edge, tmp + n - LG_UNIT_SIZE, NULL, NULL,
                                 true, false)
          != 0)
        goto eio;
    }
    memcpy (tmp + off % LG_UNIT_SIZE, buf, count);
    src = tmp;
  }
  r = write_units_locked (x, &sp, src, false);
  goto out;

eio:
  errno = EIO;
out:
  saved = errno;
  lgc_span_unlock (x, &sp);
  if (tmp) {
    sodium_memzero (tmp, (size_t) (u1 - u0) * LG_UNIT_SIZE);
    free (tmp);
  }
  if (r == 0 && (flags & LG_FUA))
    r = client_flush (x);
  else
    errno = saved;
  return r;
}

int
lgc_flush (struct lg_dev *d)
{
  if (lgc_lower_check (to_cdev (d)) < 0)
    return -1;
  return client_flush (to_cdev (d));
}

/* Zero and trim: whole units get authenticated ZERO slots (and their data
 * trimmed when allowed); partial units are written with zeroes. */
static int
zero_range (struct cdev *x, uint64_t count, uint64_t off, bool trim,
            unsigned flags)
{
  uint64_t first = (off + LG_UNIT_SIZE - 1) / LG_UNIT_SIZE;
  uint64_t end = (off + count) / LG_UNIT_SIZE;
  static const uint8_t zero[LG_UNIT_SIZE];

  if (end <= first) {
    while (count > 0) {
      size_t n = LG_UNIT_SIZE - off % LG_UNIT_SIZE;

      if (n > count)
        n = (size_t) count;
      if (lgc_pwrite (&x->dev, zero, n, off, 0) < 0)
        return -1;
      off += n;
      count -= n;
    }
    return (flags & LG_FUA) ? client_flush (x) : 0;
  }
  if (off < first * LG_UNIT_SIZE
      && zero_range (x, first * LG_UNIT_SIZE - off, off, trim, 0) < 0)
    return -1;
  /* Bounded batches, so one request never pins the whole cache. */
  for (uint64_t u = first; u < end;) {
    uint64_t n = end - u < 1024 ? end - u : 1024;
    struct span sp;
    int r;

    lgc_span_init (&sp, u, u + n);
    lgc_span_lock (x, &sp, true);
    r = write_units_locked (x, &sp, NULL, trim);
    lgc_span_unlock (x, &sp);
    if (r < 0)
      return -1;
    u += n;
  }
  if (off + count > end * LG_UNIT_SIZE
      && zero_range (x, off + count - end * LG_UNIT_SIZE, end * LG_UNIT_SIZE,
                     trim, 0)
          < 0)
    return -1;
  return (flags & LG_FUA) ? client_flush (x) : 0;
}

int
lgc_trim (struct lg_dev *d, uint64_t count, uint64_t off, unsigned flags)
{
  if (lgc_lower_check (to_cdev (d)) < 0 || lgc_ensure_dirty (to_cdev (d)) < 0)
    return -1;
  return zero_range (to_cdev (d), count, off, true, flags);
}

int
lgc_zero (struct lg_dev *d, uint64_t count, uint64_t off, unsigned flags)
{
  /* The stored bytes under a ZERO slot are zeroed too: fast only where
   * the LUN deallocates them (the lower device's WRITE SAME with UNMAP). */
  if ((flags & LG_FAST_ZERO) && (!d->can_fast_zero || !(flags & LG_MAY_TRIM))) {
    errno = ENOTSUP;
    return -1;
  }
  if (lgc_lower_check (to_cdev (d)) < 0 || lgc_ensure_dirty (to_cdev (d)) < 0)
    return -1;
  return zero_range (to_cdev (d), count, off, (flags & LG_MAY_TRIM) != 0,
                     flags);
}
