/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Replies from a hostile target before libiscsi unmarshalls them: a short
 * INQUIRY, list lengths larger than what arrived, and GET LBA STATUS
 * descriptors that go backwards, overlap or leave the LUN. */
#include <config.h>

#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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

/* ---- identity: VPD 0x80 and 0x83 ---- */

/* tgt 1.0.85's VPD 0x83 for tid 1, LUN 1: a T10 vendor ID descriptor of
 * 36 bytes ("IET     00010001", NUL-padded), NAA locally assigned
 * (tid << 32 | lun), NAA IEEE registered extended (from the same string's
 * hex digits); all of association 0 (the logical unit). */
static size_t
tgt_page83 (unsigned char *d, unsigned tid, unsigned lun)
{
  size_t p = 4;
  char id[37];

  memset (d, 0, 80);
  d[1] = 0x83;
  d[p] = 2; /* ASCII */
  d[p + 1] = 1;
  d[p + 3] = 36;
  snprintf (id, sizeof id, "IET     %04x%04x", tid, lun);
  memcpy (d + p + 4, id, strlen (id));
  p += 40;
  d[p] = 1; /* binary */
  d[p + 1] = 3;
  d[p + 3] = 8;
  d[p + 4] = 0x30;
  d[p + 7] = (unsigned char) tid;
  d[p + 11] = (unsigned char) lun;
  p += 12;
  d[p] = 1;
  d[p + 1] = 3;
  d[p + 3] = 16;
  d[p + 4] = 0x60;
  d[p + 19] = (unsigned char) lun;
  p += 20;
  d[3] = (unsigned char) (p - 4);
  return p;
}

Test (lun, serial_tgt)
{
  /* tgt right-adjusts "beaf11" in 36 spaces. */
  unsigned char d[40];
  struct lg_lun_ident id = { 0 };

  memset (d, ' ', sizeof d);
  d[0] = 0;
  d[1] = 0x80;
  d[2] = 0;
  d[3] = 36;
  memcpy (d + 40 - 6, "beaf11", 6);
  cr_assert_eq (lg_vpd_serial_parse (d, sizeof d, &id), 0);
  cr_assert (id.has_serial);
  cr_assert_str_eq (id.serial, "beaf11");
}

Test (lun, serial_lying_length)
{
  /* Claims 200 bytes, 6 arrived; what follows in memory is never read. */
  unsigned char d[64];
  struct lg_lun_ident id = { 0 };

  memset (d, 0xaa, sizeof d);
  memcpy (d,
          "\0\x80\0\xc8"
          "ab\x01 cd",
          10);
  cr_assert_eq (lg_vpd_serial_parse (d, 10, &id), 0);
  cr_assert_str_eq (id.serial, "ab? cd");

  /* Truncated header, another page, NULL. */
  cr_assert_eq (lg_vpd_serial_parse (d, 3, &id), -1);
  d[1] = 0x83;
  cr_assert_eq (lg_vpd_serial_parse (d, 10, &id), -1);
  cr_assert_eq (lg_vpd_serial_parse (NULL, 10, &id), -1);
  cr_assert_str_eq (id.serial, "ab? cd");

  /* Only spaces: no serial. */
  memcpy (d, "\0\x80\0\x04    ", 8);
  cr_assert_eq (lg_vpd_serial_parse (d, 8, &id), 0);
  cr_assert (!id.has_serial);
}

Test (lun, serial_cut)
{
  unsigned char d[4 + 255];
  struct lg_lun_ident id = { 0 };

  memset (d, 'x', sizeof d);
  d[0] = 0;
  d[1] = 0x80;
  d[2] = 0;
  d[3] = 255;
  cr_assert_eq (lg_vpd_serial_parse (d, sizeof d, &id), 0);
  cr_assert_eq (strlen (id.serial), LG_SERIAL_MAX);
}

