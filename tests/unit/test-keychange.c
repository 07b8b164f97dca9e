/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The key slot changes of `lungate key' (crypt/keychange.c) under
 * lg_header_update, with another machine's update injected at the worst
 * instant: a `key remove' whose first attempt landed and is retried (its
 * read-back saw the header change) must not remove the key another `key
 * add' put in the slot it freed; an add retried must not add its key
 * twice.  (The first found by a hostile review of this code.) */
#include <config.h>

#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "crypt/header.h"
#include "dev/dev.h"
#include "util/log.h"

#include "crypt/keychange.h"

#define DEV_SIZE (4u << 20)

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static uint8_t *disk;
static struct lg_dev dev;
static int caws; /* COMPARE AND WRITEs so far */
static int
    inject_after; /* run the injection at the first header read after this many CAWs */
static void (*inject) (void);

static int
m_pread (struct lg_dev *d, void *buf, size_t n, uint64_t off)
{
  void (*f) (void) = NULL;

  (void) d;
  pthread_mutex_lock (&lock);
  if (inject && caws >= inject_after && off == LG_HDR_COPY0_OFFSET) {
    f = inject;
    inject = NULL;
  }
  pthread_mutex_unlock (&lock);
  if (f)
    f (); /* another machine's update, in the window */
  pthread_mutex_lock (&lock);
  memcpy (buf, disk + off, n);
  pthread_mutex_unlock (&lock);
  return 0;
}

static int
m_pwrite (struct lg_dev *d, const void *buf, size_t n, uint64_t off,
          unsigned flags)
{
  (void) d, (void) flags;
  pthread_mutex_lock (&lock);
  memcpy (disk + off, buf, n);
  pthread_mutex_unlock (&lock);
  return 0;
}

static int
m_flush (struct lg_dev *d)
{
  (void) d;
  return 0;
}

static int
m_caw (struct lg_dev *d, const void *expect, const void *buf, size_t n,
       uint64_t off)
{
  int r = 0;

  (void) d;
  pthread_mutex_lock (&lock);
  caws++;
  if (memcmp (disk + off, expect, n) == 0)
    memcpy (disk + off, buf, n);
  else {
    errno = EAGAIN;
    r = -1;
  }
  pthread_mutex_unlock (&lock);
  return r;
}

static void
m_close (struct lg_dev *d)
{
  (void) d;
}

static struct lg_dev_ops ops = {
  .name = "mem",
  .pread = m_pread,
  .pwrite = m_pwrite,
  .flush = m_flush,
  .compare_write = m_caw,
  .close = m_close,
};

static uint8_t *mk;
static uint8_t kf[4][LG_KEY_BYTES];

static void
quiet (enum lg_log_level level, const char *msg)
{
  (void) level, (void) msg;
}

static void
setup (void)
{
  struct lg_header h;

  cr_assert_geq (sodium_init (), 0);
  lg_log_set_sink (quiet);
  disk = calloc (1, DEV_SIZE);
  dev.ops = &ops;
  lg_dev_set_size (&dev, DEV_SIZE);
  dev.block_size = 512;
  dev.max_io = 1 << 20;
  strcpy (dev.name, "mem");
  memset (&h, 0, sizeof h);
  cr_assert_eq (lg_header_geometry (&h, DEV_SIZE), 0);
  h.version = LG_HDR_VERSION;
  h.mode = LG_MODE_AEAD;
  randombytes_buf (h.uuid, sizeof h.uuid);
  mk = sodium_malloc (LG_KEY_BYTES);
  crypto_kdf_keygen (mk);
  for (int i = 0; i < 4; i++)
    randombytes_buf (kf[i], LG_KEY_BYTES);
  cr_assert_eq (lg_keyslot_set_keyfile (&h, 0, mk, kf[0]), 0);
  cr_assert_eq (lg_keyslot_set_keyfile (&h, 1, mk, kf[1]), 0);
  cr_assert_eq (lg_keyslot_set_keyfile (&h, 2, mk, kf[2]), 0);
  lg_header_set_mac (&h, mk);
  cr_assert_eq (lg_header_write (&dev, &h), 0);
}

/* Another admin, on another machine: `lungate key add --new-key-file k3'
 * (first free slot). */
