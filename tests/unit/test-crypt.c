/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The crypt layer over an in-memory device that can be made to fail its
 * writes: round trips in both modes, tampering, ZERO units, lazy volumes,
 * and the slot chosen after an unclean stop. */
#include <config.h>

#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "crypt/crypt.h"
#include "crypt/header.h"
#include "dev/dev.h"
#include "util/log.h"

#define MEM_SIZE (8u << 20)

struct memdev {
  struct lg_dev dev;
  uint8_t *buf;
  int writes_left; /* < 0: unlimited; 0: every write fails */
};

static int
mem_pread (struct lg_dev *d, void *buf, size_t n, uint64_t off)
{
  memcpy (buf, ((struct memdev *) d)->buf + off, n);
  return 0;
}

static int
mem_pwrite (struct lg_dev *d, const void *buf, size_t n, uint64_t off,
            unsigned flags)
{
  struct memdev *m = (struct memdev *) d;

  (void) flags;
  if (m->writes_left == 0) {
    errno = EIO;
    return -1;
  }
  if (m->writes_left > 0)
    m->writes_left--;
  memcpy (m->buf + off, buf, n);
  return 0;
}

static int
mem_flush (struct lg_dev *d)
{
  (void) d;
  return 0;
}

static int
mem_zero (struct lg_dev *d, uint64_t n, uint64_t off, unsigned flags)
{
  static const uint8_t z[4096];

  (void) flags;
  while (n > 0) {
    size_t k = n < sizeof z ? (size_t) n : sizeof z;

    if (mem_pwrite (d, z, k, off, 0) < 0)
      return -1;
    off += k;
    n -= k;
  }
  return 0;
}

static void
mem_close (struct lg_dev *d)
{
  (void) d; /* the buffer outlives the device: "the disk" */
}

static const struct lg_dev_ops mem_ops = {
  .name = "mem",
  .pread = mem_pread,
  .pwrite = mem_pwrite,
  .flush = mem_flush,
  .zero = mem_zero,
  .close = mem_close,
};

static struct memdev mem;
static struct lg_header hdr;
static uint8_t *mk;
static bool manage; /* open_volume: manage the dirty flag */
static char ebuf[256];

static uint8_t kf[LG_KEY_BYTES]; /* the key file of slot 0 */

static void
setup_volume (uint32_t mode, bool lazy)
{
  char err[256];
  struct lg_dev *d;

  cr_assert_geq (sodium_init (), 0);
  memset (&mem, 0, sizeof mem);
  mem.buf = calloc (1, MEM_SIZE);
  mem.dev.ops = &mem_ops;
  lg_dev_set_size (&mem.dev, MEM_SIZE);
  mem.dev.block_size = 512;
  mem.dev.max_io = 1 << 20;
  mem.writes_left = -1;
  strcpy (mem.dev.name, "mem");

  memset (&hdr, 0, sizeof hdr);
  cr_assert_eq (lg_header_geometry (&hdr, MEM_SIZE), 0);
  hdr.version = LG_HDR_VERSION;
  hdr.mode = mode;
  hdr.flags = lazy ? LG_HDR_FLAG_LAZY : 0;
  randombytes_buf (hdr.uuid, sizeof hdr.uuid);
  mk = sodium_malloc (LG_KEY_BYTES);
  crypto_kdf_keygen (mk);
  randombytes_buf (kf, sizeof kf);
  cr_assert_eq (lg_keyslot_set_keyfile (&hdr, 0, mk, kf), 0);
  lg_header_set_mac (&hdr, mk);
  if (!lazy) {
    d = lg_crypt_open (&mem.dev, false, &hdr, mk, 0, false, err, sizeof err);
    cr_assert_not_null (d, "%s", err);
    cr_assert_eq (lg_crypt_init_units (d, 0, hdr.nunits, NULL), 0);
    lg_dev_close (d);
  }
}

static struct lg_dev *
open_volume (void)
{
  char err[256];
  struct lg_dev *d
      = lg_crypt_open (&mem.dev, false, &hdr, mk, 4, manage, err, sizeof err);

  cr_assert_not_null (d, "%s", err);
  return d;
}

static void
teardown (void)
{
  free (mem.buf);
  sodium_free (mk);
}

