/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The iSCSI block device: byte-addressed requests become READ(16) /
 * WRITE(16) / UNMAP / WRITE SAME(16) / GET LBA STATUS / SYNCHRONIZE
 * CACHE(16) commands on the pool.
 *
 * Threads: any number of callers at once.  A large request is split at the
 * LUN's maximum transfer length and its pieces are all submitted before
 * waiting, so they run in parallel over the pool's sessions.  Unaligned
 * writes read-modify-write their edge blocks, one block at a time under
 * its stripe (keyed by LBA), and whole-block writes, zeroings and trims
 * are counted on the stripes they cover while they are in flight: an RMW
 * waits until no whole-block write is in flight on its stripe, and new
 * ones wait for the RMWs that came before them there (struct stripe).
 * So neither an RMW nor a whole-block write of one block can land
 * between the other's read and write, and lose its bytes (two RMWs, or
 * an RMW and an aligned write of another connection), and neither kind
 * starves the other.  stripe_lock is a leaf, held only to count; of the
 * stripe state, nothing is held across a round trip but an RMW's own
 * turn.  reval is held across the identity probe (idev_check_identity,
 * iscsi-ident.c), and
 * top_lock across a reattach of the stack (doc/locking.md).
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <time.h>

#include "dev/iscsi-int.h"
#include "dev/known.h"
#include "dev/ra.h"
#include "dev/reserve.h"
#include "iscsi/sense.h"
#include "util/log.h"

/* The stripes nblocks at lba cover, as a bit mask. */
static uint64_t
stripes_of (uint64_t lba, uint64_t nblocks)
{
  uint64_t mask = 0;

  if (nblocks >= RMW_STRIPES)
    return ~UINT64_C (0);
  for (uint64_t i = 0; i < nblocks; i++)
    mask |= UINT64_C (1) << ((lba + i) % RMW_STRIPES);
  return mask;
}

/* A whole-block request enters its stripes: it waits until the RMWs
 * ticketed on them before it came have run, then counts itself on all. */
uint64_t
idev_span_enter (struct idev *x, uint64_t lba, uint64_t nblocks)
{
  uint64_t mask = stripes_of (lba, nblocks), need[RMW_STRIPES];
  bool wait;

  pthread_mutex_lock (&x->stripe_lock);
  for (unsigned i = 0; i < RMW_STRIPES; i++)
    need[i] = x->rmw[i].next;
  do {
    wait = false;
    for (unsigned i = 0; i < RMW_STRIPES && !wait; i++)
      wait = (mask & (UINT64_C (1) << i)) && x->rmw[i].serving < need[i];
    if (wait)
      pthread_cond_wait (&x->stripe_cond, &x->stripe_lock);
  } while (wait);
  for (unsigned i = 0; i < RMW_STRIPES; i++)
    if (mask & (UINT64_C (1) << i))
      x->rmw[i].writers++;
  pthread_mutex_unlock (&x->stripe_lock);
  return mask;
}

/* It completed (any thread). */
void
idev_span_exit (struct idev *x, uint64_t mask)
{
  pthread_mutex_lock (&x->stripe_lock);
  for (unsigned i = 0; i < RMW_STRIPES; i++)
    if (mask & (UINT64_C (1) << i))
      x->rmw[i].writers--;
  pthread_cond_broadcast (&x->stripe_cond);
  pthread_mutex_unlock (&x->stripe_lock);
}

static struct stripe *
rmw_enter (struct idev *x, uint64_t lba)
{
  struct stripe *s = &x->rmw[lba % RMW_STRIPES];
  uint64_t t;

  pthread_mutex_lock (&x->stripe_lock);
  t = s->next++;
  while (s->serving != t || s->writers)
    pthread_cond_wait (&x->stripe_cond, &x->stripe_lock);
  pthread_mutex_unlock (&x->stripe_lock);
  return s;
}

static void
rmw_exit (struct idev *x, struct stripe *s)
{
  pthread_mutex_lock (&x->stripe_lock);
  s->serving++;
  pthread_cond_broadcast (&x->stripe_cond);
  pthread_mutex_unlock (&x->stripe_lock);
}

/* ---- a volatile cache, for a plain LUN (idev.vc_*) ---- */

void
idev_vc_begin (struct idev *x)
{
  atomic_fetch_add (&x->vc_inflight, 1);
}

