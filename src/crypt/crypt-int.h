/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The crypt layer inside: what its files share (struct cdev and the
 * structures it holds) and the functions they call in one another.  Not
 * for use outside src/crypt.
 *
 * Unit i (4096 bytes) lives at data_offset + i * 4096 on the lower device;
 * its two metadata slots live in metadata block i / 42, at (i % 42) * 96.
 * A slot is nonce (24) | tag (16) | u64le seq << 8 | flags; the tag binds
 * the volume UUID, the unit index and the slot's seq and flags.
 *
 *   slot.c     the slot codec: sealing and opening units
 *   mdcache.c  the metadata cache, and the stripe locks of its blocks
 *   read.c     the read path
 *   write.c    the write, zero and trim paths, and their barriers
 *   crypt.c    the device: open, close, the dirty flag, the lower checks
 *   keyfile.c  key files and unlocking a header
 *   barrier.c  group-committed flushes; header.c, hdrupdate.c the header
 *
 * Threads: any number.  Each metadata block is guarded by a striped
 * rwlock (readers shared, writers exclusive); a request locks its stripes
 * in ascending order.  The metadata cache has its own mutex, taken only
 * briefly and never while waiting for I/O; its entries are pinned while a
 * request uses them and only changed under the block's write lock (or,
 * for what a reader learnt, under the cache mutex).
 * Lock order: stripe locks (ascending), then the cache mutex; the dirty
 * lock and the recheck mutex are taken before any stripe lock.
 */
#ifndef LG_CRYPT_INT_H
#define LG_CRYPT_INT_H

#include <pthread.h>
#include <sodium.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "crypt/barrier.h"
#include "crypt/crypt.h"
#include "crypt/header.h"
#include "dev/dev.h"

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
  uint64_t lgen;   /* the cache's gen when data was loaded */
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
  uint64_t gen;   /* lgc_cache_forget: entries of an older gen reload */
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
  /* The ranges of units last reported failing, and when (monotonic ms):
   * the same failure again soon (the kernel reads a page again after a
   * failed read-ahead) is logged at debug level, not once more (read.c).
   * bad_lock is a leaf lock. */
  pthread_mutex_t bad_lock;
  struct {
    uint64_t u0, n;
    int64_t ms;
  } bad[8];
  unsigned bad_next;
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
   * open that never writes (nbdkit -r) leaves the LUN as it was.  Lock
   * order (doc/locking.md): dirty_lock, then recheck, then the stripes;
   * both are released before a stripe lock is taken. */
  pthread_mutex_t dirty_lock;
  atomic_bool marked;
  uint8_t *mk; /* sodium memory, for the header MAC */

  /* After each login under the stack its header is read again, on that
   * session, before anything held goes (cdev_reattach): another volume on
   * the same LUN number (another UUID or geometry) and every request fails
   * with ESHUTDOWN.  When that read failed (unchecked), the next request
   * reads it first, under recheck (lgc_lower_check). */
  pthread_mutex_t recheck;
  atomic_bool unchecked;
  atomic_bool replaced;
  /* Opened by `lungate format' over a LUN it is overwriting: until the
   * header is written last, header copy 0 holds what format found there
   * (its hash: formatting_was) or the format mark, so after a login that
   * is what is checked (lg_crypt_formatting). */
  atomic_bool formatting;
  uint8_t formatting_was[crypto_generichash_BYTES];
  struct lg_owner *owner; /* the owner record, where nothing else claims */
};

static inline struct cdev *
to_cdev (struct lg_dev *d)
{
  return (struct cdev *) d;
}

static inline uint64_t
md_off (const struct cdev *x, uint64_t b)
{
  return x->h.md_offset + b * LG_MD_BLOCK;
}

static inline uint64_t
data_off (const struct cdev *x, uint64_t u)
{
  return x->h.data_offset + u * LG_UNIT_SIZE;
}

/* ---- slot.c: the slot codec ---- */

