/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Blocks a writer knows (dev/known.h): the disk it wrote reads back the
 * same, another disk does not, a write of unknown outcome leaves either
 * content acceptable, overlapping writes in flight leave both, and a
 * block that flips once on the wire is no proof. */
#include <config.h>

#include <criterion/criterion.h>
#include <string.h>

#include "dev/known.h"

#define BS 512
#define NB 64

static uint8_t disk[NB * BS];
static int flips; /* reads left that come back with a bit flipped */

static int
read_disk (void *opaque, uint64_t lba, uint8_t *buf)
{
  (void) opaque;
  if (lba >= NB)
    return -1;
  memcpy (buf, disk + lba * BS, BS);
  if (flips > 0) {
    flips--;
    buf[7] ^= 0x10;
  }
  return 0;
}

/* Writes n blocks of byte v at lba to the disk through k. */
static void
write_ok (struct lg_known *k, uint64_t lba, uint64_t n, uint8_t v)
{
  static uint8_t buf[NB * BS];
  unsigned t;

  memset (buf, v, n * BS);
  t = lg_known_begin (k, lba, n, buf);
  memcpy (disk + lba * BS, buf, n * BS);
  lg_known_end (k, t, true);
}

static int
check (struct lg_known *k, unsigned *checked)
{
  char msg[200];

  return lg_known_check (k, read_disk, NULL, checked, msg, sizeof msg);
}

Test (known, same_disk_other_disk)
{
  struct lg_known *k = lg_known_new (BS);
  unsigned n;

  memset (disk, 0, sizeof disk);
  cr_assert_eq (check (k, &n), 0);
  cr_assert_eq (n, 0);
  write_ok (k, 3, 4, 0xaa);
  write_ok (k, 20, 1, 0xbb);
  cr_assert_eq (check (k, &n), 0);
  cr_assert_eq (n, 2);
  disk[20 * BS + 100] ^= 1; /* another disk */
  cr_assert_eq (check (k, &n), 1);
  lg_known_free (k);
}

Test (known, one_flip_is_no_proof)
{
  struct lg_known *k = lg_known_new (BS);
  unsigned n;

  memset (disk, 0, sizeof disk);
  write_ok (k, 5, 1, 0x11);
  flips = 2;
  cr_assert_eq (check (k, &n), 0, "two flipped reads were taken for proof");
  flips = 3;
  cr_assert_eq (check (k, &n), 1);
  flips = 0;
  lg_known_free (k);
}

Test (known, unknown_outcome_either)
{
  struct lg_known *k = lg_known_new (BS);
  uint8_t nb[BS];
  unsigned n, t;

  memset (disk, 0, sizeof disk);
  write_ok (k, 8, 2, 0x22);
  memset (nb, 0x33, sizeof nb);
  t = lg_known_begin (k, 8, 1, nb);
  /* Not executed (held during an outage): the old content agrees. */
  cr_assert_eq (check (k, &n), 0);
  /* Executed, its answer lost: the new one too. */
  memcpy (disk + 8 * BS, nb, BS);
  lg_known_end (k, t, false);
  cr_assert_eq (check (k, &n), 0);
  cr_assert_eq (n, 1);
  /* Neither: another disk. */
  disk[8 * BS] ^= 1;
  cr_assert_eq (check (k, &n), 1);
  lg_known_free (k);
}

Test (known, overlapping_in_flight_keep_both)
{
  struct lg_known *k = lg_known_new (BS);
  uint8_t a[BS], b[BS];
  unsigned n, ta, tb;

  memset (disk, 0, sizeof disk);
  write_ok (k, 1, 1, 0x44);
  memset (a, 0x55, sizeof a);
  memset (b, 0x66, sizeof b);
  ta = lg_known_begin (k, 1, 1, a);
  tb = lg_known_begin (k, 1, 1, b);
  /* The target ran b, then a; b's answer came last. */
  memcpy (disk + BS, a, BS);
  lg_known_end (k, ta, true);
  lg_known_end (k, tb, true);
  cr_assert_eq (check (k, &n), 0, "the order the target chose was refused");
  lg_known_free (k);
}

Test (known, zero_forgets)
{
  struct lg_known *k = lg_known_new (BS);
  unsigned n, t;

  memset (disk, 0, sizeof disk);
  write_ok (k, 2, 1, 0x77);
  t = lg_known_begin (k, 0, 8, NULL);
  memset (disk, 0, 8 * BS);
  lg_known_end (k, t, true);
  cr_assert_eq (check (k, &n), 0);
  cr_assert_eq (n, 0);
  lg_known_free (k);
}