void
idev_vc_end (struct idev *x)
{
  /* Counted done before it leaves inflight: a login's check that sees
   * neither is not possible. */
  atomic_fetch_add (&x->vc_done, 1);
  atomic_fetch_sub (&x->vc_inflight, 1);
}

/* Whether writes were acknowledged, or sent, since the last flush. */
bool
idev_vc_unstable (struct idev *x)
{
  return x->dev.volatile_cache
      && (atomic_load (&x->vc_inflight) > 0
          || atomic_load (&x->vc_durable) < atomic_load (&x->vc_done));
}

/* Known blocks (known.h): a write's token, 0 when not tracked. */
static unsigned
known_begin (struct idev *x, uint64_t lba, uint64_t nblocks, const uint8_t *buf)
{
  return atomic_load (&x->known_on)
      ? lg_known_begin (x->known, lba, nblocks, buf)
      : 0;
}

static void
known_end (struct idev *x, unsigned token, bool ok)
{
  if (token)
    lg_known_end (x->known, token, ok);
}

/* Logs and sets errno for a failed command.  A read-ahead worker's own
 * read (ahead) is logged as debug (ra.h).  Whose command it was is said
 * by the caller, not by the thread: a worker that polls its session
 * completes other clients' commands too (selfpoll.c). */
static int
cmd_failed (struct idev *x, const struct lg_cmd *cmd, uint64_t lba,
            uint64_t nblocks, bool ahead)
{
  char msg[256];
  int err = lg_cmd_errno (cmd, msg, sizeof msg);

  if (cmd->status == SCSI_STATUS_RESERVATION_CONFLICT)
    lg_reserve_conflict (x->res);
  if (ahead)
    lg_debug ("%s: %s LBA %" PRIu64 "+%" PRIu64 " (read ahead): %s",
              x->dev.name, lg_scsi_opname (cmd->task ? cmd->task->cdb[0] : 0),
              lba, nblocks, msg);
  else
    lg_error ("%s: %s LBA %" PRIu64 "+%" PRIu64 ": %s", x->dev.name,
              lg_scsi_opname (cmd->task ? cmd->task->cdb[0] : 0), lba, nblocks,
              msg);
  errno = err ? err : EIO;
  return -1;
}

int
idev_cmd_failed (struct idev *x, const struct lg_cmd *cmd, uint64_t lba,
                 uint64_t nblocks)
{
  return cmd_failed (x, cmd, lba, nblocks, false);
}

/* Ranges of whole blocks, for one batch of commands. */
struct blkseg {
  uint8_t *buf;
  uint64_t lba, nblocks;
};

struct pending {
  struct lg_cmd cmd;
  uint64_t lba, nblocks;
  unsigned known; /* a write's token (known.h) */
};

/* Reads or writes whole-block ranges, split in commands of at most
 * max_blocks, all in flight at once over the pool. */