static long added_slot = -1;
static void
other_key_add (void)
{
  struct lg_key_change kc = { 0 };
  char err[256];

  kc.add = true;
  kc.slot = -1;
  kc.mk = mk;
  kc.new_key = kf[3];
  kc.name = "other";
  cr_assert_eq (
      lg_header_update (&dev, lg_key_change, &kc, NULL, err, sizeof err), 0,
      "%s", err);
  added_slot = kc.done;
  fprintf (stderr, "other machine: key slot %ld added\n", added_slot);
}

TestSuite (keychange, .timeout = 60);

Test (keychange, remove_retry_removes_anothers_add)
{
  struct lg_key_change kc = { 0 };
  char err[256];
  struct lg_header hc[2];
  unsigned n;
  uint8_t got[LG_KEY_BYTES];

  setup ();
  /* Between our two COMPARE AND WRITEs landing and our read-back, the
   * other machine adds its key: it takes the slot we just freed. */
  inject_after = 2;
  inject = other_key_add;
  kc.add = false;
  kc.slot = 2;
  kc.mk = mk;
  kc.name = "us";
  cr_assert_eq (
      lg_header_update (&dev, lg_key_change, &kc, NULL, err, sizeof err), 0,
      "%s", err);
  fprintf (stderr, "us: key slot %ld removed\n", kc.done);
  cr_assert_eq (added_slot, 2);
  cr_assert_eq (lg_header_read_all (&dev, hc, &n, err, sizeof err), 0);
  cr_expect_eq (lg_keyslot_open_keyfile (&hc[0], kf[3], got), 2,
                "the other machine's `key add' reported slot 2 added, but its "
                "key no longer opens the volume (slot 2 kind %u): our retried "
                "remove took it away",
                hc[0].slots[2].kind);
}

/* Our add lands, then another machine's update lands on top before our
 * read-back: the retried add finds its slot there and adds nothing. */
static void
other_dirty_flip (void)
{
  struct lg_header hc[2], h;
  unsigned n;
  char err[256];

  cr_assert_eq (lg_header_read_all (&dev, hc, &n, err, sizeof err), 0);
  h = hc[0];
  h.flags ^= LG_HDR_FLAG_DIRTY;
  lg_header_set_mac (&h, mk);
  cr_assert_eq (lg_header_write (&dev, &h), 0);
}

Test (keychange, add_retried_adds_once)
{
  struct lg_key_change kc = { 0 };
  char err[256];
  struct lg_header hc[2];
  unsigned n;
  int used = 0;
  uint8_t got[LG_KEY_BYTES];

  setup ();
  inject_after = 2;
  inject = other_dirty_flip;
  kc.add = true;
  kc.slot = -1;
  kc.mk = mk;
  kc.new_key = kf[3];
  kc.name = "us";
  cr_assert_eq (
      lg_header_update (&dev, lg_key_change, &kc, NULL, err, sizeof err), 0,
      "%s", err);
  cr_assert_eq (kc.done, 3);
  cr_assert_eq (lg_header_read_all (&dev, hc, &n, err, sizeof err), 0);
  for (int i = 0; i < LG_KEYSLOTS; i++)
    used += hc[0].slots[i].kind != LG_SLOT_EMPTY;
  cr_assert_eq (used, 4, "%d slots in use: the key went in twice", used);
  cr_assert_eq (lg_keyslot_open_keyfile (&hc[0], kf[3], got), 3);
  cr_assert (hc[0].flags & LG_HDR_FLAG_DIRTY, "the other update was lost");
}