Test (lun, desig_tgt)
{
  unsigned char d[80];
  size_t n = tgt_page83 (d, 1, 1);
  struct lg_lun_ident a = { 0 }, b = { 0 };
  char msg[256];

  cr_assert_eq (n, 76);
  cr_assert_eq (lg_vpd_desig_parse (d, n, &a), 0);
  cr_assert (a.has_desig);
  cr_assert_eq (a.desig_len, 72);
  cr_assert_str_eq (a.desig_name, "t10.IET     00010001");
  cr_assert_eq (lg_vpd_desig_parse (d, n, &b), 0);
  cr_assert_eq (lg_lun_ident_diff (&a, &b, msg, sizeof msg), 0);

  /* LUN 2 of the same target. */
  tgt_page83 (d, 1, 2);
  cr_assert_eq (lg_vpd_desig_parse (d, n, &b), 0);
  cr_assert_eq (lg_lun_ident_diff (&a, &b, msg, sizeof msg), 1);
  cr_assert_str_eq (msg,
                    "designator t10.IET     00010001 -> "
                    "t10.IET     00010002");

  /* Same first descriptor, another NAA. */
  tgt_page83 (d, 1, 1);
  d[4 + 40 + 4 + 7] = 9;
  cr_assert_eq (lg_vpd_desig_parse (d, n, &b), 0);
  cr_assert_eq (lg_lun_ident_diff (&a, &b, msg, sizeof msg), 1);
  cr_assert (strstr (msg, "others with the same first one") != NULL);
}

Test (lun, desig_lying_lengths)
{
  unsigned char d[80 + 512];
  size_t n;
  struct lg_lun_ident id = { 0 };

  memset (d, 0xaa, sizeof d);
  n = tgt_page83 (d, 1, 1);

  /* The page claims 64 KiB: only what arrived is walked. */
  d[2] = 0xff;
  d[3] = 0xff;
  cr_assert_eq (lg_vpd_desig_parse (d, n, &id), 0);
  cr_assert_eq (id.desig_len, 72);

  /* Cut inside the third descriptor: the first two are kept. */
  cr_assert_eq (lg_vpd_desig_parse (d, n - 1, &id), 0);
  cr_assert_eq (id.desig_len, 52);

  /* The second descriptor claims 255 bytes: the walk stops before it. */
  d[4 + 40 + 3] = 255;
  cr_assert_eq (lg_vpd_desig_parse (d, n, &id), 0);
  cr_assert_eq (id.desig_len, 40);

  /* A header cut in the middle. */
  cr_assert_eq (lg_vpd_desig_parse (d, 6, &id), 0);
  cr_assert (!id.has_desig);
  cr_assert_eq (lg_vpd_desig_parse (d, 3, &id), -1);
  d[1] = 0x80;
  cr_assert_eq (lg_vpd_desig_parse (d, n, &id), -1);
}

Test (lun, desig_only_lu_association_bounded)
{
  /* A target port descriptor (association 1) is not the LU's; 40 LU
   * descriptors of 20 bytes are cut at LG_DESIG_MAX, at a whole one. */
  unsigned char d[4 + 24 + 40 * 20];
  struct lg_lun_ident id = { 0 };
  size_t p = 4;

  memset (d, 0, sizeof d);
  d[1] = 0x83;
  d[p + 1] = 0x10 | 3;
  d[p + 3] = 20;
  p += 24;
  for (int i = 0; i < 40; i++, p += 20) {
    d[p + 1] = 2; /* EUI-64 */
    d[p + 3] = 16;
    d[p + 4] = (unsigned char) i;
  }
  d[2] = (unsigned char) ((p - 4) >> 8);
  d[3] = (unsigned char) (p - 4);
  cr_assert_eq (lg_vpd_desig_parse (d, p, &id), 0);
  cr_assert_eq (id.desig_len, LG_DESIG_MAX / 20 * 20);
  cr_assert_eq (id.desig[1], 2);
  cr_assert (strncmp (id.desig_name, "eui.00000000", 12) == 0);
}

Test (lun, desig_page_cut_for_libiscsi)
{
  /* libiscsi walks descriptors by their own lengths: the page length is cut
   * to the whole descriptors that arrived before it unmarshalls. */
  unsigned char d[80];
  size_t n = tgt_page83 (d, 1, 1);
  struct scsi_task *t;
  struct scsi_inquiry_device_identification *di;
  int k = 0;

  d[2] = 0xff;
  d[4 + 40 + 12 + 3] = 200; /* the third descriptor lies */
  t = reply (scsi_cdb_inquiry (1, 0x83, 1024), d, n);
  di = lg_datain_unmarshall (t);
  cr_assert_not_null (di);
  for (struct scsi_inquiry_device_designator *x = di->designators; x;
       x = x->next)
    k++;
  cr_assert_eq (k, 2);
  cr_assert_eq (t->datain.data[2] << 8 | t->datain.data[3], 52);
  scsi_free_scsi_task (t);

  /* The serial's length byte is cut too. */
  {
    static const unsigned char s[8] = { 0, 0x80, 0, 250, 'a', 'b', 'c', 'd' };
    struct scsi_inquiry_unit_serial_number *u;

    t = reply (scsi_cdb_inquiry (1, 0x80, 255), s, sizeof s);
    u = lg_datain_unmarshall (t);
    cr_assert_not_null (u);
    cr_assert_str_eq (u->usn, "abcd");
    scsi_free_scsi_task (t);
  }
}