static int
rw_segs (struct idev *x, bool write, const struct blkseg *segs, unsigned nsegs,
         bool fua)
{
  struct pending stack_cmds[STACK_CMDS], *p = stack_cmds;
  struct lg_waiter w;
  uint64_t n = 0, k = 0;
  int r = 0;

  for (unsigned s = 0; s < nsegs; s++)
    n += (segs[s].nblocks + x->max_blocks - 1) / x->max_blocks;
  if (n > STACK_CMDS) {
    p = calloc (n, sizeof *p);
    if (p == NULL)
      return -1;
  }
  else
    memset (p, 0, n * sizeof *p);

  lg_waiter_init (&w, (unsigned) n);
  for (unsigned s = 0; s < nsegs; s++)
    for (uint64_t done = 0; done < segs[s].nblocks; done += x->max_blocks) {
      struct pending *q = &p[k++];
      uint64_t cnt = segs[s].nblocks - done;
      uint32_t bytes;

      if (cnt > x->max_blocks)
        cnt = x->max_blocks;
      bytes = (uint32_t) (cnt * x->bs);
      q->lba = segs[s].lba + done;
      q->nblocks = cnt;
      q->cmd.kind = LG_CMD_SCSI;
      q->cmd.lun = x->lun;
      q->cmd.waiter = &w;
      q->cmd.iov.iov_base = segs[s].buf + done * x->bs;
      q->cmd.iov.iov_len = bytes;
      q->cmd.task = write
          ? scsi_cdb_write16 (q->lba, bytes, (int) x->bs, 0, 0, fua, 0, 0)
          : scsi_cdb_read16 (q->lba, bytes, (int) x->bs, 0, 0, 0, 0, 0);
      if (q->cmd.task == NULL) {
        q->cmd.status = SCSI_STATUS_ERROR;
        snprintf (q->cmd.msg, sizeof q->cmd.msg, "out of memory");
        /* Never submitted: count it done. */
        lg_waiter_done (&w);
        continue;
      }
      if (write) {
        q->known = known_begin (x, q->lba, q->nblocks, q->cmd.iov.iov_base);
        idev_vc_begin (x);
      }
      lg_pool_submit (x->pool, &q->cmd);
    }
  lg_waiter_wait (&w);
  lg_waiter_destroy (&w);

  for (uint64_t i = 0; i < n; i++) {
    bool ok = p[i].cmd.task != NULL
        && lg_scsi_errno (p[i].cmd.status, p[i].cmd.sense.key,
                          p[i].cmd.sense.ascq)
            == 0;

    known_end (x, p[i].known, ok);
    if (write && p[i].cmd.task != NULL)
      idev_vc_end (x);
    /* The commands this thread sent and waited for: a read-ahead
     * worker's are its own reads. */
    if (r == 0 && !ok)
      r = cmd_failed (x, &p[i].cmd, p[i].lba, p[i].nblocks,
                      !write && lg_ra_worker ());
    scsi_free_scsi_task (p[i].cmd.task);
  }
  if (p != stack_cmds) {
    int saved = errno;

    free (p);
    errno = saved;
  }
  return r;
}

/* A started request: its commands and what to call when the last one
 * completes. */
struct abatch {
  struct lg_waiter w;
  struct idev *x;
  lg_dev_done_fn *done;
  void *opaque;
  uint64_t stripes; /* a write's (idev_span_enter), left at its completion */
  bool write;
  unsigned n;
  struct pending p[];
};

/* The last completion, on a loop thread. */
static void
abatch_done (void *opaque)
{
  struct abatch *b = opaque;
  int err = 0;

  for (unsigned i = 0; i < b->n; i++) {
    bool ok = lg_scsi_errno (b->p[i].cmd.status, b->p[i].cmd.sense.key,
                             b->p[i].cmd.sense.ascq)
        == 0;

    known_end (b->x, b->p[i].known, ok);
    if (b->write)
      idev_vc_end (b->x);
    if (err == 0 && !ok) {
      idev_cmd_failed (b->x, &b->p[i].cmd, b->p[i].lba, b->p[i].nblocks);
      err = errno;
    }
    scsi_free_scsi_task (b->p[i].cmd.task);
  }
  if (b->stripes)
    idev_span_exit (b->x, b->stripes);
  b->done (b->opaque, err);
  free (b);
}

static int
idev_start_rw (struct lg_dev *d, bool write, void *buf, size_t count,
               uint64_t off, unsigned flags, lg_dev_done_fn *done, void *opaque)
{
  struct idev *x = to_idev (d);
  uint64_t lba = off / x->bs, nblocks = count / x->bs;
  bool fua = (flags & LG_FUA) != 0;
  struct abatch *b;
  unsigned n;

  if ((write && idev_refused (x) < 0)
      || idev_check_identity (to_idev (d), false) < 0)
    return -1;

  /* Unaligned requests read-modify-write under locks, and FUA without
   * DPOFUA needs a flush after: both go the synchronous way. */
  if (off % x->bs != 0 || count % x->bs != 0 || (fua && !x->dpofua)) {
    errno = ENOTSUP;
    return -1;
  }
  n = (unsigned) ((nblocks + x->max_blocks - 1) / x->max_blocks);
  b = calloc (1, sizeof *b + n * sizeof b->p[0]);
  if (b == NULL)
    return -1;
  b->x = x;
  b->done = done;
  b->opaque = opaque;
  b->write = write;
  b->n = n;
  for (unsigned i = 0; i < n; i++) {
    struct pending *q = &b->p[i];
    uint64_t first = (uint64_t) i * x->max_blocks;
    uint64_t cnt = nblocks - first;
    uint32_t bytes;

    if (cnt > x->max_blocks)
      cnt = x->max_blocks;
    bytes = (uint32_t) (cnt * x->bs);
    q->lba = lba + first;
    q->nblocks = cnt;
    q->cmd.kind = LG_CMD_SCSI;
    q->cmd.lun = x->lun;
    q->cmd.waiter = &b->w;
    q->cmd.iov.iov_base = (uint8_t *) buf + first * x->bs;
    q->cmd.iov.iov_len = bytes;
    q->cmd.task = write
        ? scsi_cdb_write16 (q->lba, bytes, (int) x->bs, 0, 0, fua, 0, 0)
        : scsi_cdb_read16 (q->lba, bytes, (int) x->bs, 0, 0, 0, 0, 0);
    if (q->cmd.task == NULL) {
      for (unsigned j = 0; j < i; j++)
        scsi_free_scsi_task (b->p[j].cmd.task);
      free (b);
      errno = ENOMEM;
      return -1;
    }
  }
  /* Every task exists before the first is submitted: from then on only
   * the completions own b. */
  lg_waiter_init_fn (&b->w, n, abatch_done, b);
  if (write)
    b->stripes = idev_span_enter (x, lba, nblocks);
  for (unsigned i = 0; i < n; i++) {
    if (write) {
      b->p[i].known = known_begin (x, b->p[i].lba, b->p[i].nblocks,
                                   b->p[i].cmd.iov.iov_base);
      idev_vc_begin (x);
    }
    lg_pool_submit (x->pool, &b->p[i].cmd);
  }
  return 0;
}