static void
fill (uint8_t *p, size_t n, int seed)
{
  for (size_t i = 0; i < n; i++)
    p[i] = (uint8_t) (seed * 131 + i * 7);
}

TestSuite (crypt, .fini = teardown);

Test (crypt, aead_round_trip_and_no_plaintext_on_disk)
{
  uint8_t w[3 * 4096], r[3 * 4096];
  struct lg_dev *d;

  setup_volume (LG_MODE_AEAD, false);
  d = open_volume ();
  cr_assert_eq (lg_dev_size (d), hdr.nunits * 4096);
  memset (w, 'P', sizeof w);
  cr_assert_eq (lg_dev_pwrite (d, w, sizeof w, 4096 * 7, 0), 0);
  cr_assert_eq (lg_dev_pread (d, r, sizeof r, 4096 * 7), 0);
  cr_assert_arr_eq (r, w, sizeof w);
  cr_assert_null (memmem (mem.buf, MEM_SIZE, w, 64), "plaintext on disk");
  lg_dev_close (d);
  /* A new session (new nonce prefix) reads the same. */
  d = open_volume ();
  cr_assert_eq (lg_dev_pread (d, r, sizeof r, 4096 * 7), 0);
  cr_assert_arr_eq (r, w, sizeof w);
  lg_dev_close (d);
}

Test (crypt, mac_mode_stores_plaintext_and_detects_changes)
{
  uint8_t w[4096], r[4096];
  struct lg_dev *d;
  uint8_t *where;

  setup_volume (LG_MODE_MAC, false);
  d = open_volume ();
  fill (w, sizeof w, 3);
  cr_assert_eq (lg_dev_pwrite (d, w, sizeof w, 4096 * 2, 0), 0);
  where = memmem (mem.buf, MEM_SIZE, w, sizeof w);
  cr_assert_not_null (where, "mac mode stores plaintext");
  where[100] ^= 1;
  errno = 0;
  cr_assert_eq (lg_dev_pread (d, r, sizeof r, 4096 * 2), -1);
  cr_assert_eq (errno, EIO);
  cr_assert_eq (lg_crypt_auth_failures (d), 1);
  /* The neighbours still read. */
  cr_assert_eq (lg_dev_pread (d, r, sizeof r, 4096 * 3), 0);
  lg_dev_close (d);
}

Test (crypt, unaligned_writes_merge)
{
  uint8_t model[5 * 4096], r[5 * 4096], w[6000];
  struct lg_dev *d;

  setup_volume (LG_MODE_AEAD, false);
  d = open_volume ();
  memset (model, 0, sizeof model);
  fill (w, sizeof w, 9);
  cr_assert_eq (lg_dev_pwrite (d, w, sizeof w, 1000, 0), 0);
  memcpy (model + 1000, w, sizeof w);
  cr_assert_eq (lg_dev_pwrite (d, w, 3, 8191, 0), 0);
  memcpy (model + 8191, w, 3);
  cr_assert_eq (lg_dev_pread (d, r, sizeof r, 0), 0);
  cr_assert_arr_eq (r, model, sizeof model);
  cr_assert_eq (lg_dev_pread (d, r, 77, 8190), 0);
  cr_assert_arr_eq (r, model + 8190, 77);
  lg_dev_close (d);
}

Test (crypt, zero_and_trim_read_zeroes_and_stay_authentic)
{
  uint8_t w[4 * 4096], r[4 * 4096], z[4 * 4096] = { 0 };
  struct lg_dev *d;

  setup_volume (LG_MODE_AEAD, false);
  d = open_volume ();
  memset (w, 0x77, sizeof w);
  cr_assert_eq (lg_dev_pwrite (d, w, sizeof w, 0, 0), 0);
  cr_assert_eq (lg_dev_zero (d, 2 * 4096, 4096, 0), 0);
  cr_assert_eq (lg_dev_trim (d, 4096, 3 * 4096, 0), 0);
  cr_assert_eq (lg_dev_pread (d, r, sizeof r, 0), 0);
  cr_assert_arr_eq (r, w, 4096);
  cr_assert_arr_eq (r + 4096, z, 3 * 4096);
  cr_assert_eq (lg_crypt_verify (d, 0, hdr.nunits, false, NULL, NULL, NULL), 0);
  lg_dev_close (d);
}

