/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* LUN probing.  Runs on the caller's thread, over the pool.  Everything
 * parsed here came from the target: libiscsi's unmarshallers check the
 * lengths they read; we check what they return. */
#include <config.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "iscsi/lun.h"
#include "util/log.h"

static const char *
type_name (int t)
{
  switch (t) {
  case 0x00:
    return "disk";
  case 0x01:
    return "tape";
  case 0x03:
    return "processor";
  case 0x05:
    return "cd/dvd";
  case 0x07:
    return "optical";
  case 0x08:
    return "changer";
  case 0x0c:
    return "controller";
  case 0x0d:
    return "enclosure";
  case 0x0e:
    return "rbc";
  case 0x1e:
    return "well-known";
  default:
    return "other";
  }
}

/* Copies a space-padded INQUIRY string, trimming the padding. */
static void
copy_trim (char *dst, size_t len, const char *src)
{
  size_t n;

  snprintf (dst, len, "%s", src);
  n = strlen (dst);
  while (n > 0 && (dst[n - 1] == ' ' || dst[n - 1] == '\0'))
    dst[--n] = '\0';
  for (size_t i = 0; i < n; i++)
    if (dst[i] < 0x20 || dst[i] > 0x7e)
      dst[i] = '?';
}

/* libiscsi's unmarshalling of INQUIRY data trusts the reply to be as long
 * as the command asked for: the standard data is copied from fixed offsets
 * up to 36 bytes and the supported VPD pages by their in-band count (up to
 * 259 bytes), whatever arrived.  A short INQUIRY reply from a hostile
 * target is padded with zeroes first (zero reads as "not reported").
 * (Only INQUIRY: libiscsi 1.19 refuses a REPORT LUNS reply longer than
 * its list.) */
#define DATAIN_MIN 260

static uint32_t
get32 (const unsigned char *p)
{
  return (uint32_t) p[0] << 24 | (uint32_t) p[1] << 16 | (uint32_t) p[2] << 8
      | p[3];
}

static void
put32 (unsigned char *p, uint32_t v)
{
  p[0] = (unsigned char) (v >> 24);
  p[1] = (unsigned char) (v >> 16);
  p[2] = (unsigned char) (v >> 8);
  p[3] = (unsigned char) v;
}

/* In-band lengths that libiscsi believes, cut to what arrived: n bytes
 * (at least 4, or an INQUIRY reply padded above).  libiscsi 1.19 allocates
 * for and walks a REPORT LUNS list as long as the reply claims (up to 4
 * GiB), and reads a GET LBA STATUS length of 2^31 or more as negative. */
static void
clamp_lengths (struct scsi_task *task, uint32_t n)
{
  unsigned char *d = task->datain.data;

  switch (task->cdb[0]) {
  case SCSI_OPCODE_REPORTLUNS: /* list length, then 8 bytes per LUN */
    if (get32 (d) > (n >= 8 ? (n - 8) & ~7u : 0))
      put32 (d, n >= 8 ? (n - 8) & ~7u : 0);
    break;
  case SCSI_OPCODE_SERVICE_ACTION_IN: /* GET LBA STATUS: 16 per descriptor */
    if ((task->cdb[1] & 0x1f) == SCSI_GET_LBA_STATUS
        && get32 (d) > (n >= 8 ? 4 + (n - 8) / 16 * 16 : 0))
      put32 (d, n >= 8 ? 4 + (n - 8) / 16 * 16 : 0);
    break;
  case SCSI_OPCODE_INQUIRY: /* supported VPD pages: a count in byte 3 */
    if ((task->cdb[1] & 1) && task->cdb[2] == 0 && d[3] > (n >= 4 ? n - 4 : 0))
      d[3] = (unsigned char) (n >= 4 ? n - 4 : 0);
    break;
  default:
    break;
  }
}

void *
lg_datain_unmarshall (struct scsi_task *task)
{
  uint32_t n = task->datain.size > 0 ? (uint32_t) task->datain.size : 0;

  if (task->cdb[0] == SCSI_OPCODE_INQUIRY && task->datain.size < DATAIN_MIN) {
    unsigned char *p = calloc (1, DATAIN_MIN);

    if (p == NULL) {
      errno = ENOMEM;
      return NULL;
    }
    if (task->datain.size > 0)
      memcpy (p, task->datain.data, (size_t) task->datain.size);
    free (task->datain.data);
    task->datain.data = p;
    task->datain.size = DATAIN_MIN;
  }
  if (n >= 4 || task->cdb[0] == SCSI_OPCODE_INQUIRY)
    clamp_lengths (task, n);
  return scsi_datain_unmarshall (task);
}

/* Runs task and unmarshalls its data-in.  NULL on failure, with errno and
 * err set; the caller still frees the task. */