static int
rw_blocks (struct idev *x, bool write, uint8_t *buf, uint64_t lba,
           uint64_t nblocks, bool fua)
{
  struct blkseg seg = { buf, lba, nblocks };

  return rw_segs (x, write, &seg, 1, fua);
}

/* Several aligned reads in one batch (the crypt layer reads a range's
 * metadata and data together); unaligned ones one after the other. */
static int idev_pread (struct lg_dev *d, void *buf, size_t count, uint64_t off);

static int
idev_pread_multi (struct lg_dev *d, const struct lg_dev_seg *segs, unsigned n)
{
  struct idev *x = to_idev (d);
  struct blkseg bs[8];
  bool aligned = n <= 8;

  if (idev_check_identity (to_idev (d), false) < 0)
    return -1;

  for (unsigned i = 0; i < n && aligned; i++) {
    aligned = segs[i].off % x->bs == 0 && segs[i].count % x->bs == 0;
    bs[i].buf = segs[i].buf;
    bs[i].lba = segs[i].off / x->bs;
    bs[i].nblocks = segs[i].count / x->bs;
  }
  if (aligned)
    return rw_segs (x, false, bs, n, false);
  for (unsigned i = 0; i < n; i++)
    if (segs[i].count
        && idev_pread (d, segs[i].buf, segs[i].count, segs[i].off) < 0)
      return -1;
  return 0;
}

int
idev_flush (struct lg_dev *d)
{
  struct idev *x = to_idev (d);
  uint64_t done = atomic_load (&x->vc_done), was;
  struct lg_cmd cmd;
  int r = 0;

  if (idev_check_identity (to_idev (d), false) < 0)
    return -1;

  memset (&cmd, 0, sizeof cmd);
  cmd.kind = LG_CMD_SCSI;
  cmd.lun = x->lun;
  cmd.task = scsi_cdb_synchronizecache16 (0, 0, 0, 0);
  if (cmd.task == NULL)
    return -1;
  lg_pool_exec (x->pool, &cmd);
  if (lg_scsi_errno (cmd.status, cmd.sense.key, cmd.sense.ascq) != 0)
    r = idev_cmd_failed (x, &cmd, 0, x->info.nblocks);
  scsi_free_scsi_task (cmd.task);
  /* Everything completed before it began is stable now. */
  was = atomic_load (&x->vc_durable);
  while (r == 0 && was < done
         && !atomic_compare_exchange_weak (&x->vc_durable, &was, done))
    ;
  return r;
}

/* A client's flush of a plain LUN: also fails, once, when a login since
 * the last one found that the target may have lost acknowledged writes
 * (it restarted, its cache volatile: idev_check_after_login).  A login
 * being checked now is waited for (up to 30 s; then it counts as such a
 * loss), as it may be the one that finds the restart. */
