/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* nbdkit-lungate-crypt-filter: the crypt layer over any nbdkit plugin.
 *
 *   nbdkit --filter=lungate-crypt file disk.img key-file=volume.key
 *
 * The backend must hold a lungate volume (made by lungate format on a LUN,
 * or copied from one).  All connections share one crypt device, so that
 * its per-block locks and metadata cache see every request; its lower
 * device is the calling connection's nbdkit_next, found through a
 * thread-local pointer that each callback sets before it calls in (nbdkit
 * runs a request start to end on one thread).
 *
 * Threads: nbdkit's PARALLEL model.  The shared device is created once
 * (under state_lock) by the first connection to prepare, and is immutable
 * after that until unload.
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nbdkit-filter.h>

#include <sodium.h>

#include "common/glue.h"
#include "dev/dev.h"
#include "dev/volume.h"
#include "util/log.h"
#include "util/secret.h"

#define THREAD_MODEL NBDKIT_THREAD_MODEL_PARALLEL
#define CHUNK (32u << 20) /* largest request passed down */

static uint8_t *keyfile;
static char *passphrase;

static pthread_mutex_t state_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned writers;    /* connections that may write (state_lock) */
static struct lg_dev *cdev; /* the shared crypt device */
static uint8_t volume_uuid[LG_UUID_BYTES];
static __thread nbdkit_next *tls_next;

/* ---- the lower device: whatever nbdkit_next this thread serves ---- */

static struct lg_dev nextdev;

static int
next_pread (struct lg_dev *d, void *buf, size_t count, uint64_t off)
{
  int err = 0;

  (void) d;
  while (count > 0) {
    uint32_t n = count < CHUNK ? (uint32_t) count : CHUNK;

    if (tls_next->pread (tls_next, buf, n, off, 0, &err) == -1) {
      errno = err ? err : EIO;
      return -1;
    }
    buf = (uint8_t *) buf + n;
    off += n;
    count -= n;
  }
  return 0;
}

static int
next_pwrite (struct lg_dev *d, const void *buf, size_t count, uint64_t off,
             unsigned flags)
{
  int err = 0;

  (void) d;
  while (count > 0) {
    uint32_t n = count < CHUNK ? (uint32_t) count : CHUNK;

    /* FUA on every piece: each must be durable on return. */
    if (tls_next->pwrite (tls_next, buf, n, off,
                          (flags & LG_FUA) ? NBDKIT_FLAG_FUA : 0, &err)
        == -1) {
      errno = err ? err : EIO;
      return -1;
    }
    buf = (const uint8_t *) buf + n;
    off += n;
    count -= n;
  }
  return 0;
}

static int
next_flush (struct lg_dev *d)
{
  int err = 0;

  (void) d;
  if (tls_next->can_flush (tls_next) != 1)
    return 0;
  if (tls_next->flush (tls_next, 0, &err) == -1) {
    errno = err ? err : EIO;
    return -1;
  }
  return 0;
}

static int
next_zero (struct lg_dev *d, uint64_t count, uint64_t off, unsigned flags)
{
  int err = 0;

  if (tls_next->can_zero (tls_next) <= NBDKIT_ZERO_NONE)
    return lg_dev_write_zeroes (d, count, off, 0);
  while (count > 0) {
    uint32_t n = count < CHUNK ? (uint32_t) count : CHUNK;

    if (tls_next->zero (
            tls_next, n, off,
            ((flags & LG_MAY_TRIM) ? NBDKIT_FLAG_MAY_TRIM : 0)
                | ((flags & LG_FAST_ZERO) ? NBDKIT_FLAG_FAST_ZERO : 0),
            &err)
        == -1) {
      errno = err ? err : EIO;
      return -1;
    }
    off += n;
    count -= n;
  }
  return 0;
}

static void
next_close (struct lg_dev *d)
{
  (void) d;
}

static const struct lg_dev_ops next_ops = {
  .name = "nbdkit-next",
  .pread = next_pread,
  .pwrite = next_pwrite,
  .flush = next_flush,
  .zero = next_zero,
  .close = next_close,
};

/* ---- configuration ---- */

static void
crypt_load (void)
{
  lg_nbdkit_who = "lungate-crypt";
  lg_log_set_sink (lg_nbdkit_log_sink);
  lg_log_set_level (LG_LOG_DEBUG);
  if (sodium_init () < 0)
    nbdkit_error ("cannot initialise libsodium");
}

static void
crypt_unload (void)
{
  /* No connection is left to write the header through. */
  if (cdev)
    lg_crypt_keep_dirty (cdev);
  lg_dev_close (cdev);
  if (keyfile)
    sodium_free (keyfile);
  lg_secret_free (passphrase);
}

