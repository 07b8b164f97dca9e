/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* libFuzzer harness for what a target says in reply to the commands that
 * describe a LUN: REPORT LUNS, INQUIRY (standard and VPD 0x00, 0x80, 0x83,
 * 0xB0, 0xB2), READ CAPACITY(16), MODE SENSE(6), GET LBA STATUS and
 * PERSISTENT RESERVE IN (READ RESERVATION, READ KEYS, READ FULL STATUS).  Each
 * command gets the next reply from the input (a status byte, a 16-bit
 * length, that many data-in bytes); libiscsi unmarshalls it as it does for
 * a real target and lungate's probe and extent code take it from there.
 * Never a crash, and what comes out holds: a disk's block size is a power
 * of two from 512 to 65536 and its size does not overflow, names are
 * printable (the serial and the designator's name too), the designators
 * kept fit their bound, extents run in order inside the range asked for,
 * the registered keys kept fit theirs and their description is
 * printable. */
#include <config.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "iscsi/lun.h"
#include "iscsi/pr.h"

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size);

/* The probe reaches the pool only through lg_lun_io here. */
int
lg_pool_task (struct lg_pool *p, int lun, struct scsi_task *task, char *msg,
              size_t len)
{
  (void) p, (void) lun, (void) task, (void) msg, (void) len;
  abort ();
}

const char *
lg_pool_target (const struct lg_pool *p)
{
  (void) p;
  abort ();
}

struct input {
  const uint8_t *p;
  size_t left;
};

static int
reply (void *opaque, int lun, struct scsi_task *task, char *msg, size_t len)
{
  struct input *in = opaque;
  uint8_t st;
  size_t n;

  (void) lun;
  if (in->left < 3) {
    snprintf (msg, len, "no reply");
    errno = EIO;
    return -1;
  }
  st = in->p[0];
  n = (size_t) in->p[1] << 8 | in->p[2];
  in->p += 3;
  in->left -= 3;
  if (n > in->left)
    n = in->left;
  if (st >= 0xe0) {
    snprintf (msg, len, "transport error");
    errno = EIO;
    return -1;
  }
  if (st >= 0xc0) {
    task->status = SCSI_STATUS_CHECK_CONDITION;
    task->sense.key = st & 0x0f;
    snprintf (msg, len, "check condition");
    errno = st & 1 ? ENOTSUP : EIO;
    return -1;
  }
  task->status = SCSI_STATUS_GOOD;
  task->datain.data = malloc (n ? n : 1);
  if (task->datain.data == NULL)
    abort ();
  memcpy (task->datain.data, in->p, n);
  task->datain.size = (int) n;
  in->p += n;
  in->left -= n;
  return 0;
}

static void
printable (const char *s)
{
  for (; *s; s++)
    if (*s < 0x20 || *s > 0x7e)
      abort ();
}

struct walk {
  uint64_t next, end;
  unsigned calls;
};

static int
extent (void *opaque, uint64_t off, uint64_t len, bool hole)
{
  struct walk *w = opaque;

  (void) hole;
  if (off != w->next || len == 0 || off + len > w->end)
    abort ();
  w->next = off + len;
  return ++w->calls == 100 ? -1 : 0;
}

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
  struct input in = { data, size };
  struct lg_lun_io io = { reply, &in, "fuzz" };
  struct lg_lun_info info;
  char err[256];
  int *luns = NULL;
  size_t n = 0;

  if (lg_report_luns_io (&io, &luns, &n, err, sizeof err) == 0)
    for (size_t i = 0; i < n; i++)
      if (luns[i] < 0 || luns[i] > 0x3fff)
        abort ();
  free (luns);

  {
    struct lg_pr_state st;
    char line[2048];
    FILE *f;

    if (lg_pr_read (&io, 1, &st, err, sizeof err) == 0) {
      if (st.nkeys > LG_PR_MAX_KEYS || st.type < 0 || st.type > 15
          || (!st.supported && (st.reserved || st.nkeys)))
        abort ();
      lg_pr_describe (&st, line, sizeof line);
      printable (line);
      if ((f = fopen ("/dev/null", "w")) != NULL) {
        lg_pr_print_json (f, &st);
        fclose (f);
      }
    }
  }
  {
    char name[256];
    uint8_t isid[6];
    uint64_t key;

    /* READ FULL STATUS: the holder's port, NUL-terminated within name. */
    if (lg_pr_holder_port (&io, 1, name, sizeof name, isid, &key, err,
                           sizeof err)
            == 0
        && (name[0] == '\0' || strlen (name) >= sizeof name))
      abort ();
  }

  if (lg_lun_probe_io (&io, 1, &info, err, sizeof err) < 0)
    return 0;
  printable (info.vendor);
  printable (info.product);
  printable (info.revision);
  printable (info.ident.serial);
  printable (info.ident.desig_name);
  if (strlen (info.ident.serial) > LG_SERIAL_MAX
      || info.ident.desig_len > LG_DESIG_MAX
      || info.ident.has_desig != (info.ident.desig_len > 0)
      || lg_lun_ident_diff (&info.ident, &info.ident, err, sizeof err) != 0)
    abort ();
  if (!info.is_disk || info.no_medium)
    return 0;
  if (info.block_size < 512 || info.block_size > 65536
      || (info.block_size & (info.block_size - 1)) || info.nblocks == 0
      || info.size / info.block_size != info.nblocks)
    abort ();

  /* GET LBA STATUS for blocks lba .. end - 1 of the LUN. */
  {
    uint64_t lba = info.nblocks > 8 ? info.nblocks / 3 : 0;
    uint64_t end = info.nblocks - (info.nblocks > 8 ? info.nblocks / 5 : 0);
    struct scsi_task *task = scsi_cdb_get_lba_status (lba, 4096);
    struct walk w = { lba * info.block_size, end * info.block_size, 0 };
    uint64_t done;
    bool stopped;

    if (task == NULL)
      return 0;
    if (reply (&in, 1, task, err, sizeof err) == 0) {
      done = lg_lba_status_walk (lg_datain_unmarshall (task), lba, end,
                                 info.nblocks, info.block_size, extent, &w,
                                 &stopped);
      if (done < lba || done > end
          || (!stopped && done * info.block_size != w.next))
        abort ();
    }
    scsi_free_scsi_task (task);
  }
  return 0;
}
