/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The crypt layer's block device: open and close, the ops table, the dirty
 * flag in the header, the checks that the lower device still holds this
 * volume after it logged in again, format's sealing of every unit and
 * verify.  The paths themselves are in read.c and write.c; crypt-int.h
 * says where everything else is.  Any thread. */
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
#include "crypt/owner.h"
#include "util/log.h"
#include "util/hooks.h"

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
    if (lg_header_parse (buf, lg_dev_size (x->lower), &h, NULL, 0) < 0)
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

/* While formatting (lg_crypt_formatting): whether copy 0 still holds
 * what format found there, or the mark, or (written last) this volume's
 * header.  1 yes, 0 no (why says so), -1 on a failed read. */
static int
formatting_is_ours (struct cdev *x, struct lg_dev_reader *rd, char *why,
                    size_t len)
{
  uint8_t *buf = malloc (LG_HDR_SIZE), hash[crypto_generichash_BYTES];
  int r = -1;

  if (buf == NULL)
    return -1;
  if ((rd ? rd->pread (rd, buf, LG_HDR_SIZE, LG_HDR_COPY0_OFFSET)
          : lg_dev_pread (x->lower, buf, LG_HDR_SIZE, LG_HDR_COPY0_OFFSET))
      < 0)
    goto out;
  crypto_generichash (hash, sizeof hash, buf, LG_HDR_SIZE, NULL, 0);
  if (sodium_memcmp (hash, x->formatting_was, sizeof hash) == 0
      || lg_header_is_format_mark (buf))
    r = 1;
  else {
    r = header_is_ours_via (x, rd, why, len);
    if (r == 0)
      snprintf (why, len,
                "the LUN's first block is neither what format found there, "
                "nor its mark, nor the new header");
  }

out:
  free (buf);
  return r;
}

/* What the LUN holds is this volume (or, formatting, becoming it). */
static int
header_check (struct cdev *x, struct lg_dev_reader *rd, char *why, size_t len)
{
  return atomic_load (&x->formatting) ? formatting_is_ours (x, rd, why, len)
                                      : header_is_ours_via (x, rd, why, len);
}

static int
header_is_ours (struct cdev *x, char *why, size_t len)
{
  return header_check (x, NULL, why, len);
}

/* The lower device logged in again.  Over a volatile cache the target may
 * have lost power: what this session knows of the current slots may name
 * data its cache lost.  As after a failed write, each first write to a
 * unit reads it again, and the volume stays dirty.  True when writes were
 * not yet stable: they may be gone, which the next flush reports, unless
 * the reattach shows that the target kept its state (cdev_reattach). */
bool
lgc_after_login (struct cdev *x)
{
  bool unstable;

  if (!x->ordered)
    return false;
  unstable = lg_barrier_login (&x->bar);
  lgc_write_failed (x);
  return unstable;
}

/* The crypt layer's part of the reattach lifecycle (lg_dev_reattach): a
 * session under the stack logged in again and issues nothing it held
 * until this says the LUN still holds this volume.  The header first (a
 * volume replaced by another is named better than by the blocks the
 * device below last wrote), then the layer below. */
static int reattach_checks (struct cdev *x, struct lg_dev_reader *r);

static int
cdev_reattach (struct lg_dev *d, struct lg_dev_reader *r)
{
  struct cdev *x = to_cdev (d);
  bool unstable;
  int ret;

  if (atomic_load (&x->replaced))
    return -1;
  unstable = lgc_after_login (x);
  r->target_kept = false;
  ret = reattach_checks (x, r);
  /* A connection lost with the target still up (its reservation kept
   * shows it) loses nothing from its cache; a restart may have. */
  if (x->ordered)
    lg_barrier_checked (&x->bar, unstable && !(ret == 0 && r->target_kept));
  return ret;
}

