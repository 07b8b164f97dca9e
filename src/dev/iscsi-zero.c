/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The iSCSI device (iscsi-int.h): trims (UNMAP), zeroing (WRITE SAME,
 * with what the LUN refused learned as it goes, else writes of zeroes),
 * COMPARE AND WRITE and extents (GET LBA STATUS).  Threads and locks:
 * iscsi.c. */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dev/iscsi-int.h"
#include "dev/known.h"
#include "dev/reserve.h"
#include "iscsi/sense.h"
#include "util/log.h"

/* UNMAP of whole blocks, in commands that respect the LUN's limits. */
static int
unmap_blocks (struct idev *x, uint64_t lba, uint64_t nblocks)
{
  uint32_t per_desc
      = x->info.max_unmap_blocks ? x->info.max_unmap_blocks : UINT32_MAX;
  uint32_t max_desc = x->info.max_unmap_desc ? x->info.max_unmap_desc : 64;

  if (max_desc > 64)
    max_desc = 64;
  while (nblocks > 0) {
    uint8_t param[8 + 64 * 16];
    struct lg_cmd cmd;
    uint32_t nd = 0;
    uint64_t first = lba, covered = 0;
    int bad;

    memset (param, 0, sizeof param);
    while (nblocks > 0 && nd < max_desc) {
      uint64_t cnt = nblocks < per_desc ? nblocks : per_desc;
      uint8_t *desc = param + 8 + nd * 16;

      for (int i = 0; i < 8; i++)
        desc[i] = (uint8_t) (lba >> (56 - 8 * i));
      for (int i = 0; i < 4; i++)
        desc[8 + i] = (uint8_t) (cnt >> (24 - 8 * i));
      lba += cnt;
      nblocks -= cnt;
      covered += cnt;
      nd++;
    }
    param[0] = (uint8_t) ((6 + nd * 16) >> 8);
    param[1] = (uint8_t) (6 + nd * 16);
    param[2] = (uint8_t) ((nd * 16) >> 8);
    param[3] = (uint8_t) (nd * 16);

    memset (&cmd, 0, sizeof cmd);
    cmd.kind = LG_CMD_SCSI;
    cmd.lun = x->lun;
    cmd.task = scsi_cdb_unmap (0, 0, (uint16_t) (8 + nd * 16));
    if (cmd.task == NULL)
      return -1;
    cmd.iov.iov_base = param;
    cmd.iov.iov_len = 8 + nd * 16;
    lg_pool_exec (x->pool, &cmd);
    bad = lg_scsi_errno (cmd.status, cmd.sense.key, cmd.sense.ascq);
    if (bad)
      idev_cmd_failed (x, &cmd, first, covered);
    scsi_free_scsi_task (cmd.task);
    if (bad)
      return -1;
  }
  return 0;
}

int
idev_trim (struct lg_dev *d, uint64_t count, uint64_t off, unsigned flags)
{
  struct idev *x = to_idev (d);
  uint64_t first = (off + x->bs - 1) / x->bs;
  uint64_t end = (off + count) / x->bs;

  /* refused first: it may wait on the target, and the LUN must be
   * checked after that, just before the request goes out. */
  if (idev_refused (x) < 0 || idev_check_identity (to_idev (d), false) < 0)
    return -1;

  /* Trim is a hint: only the whole blocks inside the range go. */
  if (end > first) {
    uint64_t mask = idev_span_enter (x, first, end - first);
    int r = unmap_blocks (x, first, end - first);

    idev_span_exit (x, mask);
    if (r < 0)
      return -1;
  }
  return (flags & LG_FUA) ? idev_flush_client (d) : 0;
}

/* One WRITE SAME(16) of the zero block over cnt blocks at lba; 0, or the
 * errno the status maps to (EINVAL, ENOTSUP: the LUN refused it). */