Test (lun, ident_diff)
{
  struct lg_lun_ident a = { 0 }, b = { 0 };
  char msg[256];

  /* Nothing known at open: nothing to compare. */
  b.has_serial = true;
  snprintf (b.serial, sizeof b.serial, "x");
  cr_assert_eq (lg_lun_ident_diff (&a, &b, msg, sizeof msg), 0);
  cr_assert_str_eq (msg, "");

  a.has_serial = true;
  snprintf (a.serial, sizeof a.serial, "beaf11");
  snprintf (b.serial, sizeof b.serial, "beaf12");
  cr_assert_eq (lg_lun_ident_diff (&a, &b, msg, sizeof msg), 1);
  cr_assert_str_eq (msg, "serial beaf11 -> beaf12");

  /* Known at open, gone now: differs. */
  b.has_serial = false;
  a.has_desig = true;
  a.desig_len = 4;
  cr_assert_eq (lg_lun_ident_diff (&a, &b, msg, sizeof msg), 2);
  cr_assert_str_eq (msg,
                    "serial beaf11 -> (none), designator (unnamed) -> (none)");

  /* A short buffer is cut, never overrun. */
  cr_assert_eq (lg_lun_ident_diff (&a, &b, msg, 10), 2);
  cr_assert_eq (strlen (msg), 9);
}

/* The probe over made-up replies: tgt's pages, then a connection lost
 * while one command (named as cmd_name names it) is read.  The probe
 * sends its commands from several threads at once. */
struct script {
  const char *fail; /* NULL: none */
};

static void
cmd_name (const struct scsi_task *task, char *buf, size_t len)
{
  if (task->cdb[0] == SCSI_OPCODE_INQUIRY && !(task->cdb[1] & 1))
    snprintf (buf, len, "INQUIRY");
  else if (task->cdb[0] == SCSI_OPCODE_INQUIRY)
    snprintf (buf, len, "VPD %02x", task->cdb[2]);
  else if (task->cdb[0] == SCSI_OPCODE_SERVICE_ACTION_IN)
    snprintf (buf, len, "READ CAPACITY");
  else if (task->cdb[0] == SCSI_OPCODE_MODESENSE6)
    snprintf (buf, len, "MODE SENSE");
  else
    snprintf (buf, len, "0x%02x", task->cdb[0]);
}

static int
script_task (void *opaque, int lun, struct scsi_task *task, char *msg,
             size_t len)
{
  struct script *s = opaque;
  unsigned char d[255];
  char name[32];
  size_t n = 0;

  (void) lun;
  cmd_name (task, name, sizeof name);
  if (s->fail && strcmp (s->fail, name) == 0) {
    snprintf (msg, len, "connection lost");
    errno = EIO;
    return -1;
  }
  memset (d, 0, sizeof d);
  if (task->cdb[0] == SCSI_OPCODE_INQUIRY && !(task->cdb[1] & 1)) {
    d[2] = 5;
    d[4] = 31;
    memcpy (d + 8, "IET     VIRTUAL-DISK    0001", 28);
    n = 36;
  }
  else if (task->cdb[0] == SCSI_OPCODE_INQUIRY && task->cdb[2] == 0) {
    static const unsigned char p[] = { 0, 0, 0, 5, 0, 0x80, 0x83, 0xb0, 0xb2 };
    memcpy (d, p, sizeof p);
    n = sizeof p;
  }
  else if (task->cdb[0] == SCSI_OPCODE_INQUIRY && task->cdb[2] == 0x80) {
    memset (d, ' ', 40);
    d[0] = 0;
    d[1] = 0x80;
    d[2] = 0;
    d[3] = 36;
    memcpy (d + 34, "beaf11", 6);
    n = 40;
  }
  else if (task->cdb[0] == SCSI_OPCODE_INQUIRY && task->cdb[2] == 0x83)
    n = tgt_page83 (d, 1, 1);
  else if (task->cdb[0] == SCSI_OPCODE_INQUIRY) {
    d[1] = task->cdb[2];
    d[3] = 60;
    n = 64;
  }
  else if (task->cdb[0] == SCSI_OPCODE_SERVICE_ACTION_IN) {
    d[7] = 0xff; /* 256 blocks */
    d[10] = 2;   /* of 512 bytes */
    n = 32;
  }
  else
    n = 4;
  task->status = SCSI_STATUS_GOOD;
  task->datain.data = malloc (n);
  cr_assert_not_null (task->datain.data);
  memcpy (task->datain.data, d, n);
  task->datain.size = (int) n;
  return 0;
}

