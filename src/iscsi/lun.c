/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* LUN probing, over the pool: the caller's thread waits while its
 * commands go out together (lg_lun_probe_io).  Everything
 * parsed here came from the target: libiscsi's unmarshallers check the
 * lengths they read; we check what they return. */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "iscsi/lun.h"
#include "util/log.h"
#include "util/bytes.h"

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

/* The largest physical block believed (a READ CAPACITY field). */
#define LG_PHYS_MAX (16u << 20)

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

/* The bytes of whole descriptors in a VPD 0x83 page of n bytes: the walk
 * stops at the first descriptor whose header or designator does not fit
 * in the page length or in what arrived. */
static uint16_t
desig_fit (const unsigned char *d, uint32_t n)
{
  uint32_t end, p = 4;

  if (n < 4)
    return 0;
  end = 4 + lg_be16 (d + 2);
  if (end > n)
    end = n;
  while (p + 4 <= end && p + 4 + d[p + 3] <= end)
    p += 4 + d[p + 3];
  return (uint16_t) (p - 4);
}

/* In-band lengths that libiscsi believes, cut to what arrived: n bytes
 * (at least 4, or an INQUIRY reply padded above).  libiscsi 1.19 allocates
 * for and walks a REPORT LUNS list as long as the reply claims (up to 4
 * GiB), and reads a GET LBA STATUS length of 2^31 or more as negative.
 * It copies a unit serial number as long as its page length says, and
 * walks device identification descriptors by their own lengths past the
 * end of the page and of the buffer: the page length is cut to the whole
 * descriptors that arrived. */