static int
write_same_once (struct idev *x, const uint8_t *zero, uint64_t lba,
                 uint32_t cnt, bool unmap)
{
  struct lg_cmd cmd;
  int bad;

  memset (&cmd, 0, sizeof cmd);
  cmd.kind = LG_CMD_SCSI;
  cmd.lun = x->lun;
  cmd.task = scsi_cdb_writesame16 (0, 0, unmap, lba, 0, cnt, x->bs);
  if (cmd.task == NULL)
    return ENOMEM;
  cmd.iov.iov_base = (void *) zero;
  cmd.iov.iov_len = x->bs;
  lg_pool_exec (x->pool, &cmd);
  bad = lg_scsi_errno (cmd.status, cmd.sense.key, cmd.sense.ascq);
  if (bad && bad != EINVAL && bad != ENOTSUP) {
    idev_cmd_failed (x, &cmd, lba, cnt);
    bad = errno;
  }
  else if (bad) {
    char msg[256];

    lg_cmd_errno (&cmd, msg, sizeof msg);
    lg_debug ("%s: WRITE SAME(16) LBA %" PRIu64 "+%" PRIu32 "%s refused: %s",
              x->dev.name, lba, cnt, unmap ? " (UNMAP)" : "", msg);
  }
  scsi_free_scsi_task (cmd.task);
  return bad;
}

/* What a refusal teaches: an unknown opcode turns WRITE SAME off for good;
 * INVALID FIELD and the like only fail this request (the caller writes
 * zeroes instead), unless the LUN refuses every WRITE SAME it gets. */
static void
write_same_refused (struct idev *x, int bad)
{
  if (bad == ENOTSUP
      || atomic_fetch_add (&x->ws_refusals, 1) + 1 >= WS_REFUSALS_MAX) {
    if (!atomic_exchange (&x->no_write_same, true))
      lg_info ("%s: the LUN refuses WRITE SAME: zeroing by writes from now on",
               x->dev.name);
  }
}

/* WRITE SAME(16) of a zero block over whole blocks, deallocating when
 * unmap is set.  ENOTSUP: idev_refused, nothing of the range is known zeroed
 * beyond what returned; the caller writes zeroes. */
static int
write_same_blocks (struct idev *x, uint64_t lba, uint64_t nblocks, bool unmap)
{
  uint8_t *zero = calloc (1, x->bs);
  int bad = 0;

  if (zero == NULL)
    return -1;
  if (unmap && atomic_load (&x->no_ws_unmap))
    unmap = false;
  while (nblocks > 0 && bad == 0) {
    uint32_t cnt
        = (uint32_t) (nblocks < x->max_ws_blocks ? nblocks : x->max_ws_blocks);

    bad = write_same_once (x, zero, lba, cnt, unmap);
    if (bad == EINVAL && unmap) {
      /* Some targets take WRITE SAME but not its UNMAP bit. */
      atomic_store (&x->no_ws_unmap, true);
      unmap = false;
      bad = write_same_once (x, zero, lba, cnt, false);
    }
    if (bad == EINVAL || bad == ENOTSUP) {
      write_same_refused (x, bad);
      bad = ENOTSUP;
    }
    else if (bad == 0) {
      atomic_store (&x->ws_refusals, 0);
      lba += cnt;
      nblocks -= cnt;
    }
  }
  free (zero);
  if (bad) {
    errno = bad;
    return -1;
  }
  return 0;
}

/* COMPARE AND WRITE: the data-out is the expected bytes, then the new. */
int
idev_compare_write (struct lg_dev *d, const void *expect, const void *buf,
                    size_t count, uint64_t off)
{
  struct idev *x = to_idev (d);
  uint64_t lba = off / x->bs, nblocks = count / x->bs;
  struct lg_cmd cmd;
  uint8_t *both;
  int bad;

  if (off % x->bs || count % x->bs || nblocks == 0
      || nblocks > x->max_caw_blocks) {
    errno = ENOTSUP;
    return -1;
  }
  if (idev_refused (x) < 0) {
    return -1;
  }
  both = malloc (2 * count);
  if (both == NULL)
    return -1;
  memcpy (both, expect, count);
  memcpy (both + count, buf, count);
  memset (&cmd, 0, sizeof cmd);
  cmd.kind = LG_CMD_SCSI;
  cmd.lun = x->lun;
  cmd.task = scsi_cdb_compareandwrite (lba, (uint32_t) (2 * count), (int) x->bs,
                                       0, 0, 0, 0, 0);
  if (cmd.task == NULL) {
    free (both);
    return -1;
  }
  cmd.iov.iov_base = both;
  cmd.iov.iov_len = 2 * count;
  lg_pool_exec (x->pool, &cmd);
  bad = lg_scsi_errno (cmd.status, cmd.sense.key, cmd.sense.ascq);
  if (bad && cmd.status == SCSI_STATUS_CHECK_CONDITION
      && cmd.sense.key == SCSI_SENSE_MISCOMPARE)
    bad = EAGAIN;
  else if (bad == EINVAL || bad == ENOTSUP) {
    /* Refused after all: the caller falls back. */
    char msg[256];

    lg_cmd_errno (&cmd, msg, sizeof msg);
    lg_debug ("%s: COMPARE AND WRITE refused: %s", x->dev.name, msg);
    x->max_caw_blocks = 0;
    bad = ENOTSUP;
  }
  else if (bad) {
    idev_cmd_failed (x, &cmd, lba, nblocks);
    bad = errno;
  }
  scsi_free_scsi_task (cmd.task);
  free (both);
  if (bad) {
    errno = bad;
    return -1;
  }
  return 0;
}