/* The header, then the layer below. */
static int
reattach_checks (struct cdev *x, struct lg_dev_reader *r)
{
  char why[160];
  int ours, lower;

  ours = header_check (x, r, why, sizeof why);
  if (ours == 0) {
    if (!atomic_exchange (&x->replaced, true))
      lg_error ("%s: the LUN holds another volume since the outage (%s): "
                "refusing every request, and nothing held for it is sent",
                x->dev.name, why);
    atomic_store (&x->clean_at_close, false);
    return -1;
  }
  lower = lg_dev_reattach (x->lower, r);
  if (lower == -1) {
    /* The layer below refuses every request from now on, and said why. */
    atomic_store (&x->clean_at_close, false);
    atomic_store (&x->replaced, true);
    return -1;
  }
  if (ours < 0)
    atomic_store (&x->unchecked, true);
  return ours < 0 ? -2 : lower;
}

/* Before each request: when the header could not be read after a login
 * (cdev_reattach), read it now (under recheck, so that one request reads
 * it while the others wait).  ESHUTDOWN from then on when the LUN now
 * holds another volume: its units would fail authentication, and worse,
 * our writes would land on it. */
int
lgc_lower_check (struct cdev *x)
{
  if (atomic_load (&x->unchecked) && !atomic_load (&x->replaced)) {
    char why[160];
    int ours = 1;

    pthread_mutex_lock (&x->recheck);
    if (atomic_load (&x->unchecked) && !atomic_load (&x->replaced))
      ours = header_is_ours (x, why, sizeof why);
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
    else if (ours == 0) {
      lg_error ("%s: the LUN holds another volume since the outage (%s): "
                "refusing every request",
                x->dev.name, why);
      atomic_store (&x->clean_at_close, false);
      atomic_store (&x->replaced, true);
    }
    atomic_store (&x->unchecked, false);
    pthread_mutex_unlock (&x->recheck);
  }
  if (atomic_load (&x->replaced)) {
    errno = ESHUTDOWN;
    return -1;
  }
  return 0;
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
int
lgc_set_dirty (struct cdev *x, bool dirty)
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
  if (lgc_lower_check (x) < 0)
    return;
  if (lgc_lower_flush (x) < 0 || lgc_set_dirty (x, false) < 0)
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

void
lg_crypt_formatting (struct lg_dev *d, const uint8_t *was)
{
  struct cdev *x = to_cdev (d);

  crypto_generichash (x->formatting_was, sizeof x->formatting_was, was,
                      LG_HDR_SIZE, NULL, 0);
  atomic_store (&x->formatting, true);
}

/* The owner record is cleared at close, but never while a write of this
 * gateway may still execute in the target (waiting up to
 * OWNER_RELEASE_WAIT_MS for the target to confirm): the next gateway would
 * be admitted, write, and have that write land over its own.  Kept, the
 * record names a process that has ended, which the next gateway of this
 * host takes back, fenced (claim_owner). */
#define OWNER_RELEASE_WAIT_MS 5000
static void
owner_release (struct cdev *x)
{
  struct lg_dev_transport t;

  if (x->owner == NULL)
    return;
  lg_dev_transport (x->lower, &t);
  for (int waited = 0; t.unconfirmed > 0 && waited < OWNER_RELEASE_WAIT_MS;
       waited += 100) {
    nanosleep (&(struct timespec){ .tv_nsec = 100 * 1000 * 1000 }, NULL);
    lg_dev_transport (x->lower, &t);
  }
  if (t.unconfirmed > 0) {
    lg_warn ("%s: not clearing the owner record: %" PRIu64 " write%s of "
             "unknown outcome may still execute in the target, which has "
             "not confirmed that %s cannot; the volume stays this gateway's",
             x->dev.name, t.unconfirmed, t.unconfirmed == 1 ? "" : "s",
             t.unconfirmed == 1 ? "it" : "they");
    lg_owner_keep (x->owner, true);
  }
  lg_owner_release (x->owner);
}

static void
cdev_close (struct lg_dev *d)
{
  struct cdev *x = to_cdev (d);

  lg_dev_set_top (x->lower, NULL);
  mark_clean (x);
  owner_release (x);
  if (x->mk)
    sodium_free (x->mk);
  if (x->owns_lower)
    lg_dev_close (x->lower);
  for (int i = 0; i < STRIPES; i++)
    pthread_rwlock_destroy (&x->stripe[i]);
  lgc_cache_destroy (&x->cache);
  lg_barrier_destroy (&x->bar);
  pthread_mutex_destroy (&x->recheck);
  pthread_mutex_destroy (&x->dirty_lock);
  pthread_mutex_destroy (&x->bad_lock);
  sodium_free (x->key);
  sodium_memzero (x->prefix, sizeof x->prefix);
  sodium_free (x);
}

static int
cdev_revalidate (struct lg_dev *d)
{
  if (lg_dev_revalidate (to_cdev (d)->lower) < 0)
    return -1;
  return lgc_lower_check (to_cdev (d));
}

static void
cdev_counters (const struct lg_dev *d, struct lg_dev_counters *c)
{
  const struct lg_dev *lower = ((const struct cdev *) d)->lower;
  const struct cdev *x = (const struct cdev *) d;

  if (lower->ops->counters)
    lower->ops->counters (lower, c);
  c->auth_failures += atomic_load (&x->auth_failures);
  c->losses += atomic_load (&x->bar.losses);
  /* As the header would say after a close now (mark_clean).  A reader
   * does not follow the header another gateway writes. */
  c->volume = !x->manage_dirty || atomic_load (&x->replaced) ? LG_VOLUME_UNKNOWN
      : x->was_dirty || atomic_load (&x->write_failed)       ? LG_VOLUME_DIRTY
      : atomic_load (&x->marked)                             ? LG_VOLUME_IN_USE
                                                             : LG_VOLUME_CLEAN;
}

/* Write access taken: the device may have been open (read-only, in the
 * plugin) while another gateway wrote.  Its cached metadata is read
 * again, and a header the other left dirty (killed, before a target
 * restart forgot its reservation) counts as dirty. */
static int
refresh_at_claim (struct cdev *x, char *err, size_t errlen)
{
  struct lg_header h;
  char why[256];

  lgc_cache_forget (&x->cache);
  if (lg_header_read (x->lower, &h, why, sizeof why) < 0) {
    snprintf (err, errlen, "%s: reading the header again: %s", x->dev.name,
              why);
    return -1;
  }
  if (sodium_memcmp (h.uuid, x->h.uuid, sizeof h.uuid) != 0) {
    snprintf (err, errlen,
              "%s: the LUN holds another volume since it was "
              "opened",
              x->dev.name);
    errno = ESHUTDOWN;
    sodium_memzero (&h, sizeof h);
    return -1;
  }
  pthread_mutex_lock (&x->dirty_lock);
  if ((h.flags & LG_HDR_FLAG_DIRTY) && !x->was_dirty
      && !atomic_load (&x->marked)) {
    lg_warn ("%s: the volume was left dirty since it was opened: each first "
             "write to a unit checks which slot is current",
             x->dev.name);
    x->was_dirty = true;
    atomic_store (&x->trust_newer, false);
    atomic_store (&x->clean_at_close, false);
  }
  pthread_mutex_unlock (&x->dirty_lock);
  sodium_memzero (&h, sizeof h);
  return 0;
}

/* No persistent reservations below: the owner record says who writes.
 * LUNGATE_TEST_NO_OWNER leaves it out (test-header-race runs several
 * writers on one volume so); never for use. */
/* The previous owner's last writes may still be executing in the
 * target: the lower device confirms they cannot (a LUN RESET). */
static int
fence_lower (void *opaque, char *err, size_t errlen)
{
  return lg_dev_claim (opaque, LG_CLAIM_RESET, err, errlen);
}

static int
claim_owner (struct cdev *x, unsigned flags, char *err, size_t errlen)
{
  bool took = false;

  if (lg_test_hook ("LUNGATE_TEST_NO_OWNER"))
    return LG_CLAIM_UNHELD;
  x->owner
      = lg_owner_claim (x->lower, x->dev.name, (flags & LG_CLAIM_TAKEOVER) != 0,
                        fence_lower, x->lower, &took, err, errlen);
  if (x->owner == NULL)
    return -1;
  if (took)
    lg_warn ("%s: took over the volume from another gateway", x->dev.name);
  return took ? LG_CLAIM_PREEMPTED : LG_CLAIM_HELD;
}

/* One writer: the lower device's exclusive claim, never a shared one (two
 * gateways' metadata caches would overwrite each other's slots).  After a
 * takeover the volume counts as stopped uncleanly: the holder may have
 * died between a unit's metadata and its data. */
static int
cdev_claim (struct lg_dev *d, unsigned flags, char *err, size_t errlen)
{
  struct cdev *x = to_cdev (d);
  int r = 0;

  if (flags & LG_CLAIM_READER) {
    /* A reader beside another gateway's writes reads a volume's units. */
    if (x->lower->ops->claim)
      x->lower->ops->claim (x->lower, flags | LG_CLAIM_VOLUME, NULL, 0);
    return LG_CLAIM_UNHELD;
  }
  if (flags & LG_CLAIM_SHARED) {
    snprintf (err, errlen,
              "%s: a lungate volume cannot be shared: it has one writer "
              "(two gateways would overwrite each other's metadata slots); "
              "open it read-only (-r, -o ro) beside the writer",
              d->name);
    errno = EINVAL;
    return -1;
  }
  r = lg_dev_claim (x->lower, flags, err, errlen);
  if (r == LG_CLAIM_UNHELD && x->manage_dirty && x->owner == NULL)
    r = claim_owner (x, flags, err, errlen);
  if (r >= 0 && x->manage_dirty && refresh_at_claim (x, err, errlen) < 0)
    return -1;
  if (r < 0 || r == LG_CLAIM_HELD || r == LG_CLAIM_UNHELD || !x->manage_dirty)
    return r < 0 ? -1 : LG_CLAIM_HELD;
  pthread_mutex_lock (&x->dirty_lock);
  atomic_store (&x->trust_newer, false);
  atomic_store (&x->clean_at_close, false);
  x->was_dirty = true;
  if ((r = lgc_set_dirty (x, true)) < 0)
    snprintf (err, errlen, "%s: marking the volume dirty for the takeover: %m",
              d->name);
  else
    atomic_store (&x->marked, true);
  pthread_mutex_unlock (&x->dirty_lock);
  return r < 0 ? -1 : LG_CLAIM_PREEMPTED;
}

static const struct lg_dev_ops cdev_ops = {
  .claim = cdev_claim,
  .name = "crypt",
  .pread = lgc_pread,
  .pwrite = lgc_pwrite,
  .flush = lgc_flush,
  .trim = lgc_trim,
  .zero = lgc_zero,
  .extents = NULL,
  .close = cdev_close,
  .counters = cdev_counters,
  .revalidate = cdev_revalidate,
  .reattach = cdev_reattach,
};

/* Locks, counters and what is known of the lower device. */
static void
init_state (struct cdev *x)
{
  randombytes_buf (x->prefix, sizeof x->prefix);
  atomic_init (&x->counter, 0);
  atomic_init (&x->auth_failures, 0);
  for (int i = 0; i < STRIPES; i++)
    pthread_rwlock_init (&x->stripe[i], NULL);
  pthread_mutex_init (&x->recheck, NULL);
  pthread_mutex_init (&x->dirty_lock, NULL);
  pthread_mutex_init (&x->bad_lock, NULL);
  atomic_init (&x->marked, false);
  atomic_init (&x->unchecked, false);
  atomic_init (&x->formatting, false);
  atomic_init (&x->replaced, false);
}

/* What the device above sees: 4 KiB units, everything but extents. */
static void
init_dev (struct cdev *x)
{
  const struct lg_dev *lower = x->lower;

  snprintf (x->dev.name, sizeof x->dev.name, "%s", lower->name);
  x->dev.ops = &cdev_ops;
  lg_dev_set_size (&x->dev, x->h.nunits * LG_UNIT_SIZE);
  x->dev.block_size = LG_UNIT_SIZE;
  x->dev.pref_block_size = LG_UNIT_SIZE;
  x->dev.max_io = lower->max_io > LG_UNIT_SIZE
      ? lower->max_io / LG_UNIT_SIZE * LG_UNIT_SIZE
      : LG_UNIT_SIZE;
  x->dev.read_only = lower->read_only;
  x->dev.can_trim = true;
  x->dev.can_zero = true;
  /* A ZERO slot holds only over zeroed stored bytes (lungate-format(5)):
   * fast only where the LUN zeroes them fast. */
  x->dev.can_fast_zero = lower->can_fast_zero;
  x->dev.can_extents = false;
  x->dev.can_fua = true;
}

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
      || lgc_cache_init (&x->cache,
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
  x->ordered = lower->volatile_cache
      && lg_test_hook ("LUNGATE_BENCH_NO_BARRIERS") == NULL;
  lg_barrier_init (&x->bar, lower);
  x->h = *h;
  lg_derive_subkey (x->key, mk, LG_SUBKEY_DATA);
  init_state (x);
  init_dev (x);

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
  /* The top of the stack over lower, for the reattach lifecycle, once
   * everything it reads is set; devices without sessions say ENOTSUP:
   * nothing is held there. */
  lg_dev_set_top (lower, &x->dev);
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
                     int (*progress) (uint64_t done, uint64_t total))
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

      lgc_seal (x, v, (UINT64_C (1) << 8) | SLOT_FLAG_ZERO, NULL, NULL, &s);
      lgc_slot_put (md + (k / LG_UNITS_PER_MD) * LG_MD_BLOCK,
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
    if (progress && progress (u + cnt - first, n) != 0) {
      free (md);
      errno = EINTR;
      return -1;
    }
  }
  free (md);
  return lg_dev_flush (x->lower);
}

