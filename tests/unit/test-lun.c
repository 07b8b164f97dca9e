/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Replies from a hostile target before libiscsi unmarshalls them: a short
 * INQUIRY, list lengths larger than what arrived, and GET LBA STATUS
 * descriptors that go backwards, overlap or leave the LUN. */
#include <config.h>

#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "iscsi/lun.h"

/* A task for cdb with data-in bytes d[0..n-1] as the target sent them.
 * The buffer goes on with 0xaa bytes that did not arrive: anything read
 * from there shows. */
static struct scsi_task *
reply (struct scsi_task *task, const void *d, size_t n)
{
  cr_assert_not_null (task);
  task->datain.data = malloc (n + 512);
  cr_assert_not_null (task->datain.data);
  memset (task->datain.data, 0xaa, n + 512);
  memcpy (task->datain.data, d, n);
  task->datain.size = (int) n;
  return task;
}

Test (lun, short_inquiry_is_padded)
{
  /* 8 bytes where 36 were asked for: a disk, no vendor or product. */
  static const unsigned char d[8] = { 0x00, 0x00, 0x05, 0x02, 3 };
  struct scsi_task *t = reply (scsi_cdb_inquiry (0, 0, 255), d, sizeof d);
  struct scsi_inquiry_standard *inq = lg_datain_unmarshall (t);

  cr_assert_not_null (inq);
  cr_assert_eq (inq->device_type, 0);
  cr_assert_eq (inq->vendor_identification[0], '\0');
  cr_assert_eq (inq->product_revision_level[0], '\0');
  scsi_free_scsi_task (t);
}

Test (lun, vpd_page_count_cut_to_reply)
{
  /* Claims 255 supported pages, sends 2. */
  static const unsigned char d[6] = { 0, 0x00, 0, 255, 0xb0, 0xb2 };
  struct scsi_task *t = reply (
      scsi_cdb_inquiry (1, SCSI_INQUIRY_PAGECODE_SUPPORTED_VPD_PAGES, 255), d,
      sizeof d);
  struct scsi_inquiry_supported_pages *sp = lg_datain_unmarshall (t);

  cr_assert_not_null (sp);
  cr_assert_eq (sp->num_pages, 2);
  cr_assert_eq (sp->pages[0], 0xb0);
  cr_assert_eq (sp->pages[1], 0xb2);
  scsi_free_scsi_task (t);
}

Test (lun, report_luns_length_cut_to_reply)
{
  /* Claims a list of 4 GiB - 16, sends 2 LUNs. */
  unsigned char d[24] = { 0xff, 0xff, 0xff, 0xf0 };
  struct scsi_task *t;
  struct scsi_reportluns_list *l;

  d[8 + 1] = 0;  /* LUN 0 */
  d[16 + 1] = 5; /* LUN 5 */
  t = reply (scsi_reportluns_cdb (0, 16384), d, sizeof d);
  l = lg_datain_unmarshall (t);
  cr_assert_not_null (l);
  cr_assert_eq (l->num, 2);
  cr_assert_eq (l->luns[1] & 0x3fff, 5);
  scsi_free_scsi_task (t);
}

Test (lun, lba_status_length_cut_to_reply)
{
  /* Claims 2^31 bytes of descriptors (negative to libiscsi), sends one. */
  unsigned char d[24] = { 0x80, 0, 0, 0 };
  struct scsi_task *t;
  struct scsi_get_lba_status *st;

  d[8 + 7] = 100; /* LBA 100 */
  d[8 + 11] = 8;  /* 8 blocks */
  d[8 + 12] = 1;  /* deallocated */
  t = reply (scsi_cdb_get_lba_status (100, 4096), d, sizeof d);
  st = lg_datain_unmarshall (t);
  cr_assert_not_null (st);
  cr_assert_eq (st->num_descriptors, 1);
  cr_assert_eq (st->descriptors[0].lba, 100);
  cr_assert_eq (st->descriptors[0].num_blocks, 8);
  scsi_free_scsi_task (t);
}

struct seen {
  uint64_t off[8], len[8];
  bool hole[8];
  int n;
};

static int
record (void *opaque, uint64_t off, uint64_t len, bool hole)
{
  struct seen *s = opaque;

  cr_assert_lt (s->n, 8);
  s->off[s->n] = off;
  s->len[s->n] = len;
  s->hole[s->n++] = hole;
  return 0;
}

Test (lun, lba_status_walk)
{
  struct scsi_lba_status_descriptor ds[4] = {
    { 10, 5, SCSI_PROVISIONING_TYPE_MAPPED },
    { 15, 100, SCSI_PROVISIONING_TYPE_DEALLOCATED },
    { 12, 3, SCSI_PROVISIONING_TYPE_MAPPED }, /* goes backwards */
    { 115, 1, SCSI_PROVISIONING_TYPE_MAPPED },
  };
  struct scsi_get_lba_status st = { 4, ds };
  struct seen s = { .n = 0 };
  bool stopped;

  /* Blocks 10..49 of a 1000-block LUN, 512-byte blocks: the second
   * descriptor is cut at 50, the walk ends there. */
  cr_assert_eq (
      lg_lba_status_walk (&st, 10, 50, 1000, 512, record, &s, &stopped), 50);
  cr_assert (!stopped);
  cr_assert_eq (s.n, 2);
  cr_assert_eq (s.off[0], 10 * 512);
  cr_assert_eq (s.len[0], 5 * 512);
  cr_assert (!s.hole[0]);
  cr_assert_eq (s.off[1], 15 * 512);
  cr_assert_eq (s.len[1], 35 * 512);
  cr_assert (s.hole[1]);

  /* Up to 200: the backwards descriptor stops the walk at 115. */
  s.n = 0;
  cr_assert_eq (
      lg_lba_status_walk (&st, 10, 200, 1000, 512, record, &s, &stopped), 115);
  cr_assert_eq (s.n, 2);

  /* A descriptor past the end of the LUN is not believed. */
  ds[1].num_blocks = 2000;
  s.n = 0;
  cr_assert_eq (
      lg_lba_status_walk (&st, 10, 200, 1000, 512, record, &s, &stopped), 15);
  cr_assert_eq (s.n, 1);

  /* Not starting where asked: nothing. */
  s.n = 0;
  cr_assert_eq (
      lg_lba_status_walk (&st, 11, 200, 1000, 512, record, &s, &stopped), 11);
  cr_assert_eq (s.n, 0);
  cr_assert_eq (
      lg_lba_status_walk (NULL, 11, 200, 1000, 512, record, &s, &stopped), 11);
}