struct slot {
  uint8_t nonce[24];
  uint8_t tag[16];
  uint64_t seqflags;
};

void lgc_slot_get (const uint8_t *md, unsigned j, unsigned k, struct slot *s);
void lgc_slot_put (uint8_t *md, unsigned j, unsigned k, const struct slot *s);
bool lgc_slot_empty (const struct slot *s);
void lgc_seal (struct cdev *x, uint64_t unit, uint64_t seqflags,
               const uint8_t *in, uint8_t *out, struct slot *s);
int lgc_open_slot (const struct cdev *x, uint64_t unit, const struct slot *s,
                   const uint8_t *stored, uint8_t *out);
int lgc_current_slot (const struct cdev *x, uint64_t unit, const uint8_t *md,
                      unsigned j, const uint8_t *stored, uint8_t *out);
bool lgc_any_empty (const uint8_t *md, unsigned j);
bool lgc_first_write_failed (const struct cdev *x, const uint8_t *md,
                             unsigned j);
bool lgc_both_empty (const uint8_t *md, unsigned j);

/* ---- mdcache.c: the metadata cache and the stripe locks ---- */

struct span {
  uint64_t u0, u1; /* units [u0, u1) */
  uint64_t b0, b1; /* metadata blocks [b0, b1] */
  uint8_t stripes[STRIPES / 8];
};

int lgc_cache_init (struct mdcache *c, size_t n);
void lgc_cache_destroy (struct mdcache *c);
struct mdent *lgc_cache_get (struct mdcache *c, uint64_t b);
void lgc_cache_put (struct mdcache *c, struct mdent *e);
/* Another writer may have changed the metadata since it was read (the
 * claim of a device opened before it took write access): every entry is
 * read again at its next use that no one else pins. */
void lgc_cache_forget (struct mdcache *c);
uint64_t lgc_known_of (struct cdev *x, const struct mdent *e);
void lgc_learn (struct cdev *x, struct mdent *e, uint64_t epoch, uint64_t bits,
                uint64_t cur);
void lgc_span_init (struct span *sp, uint64_t u0, uint64_t u1);
void lgc_span_lock (struct cdev *x, const struct span *sp, bool write);
void lgc_span_unlock (struct cdev *x, const struct span *sp);

/* ---- read.c ---- */

/* Reads nb metadata blocks at block b0 into md, with the n other
 * segments of segs in the same batch, the metadata twice: plain TCP has
 * no data digest, and a block written back as a flipped bit made it
 * would destroy a unit nobody wrote.  When the copies differ, the
 * metadata is read again until two reads agree.  0, or -1 with errno. */
int lgc_read_md (struct cdev *x, uint8_t *md, uint64_t b0, uint64_t nb,
                 const struct lg_dev_seg *segs, unsigned n);
int64_t lgc_read_units_locked (struct cdev *x, const struct span *sp,
                               uint8_t *out,
                               void (*bad) (void *, uint64_t, uint64_t),
                               void *opaque, bool use_cache, bool repair);
int lgc_pread (struct lg_dev *d, void *buf, size_t count, uint64_t off);

/* ---- write.c ---- */

int lgc_lower_flush (struct cdev *x);
void lgc_write_failed (struct cdev *x);
int lgc_write_md (struct cdev *x, const uint8_t *md, uint64_t b0, uint64_t nb);
int lgc_ensure_dirty (struct cdev *x);
int lgc_pwrite (struct lg_dev *d, const void *buf, size_t count, uint64_t off,
                unsigned flags);
int lgc_flush (struct lg_dev *d);
int lgc_trim (struct lg_dev *d, uint64_t count, uint64_t off, unsigned flags);
int lgc_zero (struct lg_dev *d, uint64_t count, uint64_t off, unsigned flags);

/* ---- crypt.c ---- */

int lgc_lower_check (struct cdev *x);
bool lgc_after_login (struct cdev *x);
int lgc_set_dirty (struct cdev *x, bool dirty);

#endif