int
idev_flush_client (struct lg_dev *d)
{
  struct idev *x = to_idev (d);

  if (idev_flush (d) < 0)
    return -1;
  if (atomic_load (&x->stacked))
    return 0;
  for (int ms = 0; atomic_load (&x->vc_checking) > 0; ms++) {
    if (ms == 30000) {
      atomic_store (&x->vc_lost, true);
      atomic_fetch_add (&x->vc_losses, 1);
      break;
    }
    usleep (1000);
  }
  if (!atomic_exchange (&x->vc_lost, false) || d->loss_tracked)
    return 0;
  lg_error ("%s: the target logged in again, and may have restarted, "
            "before writes it had acknowledged were flushed: they may be "
            "lost (a power cut of a volatile write cache)",
            d->name);
  errno = EIO;
  return -1;
}

static int
idev_pread (struct lg_dev *d, void *buf, size_t count, uint64_t off)
{
  struct idev *x = to_idev (d);
  uint8_t *p = buf;
  uint64_t bs = x->bs;
  uint8_t *bounce = NULL;
  int r = 0;

  if (idev_check_identity (to_idev (d), false) < 0)
    return -1;

  /* Head: a partial first block. */
  if (off % bs != 0 || count < bs) {
    uint64_t skip = off % bs;
    size_t n = count < bs - skip ? count : (size_t) (bs - skip);

    bounce = malloc (bs);
    if (bounce == NULL)
      return -1;
    if (rw_blocks (x, false, bounce, off / bs, 1, false) < 0)
      goto err;
    memcpy (p, bounce + skip, n);
    p += n;
    off += n;
    count -= n;
  }
  /* Middle: straight into the caller's buffer. */
  if (count >= bs) {
    uint64_t nb = count / bs;

    if (rw_blocks (x, false, p, off / bs, nb, false) < 0)
      goto err;
    p += nb * bs;
    off += nb * bs;
    count -= nb * bs;
  }
  /* Tail. */
  if (count > 0) {
    if (bounce == NULL && (bounce = malloc (bs)) == NULL)
      return -1;
    if (rw_blocks (x, false, bounce, off / bs, 1, false) < 0)
      goto err;
    memcpy (p, bounce, count);
  }
  free (bounce);
  return r;

err:
  r = errno;
  free (bounce);
  errno = r;
  return -1;
}

/* Read-modify-write of the part [skip, skip+n) of block lba. */
static int
rmw_block (struct idev *x, uint64_t lba, uint64_t skip, const uint8_t *src,
           size_t n, bool fua)
{
  uint8_t *bounce = malloc (x->bs);
  struct stripe *s;
  int r = -1, saved;

  if (bounce == NULL)
    return -1;
  s = rmw_enter (x, lba);
  if (rw_blocks (x, false, bounce, lba, 1, false) == 0) {
    memcpy (bounce + skip, src, n);
    r = rw_blocks (x, true, bounce, lba, 1, fua);
  }
  saved = errno;
  rmw_exit (x, s);
  free (bounce);
  errno = saved;
  return r;
}

static int
idev_pwrite (struct lg_dev *d, const void *buf, size_t count, uint64_t off,
             unsigned flags)
{
  struct idev *x = to_idev (d);
  const uint8_t *p = buf;
  uint64_t bs = x->bs;
  bool fua = (flags & LG_FUA) && x->dpofua;

  /* refused first: it may wait on the target, and the LUN must be
   * checked after that, just before the request goes out. */
  if (idev_refused (x) < 0 || idev_check_identity (to_idev (d), false) < 0)
    return -1;

  if (off % bs != 0 || count < bs) {
    uint64_t skip = off % bs;
    size_t n = count < bs - skip ? count : (size_t) (bs - skip);

    if (rmw_block (x, off / bs, skip, p, n, fua) < 0)
      return -1;
    p += n;
    off += n;
    count -= n;
  }
  if (count >= bs) {
    uint64_t nb = count / bs;

    uint64_t mask = idev_span_enter (x, off / bs, nb);
    int r;

    /* libiscsi only reads from the buffer of a data-out. */
    r = rw_blocks (x, true, (uint8_t *) p, off / bs, nb, fua);
    idev_span_exit (x, mask);
    if (r < 0)
      return -1;
    p += nb * bs;
    off += nb * bs;
    count -= nb * bs;
  }
  if (count > 0 && rmw_block (x, off / bs, 0, p, count, fua) < 0)
    return -1;
  if ((flags & LG_FUA) && !x->dpofua)
    return idev_flush_client (d);
  return 0;
}

