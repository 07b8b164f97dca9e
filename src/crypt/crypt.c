/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The crypt layer's block device.
 *
 * Unit i (4096 bytes) lives at data_offset + i * 4096 on the lower device;
 * its two metadata slots live in metadata block i / 42, at (i % 42) * 96.
 * A slot is nonce (24) | tag (16) | u64le seq << 8 | flags; the tag binds
 * the volume UUID, the unit index and the slot's seq and flags.
 *
 * Writes: under the write lock of the metadata block, put the new nonce
 * and tag in the slot that does NOT authenticate what is on disk now
 * (known from this session, or found by reading and checking the old
 * data), write the metadata block, wait for it, then write the data.  A
 * crash at any point leaves the old data with its old slot, or the new
 * data with its new slot.  Reads accept whichever slot authenticates.
 *
 * Threads: any number.  Each metadata block is guarded by a striped
 * rwlock (readers shared, writers exclusive); a request locks its stripes
 * in ascending order.  The metadata cache has its own mutex, taken only
 * briefly and never while waiting for I/O; its entries are pinned while a
 * request uses them and only changed under the block's write lock.
 * Lock order: stripe locks (ascending), then the cache mutex.
 */
#include <config.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sodium.h>

#include "crypt/barrier.h"
#include "crypt/crypt.h"
#include "util/log.h"

#define STRIPES 256
#define DEFAULT_CACHE 4096 /* 16 MiB: the metadata of 688 MiB of data */
#define SLOT_FLAG_ZERO 0x1
#define SEQ_MAX ((UINT64_C (1) << 56) - 1)

struct mdent {
  uint64_t block;
  int next; /* hash chain */
  unsigned pins;
  bool used, loaded, ref;
  uint64_t known;  /* bit j: unit j's current slot is known */
  uint64_t cur;    /* bit j: ... and it is slot 1 */
  uint64_t kepoch; /* the lower device's logins when known was learnt */
  /* Over a volatile cache: the barrier generation of the last write of
   * unit j's data, which must be stable before its other slot is
   * overwritten. */
  uint64_t dgen[LG_UNITS_PER_MD];
  uint8_t data[LG_MD_BLOCK];
};

struct mdcache {
  pthread_mutex_t lock;
  size_t n, hand;
  uint64_t floor; /* the newest dgen of an entry reused for another block */
  int *buckets;   /* n * 2 */
  struct mdent *e;
};

struct cdev {
  struct lg_dev dev;
  struct lg_dev *lower;
  bool owns_lower;
  struct lg_header h;
  uint8_t *key;       /* data subkey, sodium memory */
  uint8_t prefix[16]; /* random per open: nonce = prefix | counter */
  atomic_uint_fast64_t counter;
  atomic_uint_fast64_t auth_failures;
  pthread_rwlock_t stripe[STRIPES];
  struct mdcache cache;

  /* The lower device has a volatile cache (ordered): metadata is flushed
   * before its data goes out, and a unit's data is stable before the
   * slot that authenticates the data before it is overwritten. */
  bool ordered;
  struct lg_barrier bar;

  /* The dirty flag (see lg_crypt_open).  trust_newer: a unit's newer slot
   * is current unless this session knows otherwise; cleared for good by
   * any failed write.  clean_at_close: mark the header clean on close. */
  bool manage_dirty, was_dirty;
  atomic_bool trust_newer, write_failed, clean_at_close;
  /* The header is marked dirty before the first write, not at open: an
   * open that never writes (nbdkit -r) leaves the LUN as it was. */
  pthread_mutex_t dirty_lock;
  atomic_bool marked;
  uint8_t *mk; /* sodium memory, for the header MAC */

  /* After the lower device logged in again, its header is read before the
   * next request (lower_check): another volume on the same LUN number
   * (another UUID or geometry) and every request fails with ESHUTDOWN. */
  pthread_mutex_t recheck;
  atomic_uint_fast64_t lower_logins; /* when last checked */
  atomic_bool replaced;
};

static struct cdev *
to_cdev (struct lg_dev *d)
{
  return (struct cdev *) d;
}

/* ---- slots and tags ---- */

struct slot {
  uint8_t nonce[24];
  uint8_t tag[16];
  uint64_t seqflags;
};

static void
slot_get (const uint8_t *md, unsigned j, unsigned k, struct slot *s)
{
  const uint8_t *p = md + j * 2 * LG_SLOT_BYTES + k * LG_SLOT_BYTES;

  memcpy (s->nonce, p, 24);
  memcpy (s->tag, p + 24, 16);
  s->seqflags = 0;
  for (int i = 7; i >= 0; i--)
    s->seqflags = (s->seqflags << 8) | p[40 + i];
}

static void
slot_put (uint8_t *md, unsigned j, unsigned k, const struct slot *s)
{
  uint8_t *p = md + j * 2 * LG_SLOT_BYTES + k * LG_SLOT_BYTES;

  memcpy (p, s->nonce, 24);
  memcpy (p + 24, s->tag, 16);
  for (int i = 0; i < 8; i++)
    p[40 + i] = (uint8_t) (s->seqflags >> (8 * i));
}

static bool
slot_empty (const struct slot *s)
{
  static const uint8_t zero[24];

  return s->seqflags == 0 && sodium_memcmp (s->nonce, zero, 24) == 0
      && sodium_memcmp (s->tag, zero, 16) == 0;
}

static void
make_ad (const struct cdev *x, uint64_t unit, uint64_t seqflags, uint8_t ad[32])
{
  memcpy (ad, x->h.uuid, 16);
  for (int i = 0; i < 8; i++) {
    ad[16 + i] = (uint8_t) (unit >> (8 * i));
    ad[24 + i] = (uint8_t) (seqflags >> (8 * i));
  }
}

static void
new_nonce (struct cdev *x, uint8_t nonce[24])
{
  uint64_t c = atomic_fetch_add (&x->counter, 1);

  memcpy (nonce, x->prefix, 16);
  for (int i = 0; i < 8; i++)
    nonce[16 + i] = (uint8_t) (c >> (8 * i));
}

/* MAC mode: Poly1305 with a one-time key from XChaCha20(nonce), over the
 * additional data and the data (len may be 0 for a ZERO slot). */
static void
mac_tag (const struct cdev *x, const uint8_t nonce[24], const uint8_t ad[32],
         const uint8_t *data, size_t len, uint8_t tag[16])
{
  crypto_onetimeauth_poly1305_state st;
  uint8_t otk[32];

  crypto_stream_xchacha20 (otk, sizeof otk, nonce, x->key);
  crypto_onetimeauth_poly1305_init (&st, otk);
  crypto_onetimeauth_poly1305_update (&st, ad, 32);
  if (len)
    crypto_onetimeauth_poly1305_update (&st, data, len);
  crypto_onetimeauth_poly1305_final (&st, tag);
  sodium_memzero (otk, sizeof otk);
  sodium_memzero (&st, sizeof st);
}

/* Seals one unit: fills s (nonce, tag, seqflags) and, in aead mode, out
 * with the ciphertext of in.  in == NULL seals a ZERO slot. */