Test (crypt, wiped_metadata_fails_unless_lazy)
{
  uint8_t r[4096];
  struct lg_dev *d;

  setup_volume (LG_MODE_AEAD, false);
  memset (mem.buf + hdr.md_offset, 0, LG_MD_BLOCK);
  d = open_volume ();
  errno = 0;
  cr_assert_eq (lg_dev_pread (d, r, sizeof r, 0), -1, "wiped metadata read");
  cr_assert_eq (errno, EIO);
  lg_dev_close (d);
  free (mem.buf);
  sodium_free (mk);

  setup_volume (LG_MODE_AEAD, true);
  d = open_volume ();
  cr_assert_eq (lg_dev_pread (d, r, sizeof r, 0), 0, "lazy: never written");
  lg_dev_close (d);
}

/* The trap of DESIGN.md: after an unclean stop the newer slot may be the
 * one that does not authenticate the data on disk; a write must overwrite
 * that one, not the old slot that still holds. */
Test (crypt, slot_choice_after_unclean_stop)
{
  uint8_t a[4096], b[4096], c[4096], r[4096];
  struct lg_dev *d;

  setup_volume (LG_MODE_AEAD, false);
  memset (a, 'A', sizeof a);
  memset (b, 'B', sizeof b);
  memset (c, 'C', sizeof c);
  d = open_volume ();
  cr_assert_eq (lg_dev_pwrite (d, a, 4096, 5 * 4096, 0), 0);
  lg_dev_close (d);

  for (int crash = 0; crash < 3; crash++) {
    /* The metadata write lands, the data write does not: a crash
     * between the two. */
    d = open_volume ();
    mem.writes_left = 1;
    cr_assert_eq (lg_dev_pwrite (d, crash % 2 ? c : b, 4096, 5 * 4096, 0), -1);
    mem.writes_left = -1;
    lg_dev_close (d);
    d = open_volume ();
    cr_assert_eq (lg_dev_pread (d, r, sizeof r, 5 * 4096), 0,
                  "after crash %d the unit does not read", crash);
    cr_assert_arr_eq (r, a, sizeof a, "after crash %d: not the old data",
                      crash);
    lg_dev_close (d);
  }
  d = open_volume ();
  cr_assert_eq (lg_dev_pwrite (d, c, 4096, 5 * 4096, 0), 0);
  cr_assert_eq (lg_dev_pread (d, r, sizeof r, 5 * 4096), 0);
  cr_assert_arr_eq (r, c, sizeof c);
  lg_dev_close (d);
}

Test (crypt, units_are_bound_to_their_place)
{
  uint8_t w[2 * 4096], r[4096];
  struct lg_dev *d;
  uint8_t tmp[4096];
  uint8_t *u0, *u1;

  setup_volume (LG_MODE_AEAD, false);
  d = open_volume ();
  fill (w, sizeof w, 5);
  cr_assert_eq (lg_dev_pwrite (d, w, sizeof w, 40 * 4096, 0), 0);
  u0 = mem.buf + hdr.data_offset + 40 * 4096;
  u1 = u0 + 4096;
  memcpy (tmp, u0, 4096);
  memcpy (u0, u1, 4096);
  memcpy (u1, tmp, 4096);
  cr_assert_eq (lg_dev_pread (d, r, sizeof r, 40 * 4096), -1);
  cr_assert_eq (lg_dev_pread (d, r, sizeof r, 41 * 4096), -1);
  cr_assert_eq (lg_crypt_verify (d, 0, hdr.nunits, false, NULL, NULL, NULL), 2);
  lg_dev_close (d);
}

static bool
disk_dirty (void)
{
  struct lg_header h;
  char err[256];

  cr_assert_eq (lg_header_read (&mem.dev, &h, err, sizeof err), 0, "%s", err);
  return (h.flags & LG_HDR_FLAG_DIRTY) != 0;
}

/* The dirty flag: set while open, cleared by a clean close; a failed
 * write leaves it set, and then every first write checks the slots (the
 * trap again, now across sessions); verify --repair cleans it. */