static void *
run (const struct lg_lun_io *io, int lun, struct scsi_task *task,
     const char *what, char *err, size_t errlen)
{
  char msg[256];
  void *data;

  if (task == NULL) {
    snprintf (err, errlen, "%s: out of memory", what);
    errno = ENOMEM;
    return NULL;
  }
  if (io->task (io->opaque, lun, task, msg, sizeof msg) < 0) {
    int saved = errno;

    snprintf (err, errlen, "%s/%d: %s: %s", io->target, lun, what, msg);
    errno = saved;
    return NULL;
  }
  errno = 0;
  data = lg_datain_unmarshall (task);
  if (data == NULL && errno == ENOMEM)
    snprintf (err, errlen, "%s/%d: %s: out of memory", io->target, lun, what);
  else if (data == NULL) {
    snprintf (err, errlen, "%s/%d: %s: malformed reply from the target",
              io->target, lun, what);
    errno = EIO;
  }
  return data;
}

static int
not_found (const struct lg_lun_io *io, int lun, char *err, size_t errlen)
{
  snprintf (err, errlen, "%s: LUN %d does not exist on this target", io->target,
            lun);
  errno = ENOENT;
  return -1;
}

int
lg_lun_probe_io (const struct lg_lun_io *io, int lun, struct lg_lun_info *info,
                 char *err, size_t errlen)
{
  struct scsi_task *task;
  struct scsi_inquiry_standard *inq;
  struct scsi_readcapacity16 *rc;
  bool has_b0 = false, has_b2 = false;
  int r = -1;

  memset (info, 0, sizeof *info);
  info->lun = lun;

  task = scsi_cdb_inquiry (0, 0, 255);
  inq = run (io, lun, task, "INQUIRY", err, errlen);
  if (inq == NULL) {
    if (errno == ESHUTDOWN) /* LOGICAL UNIT NOT SUPPORTED */
      r = not_found (io, lun, err, errlen);
    goto out;
  }
  if (inq->qualifier == SCSI_INQUIRY_PERIPHERAL_QUALIFIER_NOT_SUPPORTED
      || inq->device_type == SCSI_INQUIRY_PERIPHERAL_DEVICE_TYPE_UNKNOWN) {
    r = not_found (io, lun, err, errlen);
    goto out;
  }
  info->device_type = inq->device_type;
  info->type_name = type_name (inq->device_type);
  info->removable = inq->rmb != 0;
  copy_trim (info->vendor, sizeof info->vendor, inq->vendor_identification);
  copy_trim (info->product, sizeof info->product, inq->product_identification);
  copy_trim (info->revision, sizeof info->revision,
             inq->product_revision_level);
  /* inq lives in the task's memory: nothing of it is used past here. */
  scsi_free_scsi_task (task);
  task = NULL;
  inq = NULL;

  if (info->device_type != SCSI_INQUIRY_PERIPHERAL_DEVICE_TYPE_DIRECT_ACCESS) {
    r = 0;
    goto out;
  }
  info->is_disk = true;

  /* Supported VPD pages: ask only for the pages the LUN has. */
  {
    struct scsi_inquiry_supported_pages *sp;
    char ignore[256];

    task = scsi_cdb_inquiry (1, SCSI_INQUIRY_PAGECODE_SUPPORTED_VPD_PAGES, 255);
    sp = run (io, lun, task, "INQUIRY VPD 0x00", ignore, sizeof ignore);
    if (sp) {
      for (int i = 0; i < sp->num_pages && i < 255; i++) {
        has_b0 |= sp->pages[i] == SCSI_INQUIRY_PAGECODE_BLOCK_LIMITS;
        has_b2
            |= sp->pages[i] == SCSI_INQUIRY_PAGECODE_LOGICAL_BLOCK_PROVISIONING;
      }
    }
    scsi_free_scsi_task (task);
    task = NULL;
  }

  task = scsi_cdb_readcapacity16 ();
  rc = run (io, lun, task, "READ CAPACITY(16)", err, errlen);
  if (rc == NULL) {
    if (task && task->status == SCSI_STATUS_CHECK_CONDITION
        && task->sense.key == SCSI_SENSE_NOT_READY) {
      info->no_medium = true;
      r = 0;
    }
    goto out;
  }
  if (rc->block_length < 512 || rc->block_length > 65536
      || (rc->block_length & (rc->block_length - 1)) != 0) {
    snprintf (err, errlen,
              "%s/%d: READ CAPACITY(16): unsupported logical "
              "block size %u",
              io->target, lun, rc->block_length);
    errno = ENOTSUP;
    goto out;
  }
  if (rc->returned_lba == UINT64_MAX
      || (rc->returned_lba + 1) > UINT64_MAX / rc->block_length) {
    snprintf (err, errlen, "%s/%d: READ CAPACITY(16): capacity out of range",
              io->target, lun);
    errno = EIO;
    goto out;
  }
  info->block_size = rc->block_length;
  info->nblocks = rc->returned_lba + 1;
  info->size = info->nblocks * info->block_size;
  info->phys_block_size
      = rc->lbppbe < 16 ? info->block_size << rc->lbppbe : info->block_size;
  info->lbpme = rc->lbpme != 0;
  info->lbprz = rc->lbprz != 0;
  scsi_free_scsi_task (task);
  task = NULL;

  if (has_b0) {
    struct scsi_inquiry_block_limits *bl;
    char ignore[256];

    task = scsi_cdb_inquiry (1, SCSI_INQUIRY_PAGECODE_BLOCK_LIMITS, 255);
    bl = run (io, lun, task, "INQUIRY VPD 0xB0", ignore, sizeof ignore);
    if (bl) {
      info->has_block_limits = true;
      info->max_xfer_blocks = bl->max_xfer_len;
      info->opt_xfer_blocks = bl->opt_xfer_len;
      info->opt_gran_blocks = bl->opt_gran;
      info->max_unmap_blocks = bl->max_unmap;
      info->max_unmap_desc = bl->max_unmap_bdc;
      info->opt_unmap_gran = bl->opt_unmap_gran;
      info->max_ws_blocks = bl->max_ws_len;
    }
    scsi_free_scsi_task (task);
    task = NULL;
  }
  if (has_b2) {
    struct scsi_inquiry_logical_block_provisioning *lbp;
    char ignore[256];

    task = scsi_cdb_inquiry (
        1, SCSI_INQUIRY_PAGECODE_LOGICAL_BLOCK_PROVISIONING, 255);
    lbp = run (io, lun, task, "INQUIRY VPD 0xB2", ignore, sizeof ignore);
    if (lbp) {
      info->has_lbp = true;
      info->lbpu = lbp->lbpu != 0;
      info->lbpws = lbp->lbpws != 0;
      info->lbpws10 = lbp->lbpws10 != 0;
      info->anc_sup = lbp->anc_sup != 0;
      info->provisioning_type = lbp->provisioning_type;
    }
    scsi_free_scsi_task (task);
    task = NULL;
  }

  /* Write protection: the WP bit of the mode parameter header.  Parsed by
   * hand: only the 4-byte header is needed. */
  task = scsi_cdb_modesense6 (1, SCSI_MODESENSE_PC_CURRENT,
                              SCSI_MODEPAGE_RETURN_ALL_PAGES, 0, 255);
  if (task) {
    char msg[256];

    if (io->task (io->opaque, lun, task, msg, sizeof msg) == 0
        && task->datain.size >= 4)
      info->write_protected = (task->datain.data[2] & 0x80) != 0;
    else
      lg_debug ("%s/%d: MODE SENSE(6): %s", io->target, lun, msg);
  }
  r = 0;

out:
  scsi_free_scsi_task (task);
  return r;
}