static void
seal (struct cdev *x, uint64_t unit, uint64_t seqflags, const uint8_t *in,
      uint8_t *out, struct slot *s)
{
  uint8_t ad[32], dummy[1] = { 0 };
  unsigned long long tl;

  s->seqflags = seqflags;
  new_nonce (x, s->nonce);
  make_ad (x, unit, seqflags, ad);
  if (x->h.mode == LG_MODE_AEAD)
    /* A ZERO slot seals the empty message (libsodium wants non-NULL
     * buffers even for zero bytes). */
    crypto_aead_xchacha20poly1305_ietf_encrypt_detached (
        in ? out : dummy, s->tag, &tl, in ? in : dummy, in ? LG_UNIT_SIZE : 0,
        ad, sizeof ad, NULL, s->nonce, x->key);
  else
    mac_tag (x, s->nonce, ad, in, in ? LG_UNIT_SIZE : 0, s->tag);
}

/* Checks one slot against the stored unit: 1 authentic data (plaintext
 * in out: decrypted in aead mode, copied in mac mode), 2 authentic ZERO
 * (out zeroed), 0 not authentic (out unspecified). */
static int
open_slot (const struct cdev *x, uint64_t unit, const struct slot *s,
           const uint8_t *stored, uint8_t *out)
{
  uint8_t ad[32], tag[16], dummy[1] = { 0 };

  if (slot_empty (s))
    return 0;
  make_ad (x, unit, s->seqflags, ad);
  if (s->seqflags & SLOT_FLAG_ZERO) {
    /* A ZERO slot stands for a unit whose stored bytes are zeroes: were
     * it valid whatever the data, flipping a bit of a unit written after
     * it would silently read back zeroes. */
    if (stored == NULL || !sodium_is_zero (stored, LG_UNIT_SIZE))
      return 0;
    if (x->h.mode == LG_MODE_AEAD) {
      if (crypto_aead_xchacha20poly1305_ietf_decrypt_detached (
              NULL, NULL, dummy, 0, s->tag, ad, sizeof ad, s->nonce, x->key)
          != 0)
        return 0;
    }
    else {
      mac_tag (x, s->nonce, ad, NULL, 0, tag);
      if (crypto_verify_16 (tag, s->tag) != 0)
        return 0;
    }
    if (out)
      memset (out, 0, LG_UNIT_SIZE);
    return 2;
  }
  if (x->h.mode == LG_MODE_AEAD)
    return crypto_aead_xchacha20poly1305_ietf_decrypt_detached (
               out, NULL, stored, LG_UNIT_SIZE, s->tag, ad, sizeof ad, s->nonce,
               x->key)
        == 0;
  mac_tag (x, s->nonce, ad, stored, LG_UNIT_SIZE, tag);
  if (crypto_verify_16 (tag, s->tag) != 0)
    return 0;
  if (out && out != stored)
    memcpy (out, stored, LG_UNIT_SIZE);
  return 1;
}

/* Which slot authenticates unit (data in stored): 0 or 1, -1 if none.
 * The newer slot is tried first.  out receives the plaintext. */
static int
current_slot (const struct cdev *x, uint64_t unit, const uint8_t *md,
              unsigned j, const uint8_t *stored, uint8_t *out)
{
  struct slot s[2];
  int first;

  slot_get (md, j, 0, &s[0]);
  slot_get (md, j, 1, &s[1]);
  first = (s[1].seqflags >> 8) > (s[0].seqflags >> 8) ? 1 : 0;
  if (open_slot (x, unit, &s[first], stored, out))
    return first;
  if (open_slot (x, unit, &s[1 - first], stored, out))
    return 1 - first;
  return -1;
}

/* Either slot of unit j empty. */
static bool
any_empty (const uint8_t *md, unsigned j)
{
  struct slot s0, s1;

  slot_get (md, j, 0, &s0);
  slot_get (md, j, 1, &s1);
  return slot_empty (&s0) || slot_empty (&s1);
}

/* On a lazy volume, a unit with one slot that does not authenticate and
 * one empty slot is a never-written unit whose first write failed or
 * crashed between its metadata and its data, but only where that can have
 * happened: the volume was left dirty, or a write failed in this session.
 * On a clean volume it is damage, and fails. */
static bool
first_write_failed (const struct cdev *x, const uint8_t *md, unsigned j)
{
  return (x->h.flags & LG_HDR_FLAG_LAZY) && any_empty (md, j)
      && (x->was_dirty || atomic_load (&x->write_failed));
}

static bool
both_empty (const uint8_t *md, unsigned j)
{
  struct slot s0, s1;

  slot_get (md, j, 0, &s0);
  slot_get (md, j, 1, &s1);
  return slot_empty (&s0) && slot_empty (&s1);
}

/* ---- metadata cache ---- */

static int
cache_init (struct mdcache *c, size_t n)
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

static void
cache_destroy (struct mdcache *c)
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
static struct mdent *
cache_get (struct mdcache *c, uint64_t b)
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
  e->pins++;
  e->ref = true;
  pthread_mutex_unlock (&c->lock);
  return e;
}

static void
cache_put (struct mdcache *c, struct mdent *e)
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
static uint64_t
known_of (struct cdev *x, const struct mdent *e)
{
  return e->kepoch == lg_barrier_epoch (&x->bar) ? e->known : 0;
}

/* Notes that the units in bits have slot 1 current where cur says so, as
 * learnt from I/O that began in epoch (nothing, if a login came since).
 * Under the block's write lock, or the cache mutex for a reader. */