static void
idev_close (struct lg_dev *d)
{
  struct idev *x = to_idev (d);

  lg_pool_unwatch (x->pool, x);
  lg_reserve_free (x->res);
  lg_known_free (x->known);
  if (x->owns_pool)
    lg_pool_close (x->pool);
  pthread_mutex_destroy (&x->stripe_lock);
  pthread_cond_destroy (&x->stripe_cond);
  free (x);
}

static int
idev_revalidate (struct lg_dev *d)
{
  return idev_check_identity (to_idev (d), true);
}

static void
idev_counters (const struct lg_dev *d, struct lg_dev_counters *c)
{
  const struct idev *x = (const struct idev *) d;

  c->transport.reconnects += lg_pool_reconnects (x->pool);
  c->transport.retries += lg_pool_retries (x->pool);
  c->transport.timeouts += lg_pool_timeouts (x->pool);
  c->transport.unconfirmed += lg_pool_doubts (x->pool, x->lun);
  /* A stacked device's losses are the layer above's to count. */
  if (!atomic_load (&x->stacked))
    c->losses += atomic_load (&x->vc_losses);
}

/* Trims, zeroings and compare-and-writes: the blocks they touch are
 * forgotten (known.h), before they go and whatever their outcome. */
static unsigned
known_touch (struct idev *x, uint64_t count, uint64_t off)
{
  uint64_t first = off / x->bs, end = (off + count + x->bs - 1) / x->bs;

  return end > first ? known_begin (x, first, end - first, NULL) : 0;
}

static int
idev_trim_k (struct lg_dev *d, uint64_t count, uint64_t off, unsigned flags)
{
  unsigned t = known_touch (to_idev (d), count, off);
  int r, e;

  idev_vc_begin (to_idev (d));
  r = idev_trim (d, count, off, flags);
  e = errno;
  idev_vc_end (to_idev (d));
  known_end (to_idev (d), t, false);
  errno = e;
  return r;
}

static int
idev_zero_k (struct lg_dev *d, uint64_t count, uint64_t off, unsigned flags)
{
  unsigned t = known_touch (to_idev (d), count, off);
  int r, e;

  idev_vc_begin (to_idev (d));
  r = idev_zero (d, count, off, flags);
  e = errno;
  idev_vc_end (to_idev (d));
  known_end (to_idev (d), t, false);
  errno = e;
  return r;
}

static int
idev_compare_write_k (struct lg_dev *d, const void *expect, const void *buf,
                      size_t count, uint64_t off)
{
  unsigned t = known_touch (to_idev (d), count, off);
  int r, e;

  idev_vc_begin (to_idev (d));
  r = idev_compare_write (d, expect, buf, count, off);
  e = errno;
  idev_vc_end (to_idev (d));
  known_end (to_idev (d), t, false);
  errno = e;
  return r;
}

static const struct lg_dev_ops idev_ops = {
  .name = "iscsi",
  .pread = idev_pread,
  .pread_multi = idev_pread_multi,
  .pwrite = idev_pwrite,
  .start_rw = idev_start_rw,
  .counters = idev_counters,
  .reattach = idev_reattach,
  .set_top = idev_set_top,
  .compare_write = idev_compare_write_k,
  .claim = idev_claim,
  .revalidate = idev_revalidate,
  .flush = idev_flush_client,
  .trim = idev_trim_k,
  .zero = idev_zero_k,
  .extents = idev_extents,
  .close = idev_close,
};