Test (crypt, dirty_flag_and_repair)
{
  uint8_t a[4096], b[4096], r[4096];
  struct lg_dev *d;

  setup_volume (LG_MODE_AEAD, false);
  cr_assert_eq (lg_header_write (&mem.dev, &hdr), 0);
  manage = true;
  memset (a, 'A', sizeof a);
  memset (b, 'B', sizeof b);

  d = open_volume ();
  cr_assert (!disk_dirty (), "an open that has not written wrote the header");
  cr_assert_eq (lg_dev_pwrite (d, a, 4096, 9 * 4096, 0), 0);
  cr_assert (disk_dirty (), "the first write must mark the header dirty");
  lg_dev_close (d);
  cr_assert (!disk_dirty (), "a clean close must mark it clean");

  /* Crash between the metadata and the data, twice, in a clean volume
   * and then in the dirty one. */
  for (int i = 0; i < 2; i++) {
    cr_assert_eq (lg_header_read (&mem.dev, &hdr, ebuf, sizeof ebuf), 0);
    d = open_volume ();
    cr_assert_eq (lg_crypt_was_dirty (d), i == 1);
    /* Twice in one session: after the first failure the session must
     * stop trusting the newer slot. */
    for (int k = 0; k < 2; k++) {
      mem.writes_left = 1;
      cr_assert_eq (lg_dev_pwrite (d, b, 4096, 9 * 4096, 0), -1);
      mem.writes_left = -1;
    }
    lg_dev_close (d);
    cr_assert (disk_dirty (), "after a failed write the header stays dirty");
    cr_assert_eq (lg_header_read (&mem.dev, &hdr, ebuf, sizeof ebuf), 0);
    d = open_volume ();
    cr_assert_eq (lg_dev_pread (d, r, sizeof r, 9 * 4096), 0,
                  "crash %d: the unit does not read", i);
    cr_assert_arr_eq (r, a, sizeof a, "crash %d: not the old data", i);
    lg_dev_close (d);
  }

  /* Repair: the stale newer slot goes, the volume is clean again, and a
   * crash in the clean volume still leaves the old data. */
  cr_assert_eq (lg_header_read (&mem.dev, &hdr, ebuf, sizeof ebuf), 0);
  d = open_volume ();
  cr_assert_eq (lg_crypt_verify (d, 0, hdr.nunits, true, NULL, NULL, NULL), 0);
  lg_dev_close (d);
  cr_assert (!disk_dirty (), "repair must leave the volume clean");
  cr_assert_eq (lg_header_read (&mem.dev, &hdr, ebuf, sizeof ebuf), 0);
  d = open_volume ();
  cr_assert (!lg_crypt_was_dirty (d));
  mem.writes_left = 1;
  cr_assert_eq (lg_dev_pwrite (d, b, 4096, 9 * 4096, 0), -1);
  mem.writes_left = -1;
  lg_dev_close (d);
  cr_assert_eq (lg_header_read (&mem.dev, &hdr, ebuf, sizeof ebuf), 0);
  d = open_volume ();
  cr_assert_eq (lg_dev_pread (d, r, sizeof r, 9 * 4096), 0);
  cr_assert_arr_eq (r, a, sizeof a);
  manage = false;
  lg_dev_close (d);
}

/* A lazy volume's never-written unit whose first write fails between the
 * metadata and the data (the data write, or the zeroing, fails): it reads
 * as its old content, zeroes, and verifies; in this session and the next,
 * and a later write to it works.  Before, it had one slot that did not
 * authenticate and one empty slot: EIO for good. */