static void
learn (struct cdev *x, struct mdent *e, uint64_t epoch, uint64_t bits,
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

/* ---- locking a request's metadata blocks ---- */

struct span {
  uint64_t u0, u1; /* units [u0, u1) */
  uint64_t b0, b1; /* metadata blocks [b0, b1] */
  uint8_t stripes[STRIPES / 8];
};

static void
span_init (struct span *sp, uint64_t u0, uint64_t u1)
{
  sp->u0 = u0;
  sp->u1 = u1;
  sp->b0 = u0 / LG_UNITS_PER_MD;
  sp->b1 = (u1 - 1) / LG_UNITS_PER_MD;
  memset (sp->stripes, 0, sizeof sp->stripes);
  for (uint64_t b = sp->b0; b <= sp->b1 && b < sp->b0 + STRIPES; b++)
    sp->stripes[(b % STRIPES) / 8] |= (uint8_t) (1u << (b % 8));
}

static void
span_lock (struct cdev *x, const struct span *sp, bool write)
{
  for (unsigned i = 0; i < STRIPES; i++)
    if (sp->stripes[i / 8] & (1u << (i % 8))) {
      if (write)
        pthread_rwlock_wrlock (&x->stripe[i]);
      else
        pthread_rwlock_rdlock (&x->stripe[i]);
    }
}

static void
span_unlock (struct cdev *x, const struct span *sp)
{
  for (unsigned i = STRIPES; i-- > 0;)
    if (sp->stripes[i / 8] & (1u << (i % 8)))
      pthread_rwlock_unlock (&x->stripe[i]);
}

static uint64_t
md_off (const struct cdev *x, uint64_t b)
{
  return x->h.md_offset + b * LG_MD_BLOCK;
}

static uint64_t
data_off (const struct cdev *x, uint64_t u)
{
  return x->h.data_offset + u * LG_UNIT_SIZE;
}

/* ---- the device ---- */

static int write_md (struct cdev *x, const uint8_t *md, uint64_t b0,
                     uint64_t nb);

/* Everything written so far is stable on return. */
static int
lower_flush (struct cdev *x)
{
  return x->ordered ? lg_barrier_flush (&x->bar) : lg_dev_flush (x->lower);
}

static void
log_bad (struct cdev *x, uint64_t u0, uint64_t n)
{
  uint64_t sectors = LG_UNIT_SIZE / 512;

  const char *why;

  /* Say what is known: a fault is the likely cause where the volume was
   * left dirty or a write failed, tampering only where it was clean. */
  if (x->manage_dirty && !x->was_dirty && !atomic_load (&x->write_failed))
    why = "tampered with, or the wrong volume";
  else if (x->manage_dirty)
    why = "the gateway stopped uncleanly or a write failed; run lungate "
          "verify --repair";
  else
    why = "a crash or failed write (the dirty flag is not kept here), or "
          "tampering; run lungate verify";
  atomic_fetch_add (&x->auth_failures, n);
  lg_error ("%s: units %" PRIu64 "-%" PRIu64 " (exported bytes %" PRIu64
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
    ents[i] = use_cache ? cache_get (&x->cache, sp->b0 + i) : NULL;
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

/* Reads and authenticates whole units [u0, u1) into out (stripe locks
 * held by the caller).  Units that fail are zeroed and counted; returns
 * the number of bad units, or -1 on I/O error.  A scrub (use_cache false)
 * reads the metadata from disk, not from what this session remembers. */
static int64_t
read_units_locked (struct cdev *x, const struct span *sp, uint8_t *out,
                   void (*bad) (void *, uint64_t, uint64_t), void *opaque,
                   bool use_cache, bool repair)
{
  bool changed = false;
  uint64_t n = sp->u1 - sp->u0;
  uint64_t nb = sp->b1 - sp->b0 + 1;
  uint8_t *md = malloc (nb * LG_MD_BLOCK);
  uint8_t *ct = x->h.mode == LG_MODE_AEAD ? malloc (n * LG_UNIT_SIZE) : out;
  struct mdent **ents = calloc (nb, sizeof *ents);
  uint64_t *lknown = NULL, *lcur = NULL;
  int64_t nbad = 0;
  uint64_t run = 0, run_start = 0;
  uint64_t epoch = lg_barrier_epoch (&x->bar);

  lknown = calloc (nb, sizeof *lknown);
  lcur = calloc (nb, sizeof *lcur);
  if (md == NULL || ct == NULL || ents == NULL || lknown == NULL
      || lcur == NULL)
    goto err;
  if (md_from_cache (x, sp, md, ents, use_cache)) {
    if (lg_dev_pread (x->lower, ct, n * LG_UNIT_SIZE, data_off (x, sp->u0)) < 0)
      goto err;
  }
  else {
    /* Metadata and data in one batch: one round trip, not two. */
    struct lg_dev_seg segs[2] = {
      { md, nb * LG_MD_BLOCK, md_off (x, sp->b0) },
      { ct, n * LG_UNIT_SIZE, data_off (x, sp->u0) },
    };

    if (lg_dev_pread_multi (x->lower, segs, 2) < 0)
      goto err;
    fill_md_cache (x, sp, md, ents);
  }
  for (uint64_t u = sp->u0; u < sp->u1; u++) {
    uint64_t k = u - sp->u0;
    const uint8_t *blk = md + (u / LG_UNITS_PER_MD - sp->b0) * LG_MD_BLOCK;
    unsigned j = (unsigned) (u % LG_UNITS_PER_MD);
    uint8_t *o = out + k * LG_UNIT_SIZE;
    bool ok;

    if (both_empty (blk, j))
      /* Never written: zeroes on a lazy volume; on a normal one format
       * sealed every unit, so empty metadata was wiped. */
      ok = (x->h.flags & LG_HDR_FLAG_LAZY) != 0
          && (memset (o, 0, LG_UNIT_SIZE), true);
    else {
      int cur = current_slot (x, u, blk, j, ct + k * LG_UNIT_SIZE, o);
      struct mdent *e = ents[u / LG_UNITS_PER_MD - sp->b0];

      ok = cur >= 0;
      if (!ok && first_write_failed (x, blk, j)) {
        /* The first write of a never-written unit failed after its
         * metadata (or crashed there): its old content, zeroes, stands.
         * (Blanking the slot already read as zeroes: nothing is given
         * away.)  A repair blanks the failed slot: never written again. */
        memset (o, 0, LG_UNIT_SIZE);
        ok = true;
        e = NULL;
        if (repair) {
          struct slot s0;

          slot_get (blk, j, 0, &s0);
          memset ((uint8_t *) blk + j * 2 * LG_SLOT_BYTES
                      + (slot_empty (&s0) ? LG_SLOT_BYTES : 0),
                  0, LG_SLOT_BYTES);
          changed = true;
        }
      }
      if (ok && repair && cur >= 0) {
        /* A newer slot that does not authenticate the data was left by a
         * crash: clear it, so that the newer slot is current again. */
        struct slot sc, so;

        slot_get (blk, j, (unsigned) cur, &sc);
        slot_get (blk, j, (unsigned) (1 - cur), &so);
        if (!slot_empty (&so) && (so.seqflags >> 8) >= (sc.seqflags >> 8)) {
          memset ((uint8_t *) blk + j * 2 * LG_SLOT_BYTES
                      + (1 - cur) * LG_SLOT_BYTES,
                  0, LG_SLOT_BYTES);
          changed = true;
        }
      }
      if (ok && e) {
        /* Learnt: the next write to this unit need not read it.  Noted
         * here, published under the cache mutex once per request. */
        uint64_t i = u / LG_UNITS_PER_MD - sp->b0;

        lknown[i] |= UINT64_C (1) << j;
        if (cur)
          lcur[i] |= UINT64_C (1) << j;
      }
    }
    if (!ok) {
      memset (o, 0, LG_UNIT_SIZE);
      nbad++;
      if (run == 0)
        run_start = u;
      run++;
    }
    if (run && (ok || u + 1 == sp->u1)) {
      log_bad (x, run_start, run);
      if (bad)
        bad (opaque, run_start, run);
      run = 0;
    }
  }
  if (changed) {
    /* Write locks held (repair): the cached copies are stale now. */
    if (write_md (x, md, sp->b0, nb) < 0)
      goto err;
    pthread_mutex_lock (&x->cache.lock);
    for (uint64_t i = 0; i < nb; i++)
      if (ents[i])
        ents[i]->loaded = false;
    pthread_mutex_unlock (&x->cache.lock);
  }
  if (use_cache) {
    pthread_mutex_lock (&x->cache.lock);
    for (uint64_t i = 0; i < nb; i++)
      if (ents[i] && lknown[i])
        learn (x, ents[i], epoch, lknown[i], lcur[i]);
    pthread_mutex_unlock (&x->cache.lock);
  }
  goto done;

err:
  nbad = -1;
done:
  free (lknown);
  free (lcur);
  if (ents)
    for (uint64_t i = 0; i < nb; i++)
      cache_put (&x->cache, ents[i]);
  free (ents);
  free (md);
  if (ct != out)
    free (ct);
  return nbad;
}

static int
cdev_read_units (struct cdev *x, uint8_t *out, uint64_t u0, uint64_t u1)
{
  struct span sp;
  int64_t r;

  span_init (&sp, u0, u1);
  span_lock (x, &sp, false);
  r = read_units_locked (x, &sp, out, NULL, NULL, true, false);
  span_unlock (x, &sp);
  if (r != 0) {
    errno = EIO;
    return -1;
  }
  return 0;
}

/* A write failed between its metadata and its data: from now on the
 * newer slot of a unit is not to be trusted, in this session and (the
 * header stays dirty) the next. */
static void
write_failed (struct cdev *x)
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
static int
write_md (struct cdev *x, const uint8_t *md, uint64_t b0, uint64_t nb)
{
  if (lg_dev_pwrite (x->lower, md, nb * LG_MD_BLOCK, md_off (x, b0), 0) < 0)
    return -1;
  return x->ordered ? lg_barrier_flush (&x->bar) : 0;
}

/* Writes whole units [u0, u1) from in (NULL: ZERO units, and the data is
 * trimmed when trim is set).  Stripe write locks held by the caller. */
static int
write_units_locked (struct cdev *x, const struct span *sp, const uint8_t *in,
                    bool trim)
{
  uint64_t n = sp->u1 - sp->u0;
  uint64_t nb = sp->b1 - sp->b0 + 1;
  uint8_t *md = malloc (nb * LG_MD_BLOCK);
  uint8_t *old = NULL, *scratch = NULL;
  uint8_t *ct = NULL;
  struct mdent **ents = calloc (nb, sizeof *ents);
  int r = -1, saved = EIO;
  uint64_t epoch;

  if (md == NULL || ents == NULL)
    goto out;
  /* Metadata: from the cache where loaded, else from disk.  Which slot is
   * current, where this session does not know and the volume is dirty:
   * read the old data and see which slot authenticates it (the trap:
   * after an unclean stop the newer slot may be the one that does not).
   * Both reads go in one batch. */
  {
    bool need_md = false, need_old = false;
    struct lg_dev_seg segs[2];
    unsigned ns = 0;

    for (uint64_t i = 0; i < nb; i++) {
      ents[i] = cache_get (&x->cache, sp->b0 + i);
      need_md |= ents[i] == NULL || !ents[i]->loaded;
    }
    if (x->ordered && data_stable (x, sp, ents) < 0)
      goto out_errno;
    for (uint64_t u = sp->u0;
         u < sp->u1 && !atomic_load (&x->trust_newer) && !need_old; u++) {
      uint64_t i = u / LG_UNITS_PER_MD - sp->b0;
      unsigned j = (unsigned) (u % LG_UNITS_PER_MD);

      need_old = ents[i] == NULL || !ents[i]->loaded
          || !(known_of (x, ents[i]) & (UINT64_C (1) << j));
    }
    if (need_md)
      segs[ns++]
          = (struct lg_dev_seg){ md, nb * LG_MD_BLOCK, md_off (x, sp->b0) };
    if (need_old) {
      old = malloc (n * LG_UNIT_SIZE);
      scratch = malloc (LG_UNIT_SIZE);
      if (old == NULL || scratch == NULL)
        goto out;
      segs[ns++]
          = (struct lg_dev_seg){ old, n * LG_UNIT_SIZE, data_off (x, sp->u0) };
    }
    if (ns && lg_dev_pread_multi (x->lower, segs, ns) < 0)
      goto out_errno;
    for (uint64_t i = 0; i < nb; i++) {
      uint8_t *blk = md + i * LG_MD_BLOCK;

      if (ents[i] && ents[i]->loaded)
        memcpy (blk, ents[i]->data, LG_MD_BLOCK);
      else if (ents[i]) {
        memcpy (ents[i]->data, blk, LG_MD_BLOCK);
        ents[i]->loaded = true;
        ents[i]->known = ents[i]->cur = 0;
      }
    }
  }
  if (in && x->h.mode == LG_MODE_AEAD) {
    ct = malloc (n * LG_UNIT_SIZE);
    if (ct == NULL)
      goto out;
  }

  for (uint64_t u = sp->u0; u < sp->u1; u++) {
    uint64_t k = u - sp->u0, i = u / LG_UNITS_PER_MD - sp->b0;
    unsigned j = (unsigned) (u % LG_UNITS_PER_MD);
    uint8_t *blk = md + i * LG_MD_BLOCK;
    struct slot s0, s1, ns;
    uint64_t seq;
    int cur;

    slot_get (blk, j, 0, &s0);
    slot_get (blk, j, 1, &s1);
    if (ents[i] && (known_of (x, ents[i]) & (UINT64_C (1) << j)))
      cur = (ents[i]->cur >> j) & 1 ? 1 : 0;
    else if (slot_empty (&s0) && slot_empty (&s1))
      cur = 1; /* write slot 0 */
    else if (old == NULL)
      /* A clean volume (the old data was not read): the newer slot is the
       * current one. */
      cur = (s1.seqflags >> 8) > (s0.seqflags >> 8) ? 1 : 0;
    else {
      cur = current_slot (x, u, blk, j, old + k * LG_UNIT_SIZE, scratch);
      if (cur < 0 && (x->h.flags & LG_HDR_FLAG_LAZY)
          && (slot_empty (&s0) || slot_empty (&s1)))
        /* A failed first write on a lazy volume: the empty slot stands
         * for what reads now (zeroes, see read_units_locked); keep it. */
        cur = slot_empty (&s0) ? 0 : 1;
      else if (cur < 0)
        /* Neither authenticates (tampered): either slot may go; keep the
         * newer one. */
        cur = (s1.seqflags >> 8) > (s0.seqflags >> 8) ? 1 : 0;
    }
    seq = ((s0.seqflags >> 8) > (s1.seqflags >> 8) ? (s0.seqflags >> 8)
                                                   : (s1.seqflags >> 8))
        + 1;
    if (seq > SEQ_MAX)
      seq = 1; /* XXX: 2^56 writes to one unit */
    seal (x, u, (seq << 8) | (in ? 0 : SLOT_FLAG_ZERO),
          in ? in + k * LG_UNIT_SIZE : NULL, ct ? ct + k * LG_UNIT_SIZE : NULL,
          &ns);
    slot_put (blk, j, (unsigned) (1 - cur), &ns);
  }

  /* 1. the metadata, stable (over a volatile cache), and wait; 2. the
   * data. */
  if (write_md (x, md, sp->b0, nb) < 0) {
    /* What reached the disk is unknown: forget the cached blocks. */
    for (uint64_t i = 0; i < nb; i++)
      if (ents[i])
        ents[i]->loaded = false;
    write_failed (x);
    goto out_errno;
  }
  for (uint64_t i = 0; i < nb; i++)
    if (ents[i])
      memcpy (ents[i]->data, md + i * LG_MD_BLOCK, LG_MD_BLOCK);
  epoch = lg_barrier_epoch (&x->bar);
  /* ZERO slots hold only over zeroed data (deallocated where the LUN
   * allows): until this succeeds the old slots still stand. */
  if ((in ? lg_dev_pwrite (x->lower, ct ? ct : in, n * LG_UNIT_SIZE,
                           data_off (x, sp->u0), 0)
          : lg_dev_zero (x->lower, n * LG_UNIT_SIZE, data_off (x, sp->u0),
                         trim ? LG_MAY_TRIM : 0))
      < 0) {
    saved = errno;
    data_written (x, sp, ents);
    for (uint64_t u = sp->u0; u < sp->u1; u++) {
      uint64_t i = u / LG_UNITS_PER_MD - sp->b0;

      if (ents[i])
        ents[i]->known &= ~(UINT64_C (1) << (u % LG_UNITS_PER_MD));
    }
    write_failed (x);
    errno = saved;
    goto out_errno;
  }
  data_written (x, sp, ents);
  /* Now the new slots are current. */
  for (uint64_t u = sp->u0; u < sp->u1; u++) {
    uint64_t i = u / LG_UNITS_PER_MD - sp->b0;
    unsigned j = (unsigned) (u % LG_UNITS_PER_MD);
    struct slot s0, s1;

    if (ents[i] == NULL)
      continue;
    slot_get (md + i * LG_MD_BLOCK, j, 0, &s0);
    slot_get (md + i * LG_MD_BLOCK, j, 1, &s1);
    learn (x, ents[i], epoch, UINT64_C (1) << j,
           (s1.seqflags >> 8) > (s0.seqflags >> 8) ? UINT64_C (1) << j : 0);
  }
  r = 0;
  goto out;

out_errno:
  saved = errno;
out:
  if (ents)
    for (uint64_t i = 0; i < nb; i++)
      cache_put (&x->cache, ents[i]);
  free (ents);
  free (md);
  if (old)
    sodium_memzero (old, n * LG_UNIT_SIZE);
  free (old);
  if (scratch)
    sodium_memzero (scratch, LG_UNIT_SIZE);
  free (scratch);
  free (ct);
  if (r < 0)
    errno = saved;
  return r;
}

/* ---- is the lower device still this volume? ---- */

static void
uuid_text (const uint8_t uuid[static LG_UUID_BYTES], char out[static 33])
{
  for (int i = 0; i < LG_UUID_BYTES; i++)
    snprintf (out + 2 * i, 3, "%02x", uuid[i]);
}

/* Reads both header copies from the lower device, without repairing
 * either (this may not be our volume: nothing is written), and says
 * whether they are this volume's: every valid copy with the same UUID,
 * mode and geometry, and at least one valid.  1 yes, 0 no (what was found
 * in why), -1 on a failed read. */
static int
header_is_ours_via (struct cdev *x, struct lg_dev_reader *rd, char *why,
                    size_t len)
{
  static const uint64_t off[2] = { LG_HDR_COPY0_OFFSET, LG_HDR_COPY1_OFFSET };
  uint8_t *buf = malloc (LG_HDR_SIZE);
  struct lg_header h;
  char a[33], b[33];
  int r = -1, valid = 0, foreign = 0;

  if (buf == NULL)
    return -1;
  uuid_text (x->h.uuid, a);
  snprintf (why, len, "header UUID %s -> no valid lungate header", a);
  for (int c = 0; c < 2; c++) {
    if ((rd ? rd->pread (rd, buf, LG_HDR_SIZE, off[c])
            : lg_dev_pread (x->lower, buf, LG_HDR_SIZE, off[c]))
        < 0)
      goto out;
    if (lg_header_parse (buf, x->lower->size, &h, NULL, 0) < 0)
      continue;
    valid++;
    if (sodium_memcmp (h.uuid, x->h.uuid, LG_UUID_BYTES) != 0) {
      if (!foreign++) {
        uuid_text (h.uuid, b);
        snprintf (why, len, "header UUID %s -> %s", a, b);
      }
    }
    else if (h.mode != x->h.mode || h.unit_size != x->h.unit_size
             || h.md_offset != x->h.md_offset || h.md_size != x->h.md_size
             || h.data_offset != x->h.data_offset || h.nunits != x->h.nunits) {
      if (!foreign++)
        snprintf (why, len, "header UUID %s, but another mode or geometry", a);
    }
  }
  r = valid > 0 && foreign == 0;

out:
  sodium_memzero (&h, sizeof h);
  free (buf);
  return r;
}

static int
header_is_ours (struct cdev *x, char *why, size_t len)
{
  return header_is_ours_via (x, NULL, why, len);
}

/* lg_dev_login_check_fn: a session under us logged in again and holds
 * writes for this LUN; they go only if it still holds this volume. */
static int
login_check (void *opaque, struct lg_dev_reader *r)
{
  struct cdev *x = opaque;
  char why[160];
  int ours;

  if (x->ordered) {
    /* The target may have lost power: what this session knows of the
     * current slots may name data its cache lost.  As after a failed
     * write, each first write to a unit reads it again, and the volume
     * stays dirty. */
    lg_barrier_login (&x->bar);
    write_failed (x);
  }
  ours = header_is_ours_via (x, r, why, sizeof why);

  if (ours < 0)
    return -2;
  if (ours == 0) {
    if (!atomic_exchange (&x->replaced, true))
      lg_error ("%s: the LUN holds another volume since the outage (%s): "
                "refusing every request, and nothing held for it is sent",
                x->dev.name, why);
    atomic_store (&x->clean_at_close, false);
    return -1;
  }
  return 0;
}

/* Before each request: when the lower device logged in again since the
 * header was last checked, check it again (under recheck, so that one
 * request reads it while the others wait).  ESHUTDOWN from then on when
 * the LUN now holds another volume: its units would fail authentication,
 * and worse, our writes would land on it. */
static int
lower_check (struct cdev *x)
{
  struct lg_dev_transport t = { 0 };
  int r = 0;

  lg_dev_transport (x->lower, &t);
  if (!atomic_load (&x->replaced)
      && t.reconnects == atomic_load (&x->lower_logins))
    return 0;
  pthread_mutex_lock (&x->recheck);
  lg_dev_transport (x->lower, &t);
  if (!atomic_load (&x->replaced)
      && t.reconnects != atomic_load (&x->lower_logins)) {
    char why[160];
    int ours = header_is_ours (x, why, sizeof why);

    if (ours < 0 && errno == ESHUTDOWN) {
      /* The lower device refuses every request from now on, and said
       * why. */
      atomic_store (&x->clean_at_close, false);
      atomic_store (&x->replaced, true);
    }
    else if (ours < 0) {
      int saved = errno;

      pthread_mutex_unlock (&x->recheck);
      lg_error ("%s: reading the header again after a reconnection: %m",
                x->dev.name);
      errno = saved ? saved : EIO;
      return -1;
    }
    if (ours == 0) {
      lg_error ("%s: the LUN holds another volume since the outage (%s): "
                "refusing every request",
                x->dev.name, why);
      atomic_store (&x->clean_at_close, false);
      atomic_store (&x->replaced, true);
    }
    else
      atomic_store (&x->lower_logins, t.reconnects);
  }
  pthread_mutex_unlock (&x->recheck);
  if (atomic_load (&x->replaced)) {
    errno = ESHUTDOWN;
    r = -1;
  }
  return r;
}

static int
cdev_pread (struct lg_dev *d, void *buf, size_t count, uint64_t off)
{
  struct cdev *x = to_cdev (d);
  uint64_t u0 = off / LG_UNIT_SIZE;
  uint64_t u1 = (off + count + LG_UNIT_SIZE - 1) / LG_UNIT_SIZE;
  uint8_t *tmp;
  int r;

  if (lower_check (x) < 0)
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

static int set_dirty (struct cdev *x, bool dirty);

/* Before the first write of the session: the header says dirty. */
static int
ensure_dirty (struct cdev *x)
{
  int r = 0;

  if (!x->manage_dirty || atomic_load (&x->marked))
    return 0;
  pthread_mutex_lock (&x->dirty_lock);
  if (!atomic_load (&x->marked)) {
    if (!x->was_dirty && set_dirty (x, true) < 0) {
      lg_error ("%s: cannot mark the volume open for writing: %m", x->dev.name);
      r = -1;
    }
    else
      atomic_store (&x->marked, true);
  }
  pthread_mutex_unlock (&x->dirty_lock);
  return r;
}

static int
cdev_pwrite (struct lg_dev *d, const void *buf, size_t count, uint64_t off,
             unsigned flags)
{
  struct cdev *x = to_cdev (d);
  uint64_t u0 = off / LG_UNIT_SIZE;
  uint64_t u1 = (off + count + LG_UNIT_SIZE - 1) / LG_UNIT_SIZE;
  struct span sp;
  uint8_t *tmp = NULL;
  const uint8_t *src = buf;
  int r = -1, saved;

  if (lower_check (x) < 0 || ensure_dirty (x) < 0)
    return -1;
  span_init (&sp, u0, u1);
  span_lock (x, &sp, true);
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
    span_init (&edge, u0, u0 + 1);
    if ((off % LG_UNIT_SIZE != 0 || (u1 - u0 == 1))
        && read_units_locked (x, &edge, tmp, NULL, NULL, true, false) != 0)
      goto eio;
    if (u1 - 1 > u0 && (off + count) % LG_UNIT_SIZE != 0) {
      span_init (&edge, u1 - 1, u1);
      if (read_units_locked (x, &edge, tmp + n - LG_UNIT_SIZE, NULL, NULL, true,
                             false)
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
  span_unlock (x, &sp);
  if (tmp) {
    sodium_memzero (tmp, (size_t) (u1 - u0) * LG_UNIT_SIZE);
    free (tmp);
  }
  if (r == 0 && (flags & LG_FUA))
    r = lower_flush (x);
  else
    errno = saved;
  return r;
}

static int
cdev_flush (struct lg_dev *d)
{
  if (lower_check (to_cdev (d)) < 0)
    return -1;
  return lower_flush (to_cdev (d));
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
      if (cdev_pwrite (&x->dev, zero, n, off, 0) < 0)
        return -1;
      off += n;
      count -= n;
    }
    return (flags & LG_FUA) ? lower_flush (x) : 0;
  }
  if (off < first * LG_UNIT_SIZE
      && zero_range (x, first * LG_UNIT_SIZE - off, off, trim, 0) < 0)
    return -1;
  /* Bounded batches, so one request never pins the whole cache. */
  for (uint64_t u = first; u < end;) {
    uint64_t n = end - u < 1024 ? end - u : 1024;
    struct span sp;
    int r;

    span_init (&sp, u, u + n);
    span_lock (x, &sp, true);
    r = write_units_locked (x, &sp, NULL, trim);
    span_unlock (x, &sp);
    if (r < 0)
      return -1;
    u += n;
  }
  if (off + count > end * LG_UNIT_SIZE
      && zero_range (x, off + count - end * LG_UNIT_SIZE, end * LG_UNIT_SIZE,
                     trim, 0)
          < 0)
    return -1;
  return (flags & LG_FUA) ? lower_flush (x) : 0;
}

static int
cdev_trim (struct lg_dev *d, uint64_t count, uint64_t off, unsigned flags)
{
  if (lower_check (to_cdev (d)) < 0 || ensure_dirty (to_cdev (d)) < 0)
    return -1;
  return zero_range (to_cdev (d), count, off, true, flags);
}

static int
cdev_zero (struct lg_dev *d, uint64_t count, uint64_t off, unsigned flags)
{
  if (flags & LG_FAST_ZERO) {
    /* A metadata write per 42 units is fast; the data is left alone. */
  }
  if (lower_check (to_cdev (d)) < 0 || ensure_dirty (to_cdev (d)) < 0)
    return -1;
  return zero_range (to_cdev (d), count, off, (flags & LG_MAY_TRIM) != 0,
                     flags);
}

struct dirty_change {
  struct cdev *x;
  bool dirty;
};

/* lg_header_change_fn: the flag set or cleared on the newest copy that
 * authenticates under our key (`lungate key add' may have changed the key
 * slots while the volume was open: writing back the copy taken at open
 * would drop them), or on the header of the open when none does.  Never
 * over another volume's header. */
static int
change_dirty (const struct lg_header *copies, unsigned n, struct lg_header *out,
              void *opaque)
{
  struct dirty_change *c = opaque;
  struct cdev *x = c->x;
  unsigned i = 0;

  if (sodium_memcmp (copies[0].uuid, x->h.uuid, sizeof x->h.uuid) != 0) {
    errno = ESHUTDOWN;
    return -1;
  }
  while (i < n && lg_header_check_mac (&copies[i], x->mk) != 0)
    i++;
  *out = i < n ? copies[i] : x->h;
  if (((out->flags & LG_HDR_FLAG_DIRTY) != 0) == c->dirty)
    return 1;
  if (c->dirty)
    out->flags |= LG_HDR_FLAG_DIRTY;
  else
    out->flags &= ~(uint32_t) LG_HDR_FLAG_DIRTY;
  lg_header_set_mac (out, x->mk);
  return 0;
}

/* Marks the header clean or dirty on disk, serialised against every
 * other header update on the LUN (hdrupdate.c). */
static int
set_dirty (struct cdev *x, bool dirty)
{
  struct dirty_change c = { x, dirty };
  struct lg_header now;
  char err[256];

  if (lg_header_update (x->lower, change_dirty, &c, &now, err, sizeof err)
      < 0) {
    int saved = errno;

    if (saved != ESHUTDOWN)
      lg_error ("%s: updating the header: %s", x->dev.name, err);
    errno = saved;
    return -1;
  }
  x->h = now;
  sodium_memzero (&now, sizeof now);
  return 0;
}

/* Every write of the session completed: make them durable, then say so in
 * the header (when this session marked it dirty, or found it dirty and
 * repaired it). */
static void
mark_clean (struct cdev *x)
{
  if (!x->manage_dirty || !atomic_load (&x->clean_at_close)
      || !(atomic_load (&x->marked) || x->was_dirty)
      || atomic_load (&x->write_failed) || atomic_load (&x->replaced))
    return;
  /* The lower device may have logged in again onto another volume since
   * the last request: check before writing the header. */
  if (lower_check (x) < 0)
    return;
  if (lower_flush (x) < 0 || set_dirty (x, false) < 0)
    lg_warn ("%s: could not mark the volume clean (%m): the next open "
             "checks before each first write",
             x->dev.name);
  else {
    atomic_store (&x->marked, false);
    x->was_dirty = false;
  }
}

void
lg_crypt_quiesce (struct lg_dev *d)
{
  struct cdev *x = to_cdev (d);

  pthread_mutex_lock (&x->dirty_lock);
  mark_clean (x);
  pthread_mutex_unlock (&x->dirty_lock);
}

void
lg_crypt_keep_dirty (struct lg_dev *d)
{
  atomic_store (&to_cdev (d)->clean_at_close, false);
}

static void
cdev_close (struct lg_dev *d)
{
  struct cdev *x = to_cdev (d);

  lg_dev_watch_login (x->lower, NULL, NULL);
  mark_clean (x);
  if (x->mk)
    sodium_free (x->mk);
  if (x->owns_lower)
    lg_dev_close (x->lower);
  for (int i = 0; i < STRIPES; i++)
    pthread_rwlock_destroy (&x->stripe[i]);
  cache_destroy (&x->cache);
  lg_barrier_destroy (&x->bar);
  pthread_mutex_destroy (&x->recheck);
  pthread_mutex_destroy (&x->dirty_lock);
  sodium_free (x->key);
  sodium_memzero (x->prefix, sizeof x->prefix);
  sodium_free (x);
}

static uint64_t
cdev_auth_failures (const struct lg_dev *d)
{
  return atomic_load (&((const struct cdev *) d)->auth_failures);
}

static int
cdev_revalidate (struct lg_dev *d)
{
  if (lg_dev_revalidate (to_cdev (d)->lower) < 0)
    return -1;
  return lower_check (to_cdev (d));
}

static void
cdev_transport (const struct lg_dev *d, struct lg_dev_transport *t)
{
  lg_dev_transport (((const struct cdev *) d)->lower, t);
}

static const struct lg_dev_ops cdev_ops = {
  .name = "crypt",
  .pread = cdev_pread,
  .pwrite = cdev_pwrite,
  .flush = cdev_flush,
  .trim = cdev_trim,
  .zero = cdev_zero,
  .extents = NULL,
  .close = cdev_close,
  .auth_failures = cdev_auth_failures,
  .transport = cdev_transport,
  .revalidate = cdev_revalidate,
};

struct lg_dev *
lg_crypt_open (struct lg_dev *lower, bool owns_lower, const struct lg_header *h,
               const uint8_t *mk, size_t md_cache_blocks, bool manage_dirty,
               char *err, size_t errlen)
{
  struct cdev *x;

  if (lower->block_size > LG_UNIT_SIZE
      || LG_UNIT_SIZE % lower->block_size != 0) {
    snprintf (err, errlen, "%s: block size %u does not divide the unit size",
              lower->name, lower->block_size);
    errno = ENOTSUP;
    return NULL;
  }
  /* sodium_malloc: the struct holds nothing secret itself, but the
   * cache holds metadata and the key pointer; keep it all off core dumps. */
  x = sodium_malloc (sizeof *x);
  if (x == NULL) {
    snprintf (err, errlen, "out of memory");
    return NULL;
  }
  memset (x, 0, sizeof *x);
  x->key = sodium_malloc (32);
  if (x->key == NULL
      || cache_init (&x->cache,
                     md_cache_blocks ? md_cache_blocks : DEFAULT_CACHE)
          < 0) {
    snprintf (err, errlen, "out of memory");
    sodium_free (x->key);
    sodium_free (x);
    errno = ENOMEM;
    return NULL;
  }
  x->lower = lower;
  x->owns_lower = owns_lower;
  /* LUNGATE_BENCH_NO_BARRIERS: contrib/bench/barriers measures what the
   * barriers cost against the unordered writes of before; never for use. */
  x->ordered
      = lower->volatile_cache && getenv ("LUNGATE_BENCH_NO_BARRIERS") == NULL;
  lg_barrier_init (&x->bar, lower);
  x->h = *h;
  lg_derive_subkey (x->key, mk, LG_SUBKEY_DATA);
  randombytes_buf (x->prefix, sizeof x->prefix);
  atomic_init (&x->counter, 0);
  atomic_init (&x->auth_failures, 0);
  for (int i = 0; i < STRIPES; i++)
    pthread_rwlock_init (&x->stripe[i], NULL);
  pthread_mutex_init (&x->recheck, NULL);
  pthread_mutex_init (&x->dirty_lock, NULL);
  atomic_init (&x->marked, false);
  {
    struct lg_dev_transport t = { 0 };

    lg_dev_transport (lower, &t);
    atomic_init (&x->lower_logins, t.reconnects);
  }
  atomic_init (&x->replaced, false);
  /* Devices without sessions say ENOTSUP: nothing is held there. */
  lg_dev_watch_login (lower, login_check, x);

  snprintf (x->dev.name, sizeof x->dev.name, "%s", lower->name);
  x->dev.ops = &cdev_ops;
  x->dev.size = h->nunits * LG_UNIT_SIZE;
  x->dev.block_size = LG_UNIT_SIZE;
  x->dev.pref_block_size = LG_UNIT_SIZE;
  x->dev.max_io = lower->max_io > LG_UNIT_SIZE
      ? lower->max_io / LG_UNIT_SIZE * LG_UNIT_SIZE
      : LG_UNIT_SIZE;
  x->dev.read_only = lower->read_only;
  x->dev.can_trim = true;
  x->dev.can_zero = true;
  x->dev.can_extents = false;
  x->dev.can_fua = true;

  x->manage_dirty = manage_dirty && !lower->read_only;
  x->was_dirty = (h->flags & LG_HDR_FLAG_DIRTY) != 0;
  atomic_init (&x->write_failed, false);
  atomic_init (&x->trust_newer, x->manage_dirty && !x->was_dirty);
  atomic_init (&x->clean_at_close, x->manage_dirty && !x->was_dirty);
  if (x->manage_dirty) {
    x->mk = sodium_malloc (LG_KEY_BYTES);
    if (x->mk == NULL) {
      snprintf (err, errlen, "out of memory");
      goto fail;
    }
    memcpy (x->mk, mk, LG_KEY_BYTES);
    if (x->was_dirty)
      lg_info ("%s: the volume was not closed cleanly: each first write to "
               "a unit checks which slot is current (lungate verify "
               "--repair makes it clean again)",
               lower->name);
  }
  return &x->dev;

fail:
  x->manage_dirty = false;
  x->owns_lower = false;
  cdev_close (&x->dev);
  errno = EIO;
  return NULL;
}

bool
lg_crypt_was_dirty (const struct lg_dev *d)
{
  return ((const struct cdev *) d)->was_dirty;
}

uint64_t
lg_crypt_auth_failures (const struct lg_dev *d)
{
  return atomic_load (&((struct cdev *) d)->auth_failures);
}

int
lg_crypt_init_units (struct lg_dev *d, uint64_t first, uint64_t n,
                     void (*progress) (uint64_t done, uint64_t total))
{
  struct cdev *x = to_cdev (d);
  /* Whole metadata blocks at a time, written without reading: format
   * owns the volume. */
  uint64_t batch = LG_UNITS_PER_MD * 256;
  uint8_t *md = malloc (256 * LG_MD_BLOCK);
  uint64_t end = first + n;

  if (md == NULL)
    return -1;
  if (first % LG_UNITS_PER_MD != 0) {
    free (md);
    errno = EINVAL;
    return -1;
  }
  for (uint64_t u = first; u < end; u += batch) {
    uint64_t cnt = end - u < batch ? end - u : batch;
    uint64_t nb = (cnt + LG_UNITS_PER_MD - 1) / LG_UNITS_PER_MD;

    memset (md, 0, nb * LG_MD_BLOCK);
    for (uint64_t k = 0; k < cnt; k++) {
      struct slot s;
      uint64_t v = u + k;

      seal (x, v, (UINT64_C (1) << 8) | SLOT_FLAG_ZERO, NULL, NULL, &s);
      slot_put (md + (k / LG_UNITS_PER_MD) * LG_MD_BLOCK,
                (unsigned) (v % LG_UNITS_PER_MD), 0, &s);
    }
    if (lg_dev_pwrite (x->lower, md, nb * LG_MD_BLOCK,
                       md_off (x, u / LG_UNITS_PER_MD), 0)
        < 0) {
      int saved = errno;

      free (md);
      errno = saved;
      return -1;
    }
    if (progress)
      progress (u + cnt - first, n);
  }
  free (md);
  return lg_dev_flush (x->lower);
}

int64_t
lg_crypt_verify (struct lg_dev *d, uint64_t first, uint64_t n, bool repair,
                 void (*bad) (void *opaque, uint64_t first_unit,
                              uint64_t nunits),
                 void (*progress) (uint64_t done, uint64_t total), void *opaque)
{
  struct cdev *x = to_cdev (d);
  const uint64_t batch = LG_UNITS_PER_MD * 64; /* 10.5 MiB */
  uint8_t *buf = malloc (batch * LG_UNIT_SIZE);
  int64_t total = 0;

  if (buf == NULL || (repair && ensure_dirty (x) < 0)) {
    free (buf);
    return -1;
  }
  for (uint64_t u = first; u < first + n; u += batch) {
    uint64_t cnt = first + n - u < batch ? first + n - u : batch;
    struct span sp;
    int64_t r;

    span_init (&sp, u, u + cnt);
    span_lock (x, &sp, repair);
    r = read_units_locked (x, &sp, buf, bad, opaque, false, repair);
    span_unlock (x, &sp);
    if (r < 0) {
      free (buf);
      return -1;
    }
    total += r;
    if (progress)
      progress (u + cnt - first, n);
  }
  sodium_memzero (buf, batch * LG_UNIT_SIZE);
  free (buf);
  if (repair && total == 0 && first == 0 && n == x->h.nunits
      && !atomic_load (&x->write_failed)) {
    /* Every unit's newer slot is current now. */
    atomic_store (&x->trust_newer, true);
    atomic_store (&x->clean_at_close, true);
  }
  return total;
}

/* ---- keys ---- */

uint8_t *
lg_keyfile_read (const char *path)
{
  uint8_t *k;
  uint8_t extra;
  size_t got = 0;
  int fd, saved;

  fd = open (path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    saved = errno;
    lg_error ("%s: %s", path, strerror (saved));
    errno = saved;
    return NULL;
  }
  k = sodium_malloc (LG_KEY_BYTES);
  if (k == NULL) {
    close (fd);
    return NULL;
  }
  while (got < LG_KEY_BYTES) {
    ssize_t r = read (fd, k + got, LG_KEY_BYTES - got);

    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      break;
    got += (size_t) r;
  }
  if (got != LG_KEY_BYTES || read (fd, &extra, 1) != 0) {
    lg_error ("%s: a key file holds exactly %d bytes (make one with: head "
              "-c 32 /dev/urandom > FILE)",
              path, LG_KEY_BYTES);
    close (fd);
    sodium_free (k);
    errno = EINVAL;
    return NULL;
  }
  close (fd);
  return k;
}

/* Opens copy h with ks into mk: 0, or -1 with err (EACCES wrong key,
 * EINVAL a MAC mismatch). */
static int
unlock_copy (struct lg_dev *lower, const struct lg_keysrc *ks,
             const struct lg_header *h, uint8_t *mk, char *err, size_t errlen)
{
  int slot;

  if (ks->keyfile)
    slot = lg_keyslot_open_keyfile (h, ks->keyfile, mk);
  else
    slot = lg_keyslot_open_passphrase (h, ks->passphrase, mk);
  if (slot < 0) {
    snprintf (err, errlen, "%s: wrong %s: no key slot opens with it",
              lower->name, ks->keyfile ? "key" : "passphrase");
    errno = EACCES;
    return -1;
  }
  if (lg_header_check_mac (h, mk) < 0) {
    sodium_memzero (mk, LG_KEY_BYTES);
    snprintf (err, errlen,
              "%s: the header was modified by someone without "
              "the key (MAC mismatch): refusing it",
              lower->name);
    errno = EINVAL;
    return -1;
  }
  lg_debug ("%s: unlocked with key slot %d", lower->name, slot);
  return 0;
}

int
lg_crypt_unlock (struct lg_dev *lower, const struct lg_keysrc *ks,
                 struct lg_header *h, uint8_t *mk, char *err, size_t errlen)
{
  struct lg_header hc[2];
  unsigned n;
  int r = -1, saved = 0;

  if (lg_header_read_all (lower, hc, &n, err, errlen) < 0) {
    saved = errno;
    if (saved == ENOENT)
      snprintf (err, errlen,
                "%s: no lungate header: not formatted (lungate "
                "format)",
                lower->name);
    errno = saved;
    return -1;
  }
  if (ks->keyfile == NULL && ks->passphrase == NULL) {
    snprintf (err, errlen,
              "%s: the LUN is encrypted: give a key file or a "
              "passphrase",
              lower->name);
    errno = EACCES;
    goto out;
  }
  /* The newest copy that authenticates with this key: a newer one that
   * does not was forged or damaged (its checksum proves nothing), and is
   * replaced by the next header write. */
  for (unsigned i = 0; i < n && r < 0; i++) {
    char e[256];

    r = unlock_copy (lower, ks, &hc[i], mk, e, sizeof e);
    if (r == 0) {
      *h = hc[i];
      if (i > 0)
        lg_warn ("%s: the newest header copy does not open with this key "
                 "(forged or damaged): using the other one",
                 lower->name);
    }
    else if (i == 0) {
      snprintf (err, errlen, "%s", e);
      saved = errno;
    }
  }
  if (r < 0)
    errno = saved ? saved : EACCES;
out:
  sodium_memzero (hc, sizeof hc);
  return r;
}
