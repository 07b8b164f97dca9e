/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Header updates from many writers at once (issue 13, case 6): threads
 * add and remove key slots while others flip the dirty flag, as `lungate
 * key add' does while gateways open and close the volume.  Every slot
 * added must be there at the end, every slot removed gone, and the header
 * must still open.  Over a device with an atomic COMPARE AND WRITE, one
 * whose COMPARE AND WRITE is a read, a compare and a write with a gap (as
 * tgt's would be), and one without (the timed scheme).
 *
 * The gap device keeps the promise lungate-format(5) asks of a target: a
 * compared write lands before the read-back (LG_HDR_VERIFY_MS later).  A
 * thread of this test can be kept off the CPU far longer than that on a
 * loaded machine, so the write still owed is made by the next read
 * rather than left to the thread's timing: a gap longer than the wait
 * does lose a change, by design, and is not what this test is about.
 * As every write of these devices lands at once, the COMPARE AND WRITE
 * ones read back after 25 ms (lg_header_update_timed) rather than a
 * second, to keep the test short; the timed scheme keeps its real
 * times. */
#include <config.h>

#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sodium.h>

#include "crypt/header.h"
#include "dev/dev.h"
#include "util/log.h"

#define DEV_SIZE (4u << 20)

enum caw { CAW_ATOMIC, CAW_GAP, CAW_NONE };

/* A compared write not yet made (CAW_GAP). */
struct owed {
  bool used;
  uint64_t off;
  size_t n;
  unsigned long ticket; /* order of the compares */
  uint8_t data[LG_HDR_SIZE];
};

struct hdev {
  struct lg_dev dev;
  pthread_mutex_t lock;
  uint8_t *buf;
  enum caw caw;
  struct owed owed[LG_KEYSLOTS + 2]; /* one per racing thread at most */
  unsigned long raced;               /* compares passed with a write owed */
  unsigned long tickets;
  unsigned verify_ms; /* lg_header_update_timed */
};

static struct hdev hd;

/* Under hd.lock: make the writes still owed over [off, off+n), oldest
 * first.  Only those: a read elsewhere cannot see them (lg_header_update
 * reads the other copy just before each COMPARE AND WRITE, and paying
 * every write there closed the window this device is for). */
static void
pay_owed (uint64_t off, size_t n)
{
  for (;;) {
    struct owed *o = NULL;

    for (size_t i = 0; i < sizeof hd.owed / sizeof hd.owed[0]; i++)
      if (hd.owed[i].used && hd.owed[i].off < off + n
          && off < hd.owed[i].off + hd.owed[i].n
          && (!o || hd.owed[i].ticket < o->ticket))
        o = &hd.owed[i];
    if (!o)
      return;
    memcpy (hd.buf + o->off, o->data, o->n);
    o->used = false;
  }
}

static int
h_pread (struct lg_dev *d, void *buf, size_t n, uint64_t off)
{
  (void) d;
  pthread_mutex_lock (&hd.lock);
  pay_owed (off, n);
  memcpy (buf, hd.buf + off, n);
  pthread_mutex_unlock (&hd.lock);
  return 0;
}

static int
h_pwrite (struct lg_dev *d, const void *buf, size_t n, uint64_t off,
          unsigned flags)
{
  (void) d, (void) flags;
  pthread_mutex_lock (&hd.lock);
  memcpy (hd.buf + off, buf, n);
  pthread_mutex_unlock (&hd.lock);
  return 0;
}

static int
h_flush (struct lg_dev *d)
{
  (void) d;
  return 0;
}

static int
h_compare_write (struct lg_dev *d, const void *expect, const void *buf,
                 size_t n, uint64_t off)
{
  struct owed *o = NULL;
  bool same;

  (void) d;
  cr_assert_leq (n, sizeof o->data);
  pthread_mutex_lock (&hd.lock);
  same = memcmp (hd.buf + off, expect, n) == 0;
  if (same && hd.caw == CAW_ATOMIC)
    memcpy (hd.buf + off, buf, n);
  if (same && hd.caw == CAW_GAP) {
    /* Compared, and written a moment later: another compare can pass in
     * between, against the bytes still there. */
    for (size_t i = 0; i < sizeof hd.owed / sizeof hd.owed[0]; i++) {
      if (hd.owed[i].used && hd.owed[i].off == off)
        hd.raced++;
      if (!hd.owed[i].used && !o)
        o = &hd.owed[i];
    }
    cr_assert_not_null (o);
    *o = (struct owed){ true, off, n, ++hd.tickets, { 0 } };
    memcpy (o->data, buf, n);
  }
  pthread_mutex_unlock (&hd.lock);
  if (!same) {
    errno = EAGAIN;
    return -1;
  }
  if (o) {
    usleep ((useconds_t) randombytes_uniform (2000));
    pthread_mutex_lock (&hd.lock);
    if (o->used) { /* not yet made by a read */
      memcpy (hd.buf + o->off, o->data, o->n);
      o->used = false;
    }
    pthread_mutex_unlock (&hd.lock);
  }
  return 0;
}

static void
h_close (struct lg_dev *d)
{
  (void) d;
}

static struct lg_dev_ops ops = {
  .name = "hdr",
  .pread = h_pread,
  .pwrite = h_pwrite,
  .flush = h_flush,
  .close = h_close,
};

static uint8_t *mk;
static uint8_t keys[LG_KEYSLOTS][LG_KEY_BYTES];

static void
setup (enum caw caw)
{
  struct lg_header h;

  cr_assert_geq (sodium_init (), 0);
  memset (&hd, 0, sizeof hd);
  pthread_mutex_init (&hd.lock, NULL);
  hd.buf = calloc (1, DEV_SIZE);
  cr_assert_not_null (hd.buf);
  hd.caw = caw;
  hd.verify_ms = caw == CAW_NONE ? LG_HDR_VERIFY_MS : 25;
  ops.compare_write = caw == CAW_NONE ? NULL : h_compare_write;
  hd.dev.ops = &ops;
  lg_dev_set_size (&hd.dev, DEV_SIZE);
  hd.dev.block_size = 512;
  hd.dev.max_io = 1 << 20;
  strcpy (hd.dev.name, "hdr");
  memset (&h, 0, sizeof h);
  cr_assert_eq (lg_header_geometry (&h, DEV_SIZE), 0);
  h.version = LG_HDR_VERSION;
  h.mode = LG_MODE_AEAD;
  randombytes_buf (h.uuid, sizeof h.uuid);
  mk = sodium_malloc (LG_KEY_BYTES);
  crypto_kdf_keygen (mk);
  for (int i = 0; i < LG_KEYSLOTS; i++)
    randombytes_buf (keys[i], LG_KEY_BYTES);
  cr_assert_eq (lg_keyslot_set_keyfile (&h, 0, mk, keys[0]), 0);
  lg_header_set_mac (&h, mk);
  cr_assert_eq (lg_header_write (&hd.dev, &h), 0);
}

/* ---- the changes ---- */

struct change {
  int slot; /* key slot to set or empty; -1: the dirty flag */
  bool set; /* set the slot (or the flag), else empty it */
};

static int
newest_authentic (const struct lg_header *copies, unsigned n,
                  struct lg_header *out)
{
  for (unsigned i = 0; i < n; i++)
    if (lg_header_check_mac (&copies[i], mk) == 0) {
      *out = copies[i];
      return 0;
    }
  errno = EACCES;
  return -1;
}

static int
apply (const struct lg_header *copies, unsigned n, struct lg_header *out,
       void *opaque)
{
  const struct change *c = opaque;

  if (newest_authentic (copies, n, out) < 0)
    return -1;
  if (c->slot < 0) {
    if (((out->flags & LG_HDR_FLAG_DIRTY) != 0) == c->set)
      return 1;
    out->flags ^= LG_HDR_FLAG_DIRTY;
  }
  else if (c->set) {
    if (out->slots[c->slot].kind != LG_SLOT_EMPTY)
      return 1; /* ours, from an attempt that landed */
    cr_assert_eq (
        lg_keyslot_set_keyfile (out, (unsigned) c->slot, mk, keys[c->slot]), 0);
  }
  else {
    if (out->slots[c->slot].kind == LG_SLOT_EMPTY)
      return 1;
    memset (&out->slots[c->slot], 0, sizeof out->slots[c->slot]);
  }
  lg_header_set_mac (out, mk);
  return 0;
}

struct job {
  struct change c;
  int times;
};

static void *
run_job (void *arg)
{
  struct job *j = arg;
  char err[256];

  for (int i = 0; i < j->times; i++) {
    if (j->c.slot < 0)
      j->c.set = !j->c.set;
    cr_assert_eq (lg_header_update_timed (&hd.dev, apply, &j->c, NULL, err,
                                          sizeof err, hd.verify_ms),
                  0, "%s", err);
  }
  return NULL;
}

/* Slots 1..nslots all set (set) or all empty, and slot 0 still opens. */
static void
check (int nslots, bool set)
{
  struct lg_header hc[2], h;
  unsigned n;
  char err[256];
  uint8_t *got = sodium_malloc (LG_KEY_BYTES);

  cr_assert_eq (lg_header_read_all (&hd.dev, hc, &n, err, sizeof err), 0, "%s",
                err);
  cr_assert_eq (newest_authentic (hc, n, &h), 0);
  for (int s = 1; s <= nslots; s++) {
    cr_assert_eq (h.slots[s].kind != LG_SLOT_EMPTY, set,
                  "slot %d was %s and is %s", s, set ? "added" : "removed",
                  set ? "empty" : "still there");
    if (set) {
      cr_assert_eq (lg_keyslot_open_keyfile (&h, keys[s], got), s);
      cr_assert_eq (sodium_memcmp (got, mk, LG_KEY_BYTES), 0);
    }
  }
  cr_assert_eq (lg_keyslot_open_keyfile (&h, keys[0], got), 0);
  sodium_free (got);
}

/* Rounds of: nslots threads each add a slot, two flip the dirty flag;
 * then the same removing them. */
static void
race (int rounds, int nslots, int flips)
{
  for (int r = 0; r < rounds; r++)
    for (int phase = 0; phase < 2; phase++) {
      pthread_t t[LG_KEYSLOTS + 2];
      struct job j[LG_KEYSLOTS + 2];
      int n = 0;

      for (int s = 1; s <= nslots; s++)
        j[n++] = (struct job){ { s, phase == 0 }, 1 };
      j[n++] = (struct job){ { -1, false }, flips };
      j[n++] = (struct job){ { -1, true }, flips };
      for (int i = 0; i < n; i++)
        pthread_create (&t[i], NULL, run_job, &j[i]);
      for (int i = 0; i < n; i++)
        pthread_join (t[i], NULL);
      check (nslots, phase == 0);
    }
}

static void
quiet (enum lg_log_level level, const char *msg)
{
  (void) level, (void) msg;
}

TestSuite (hdrupdate, .timeout = 300);

Test (hdrupdate, atomic_compare_and_write)
{
  lg_log_set_sink (quiet);
  setup (CAW_ATOMIC);
  race (8, LG_KEYSLOTS - 1, 4);
}

Test (hdrupdate, compare_and_write_with_a_gap)
{
  lg_log_set_sink (quiet);
  setup (CAW_GAP);
  /* Eight rounds, and more until the race this device is for has
   * happened (two compares passed against the same bytes) three times,
   * up to 32. */
  for (int r = 0; r < 32 && (r < 8 || hd.raced < 3); r++)
    race (1, LG_KEYSLOTS - 1, 4);
  cr_assert_gt (hd.raced, 0);
}

Test (hdrupdate, timed_scheme_without_compare_and_write)
{
  lg_log_set_sink (quiet);
  setup (CAW_NONE);
  race (1, 3, 2);
}