static void
clamp_lengths (struct scsi_task *task, uint32_t n)
{
  unsigned char *d = task->datain.data;

  switch (task->cdb[0]) {
  case SCSI_OPCODE_REPORTLUNS: /* list length, then 8 bytes per LUN */
    if (lg_be32 (d) > (n >= 8 ? (n - 8) & ~7u : 0))
      lg_put_be32 (d, n >= 8 ? (n - 8) & ~7u : 0);
    break;
  case SCSI_OPCODE_SERVICE_ACTION_IN: /* GET LBA STATUS: 16 per descriptor */
    if ((task->cdb[1] & 0x1f) == SCSI_GET_LBA_STATUS
        && lg_be32 (d) > (n >= 8 ? 4 + (n - 8) / 16 * 16 : 0))
      lg_put_be32 (d, n >= 8 ? 4 + (n - 8) / 16 * 16 : 0);
    break;
  case SCSI_OPCODE_INQUIRY:
    if (!(task->cdb[1] & 1))
      break;
    /* Supported VPD pages (a count in byte 3), unit serial number (a
     * length in byte 3). */
    if ((task->cdb[2] == SCSI_INQUIRY_PAGECODE_SUPPORTED_VPD_PAGES
         || task->cdb[2] == SCSI_INQUIRY_PAGECODE_UNIT_SERIAL_NUMBER)
        && d[3] > (n >= 4 ? n - 4 : 0))
      d[3] = (unsigned char) (n >= 4 ? n - 4 : 0);
    /* Device identification: a 16-bit length, then descriptors. */
    if (task->cdb[2] == SCSI_INQUIRY_PAGECODE_DEVICE_IDENTIFICATION)
      lg_put_be16 (d + 2, desig_fit (d, n));
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

/* ---- identity: VPD 0x80 and 0x83, parsed by hand ---- */

int
lg_vpd_serial_parse (const uint8_t *d, size_t n, struct lg_lun_ident *id)
{
  size_t len, a, b, k = 0;

  if (d == NULL || n < 4 || d[1] != SCSI_INQUIRY_PAGECODE_UNIT_SERIAL_NUMBER)
    return -1;
  len = d[3] < n - 4 ? d[3] : n - 4;
  /* tgt right-adjusts its serial in spaces; others pad it on the right. */
  a = 4;
  b = 4 + len;
  while (a < b && (d[a] == ' ' || d[a] == '\0'))
    a++;
  while (b > a && (d[b - 1] == ' ' || d[b - 1] == '\0'))
    b--;
  for (size_t i = a; i < b && k < LG_SERIAL_MAX; i++)
    id->serial[k++] = d[i] >= 0x20 && d[i] <= 0x7e ? (char) d[i] : '?';
  id->serial[k] = '\0';
  id->has_serial = k > 0;
  return 0;
}

static void
desig_name (char *out, size_t len, const uint8_t *dd, size_t dl, int type)
{
  size_t k;

  if (type == 1) { /* T10 vendor ID: text */
    k = (size_t) snprintf (out, len, "t10.");
    /* tgt pads it with NULs. */
    for (size_t i = 0; i < dl && dd[i] != '\0' && k + 1 < len; i++)
      out[k++] = dd[i] >= 0x20 && dd[i] <= 0x7e ? (char) dd[i] : '?';
    while (k > 4 && out[k - 1] == ' ')
      k--;
    out[k] = '\0';
    return;
  }
  k = (size_t) snprintf (out, len, "%s", type == 2 ? "eui." : "naa.");
  for (size_t i = 0; i < dl && k + 2 < len; i++, k += 2)
    snprintf (out + k, 3, "%02x", dd[i]);
}

int
lg_vpd_desig_parse (const uint8_t *d, size_t n, struct lg_lun_ident *id)
{
  size_t end, p = 4, used = 0;
  bool full = false;

  if (d == NULL || n < 4 || d[1] != SCSI_INQUIRY_PAGECODE_DEVICE_IDENTIFICATION)
    return -1;
  end = 4 + (size_t) lg_be16 (d + 2);
  if (end > n)
    end = n;
  id->desig_name[0] = '\0';
  while (p + 4 <= end && p + 4 + d[p + 3] <= end) {
    size_t dl = d[p + 3];
    int assoc = (d[p + 1] >> 4) & 3, type = d[p + 1] & 0x0f;

    /* Association 0: the logical unit (not the port or the target). */
    if (assoc == 0 && !full) {
      if (used + 4 + dl > LG_DESIG_MAX)
        full = true;
      else {
        memcpy (id->desig + used, d + p, 4 + dl);
        used += 4 + dl;
        if (id->desig_name[0] == '\0' && dl > 0 && type >= 1 && type <= 3)
          desig_name (id->desig_name, sizeof id->desig_name, d + p + 4, dl,
                      type);
      }
    }
    p += 4 + dl;
  }
  id->desig_len = used;
  id->has_desig = used > 0;
  return 0;
}

/* Appends "what a -> b" to buf (at *k), separated by ", ". */
static void
say_diff (char *buf, size_t len, size_t *k, const char *what, const char *a,
          const char *b)
{
  int r;

  if (*k >= len)
    return;
  r = snprintf (buf + *k, len - *k, "%s%s %s -> %s", *k ? ", " : "", what, a,
                b);
  if (r > 0)
    *k += (size_t) r < len - *k ? (size_t) r : len - *k;
}

const char *
lg_lun_ident_strength (const struct lg_lun_info *li, char *why, size_t len)
{
  const struct lg_lun_ident *id = &li->ident;

  if (!id->has_serial && !id->has_desig) {
    snprintf (why, len, "no unit serial number, no designators");
    return "none";
  }
  /* tgt (vendor "IET"): serial "beaf" TID LUN unless one was set, and
   * designators derived from it. */
  if (strcmp (li->vendor, "IET") == 0
      && (!id->has_serial || strncmp (id->serial, "beaf", 4) == 0)) {
    snprintf (why, len,
              "tgt's default serial and designators, made from the target "
              "and LUN numbers");
    return "weak";
  }
  snprintf (why, len, "%s%s%s", id->has_serial ? "unit serial number" : "",
            id->has_serial && id->has_desig ? " and " : "",
            id->has_desig ? "designators" : "");
  return "unique";
}

int
lg_lun_ident_diff (const struct lg_lun_ident *a, const struct lg_lun_ident *b,
                   char *buf, size_t len)
{
  size_t k = 0;
  int n = 0;

  if (len > 0)
    buf[0] = '\0';
  if (a->has_serial && (!b->has_serial || strcmp (a->serial, b->serial) != 0)) {
    say_diff (buf, len, &k, "serial", a->serial,
              b->has_serial ? b->serial : "(none)");
    n++;
  }
  if (a->has_desig
      && (!b->has_desig || a->desig_len != b->desig_len
          || memcmp (a->desig, b->desig, a->desig_len) != 0)) {
    /* The printable forms may be equal when another designator differs. */
    if (b->has_desig && strcmp (a->desig_name, b->desig_name) == 0)
      say_diff (buf, len, &k, "designators",
                a->desig_name[0] ? a->desig_name : "(unnamed)",
                "others with the same first one");
    else
      say_diff (buf, len, &k, "designator",
                a->desig_name[0] ? a->desig_name : "(unnamed)",
                !b->has_desig          ? "(none)"
                    : b->desig_name[0] ? b->desig_name
                                       : "(unnamed)");
    n++;
  }
  return n;
}

/* Runs task and unmarshalls its data-in.  NULL on failure, with errno and
 * err set; the caller still frees the task.  *unsent (when not NULL) says
 * whether the command itself failed rather than its reply. */
static void *
run (const struct lg_lun_io *io, int lun, struct scsi_task *task,
     const char *what, char *err, size_t errlen, bool *unsent)
{
  char msg[256];
  void *data;

  if (unsent)
    *unsent = false;
  if (task == NULL) {
    snprintf (err, errlen, "%s: out of memory", what);
    errno = ENOMEM;
    return NULL;
  }
  if (io->task (io->opaque, lun, task, msg, sizeof msg) < 0) {
    int saved = errno;

    if (unsent)
      *unsent = true;
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

/* A VPD page that did not come: the target refusing it (CHECK CONDITION)
 * or sending garbage means it does not give it; the command not going
 * through, or no memory, fails the probe (errno and err are set). */
static bool
page_fatal (const struct scsi_task *task, bool unsent)
{
  if (errno == ENOMEM)
    return true;
  return unsent
      && (task == NULL || task->status != SCSI_STATUS_CHECK_CONDITION);
}

/* "LUN n does not exist", and which do (REPORT LUNS, where it works). */
static int
not_found (const struct lg_lun_io *io, int lun, char *err, size_t errlen)
{
  char e2[256];
  int *luns = NULL;
  size_t n = 0;
  int len = snprintf (err, errlen, "%s: LUN %d does not exist on this target",
                      io->target, lun);

  if (lg_report_luns_io (io, &luns, &n, e2, sizeof e2) == 0 && len >= 0
      && (size_t) len < errlen) {
    size_t at = (size_t) len;

    at += (size_t) snprintf (err + at, errlen - at, "%s",
                             n ? " (its LUNs: " : " (it has none)");
    for (size_t i = 0; i < n && at < errlen; i++)
      at += (size_t) snprintf (err + at, errlen - at, "%s%d", i ? ", " : "",
                               luns[i]);
    if (n && at < errlen)
      snprintf (err + at, errlen - at, ")");
  }
  free (luns);
  errno = ENOENT;
  return -1;
}

/* The VPD pages a LUN says it has, of those the probe asks for. */
struct vpd_pages {
  bool b0, b2, s80, s83;
};

/* Standard INQUIRY: what the LUN is.  1 a disk (go on), 0 done (not a
 * disk), -1 failed (err set). */
static int
probe_inquiry (const struct lg_lun_io *io, int lun, struct lg_lun_info *info,
               char *err, size_t errlen)
{
  struct scsi_task *task = scsi_cdb_inquiry (0, 0, 255);
  struct scsi_inquiry_standard *inq;
  int r = -1;

  inq = run (io, lun, task, "INQUIRY", err, errlen, NULL);
  if (inq == NULL) {
    if (errno == ESHUTDOWN) /* LOGICAL UNIT NOT SUPPORTED */
      r = not_found (io, lun, err, errlen);
  }
  else if (inq->qualifier == SCSI_INQUIRY_PERIPHERAL_QUALIFIER_NOT_SUPPORTED
           || inq->device_type == SCSI_INQUIRY_PERIPHERAL_DEVICE_TYPE_UNKNOWN)
    r = not_found (io, lun, err, errlen);
  else {
    info->device_type = inq->device_type;
    info->type_name = type_name (inq->device_type);
    info->removable = inq->rmb != 0;
    copy_trim (info->vendor, sizeof info->vendor, inq->vendor_identification);
    copy_trim (info->product, sizeof info->product,
               inq->product_identification);
    copy_trim (info->revision, sizeof info->revision,
               inq->product_revision_level);
    info->is_disk = info->device_type
        == SCSI_INQUIRY_PERIPHERAL_DEVICE_TYPE_DIRECT_ACCESS;
    r = info->is_disk ? 1 : 0;
  }
  /* inq lives in the task's memory: nothing of it is used past here. */
  scsi_free_scsi_task (task);
  return r;
}

/* Supported VPD pages: ask only for the pages the LUN has.  The list and
 * the identity pages must arrive when the target has them: a revalidation
 * that lost them to a broken connection would take the same LUN for
 * another one.  0, or -1 (err set). */
static int
probe_vpd_list (const struct lg_lun_io *io, int lun, struct vpd_pages *pg,
                char *err, size_t errlen)
{
  struct scsi_task *task
      = scsi_cdb_inquiry (1, SCSI_INQUIRY_PAGECODE_SUPPORTED_VPD_PAGES, 255);
  struct scsi_inquiry_supported_pages *sp;
  bool unsent;
  int r = 0;

  sp = run (io, lun, task, "INQUIRY VPD 0x00", err, errlen, &unsent);
  if (sp) {
    for (int i = 0; i < sp->num_pages && i < 255; i++) {
      pg->b0 |= sp->pages[i] == SCSI_INQUIRY_PAGECODE_BLOCK_LIMITS;
      pg->b2
          |= sp->pages[i] == SCSI_INQUIRY_PAGECODE_LOGICAL_BLOCK_PROVISIONING;
      pg->s80 |= sp->pages[i] == SCSI_INQUIRY_PAGECODE_UNIT_SERIAL_NUMBER;
      pg->s83 |= sp->pages[i] == SCSI_INQUIRY_PAGECODE_DEVICE_IDENTIFICATION;
    }
  }
  else if (page_fatal (task, unsent))
    r = -1;
  scsi_free_scsi_task (task);
  return r;
}

/* READ CAPACITY(16), checked: 1 a capacity (go on), 0 no medium (done),
 * -1 failed or out of bounds (err set). */
static int
probe_capacity (const struct lg_lun_io *io, int lun, struct lg_lun_info *info,
                char *err, size_t errlen)
{
  struct scsi_task *task = scsi_cdb_readcapacity16 ();
  struct scsi_readcapacity16 *rc;
  int r = -1;

  rc = run (io, lun, task, "READ CAPACITY(16)", err, errlen, NULL);
  if (rc == NULL) {
    if (task && task->status == SCSI_STATUS_CHECK_CONDITION
        && task->sense.key == SCSI_SENSE_NOT_READY) {
      info->no_medium = true;
      r = 0;
    }
  }
  else if (rc->block_length < 512 || rc->block_length > 65536
           || (rc->block_length & (rc->block_length - 1)) != 0) {
    snprintf (err, errlen,
              "%s/%d: READ CAPACITY(16): unsupported logical "
              "block size %u",
              io->target, lun, rc->block_length);
    errno = ENOTSUP;
  }
  else if (rc->returned_lba == UINT64_MAX) {
    snprintf (err, errlen,
              "%s/%d: READ CAPACITY(16): the last LBA is 2^64-1 (a capacity "
              "of 0 blocks once wrapped, or beyond 2^63 bytes)",
              io->target, lun);
    errno = EIO;
  }
  /* Sizes are off_t and int64_t above (nbdkit, FUSE): at most 2^63 - 1. */
  else if (rc->returned_lba >= (UINT64_C (1) << 63) / rc->block_length) {
    snprintf (err, errlen,
              "%s/%d: READ CAPACITY(16): capacity of %" PRIu64
              " blocks of %u bytes is beyond 2^63 bytes",
              io->target, lun, rc->returned_lba, rc->block_length);
    errno = EIO;
  }
  else if (rc->lbppbe > 16
           || ((uint64_t) rc->block_length << rc->lbppbe) > LG_PHYS_MAX) {
    snprintf (err, errlen,
              "%s/%d: READ CAPACITY(16): physical block exponent %u "
              "(blocks of %u bytes) is beyond 16 or 16 MiB",
              io->target, lun, rc->lbppbe, rc->block_length);
    errno = EIO;
  }
  else {
    info->block_size = rc->block_length;
    info->nblocks = rc->returned_lba + 1;
    info->size = info->nblocks * info->block_size;
    info->phys_block_size = info->block_size << rc->lbppbe;
    info->lbpme = rc->lbpme != 0;
    info->lbprz = rc->lbprz != 0;
    r = 1;
  }
  scsi_free_scsi_task (task);
  return r;
}

/* The optional pages: block limits (0xB0) and logical block provisioning
 * (0xB2); what does not arrive is left unknown. */
static void
probe_limits (const struct lg_lun_io *io, int lun, const struct vpd_pages *pg,
              struct lg_lun_info *info)
{
  struct scsi_task *task;
  char ignore[256];

  if (pg->b0) {
    struct scsi_inquiry_block_limits *bl;

    task = scsi_cdb_inquiry (1, SCSI_INQUIRY_PAGECODE_BLOCK_LIMITS, 255);
    bl = run (io, lun, task, "INQUIRY VPD 0xB0", ignore, sizeof ignore, NULL);
    if (bl) {
      info->has_block_limits = true;
      info->max_xfer_blocks = bl->max_xfer_len;
      /* LIO's 4 KiB LUNs report an optimal length beyond the maximum
       * (in 512-byte units): never more than the maximum. */
      info->opt_xfer_blocks
          = bl->max_xfer_len && bl->opt_xfer_len > bl->max_xfer_len
          ? bl->max_xfer_len
          : bl->opt_xfer_len;
      info->opt_gran_blocks = bl->opt_gran;
      info->max_unmap_blocks = bl->max_unmap;
      info->max_unmap_desc = bl->max_unmap_bdc;
      info->opt_unmap_gran = bl->opt_unmap_gran;
      info->max_ws_blocks = bl->max_ws_len;
      info->max_caw_blocks = bl->max_cmp;
    }
    scsi_free_scsi_task (task);
  }
  if (pg->b2) {
    struct scsi_inquiry_logical_block_provisioning *lbp;

    task = scsi_cdb_inquiry (
        1, SCSI_INQUIRY_PAGECODE_LOGICAL_BLOCK_PROVISIONING, 255);
    lbp = run (io, lun, task, "INQUIRY VPD 0xB2", ignore, sizeof ignore, NULL);
    if (lbp) {
      info->has_lbp = true;
      info->lbpu = lbp->lbpu != 0;
      info->lbpws = lbp->lbpws != 0;
      info->lbpws10 = lbp->lbpws10 != 0;
      info->anc_sup = lbp->anc_sup != 0;
      info->provisioning_type = lbp->provisioning_type;
    }
    scsi_free_scsi_task (task);
  }
}

/* Identity: the serial (0x80) and the designators (0x83), parsed from the
 * raw page after run () cut its lengths to what arrived (and padded a
 * short reply with zeroes).  0, or -1 when a page the LUN has did not
 * arrive (err set). */
static int
probe_ident (const struct lg_lun_io *io, int lun, const struct vpd_pages *pg,
             struct lg_lun_info *info, char *err, size_t errlen)
{
  for (int i = 0; i < 2; i++) {
    bool serial = i == 0, unsent;
    struct scsi_task *task;
    int r = 0;

    if (!(serial ? pg->s80 : pg->s83))
      continue;
    task = serial
        ? scsi_cdb_inquiry (1, SCSI_INQUIRY_PAGECODE_UNIT_SERIAL_NUMBER, 255)
        : scsi_cdb_inquiry (1, SCSI_INQUIRY_PAGECODE_DEVICE_IDENTIFICATION,
                            1024);
    if (run (io, lun, task, serial ? "INQUIRY VPD 0x80" : "INQUIRY VPD 0x83",
             err, errlen, &unsent)
        == NULL)
      r = page_fatal (task, unsent) ? -1 : 0;
    else if (serial)
      lg_vpd_serial_parse (task->datain.data, (size_t) task->datain.size,
                           &info->ident);
    else
      lg_vpd_desig_parse (task->datain.data, (size_t) task->datain.size,
                          &info->ident);
    scsi_free_scsi_task (task);
    if (r < 0)
      return -1;
  }
  return 0;
}

/* Write protection and the write cache: the WP bit of the mode parameter
 * header and the caching page's WCE.  Parsed by hand: only the 4-byte
 * header and one page are needed.  Unknown is no protection and a
 * volatile cache. */
static void
probe_mode (const struct lg_lun_io *io, int lun, struct lg_lun_info *info)
{
  struct scsi_task *task = scsi_cdb_modesense6 (
      1, SCSI_MODESENSE_PC_CURRENT, SCSI_MODEPAGE_RETURN_ALL_PAGES, 0, 255);
  char msg[256];

  if (task == NULL)
    return;
  info->volatile_cache = true;
  if (io->task (io->opaque, lun, task, msg, sizeof msg) == 0
      && task->datain.size >= 4) {
    info->write_protected = (task->datain.data[2] & 0x80) != 0;
    info->volatile_cache
        = lg_mode_wce (task->datain.data, (size_t) task->datain.size) != 0;
  }
  else
    lg_debug ("%s/%d: MODE SENSE(6): %s", io->target, lun, msg);
  scsi_free_scsi_task (task);
}

/* The probe's commands go out together, in two rounds: what the LUN is,
 * its page list, its capacity and its mode pages; then the pages the
 * list named.  One after another, the eight commands took eight round
 * trips, and every request waited for them at each check (after a login,
 * a unit attention, and every POLL_MS while a stream is read ahead): 0.4
 * s at 50 ms, a seventh of a 256 MiB copy on a 1 Gbit/s link
 * (contrib/bench/link).  Each step fills a copy of its own, and the
 * result is put together in the order the steps had when they ran one
 * after another: the first that fails says why. */
enum step {
  ST_INQ,
  ST_VPD,
  ST_CAP,
  ST_MODE,
  ST_B0,
  ST_B2,
  ST_S80,
  ST_S83,
  ST_N
};

struct step_job {
  const struct lg_lun_io *io;
  int lun;
  enum step step;
  int r, errnum;
  struct vpd_pages pg;
  struct lg_lun_info info;
  char err[256];
};

static void *
step_run (void *arg)
{
  struct step_job *j = arg;
  const struct lg_lun_io *io = j->io;
  size_t el = sizeof j->err;

  errno = 0;
  switch (j->step) {
  case ST_INQ:
    j->r = probe_inquiry (io, j->lun, &j->info, j->err, el);
    break;
  case ST_VPD:
    j->r = probe_vpd_list (io, j->lun, &j->pg, j->err, el);
    break;
  case ST_CAP:
    j->r = probe_capacity (io, j->lun, &j->info, j->err, el);
    break;
  case ST_MODE:
    probe_mode (io, j->lun, &j->info);
    break;
  case ST_B0:
  case ST_B2:
    probe_limits (io, j->lun, &j->pg, &j->info);
    break;
  case ST_S80:
  case ST_S83:
    j->r = probe_ident (io, j->lun, &j->pg, &j->info, j->err, el);
    break;
  case ST_N:
    break;
  }
  j->errnum = errno;
  return NULL;
}

/* Runs the n steps at once: the first on this thread, each other on a
 * thread of its own, or here after it when no thread can be made. */
static void
steps_run (struct step_job **jobs, size_t n)
{
  pthread_t th[ST_N];
  bool made[ST_N] = { false };

  for (size_t i = 1; i < n; i++)
    made[i] = pthread_create (&th[i], NULL, step_run, jobs[i]) == 0;
  step_run (jobs[0]);
  for (size_t i = 1; i < n; i++) {
    if (made[i])
      pthread_join (th[i], NULL);
    else
      step_run (jobs[i]);
  }
}

/* The probe ends with step j's result: its message and errno. */
static int
step_end (const struct step_job *j, char *err, size_t errlen)
{
  snprintf (err, errlen, "%s", j->err);
  errno = j->errnum;
  return j->r;
}

int
lg_lun_probe_io (const struct lg_lun_io *io, int lun, struct lg_lun_info *info,
                 char *err, size_t errlen)
{
  struct step_job *j = calloc (ST_N, sizeof *j), *round[ST_N];
  const struct vpd_pages *pg;
  size_t n = 0;
  int r;

  memset (info, 0, sizeof *info);
  info->lun = lun;
  if (j == NULL) {
    snprintf (err, errlen, "%s/%d: out of memory", io->target, lun);
    errno = ENOMEM;
    return -1;
  }
  for (int i = 0; i < ST_N; i++) {
    j[i].io = io;
    j[i].lun = lun;
    j[i].step = (enum step) i;
    j[i].info.lun = lun;
  }
  for (int i = ST_INQ; i <= ST_MODE; i++)
    round[n++] = &j[i];
  steps_run (round, n);

  *info = j[ST_INQ].info;
  if (j[ST_INQ].r <= 0) {
    r = step_end (&j[ST_INQ], err, errlen);
    goto out;
  }
  if (j[ST_VPD].r < 0) {
    r = step_end (&j[ST_VPD], err, errlen);
    goto out;
  }
  info->no_medium = j[ST_CAP].info.no_medium;
  if (j[ST_CAP].r <= 0) {
    r = step_end (&j[ST_CAP], err, errlen);
    goto out;
  }
  info->block_size = j[ST_CAP].info.block_size;
  info->nblocks = j[ST_CAP].info.nblocks;
  info->size = j[ST_CAP].info.size;
  info->phys_block_size = j[ST_CAP].info.phys_block_size;
  info->lbpme = j[ST_CAP].info.lbpme;
  info->lbprz = j[ST_CAP].info.lbprz;

  /* The second round: each step asks for its one page, if listed. */
  pg = &j[ST_VPD].pg;
  n = 0;
  j[ST_B0].pg.b0 = pg->b0;
  j[ST_B2].pg.b2 = pg->b2;
  j[ST_S80].pg.s80 = pg->s80;
  j[ST_S83].pg.s83 = pg->s83;
  if (pg->b0)
    round[n++] = &j[ST_B0];
  if (pg->b2)
    round[n++] = &j[ST_B2];
  if (pg->s80)
    round[n++] = &j[ST_S80];
  if (pg->s83)
    round[n++] = &j[ST_S83];
  if (n)
    steps_run (round, n);
  if (j[ST_S80].r < 0) {
    r = step_end (&j[ST_S80], err, errlen);
    goto out;
  }
  if (j[ST_S83].r < 0) {
    r = step_end (&j[ST_S83], err, errlen);
    goto out;
  }
  if (j[ST_B0].info.has_block_limits) {
    const struct lg_lun_info *b = &j[ST_B0].info;

    info->has_block_limits = true;
    info->max_xfer_blocks = b->max_xfer_blocks;
    info->opt_xfer_blocks = b->opt_xfer_blocks;
    info->opt_gran_blocks = b->opt_gran_blocks;
    info->max_unmap_blocks = b->max_unmap_blocks;
    info->max_unmap_desc = b->max_unmap_desc;
    info->opt_unmap_gran = b->opt_unmap_gran;
    info->max_ws_blocks = b->max_ws_blocks;
    info->max_caw_blocks = b->max_caw_blocks;
  }
  if (j[ST_B2].info.has_lbp) {
    const struct lg_lun_info *b = &j[ST_B2].info;

    info->has_lbp = true;
    info->lbpu = b->lbpu;
    info->lbpws = b->lbpws;
    info->lbpws10 = b->lbpws10;
    info->anc_sup = b->anc_sup;
    info->provisioning_type = b->provisioning_type;
  }
  info->ident.has_serial = j[ST_S80].info.ident.has_serial;
  memcpy (info->ident.serial, j[ST_S80].info.ident.serial,
          sizeof info->ident.serial);
  info->ident.has_desig = j[ST_S83].info.ident.has_desig;
  info->ident.desig_len = j[ST_S83].info.ident.desig_len;
  memcpy (info->ident.desig, j[ST_S83].info.ident.desig,
          sizeof info->ident.desig);
  memcpy (info->ident.desig_name, j[ST_S83].info.ident.desig_name,
          sizeof info->ident.desig_name);
  info->write_protected = j[ST_MODE].info.write_protected;
  info->volatile_cache = j[ST_MODE].info.volatile_cache;
  r = 0;

out:
  free (j);
  return r;
}

int
lg_mode_wce (const uint8_t *d, size_t n)
{
  size_t off;

  if (n < 4)
    return -1;
  if ((size_t) d[0] + 1 < n)
    n = (size_t) d[0] + 1; /* the mode data length leaves itself out */
  off = 4 + (size_t) d[3]; /* after the block descriptors */
  while (off + 2 <= n) {
    bool spf = (d[off] & 0x40) != 0;
    size_t hl = spf ? 4 : 2, len;

    if (off + hl > n)
      break;
    len = spf ? ((size_t) d[off + 2] << 8 | d[off + 3]) : d[off + 1];
    if ((d[off] & 0x3f) == 0x08 && !spf)
      return len >= 1 && off + 2 < n ? (d[off + 2] & 0x04) != 0 : -1;
    off += hl + len;
  }
  return -1;
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
  list = run (io, 0, task, "REPORT LUNS", err, errlen, NULL);
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

uint32_t
lg_lun_pref_io (const struct lg_lun_info *li)
{
  uint64_t want = li->phys_block_size > li->block_size ? li->phys_block_size
                                                       : li->block_size;
  uint64_t pref = li->block_size;

  if (li->opt_gran_blocks > 0
      && (uint64_t) li->opt_gran_blocks * li->block_size > want)
    want = (uint64_t) li->opt_gran_blocks * li->block_size;
  if (want > LG_PREF_IO_MAX)
    want = LG_PREF_IO_MAX;
  /* nbdkit and FUSE take powers of 2 only: the largest that fits. */
  while (pref * 2 <= want)
    pref *= 2;
  return (uint32_t) pref;
}

/* A descriptor of length 0 at a: tgt's 32-bit count of a run of a multiple
 * of 2^32 blocks (2 TiB of 512-byte blocks).  The run goes on to where the
 * next descriptor starts; with none after it, take one block and let the
 * caller ask again from the next. */
static uint64_t
zero_length_end (const struct scsi_get_lba_status *st, uint32_t i, uint64_t a,
                 uint64_t nblocks)
{
  if (i + 1 < st->num_descriptors) {
    uint64_t next = st->descriptors[i + 1].lba;

    if (next > a && next <= nblocks)
      return next;
  }
  return a + 1;
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
    if (a != progress || a >= nblocks || ds->num_blocks > nblocks - a)
      break;
    b = ds->num_blocks ? a + ds->num_blocks
                       : zero_length_end (st, i, a, nblocks);
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