int
lg_report_luns_io (const struct lg_lun_io *io, int **luns, size_t *n, char *err,
                   size_t errlen)
{
  struct scsi_task *task = scsi_reportluns_cdb (0, 16384);
  struct scsi_reportluns_list *list;
  int r = -1;

  *luns = NULL;
  *n = 0;
  list = run (io, 0, task, "REPORT LUNS", err, errlen);
  if (list == NULL)
    goto out;
  *luns = calloc (list->num ? list->num : 1, sizeof **luns);
  if (*luns == NULL) {
    errno = ENOMEM;
    goto out;
  }
  for (uint32_t i = 0; i < list->num; i++) {
    /* Flat (0x4000) and peripheral addressing: the low 14 bits. */
    (*luns)[(*n)++] = list->luns[i] & 0x3fff;
  }
  r = 0;

out:
  scsi_free_scsi_task (task);
  return r;
}

static int
pool_task (void *opaque, int lun, struct scsi_task *task, char *msg, size_t len)
{
  return lg_pool_task (opaque, lun, task, msg, len);
}

int
lg_lun_probe (struct lg_pool *p, int lun, struct lg_lun_info *info, char *err,
              size_t errlen)
{
  struct lg_lun_io io = { pool_task, p, lg_pool_target (p) };

  return lg_lun_probe_io (&io, lun, info, err, errlen);
}

int
lg_report_luns (struct lg_pool *p, int **luns, size_t *n, char *err,
                size_t errlen)
{
  struct lg_lun_io io = { pool_task, p, lg_pool_target (p) };

  return lg_report_luns_io (&io, luns, n, err, errlen);
}

uint64_t
lg_lba_status_walk (const struct scsi_get_lba_status *st, uint64_t lba,
                    uint64_t end, uint64_t nblocks, uint32_t bs,
                    int (*fn) (void *opaque, uint64_t off, uint64_t len,
                               bool hole),
                    void *opaque, bool *stopped)
{
  uint64_t progress = lba;

  *stopped = false;
  for (uint32_t i = 0; st && i < st->num_descriptors && progress < end; i++) {
    const struct scsi_lba_status_descriptor *ds = &st->descriptors[i];
    uint64_t a = ds->lba, b;

    /* Hostile input: descriptors must move forward, inside the LUN. */
    if (a != progress || a >= nblocks || ds->num_blocks == 0
        || ds->num_blocks > nblocks - a)
      break;
    b = a + ds->num_blocks;
    if (b > end)
      b = end;
    if (fn (opaque, a * bs, (b - a) * bs,
            ds->provisioning != SCSI_PROVISIONING_TYPE_MAPPED)
        < 0) {
      *stopped = true;
      break;
    }
    progress = b;
  }
  return progress;
}