int
idev_zero (struct lg_dev *d, uint64_t count, uint64_t off, unsigned flags)
{
  struct idev *x = to_idev (d);
  uint64_t first = (off + x->bs - 1) / x->bs;
  uint64_t end = (off + count) / x->bs;
  /* Deallocating is only a way to zero when deallocated blocks read as
   * zeroes (LBPRZ). */
  bool unmap = (flags & LG_MAY_TRIM) && x->info.lbpws && x->info.lbprz;
  bool native = x->dev.can_zero && !atomic_load (&x->no_write_same);
  uint64_t mask;
  int r, e;

  /* refused first: it may wait on the target, and the LUN must be
   * checked after that, just before the request goes out. */
  if (idev_refused (x) < 0 || idev_check_identity (to_idev (d), false) < 0)
    return -1;

  if (flags & LG_FAST_ZERO) {
    if (!native || !unmap) {
      errno = ENOTSUP;
      return -1;
    }
  }
  if (!native || end <= first)
    return lg_dev_write_zeroes (&x->dev, count, off, flags);

  /* Unaligned edges by writes, the whole blocks by WRITE SAME. */
  if (off < first * x->bs
      && lg_dev_write_zeroes (&x->dev, first * x->bs - off, off, 0) < 0)
    return -1;
  mask = idev_span_enter (x, first, end - first);
  r = write_same_blocks (x, first, end - first, unmap);
  e = errno;
  idev_span_exit (x, mask);
  errno = e;
  if (r < 0) {
    if (errno != ENOTSUP || (flags & LG_FAST_ZERO))
      return -1;
    if (lg_dev_write_zeroes (&x->dev, (end - first) * x->bs, first * x->bs, 0)
        < 0)
      return -1;
  }
  if (off + count > end * x->bs
      && lg_dev_write_zeroes (&x->dev, off + count - end * x->bs, end * x->bs,
                              0)
          < 0)
    return -1;
  return (flags & LG_FUA) ? idev_flush_client (d) : 0;
}

int
idev_extents (struct lg_dev *d, uint64_t count, uint64_t off, lg_extent_fn *fn,
              void *opaque)
{
  struct idev *x = to_idev (d);
  uint64_t lba = off / x->bs;
  uint64_t end = (off + count + x->bs - 1) / x->bs;

  if (atomic_load (&x->no_lba_status))
    return fn (opaque, off, count, false);

  while (lba < end) {
    struct scsi_task *task = scsi_cdb_get_lba_status (lba, 4096);
    struct scsi_get_lba_status *st;
    char msg[256];
    uint64_t progress;
    bool stopped;

    if (task == NULL)
      return -1;
    if (lg_pool_task (x->pool, x->lun, task, msg, sizeof msg) < 0) {
      int err = errno;

      scsi_free_scsi_task (task);
      if (err == EINVAL || err == ENOTSUP) {
        lg_debug ("%s: GET LBA STATUS idev_refused (%s): reporting data",
                  d->name, msg);
        atomic_store (&x->no_lba_status, true);
        return fn (opaque, lba * x->bs, end * x->bs - lba * x->bs, false);
      }
      lg_error ("%s: GET LBA STATUS LBA %" PRIu64 ": %s", d->name, lba, msg);
      errno = err;
      return -1;
    }
    st = lg_datain_unmarshall (task);
    progress = lg_lba_status_walk (st, lba, end, x->info.nblocks, x->bs, fn,
                                   opaque, &stopped);
    if (stopped) {
      scsi_free_scsi_task (task);
      return 0;
    }
    scsi_free_scsi_task (task);
    if (progress == lba) {
      /* Nothing usable came back: call the rest data, which is safe. */
      return fn (opaque, lba * x->bs, end * x->bs - lba * x->bs, false);
    }
    lba = progress;
  }
  return 0;
}