static void
failed_first_write (bool zero, bool trim)
{
  uint8_t w[4096], r[4096], z[4096] = { 0 };
  struct lg_dev *d;

  setup_volume (LG_MODE_AEAD, true);
  cr_assert_eq (lg_header_write (&mem.dev, &hdr), 0);
  manage = true;
  /* A lazy format leaves what the disk held before. */
  randombytes_buf (mem.buf + hdr.data_offset + 8 * 4096, 4096);
  d = open_volume ();
  fill (w, sizeof w, 5);
  mem.writes_left = 1; /* the metadata goes, the data fails */
  errno = 0;
  if (zero)
    cr_assert_eq (lg_dev_zero (d, 4096, 8 * 4096, 0), -1);
  else if (trim)
    cr_assert_eq (lg_dev_trim (d, 4096, 8 * 4096, 0), -1);
  else
    cr_assert_eq (lg_dev_pwrite (d, w, sizeof w, 8 * 4096, 0), -1);
  mem.writes_left = -1;
  cr_assert_eq (lg_dev_pread (d, r, sizeof r, 8 * 4096), 0,
                "the unit is unreadable after a failed first write");
  cr_assert_arr_eq (r, z, sizeof r);
  lg_dev_close (d);
  /* The next session finds the volume dirty. */
  cr_assert_eq (lg_header_read (&mem.dev, &hdr, ebuf, sizeof ebuf), 0);
  d = open_volume ();
  cr_assert_eq (lg_dev_pread (d, r, sizeof r, 8 * 4096), 0,
                "unreadable in the next session");
  cr_assert_arr_eq (r, z, sizeof r);
  cr_assert_eq (lg_crypt_verify (d, 0, hdr.nunits, false, NULL, NULL, NULL), 0);
  /* A repair makes the unit never written again, and the volume clean:
   * then the unit still reads as zeroes. */
  cr_assert_eq (lg_crypt_verify (d, 0, hdr.nunits, true, NULL, NULL, NULL), 0);
  lg_dev_close (d);
  cr_assert_eq (lg_header_read (&mem.dev, &hdr, ebuf, sizeof ebuf), 0);
  cr_assert (!(hdr.flags & LG_HDR_FLAG_DIRTY), "not clean after the repair");
  d = open_volume ();
  cr_assert_eq (lg_dev_pread (d, r, sizeof r, 8 * 4096), 0,
                "unreadable after the repair");
  cr_assert_arr_eq (r, z, sizeof r);
  cr_assert_eq (lg_dev_pwrite (d, w, sizeof w, 8 * 4096, 0), 0);
  cr_assert_eq (lg_dev_pread (d, r, sizeof r, 8 * 4096), 0);
  cr_assert_arr_eq (r, w, sizeof r);
  manage = false;
  lg_dev_close (d);
}

/* On a clean lazy volume, a unit written once (one slot, one empty) whose
 * data is damaged fails: it is not taken for a failed first write. */
Test (crypt, lazy_once_written_damage_fails)
{
  uint8_t w[4096], r[4096];
  struct lg_dev *d;

  setup_volume (LG_MODE_AEAD, true);
  cr_assert_eq (lg_header_write (&mem.dev, &hdr), 0);
  manage = true;
  d = open_volume ();
  fill (w, sizeof w, 9);
  cr_assert_eq (lg_dev_pwrite (d, w, sizeof w, 5 * 4096, 0), 0);
  lg_dev_close (d);
  mem.buf[hdr.data_offset + 5 * 4096 + 100] ^= 1;
  cr_assert_eq (lg_header_read (&mem.dev, &hdr, ebuf, sizeof ebuf), 0);
  d = open_volume ();
  errno = 0;
  cr_assert_eq (lg_dev_pread (d, r, sizeof r, 5 * 4096), -1,
                "damage read back as a never-written unit");
  cr_assert_eq (errno, EIO);
  manage = false;
  lg_dev_close (d);
}

Test (crypt, lazy_failed_first_write_reads_old)
{
  failed_first_write (false, false);
}

Test (crypt, lazy_failed_first_zero_reads_old)
{
  failed_first_write (true, false);
}

Test (crypt, lazy_failed_first_trim_reads_old)
{
  failed_first_write (false, true);
}

static char last_error[512];

static void
keep_errors (enum lg_log_level level, const char *msg)
{
  if (level == LG_LOG_ERROR)
    snprintf (last_error, sizeof last_error, "%s", msg);
}

/* What an authentication failure says: "tampered with" only on a volume
 * that was clean; on a dirty one, a crash or failed write and what to do
 * (case 8 of issue 13: it always said "tampered with"). */