struct lg_dev *
lg_iscsi_dev_open (struct lg_pool *p, bool owns_pool, int lun, bool read_only,
                   char *err, size_t errlen)
{
  struct idev *x = calloc (1, sizeof *x);
  const struct lg_lun_info *li;

  if (x == NULL) {
    snprintf (err, errlen, "out of memory");
    return NULL;
  }
  if (lg_lun_probe (p, lun, &x->info, err, errlen) < 0)
    goto err;
  li = &x->info;
  if (!li->is_disk) {
    snprintf (err, errlen, "%s: LUN %d is a %s, not a disk", lg_pool_target (p),
              lun, li->type_name);
    errno = ENOTBLK; /* the callers that list a target skip it */
    goto err;
  }
  if (li->no_medium || li->block_size == 0) {
    snprintf (err, errlen, "%s: LUN %d has no medium", lg_pool_target (p), lun);
    errno = ESHUTDOWN;
    goto err;
  }
  x->pool = p;
  x->owns_pool = owns_pool;
  x->lun = lun;
  x->bs = li->block_size;
  x->max_blocks = lg_iscsi_max_blocks (li);
  x->max_ws_blocks = li->max_ws_blocks && li->max_ws_blocks < UINT32_MAX
      ? (uint32_t) li->max_ws_blocks
      : DEFAULT_MAX_WS_BLOCKS;
  x->max_caw_blocks = li->max_caw_blocks;
  /* XXX: DPOFUA from MODE SENSE; until probed, FUA is emulated by a
   * SYNCHRONIZE CACHE after the write, which is always correct. */
  x->dpofua = false;
  pthread_mutex_init (&x->stripe_lock, NULL);
  pthread_cond_init (&x->stripe_cond, NULL);
  pthread_mutex_init (&x->reval, NULL);
  x->seen_logins = lg_pool_generation (p, true);
  atomic_init (&x->epoch, idev_pool_epoch (x));
  atomic_init (&x->gone, false);
  atomic_init (&x->checked_ms, idev_mono_ms ());
  atomic_init (&x->seen_size, li->size);
  pthread_mutex_init (&x->gone_lock, NULL);
  pthread_mutex_init (&x->top_lock, NULL);
  if (lg_pool_watch (p, lun, idev_check_after_login, x) < 0) {
    snprintf (err, errlen, "out of memory");
    errno = ENOMEM;
    goto err;
  }

  snprintf (x->dev.name, sizeof x->dev.name, "%s/%d", lg_pool_target (p), lun);
  x->res = lg_reserve_new (p, lun, x->dev.name);
  atomic_init (&x->pr_seen, lg_pool_pr_events (p));
  atomic_init (&x->pr_checked_ms, idev_mono_ms ());
  if (x->res == NULL) {
    lg_pool_unwatch (p, x);
    snprintf (err, errlen, "out of memory");
    errno = ENOMEM;
    goto err;
  }
  /* Not knowing is only weaker: no error when out of memory. */
  if (!read_only && !li->write_protected && x->bs <= 4096)
    x->known = lg_known_new (x->bs);
  x->dev.ops = &idev_ops;
  lg_dev_set_size (&x->dev, li->size);
  x->dev.block_size = x->bs;
  x->dev.pref_block_size = lg_lun_pref_io (li);
  x->dev.max_io = x->max_blocks * x->bs;
  x->dev.read_only = read_only || li->write_protected;
  x->dev.can_trim = li->lbpu;
  x->dev.can_zero = li->lbpws;
  x->dev.can_fast_zero = li->lbpws && li->lbprz;
  x->dev.can_extents = li->lbpme;
  x->dev.holes_zero = li->lbprz;
  x->dev.can_fua = true;
  x->dev.volatile_cache = li->volatile_cache;
  if (li->write_protected && !read_only)
    lg_info ("%s: the LUN is write-protected: opened read-only", x->dev.name);
  return &x->dev;

err : {
  int saved = errno;

  free (x);
  errno = saved;
}
  return NULL;
}

uint32_t
lg_iscsi_max_blocks (const struct lg_lun_info *li)
{
  uint64_t bs = li->block_size ? li->block_size : 512;
  uint64_t max_bytes = li->max_xfer_blocks ? (uint64_t) li->max_xfer_blocks * bs
                                           : DEFAULT_MAX_XFER;
  uint64_t unit = li->phys_block_size > 4096 ? li->phys_block_size : 4096;

  if (max_bytes > DEFAULT_MAX_XFER * 4)
    max_bytes = DEFAULT_MAX_XFER * 4;
  /* Whole units and physical blocks (both powers of two here; a unit
   * that is not a multiple of the block size cannot be kept whole). */
  if (unit % bs == 0 && max_bytes >= unit)
    max_bytes -= max_bytes % unit;
  else if (unit % bs == 0)
    lg_warn ("LUN %d: its maximum transfer length (%" PRIu64 " bytes) is "
             "less than %" PRIu64 " bytes: larger requests go out in several "
             "commands",
             li->lun, max_bytes, unit);
  if (max_bytes < bs)
    max_bytes = bs;
  return (uint32_t) (max_bytes / bs);
}

const struct lg_lun_info *
lg_iscsi_dev_info (const struct lg_dev *d)
{
  return &((const struct idev *) d)->info;
}