Test (lun, probe_reads_identity)
{
  struct script s = { NULL };
  struct lg_lun_io io = { script_task, &s, "iqn.t" };
  struct lg_lun_info li;
  char err[256];

  cr_assert_eq (lg_lun_probe_io (&io, 1, &li, err, sizeof err), 0, "%s", err);
  cr_assert_eq (li.size, 256 * 512);
  cr_assert (li.ident.has_serial);
  cr_assert_str_eq (li.ident.serial, "beaf11");
  cr_assert (li.ident.has_desig);
  cr_assert_eq (li.ident.desig_len, 72);
  cr_assert_str_eq (li.ident.desig_name, "t10.IET     00010001");
}

Test (lun, probe_fails_when_identity_does_not_arrive)
{
  /* A probe that lost the page list, the capacity or the serial to the
   * connection must not say "no serial"; the limits pages and the mode
   * page are optional. */
  static const struct {
    const char *cmd;
    int r;
  } cases[] = {
    { "INQUIRY", -1 }, { "VPD 00", -1 },    { "READ CAPACITY", -1 },
    { "VPD b0", 0 },   { "VPD b2", 0 },     { "VPD 80", -1 },
    { "VPD 83", -1 },  { "MODE SENSE", 0 },
  };

  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    struct script s = { cases[i].cmd };
    struct lg_lun_io io = { script_task, &s, "iqn.t" };
    struct lg_lun_info li;
    char err[256];
    int r = lg_lun_probe_io (&io, 1, &li, err, sizeof err);

    cr_assert_eq (r, cases[i].r, "%s lost: %d (%s)", cases[i].cmd, r,
                  r ? err : "");
    if (r < 0)
      cr_assert (strstr (err, "connection lost") != NULL,
                 "%s lost: the message does not say so: %s", cases[i].cmd, err);
  }
}

/* The probe's commands go out together, not one round trip after
 * another: each command waits (up to 2 s) until four are in flight at
 * once.  One after another, they never are. */
struct together {
  pthread_mutex_t lock;
  pthread_cond_t cond;
  int in, most;
};

static int
together_task (void *opaque, int lun, struct scsi_task *task, char *msg,
               size_t len)
{
  struct together *t = opaque;
  struct script s = { NULL };
  struct timespec until;

  clock_gettime (CLOCK_REALTIME, &until);
  until.tv_sec += 2;
  pthread_mutex_lock (&t->lock);
  if (++t->in > t->most)
    t->most = t->in;
  pthread_cond_broadcast (&t->cond);
  while (t->most < 4
         && pthread_cond_timedwait (&t->cond, &t->lock, &until) == 0)
    ;
  pthread_mutex_unlock (&t->lock);
  int r = script_task (&s, lun, task, msg, len);
  pthread_mutex_lock (&t->lock);
  t->in--;
  pthread_mutex_unlock (&t->lock);
  return r;
}

Test (lun, probe_sends_its_commands_together)
{
  struct together t
      = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0 };
  struct lg_lun_io io = { together_task, &t, "iqn.t" };
  struct lg_lun_info li;
  char err[256];

  cr_assert_eq (lg_lun_probe_io (&io, 1, &li, err, sizeof err), 0, "%s", err);
  cr_assert_geq (t.most, 4, "at most %d commands in flight at once", t.most);
  cr_assert_str_eq (li.ident.serial, "beaf11");
  cr_assert_eq (li.size, 256 * 512);
}

/* The caching page's WCE bit, after block descriptors and other pages,
 * and never read past the reply or the mode data length. */