static int
crypt_config (nbdkit_next_config *next, nbdkit_backend *nxdata, const char *key,
              const char *value)
{
  if (strcmp (key, "key-file") == 0) {
    if (keyfile)
      sodium_free (keyfile);
    keyfile = lg_keyfile_read (value);
    return keyfile ? 0 : -1;
  }
  if (strcmp (key, "passphrase") == 0)
    return lg_nbdkit_read_secret (key, value, &passphrase);
  return next (nxdata, key, value);
}

static int
crypt_config_complete (nbdkit_next_config_complete *next,
                       nbdkit_backend *nxdata)
{
  if ((keyfile == NULL) == (passphrase == NULL)) {
    nbdkit_error ("lungate-crypt: give one of key-file= and passphrase=");
    return -1;
  }
  return next (nxdata);
}

#define crypt_config_help                                                      \
  "key-file=FILE        The volume's 32-byte key file.\n"                      \
  "passphrase=SECRET    Its passphrase (-: prompt, +FILE, -FD)."

/* ---- connections ---- */

/* A connection: whether it counts among the writers. */
struct handle {
  bool writer;
};

static void *
crypt_open (nbdkit_next_open *next, nbdkit_context *context, int readonly,
            const char *exportname, int is_tls)
{
  struct handle *h;

  (void) is_tls;
  if (next (context, readonly, exportname) == -1)
    return NULL;
  h = calloc (1, sizeof *h);
  if (h == NULL)
    nbdkit_error ("calloc: %m");
  return h;
}

static void
crypt_close (void *handle)
{
  free (handle);
}

/* The last writer leaves (its backend still there): the header goes back
 * to clean, as the plugin does at close.  A writer that never gets here
 * (nbdkit killed) leaves it dirty, and the next open knows. */
static int
crypt_finalize (nbdkit_next *next, void *handle)
{
  struct handle *h = handle;

  if (!h->writer)
    return 0;
  pthread_mutex_lock (&state_lock);
  tls_next = next;
  if (--writers == 0 && cdev)
    lg_crypt_quiesce (cdev);
  pthread_mutex_unlock (&state_lock);
  h->writer = false;
  return 0;
}

/* The first connection unlocks the volume and makes the shared device;
 * later ones check that their backend holds the same volume. */
static int
crypt_prepare (nbdkit_next *next, void *handle, int readonly)
{
  struct lg_keysrc ks = { keyfile, passphrase };
  char err[512];
  int64_t size;
  int r = -1;

  pthread_mutex_lock (&state_lock);
  tls_next = next;
  if (cdev) {
    uint8_t buf[LG_HDR_SIZE];

    /* This connection's backend must know its size before any read (and
     * it must be the size the volume was opened with). */
    size = next->get_size (next);
    if (size < 0)
      goto out;
    if ((uint64_t) size != lg_dev_size (&nextdev)) {
      nbdkit_error ("lungate-crypt: this export's size (%" PRIi64 " bytes) "
                    "is not the volume's (%" PRIu64 " bytes)",
                    size, lg_dev_size (&nextdev));
      goto out;
    }
    if (next_pread (&nextdev, buf, sizeof buf, 0) < 0
        || !lg_volume_is (buf, lg_dev_size (&nextdev), volume_uuid)) {
      nbdkit_error ("lungate-crypt: this export is not the volume the "
                    "filter serves");
      goto out;
    }
    r = 0;
    goto count;
  }
  size = next->get_size (next);
  if (size < 0)
    goto out;
  memset (&nextdev, 0, sizeof nextdev);
  nextdev.ops = &next_ops;
  snprintf (nextdev.name, sizeof nextdev.name, "lungate-crypt");
  lg_dev_set_size (&nextdev, (uint64_t) size);
  nextdev.block_size = 512;
  nextdev.pref_block_size = 4096;
  nextdev.max_io = CHUNK;
  nextdev.read_only = readonly || next->can_write (next) != 1;
  nextdev.can_zero = true;
  nextdev.can_fast_zero = next->can_fast_zero (next) == 1;
  nextdev.can_fua = next->can_fua (next) != NBDKIT_FUA_NONE;
  /* NBD does not say whether the plugin below caches writes: if it can
   * flush, take it that it does (the crypt layer then orders its
   * metadata before its data). */
  nextdev.volatile_cache = next->can_flush (next) == 1;
  /* The dirty flag as the plugin keeps it: set before the first write,
   * cleared when the last writer leaves. */
  cdev = lg_volume_open (&nextdev, &ks, !nextdev.read_only, volume_uuid, err,
                         sizeof err);
  if (cdev == NULL) {
    nbdkit_error ("%s", err);
    goto out;
  }
  r = 0;
count:
  if (!readonly && !nextdev.read_only) {
    ((struct handle *) handle)->writer = true;
    writers++;
  }

out:
  pthread_mutex_unlock (&state_lock);
  return r;
}

