/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Fences (src/iscsi/fence.h): which CDBs write which blocks, waiting
 * behind a write of unknown outcome, a permanent fence; and the split of
 * large requests (no 4 KiB unit or physical block in two commands). */
#include <config.h>

#include <criterion/criterion.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dev/iscsi.h"
#include "iscsi/fence.h"

Test (fence, write_ranges)
{
  struct scsi_task *t;
  uint64_t lba, n;

  t = scsi_cdb_write16 (1000, 8 * 512, 512, 0, 0, 0, 0, 0);
  cr_assert (lg_cdb_write_range (t->cdb, &lba, &n));
  cr_assert_eq (lba, 1000);
  cr_assert_eq (n, 8);
  scsi_free_scsi_task (t);
  t = scsi_cdb_read16 (1000, 8 * 512, 512, 0, 0, 0, 0, 0);
  cr_assert (!lg_cdb_write_range (t->cdb, &lba, &n));
  scsi_free_scsi_task (t);
  t = scsi_cdb_synchronizecache16 (0, 0, 0, 0);
  cr_assert (!lg_cdb_write_range (t->cdb, &lba, &n));
  scsi_free_scsi_task (t);
  t = scsi_cdb_writesame16 (0, 0, 0, 77, 0, 5, 512);
  cr_assert (lg_cdb_write_range (t->cdb, &lba, &n));
  cr_assert_eq (lba, 77);
  cr_assert_eq (n, 5);
  scsi_free_scsi_task (t);
  /* UNMAP's ranges are in its parameter list: all of the LUN. */
  t = scsi_cdb_unmap (0, 0, 24);
  cr_assert (lg_cdb_write_range (t->cdb, &lba, &n));
  cr_assert_eq (lba, 0);
  cr_assert_eq (n, UINT64_MAX);
  scsi_free_scsi_task (t);
  /* A range that would wrap is cut at the end of the address space. */
  t = scsi_cdb_write16 (UINT64_MAX - 1, 8 * 512, 512, 0, 0, 0, 0, 0);
  cr_assert (lg_cdb_write_range (t->cdb, &lba, &n));
  cr_assert_eq (lba + n, UINT64_MAX);
  scsi_free_scsi_task (t);
}

Test (fence, overlap_waits_until_the_deadline)
{
  struct lg_fence *f = lg_fence_new ();
  struct lg_doubt *d = lg_fence_add (f, 1, 100, 8);
  char msg[256] = "";

  cr_assert_not_null (d);
  cr_assert_eq (lg_fence_count (f), 1);
  /* Another LUN, and blocks next to it, are not held. */
  cr_assert_eq (lg_fence_wait (f, 2, 100, 8, lg_mono_ms (), msg, sizeof msg),
                0);
  cr_assert_eq (lg_fence_wait (f, 1, 108, 8, lg_mono_ms (), msg, sizeof msg),
                0);
  cr_assert_eq (lg_fence_wait (f, 1, 92, 8, lg_mono_ms (), msg, sizeof msg), 0);
  /* An overlap is held until the deadline, then refused with the range. */
  cr_assert_eq (
      lg_fence_wait (f, 1, 107, 2, lg_mono_ms () + 200, msg, sizeof msg), -1);
  cr_assert (strstr (msg, "LUN 1 LBA 107+2") != NULL, "%s", msg);
  cr_assert (strstr (msg, "outage budget") != NULL, "%s", msg);
  lg_fence_remove (f, d);
  cr_assert_eq (lg_fence_count (f), 0);
  cr_assert_eq (lg_fence_wait (f, 1, 100, 8, -1, msg, sizeof msg), 0);
  lg_fence_free (f);
}

Test (fence, permanent_refuses_at_once)
{
  struct lg_fence *f = lg_fence_new ();
  struct lg_doubt *d = lg_fence_add (f, 0, 0, 16);
  char msg[256] = "";

  lg_fence_make_permanent (f, d);
  /* Even with no deadline: fenced for good means failing now. */
  cr_assert_eq (lg_fence_wait (f, 0, 15, 1, -1, msg, sizeof msg), -1);
  cr_assert (strstr (msg, "fenced") != NULL, "%s", msg);
  lg_fence_free (f);
}

/* calloc fails while fail_calloc is set (glibc's own is __libc_calloc).
 * Not under AddressSanitizer, whose free would then be handed glibc's
 * memory: that pass leaves this case to the plain build. */
#ifndef __SANITIZE_ADDRESS__
extern void *__libc_calloc (size_t, size_t);
static volatile bool fail_calloc;

void *
calloc (size_t n, size_t size)
{
  return fail_calloc ? NULL : __libc_calloc (n, size);
}

/* A doubt that cannot be recorded (out of memory) refuses every later
 * write, overlapping or not, at once: its range is not known any more.
 * Before, recovery.c logged and let overlapping writes through. */
Test (fence, out_of_memory_refuses_every_write)
{
  struct lg_fence *f = lg_fence_new ();
  char msg[256] = "";

  fail_calloc = true;
  cr_assert_null (lg_fence_add (f, 0, 100, 8));
  fail_calloc = false;
  cr_assert_neq (lg_fence_count (f), 0);
  cr_assert_eq (lg_fence_wait (f, 0, 100, 8, -1, msg, sizeof msg), -1);
  cr_assert (strstr (msg, "out of memory") != NULL, "%s", msg);
  cr_assert_eq (lg_fence_wait (f, 3, 0, 1, -1, msg, sizeof msg), -1);
  lg_fence_free (f);
}
#endif

struct rm {
  struct lg_fence *f;
  struct lg_doubt *d;
};

static void *
remove_later (void *opaque)
{
  struct rm *r = opaque;

  usleep (100 * 1000);
  lg_fence_remove (r->f, r->d);
  return NULL;
}

Test (fence, removal_wakes_a_waiter_with_no_deadline)
{
  struct rm r;
  pthread_t t;
  char msg[256];

  r.f = lg_fence_new ();
  r.d = lg_fence_add (r.f, 3, 0, 1);
  cr_assert_eq (pthread_create (&t, NULL, remove_later, &r), 0);
  cr_assert_eq (lg_fence_wait (r.f, 3, 0, 1, -1, msg, sizeof msg), 0);
  pthread_join (t, NULL);
  lg_fence_free (r.f);
}

static uint32_t
max_blocks (uint32_t max_xfer, uint32_t bs, uint32_t phys)
{
  struct lg_lun_info li;

  memset (&li, 0, sizeof li);
  li.max_xfer_blocks = max_xfer;
  li.block_size = bs;
  li.phys_block_size = phys;
  return lg_iscsi_max_blocks (&li);
}

Test (split, whole_units_and_physical_blocks)
{
  /* 255 and 32767 blocks of 512 bytes: cut to whole 4 KiB units. */
  cr_assert_eq (max_blocks (255, 512, 512), 248);
  cr_assert_eq (max_blocks (32767, 512, 512), 32760);
  /* Physical blocks of 16 KiB on 512-byte logical blocks. */
  cr_assert_eq (max_blocks (100, 512, 16384), 96);
  /* 4 KiB blocks: any count is whole units. */
  cr_assert_eq (max_blocks (3, 4096, 4096), 3);
  /* No limit: the default, a multiple of 4 KiB. */
  cr_assert_eq ((uint64_t) max_blocks (0, 512, 512) * 512 % 4096, 0);
  /* A limit under 4 KiB cannot be kept whole: it is respected. */
  cr_assert_eq (max_blocks (4, 512, 512), 4);
}