Test (lun, mode_sense_write_cache_enable)
{
  /* header (length 31, no block descriptor), page 0x0a (10 bytes),
   * page 0x08 (18 bytes) with WCE set as tgt sends it. */
  uint8_t d[32] = { 31, 0, 0, 0, 0x0a, 10, 2, 0x10 };

  d[16] = 0x08;
  d[17] = 18;
  d[18] = 0x14;
  cr_assert_eq (lg_mode_wce (d, sizeof d), 1);
  d[18] = 0x10;
  cr_assert_eq (lg_mode_wce (d, sizeof d), 0);
  /* The caching page beyond the mode data length: not there. */
  d[0] = 15;
  cr_assert_eq (lg_mode_wce (d, sizeof d), -1);
  /* Cut short before its first byte. */
  d[0] = 31;
  cr_assert_eq (lg_mode_wce (d, 18), -1);
  /* A block descriptor length pointing past the end. */
  d[3] = 200;
  cr_assert_eq (lg_mode_wce (d, sizeof d), -1);
  /* A subpage-format page 0x08 is not the caching page. */
  d[3] = 0;
  d[16] = 0x48;
  cr_assert_eq (lg_mode_wce (d, sizeof d), -1);
  cr_assert_eq (lg_mode_wce (d, 3), -1);
}

/* tgt counts a run in 32 bits: 2^32 blocks and more come as length 0. */
Test (lun, lba_status_zero_length_run)
{
  uint64_t tb2 = (uint64_t) 1 << 32, n = (uint64_t) 1 << 35; /* 16 TiB */
  struct scsi_lba_status_descriptor ds[2] = {
    { 0, 0, SCSI_PROVISIONING_TYPE_DEALLOCATED },
    { 3 * tb2, 8, SCSI_PROVISIONING_TYPE_MAPPED },
  };
  struct scsi_get_lba_status st = { 2, ds };
  struct seen s = { .n = 0 };
  bool stopped;

  /* Followed by another descriptor: the run ends where that one starts. */
  cr_assert_eq (
      lg_lba_status_walk (&st, 0, 3 * tb2 + 8, n, 512, record, &s, &stopped),
      3 * tb2 + 8);
  cr_assert_eq (s.n, 2);
  cr_assert_eq (s.off[0], 0);
  cr_assert_eq (s.len[0], 3 * tb2 * 512);
  cr_assert (s.hole[0]);
  cr_assert (!s.hole[1]);

  /* Alone (a hole to the end of the LUN): one block, then ask again. */
  st.num_descriptors = 1;
  s.n = 0;
  cr_assert_eq (
      lg_lba_status_walk (&st, 0, tb2 * 2, n, 512, record, &s, &stopped), 1);
  cr_assert_eq (s.n, 1);
  cr_assert (s.hole[0]);
  cr_assert_eq (s.len[0], 512);

  /* A next descriptor that goes backwards or past the LUN is no end. */
  st.num_descriptors = 2;
  ds[1].lba = n + 1;
  s.n = 0;
  cr_assert_eq (lg_lba_status_walk (&st, 0, tb2, n, 512, record, &s, &stopped),
                1);
}

static struct lg_lun_info
geometry (uint32_t bs, uint32_t phys, uint32_t gran)
{
  struct lg_lun_info li;

  memset (&li, 0, sizeof li);
  li.block_size = bs;
  li.phys_block_size = phys;
  li.opt_gran_blocks = gran;
  return li;
}

/* nbdkit 1.32 refuses a preferred block size that is not a power of 2. */
Test (lun, preferred_io_is_a_power_of_two)
{
  struct lg_lun_info li = geometry (512, 4096, 24);

  cr_assert_eq (lg_lun_pref_io (&li), 8192); /* 12 KiB granularity */
  li = geometry (512, 512, 0);
  cr_assert_eq (lg_lun_pref_io (&li), 512);
  li = geometry (512, 4096, 0);
  cr_assert_eq (lg_lun_pref_io (&li), 4096);
  li = geometry (4096, 4096, 3);
  cr_assert_eq (lg_lun_pref_io (&li), 8192);
  li = geometry (512, 512, 0xffffffffu); /* absurd: capped */
  cr_assert_eq (lg_lun_pref_io (&li), LG_PREF_IO_MAX);
  li = geometry (512, 512, 2048);
  cr_assert_eq (lg_lun_pref_io (&li), 1u << 20);
}