/* verify reads in batches, and each batch reports its own bad ranges: a
 * range that runs across a batch boundary arrives in two pieces.  This
 * holds the last range back until the next one is seen not to continue
 * it, so that the caller gets maximal ranges. */
struct bad_merge {
  void (*bad) (void *opaque, uint64_t first_unit, uint64_t nunits);
  void *opaque;
  uint64_t first, n; /* the range held back; n == 0: none */
};

static void
bad_merge_flush (struct bad_merge *m)
{
  if (m->n > 0 && m->bad)
    m->bad (m->opaque, m->first, m->n);
  m->n = 0;
}

static void
bad_merge_add (void *opaque, uint64_t first, uint64_t n)
{
  struct bad_merge *m = opaque;

  if (m->n > 0 && m->first + m->n == first) {
    m->n += n;
    return;
  }
  bad_merge_flush (m);
  m->first = first;
  m->n = n;
}

int64_t
lg_crypt_verify (struct lg_dev *d, uint64_t first, uint64_t n, bool repair,
                 void (*bad) (void *opaque, uint64_t first_unit,
                              uint64_t nunits),
                 int (*progress) (uint64_t done, uint64_t total), void *opaque)
{
  struct cdev *x = to_cdev (d);
  const uint64_t batch = LG_UNITS_PER_MD * 64; /* 10.5 MiB */
  uint8_t *buf = malloc (batch * LG_UNIT_SIZE);
  struct bad_merge m = { .bad = bad, .opaque = opaque };
  int64_t total = 0;

  if (buf == NULL || (repair && lgc_ensure_dirty (x) < 0)) {
    free (buf);
    return -1;
  }
  for (uint64_t u = first; u < first + n; u += batch) {
    uint64_t cnt = first + n - u < batch ? first + n - u : batch;
    struct span sp;
    int64_t r;

    lgc_span_init (&sp, u, u + cnt);
    lgc_span_lock (x, &sp, repair);
    r = lgc_read_units_locked (x, &sp, buf, bad_merge_add, &m, false, repair);
    lgc_span_unlock (x, &sp);
    if (r < 0) {
      bad_merge_flush (&m);
      free (buf);
      return -1;
    }
    total += r;
    if (progress && progress (u + cnt - first, n) != 0) {
      bad_merge_flush (&m);
      sodium_memzero (buf, batch * LG_UNIT_SIZE);
      free (buf);
      errno = EINTR;
      return -1;
    }
  }
  bad_merge_flush (&m);
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