static int64_t
crypt_get_size (nbdkit_next *next, void *handle)
{
  (void) next;
  (void) handle;
  return (int64_t) lg_dev_size (cdev);
}

static int
crypt_block_size (nbdkit_next *next, void *handle, uint32_t *minimum,
                  uint32_t *preferred, uint32_t *maximum)
{
  (void) next;
  (void) handle;
  *minimum = *preferred = LG_UNIT_SIZE;
  *maximum = CHUNK;
  return 0;
}

static int
crypt_can_trim (nbdkit_next *next, void *handle)
{
  (void) handle;
  return next->can_write (next) == 1;
}

static int
crypt_can_zero (nbdkit_next *next, void *handle)
{
  (void) next;
  (void) handle;
  return NBDKIT_ZERO_NATIVE;
}

static int
crypt_can_fast_zero (nbdkit_next *next, void *handle)
{
  (void) handle;
  /* The stored bytes of a ZERO unit are zeroed: fast only if below. */
  return next->can_fast_zero (next);
}

static int
crypt_can_extents (nbdkit_next *next, void *handle)
{
  (void) next;
  (void) handle;
  return 0;
}

static int
crypt_can_fua (nbdkit_next *next, void *handle)
{
  (void) next;
  (void) handle;
  return NBDKIT_FUA_NATIVE;
}

static int
crypt_can_cache (nbdkit_next *next, void *handle)
{
  (void) next;
  (void) handle;
  return NBDKIT_CACHE_NONE;
}

#define RETURN_ERR(r)                                                          \
  do {                                                                         \
    if ((r) < 0) {                                                             \
      *err = errno ? errno : EIO;                                              \
      return -1;                                                               \
    }                                                                          \
    return 0;                                                                  \
  } while (0)

static int
crypt_pread (nbdkit_next *next, void *handle, void *buf, uint32_t count,
             uint64_t offset, uint32_t flags, int *err)
{
  (void) handle;
  (void) flags;
  tls_next = next;
  RETURN_ERR (lg_dev_pread (cdev, buf, count, offset));
}

static int
crypt_pwrite (nbdkit_next *next, void *handle, const void *buf, uint32_t count,
              uint64_t offset, uint32_t flags, int *err)
{
  (void) handle;
  tls_next = next;
  RETURN_ERR (
      lg_dev_pwrite (cdev, buf, count, offset, lg_nbdkit_dev_flags (flags)));
}

static int
crypt_flush (nbdkit_next *next, void *handle, uint32_t flags, int *err)
{
  (void) handle;
  (void) flags;
  tls_next = next;
  RETURN_ERR (lg_dev_flush (cdev));
}

static int
crypt_trim (nbdkit_next *next, void *handle, uint32_t count, uint64_t offset,
            uint32_t flags, int *err)
{
  (void) handle;
  tls_next = next;
  RETURN_ERR (lg_dev_trim (cdev, count, offset, lg_nbdkit_dev_flags (flags)));
}

static int
crypt_zero (nbdkit_next *next, void *handle, uint32_t count, uint64_t offset,
            uint32_t flags, int *err)
{
  (void) handle;
  tls_next = next;
  RETURN_ERR (lg_dev_zero (cdev, count, offset, lg_nbdkit_dev_flags (flags)));
}

static struct nbdkit_filter filter = {
  .name = "lungate-crypt",
  .longname = "lungate crypt layer",
  .description = "Authenticated encryption (or MAC) per 4 KiB unit",
  .load = crypt_load,
  .unload = crypt_unload,
  .config = crypt_config,
  .config_complete = crypt_config_complete,
  .config_help = crypt_config_help,
  .open = crypt_open,
  .close = crypt_close,
  .prepare = crypt_prepare,
  .finalize = crypt_finalize,
  .get_size = crypt_get_size,
  .block_size = crypt_block_size,
  .can_trim = crypt_can_trim,
  .can_zero = crypt_can_zero,
  .can_fast_zero = crypt_can_fast_zero,
  .can_extents = crypt_can_extents,
  .can_fua = crypt_can_fua,
  .can_cache = crypt_can_cache,
  .pread = crypt_pread,
  .pwrite = crypt_pwrite,
  .flush = crypt_flush,
  .trim = crypt_trim,
  .zero = crypt_zero,
};

struct nbdkit_filter *filter_init (void);
NBDKIT_REGISTER_FILTER (filter)