Test (crypt, auth_failure_message_says_what_is_known)
{
  uint8_t r[4096];
  struct lg_dev *d;

  setup_volume (LG_MODE_AEAD, false);
  cr_assert_eq (lg_header_write (&mem.dev, &hdr), 0);
  manage = true;
  lg_log_set_sink (keep_errors);
  mem.buf[hdr.data_offset + 3 * 4096 + 17] ^= 1;

  d = open_volume (); /* clean */
  cr_assert_eq (lg_dev_pread (d, r, sizeof r, 3 * 4096), -1);
  cr_assert (strstr (last_error, "under both slots") != NULL, "%s", last_error);
  cr_assert (strstr (last_error, "tampered with") != NULL, "%s", last_error);
  lg_dev_close (d);
  /* As a crash leaves it: dirty. */
  cr_assert_eq (lg_header_read (&mem.dev, &hdr, ebuf, sizeof ebuf), 0);
  hdr.flags |= LG_HDR_FLAG_DIRTY;
  lg_header_set_mac (&hdr, mk);
  cr_assert_eq (lg_header_write (&mem.dev, &hdr), 0);
  d = open_volume (); /* dirty */
  last_error[0] = '\0';
  cr_assert_eq (lg_dev_pread (d, r, sizeof r, 3 * 4096), -1);
  cr_assert (strstr (last_error, "tampered with") == NULL, "%s", last_error);
  cr_assert (strstr (last_error, "stopped uncleanly or a write failed") != NULL,
             "%s", last_error);
  cr_assert (strstr (last_error, "lungate verify --repair") != NULL, "%s",
             last_error);
  manage = false;
  lg_dev_close (d);
  lg_log_set_sink (NULL);
}

/* A newer header copy with a valid checksum that does not authenticate
 * (forged, or damaged and re-checksummed): a wrong key changes nothing on
 * the LUN, and the right key opens the older, good copy (issue 13, case
 * 7: the forged copy replaced the good one before any key check, and the
 * volume could no longer be opened). */
Test (crypt, forged_newer_header_copy_is_not_trusted)
{
  struct lg_header f, h;
  uint8_t *mk2, *got, wrong[LG_KEY_BYTES], *before = malloc (LG_HDR_AREA);
  struct lg_keysrc ks = { 0 };
  char err[256];

  setup_volume (LG_MODE_AEAD, false); /* sodium_init first */
  mk2 = sodium_malloc (LG_KEY_BYTES);
  got = sodium_malloc (LG_KEY_BYTES);
  cr_assert_eq (lg_header_write (&mem.dev, &hdr), 0);
  f = hdr;
  f.seq = hdr.seq + 5;
  crypto_kdf_keygen (mk2);
  lg_header_set_mac (&f, mk2);
  lg_header_serialize (&f, mem.buf + LG_HDR_COPY0_OFFSET);
  memcpy (before, mem.buf, LG_HDR_AREA);

  randombytes_buf (wrong, sizeof wrong);
  ks.keyfile = wrong;
  cr_assert_eq (lg_crypt_unlock (&mem.dev, &ks, &h, got, err, sizeof err), -1);
  cr_assert_arr_eq (mem.buf, before, LG_HDR_AREA,
                    "a wrong key modified the header area");
  ks.keyfile = kf;
  cr_assert_eq (lg_crypt_unlock (&mem.dev, &ks, &h, got, err, sizeof err), 0,
                "%s", err);
  cr_assert_eq (h.seq, hdr.seq, "not the good copy");
  cr_assert_eq (sodium_memcmp (got, mk, LG_KEY_BYTES), 0);
  sodium_free (mk2);
  sodium_free (got);
  free (before);
}

/* An unaligned write that covers a damaged unit whole rewrites it: only
 * the units it covers in part are read first (issue 13, case 5: both edge
 * units were always read, and the damaged one failed the write). */
Test (crypt, unaligned_write_over_a_damaged_unit)
{
  uint8_t w[4096 + 100], r[4096 + 100];
  struct lg_dev *d;

  setup_volume (LG_MODE_AEAD, false);
  d = open_volume ();
  mem.buf[hdr.data_offset + 6 * 4096 + 9] ^= 1; /* unit 6 damaged */
  fill (w, sizeof w, 3);
  /* The last 100 bytes of unit 5, and all of unit 6. */
  cr_assert_eq (lg_dev_pwrite (d, w, sizeof w, 6 * 4096 - 100, 0), 0,
                "the write failed: %m");
  cr_assert_eq (lg_dev_pread (d, r, sizeof r, 6 * 4096 - 100), 0);
  cr_assert_arr_eq (r, w, sizeof r);
  /* And the same with the damaged unit at the head. */
  mem.buf[hdr.data_offset + 9 * 4096 + 9] ^= 1; /* unit 9 damaged */
  cr_assert_eq (lg_dev_pwrite (d, w, sizeof w, 9 * 4096, 0), 0,
                "the write failed: %m");
  cr_assert_eq (lg_dev_pread (d, r, sizeof r, 9 * 4096), 0);
  cr_assert_arr_eq (r, w, sizeof r);
  lg_dev_close (d);
}
