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
 * turn.  reval is held across the identity probe (revalidate), and
 * upper_lock across the upper layer's login check (doc/locking.md).
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
#include <time.h>

#include "dev/iscsi.h"
#include "dev/known.h"
#include "dev/reserve.h"
#include "iscsi/sense.h"
#include "util/log.h"

#define RMW_STRIPES 64
/* When the LUN reports no limit, the size of one command. */
#define DEFAULT_MAX_XFER (4u << 20)
#define DEFAULT_MAX_WS_BLOCKS 32768u
/* WRITE SAMEs refused in a row (INVALID FIELD and the like) before zeroing
 * goes by writes for good. */
#define WS_REFUSALS_MAX 8
/* lg_dev_revalidate (a FUSE stat) probes the LUN at most this often even
 * when nothing said it changed: not every target reports a resize. */
#define POLL_MS 3000
/* A writer reads the reservation again at most this often (refused). */
#define PR_POLL_MS 3000
/* Commands per batch on the stack; larger batches are allocated. */
#define STACK_CMDS 16

/* One stripe of blocks (lba % RMW_STRIPES): what writes over it now
 * (under the device's stripe_lock).  RMWs take tickets and run one at a
 * time in ticket order, each when no whole-block request is in flight
 * there; a whole-block request waits only for the RMWs ticketed before
 * it came, on all its stripes at once, then counts itself on all of them
 * at once.  So neither kind starves the other, and nothing is held while
 * waiting. */
struct stripe {
  unsigned writers;       /* whole-block requests in flight over it */
  uint64_t next, serving; /* RMW tickets: the next to give, the one to run */
};

struct idev {
  struct lg_dev dev;
  struct lg_pool *pool;
  bool owns_pool;
  int lun;
  struct lg_lun_info info;
  uint32_t bs;
  uint32_t max_blocks; /* per READ/WRITE command */
  uint32_t max_ws_blocks;
  uint32_t max_caw_blocks; /* 0: no COMPARE AND WRITE */
  bool dpofua;
  atomic_bool no_write_same; /* learned: the LUN rejects WRITE SAME */
  atomic_bool no_ws_unmap;   /* learned: it rejects WRITE SAME's UNMAP bit */
  atomic_uint ws_refusals;   /* WRITE SAMEs refused in a row (EINVAL) */
  atomic_bool no_lba_status; /* learned: the LUN rejects GET LBA STATUS */
  /* Revalidation: after a reconnection or a unit attention that says the
   * LUN may have changed, it is probed again before the next request. */
  pthread_mutex_t reval;
  atomic_uint epoch;          /* the pool's epoch when last validated */
  atomic_bool gone;           /* no longer the LUN that was opened */
  char gone_msg[512];         /* set once, before gone */
  _Atomic uint64_t seen_size; /* the last capacity accepted (written under
                                 reval) */
  pthread_mutex_t gone_lock;  /* gone_msg and gone are set under it */
  /* The layer above's login check (lg_dev_watch_login), under its lock
   * while it runs, so that the layer cannot go away under it. */
  pthread_mutex_t upper_lock;
  lg_dev_login_check_fn *upper_check;
  void *upper_opaque;
  unsigned seen_logins;           /* lg_pool_reconnects then (under reval) */
  atomic_int_fast64_t checked_ms; /* when last probed */
  struct lg_reserve *res;         /* write access (reserve.h) */
  atomic_uint pr_seen;            /* lg_pool_pr_events when last looked */
  _Atomic int64_t pr_checked_ms;  /* the reservation last read (refused) */
  bool pinned;                    /* the pool checks the LUN at every login */
  /* Blocks whose content this writer knows (known.h): tracked from its
   * claim on, checked after every login while the LUN is held. */
  struct lg_known *known;
  atomic_bool known_on;
  pthread_mutex_t stripe_lock;
  pthread_cond_t stripe_cond;
  struct stripe rmw[RMW_STRIPES];
};

static struct idev *
to_idev (struct lg_dev *d)
{
  return (struct idev *) d;
}

static int refused (struct idev *x);

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
static uint64_t
span_enter (struct idev *x, uint64_t lba, uint64_t nblocks)
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
static void
span_exit (struct idev *x, uint64_t mask)
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

/* Logs and sets errno for a failed command. */
static int
cmd_failed (struct idev *x, const struct lg_cmd *cmd, uint64_t lba,
            uint64_t nblocks)
{
  char msg[256];
  int err = lg_cmd_errno (cmd, msg, sizeof msg);

  if (cmd->status == SCSI_STATUS_RESERVATION_CONFLICT)
    lg_reserve_conflict (x->res);
  lg_error ("%s: %s LBA %" PRIu64 "+%" PRIu64 ": %s", x->dev.name,
            lg_scsi_opname (cmd->task ? cmd->task->cdb[0] : 0), lba, nblocks,
            msg);
  errno = err ? err : EIO;
  return -1;
}

/* Changes whenever the LUN may have changed under us. */
static unsigned
pool_epoch (struct idev *x)
{
  return lg_pool_lun_events (x->pool) + lg_pool_reconnects (x->pool);
}

/* Before each request: is the LUN still the one that was opened?  After
 * a new login or a unit attention (reset, capacity or LUN inventory
 * changed) the LUN is probed again, before anything else is sent.
 *
 * What must not change, ever: the kind of device, the block size, the
 * vendor and product, the unit serial number (VPD 0x80) and the
 * designators of the logical unit (VPD 0x83) where the target gives them,
 * and a medium must be there.  After a new login (the target may have
 * been reconfigured while the gateway waited: the LUN number may now name
 * another backing store) the capacity must not change either.  A LUN that
 * changed fails every request from then on (ESHUTDOWN), with one message
 * saying what differs: nothing is read from or written to another disk.
 *
 * A new capacity on a live session (a CAPACITY DATA HAS CHANGED unit
 * attention, or the periodic poll) is a resize: it is logged, and the
 * device takes it when follow_resize is set (the FUSE file), else keeps
 * serving the old size.
 *
 * A command a session held when its connection broke is not sent again
 * before check_after_login has made the same comparison on that session. */
static int64_t
mono_ms (void)
{
  struct timespec ts;

  clock_gettime (CLOCK_MONOTONIC, &ts);
  return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Appends ", " (unless buf is empty) and a formatted item to buf. */
static void __attribute__ ((format (printf, 3, 4)))
append (char *buf, size_t len, const char *fmt, ...)
{
  size_t k = strlen (buf);
  va_list ap;

  if (k > 0 && k + 2 < len) {
    memcpy (buf + k, ", ", 3);
    k += 2;
  }
  if (k + 1 >= len)
    return;
  va_start (ap, fmt);
  vsnprintf (buf + k, len - k, fmt, ap);
  va_end (ap);
}

/* What differs between the LUN as opened (x->info, x->seen_size) and li,
 * in words, into buf; 0 when it is the same LUN.  relogin: the capacity
 * counts. */
static int
identity_diff (const struct idev *x, const struct lg_lun_info *li, bool relogin,
               char *buf, size_t len)
{
  int n;

  buf[0] = '\0';
  if (!li->is_disk) {
    append (buf, len, "device type disk -> %s", li->type_name);
    return 1;
  }
  if (li->no_medium) {
    append (buf, len, "no medium");
    return 1;
  }
  n = lg_lun_ident_diff (&x->info.ident, &li->ident, buf, len);
  if (li->block_size != x->bs) {
    append (buf, len, "block size %" PRIu32 " -> %" PRIu32, x->bs,
            li->block_size);
    n++;
  }
  if (strcmp (li->vendor, x->info.vendor) != 0
      || strcmp (li->product, x->info.product) != 0) {
    append (buf, len, "vendor and product %s %s -> %s %s", x->info.vendor,
            x->info.product, li->vendor, li->product);
    n++;
  }
  if (relogin && li->size != atomic_load (&x->seen_size)) {
    append (buf, len, "capacity %" PRIu64 " -> %" PRIu64 " bytes",
            (uint64_t) atomic_load (&x->seen_size), li->size);
    n++;
  }
  return n;
}

static int
pool_io_task (void *opaque, int lun, struct scsi_task *task, char *msg,
              size_t len)
{
  return lg_pool_task (opaque, lun, task, msg, len);
}

/* Probes the LUN through io, and when it answers as another LUN than the
 * one opened, twice more: one answer that differs (a bit flipped on the
 * wire, which has no data digest) is no proof that the LUN changed.
 * 0 when a probe agrees; 1 when all three differed (diff says how the
 * last did); -1 when a probe failed (err). */
static int
probe_identity (struct idev *x, const struct lg_lun_io *io, int lun,
                bool relogin, struct lg_lun_info *li, char *diff, size_t dlen,
                char *err, size_t elen)
{
  for (int i = 0; i < 3; i++) {
    if (lg_lun_probe_io (io, lun, li, err, elen) < 0)
      return -1;
    if (identity_diff (x, li, relogin, diff, dlen) == 0)
      return 0;
    if (i < 2)
      lg_warn ("%s: the LUN answered as another (%s): asking again",
               x->dev.name, diff);
  }
  return 1;
}

static int
revalidate (struct idev *x, bool poll)
{
  unsigned e = pool_epoch (x);
  bool stale = poll && mono_ms () - atomic_load (&x->checked_ms) >= POLL_MS;

  if (!atomic_load (&x->gone) && e == atomic_load (&x->epoch) && !stale)
    return 0;
  pthread_mutex_lock (&x->reval);
  e = pool_epoch (x);
  stale = poll && mono_ms () - atomic_load (&x->checked_ms) >= POLL_MS;
  if (!atomic_load (&x->gone) && (e != atomic_load (&x->epoch) || stale)) {
    unsigned logins = lg_pool_reconnects (x->pool);
    bool relogin = logins != x->seen_logins;
    struct lg_lun_info li;
    char err[256], diff[384];

    lg_debug ("%s: checking the LUN again (%s)", x->dev.name,
              relogin ? "logged in again" : "it may have changed");
    struct lg_lun_io io = { pool_io_task, x->pool, lg_pool_target (x->pool) };
    int d = probe_identity (x, &io, x->lun, relogin, &li, diff, sizeof diff,
                            err, sizeof err);

    if (d < 0) {
      int saved = errno;

      pthread_mutex_unlock (&x->reval);
      lg_error ("%s: checking the LUN again: %s", x->dev.name, err);
      errno = saved ? saved : EIO;
      return -1;
    }
    if (d > 0) {
      pthread_mutex_lock (&x->gone_lock);
      if (atomic_load (&x->gone))
        ; /* found by the session's check first (check_after_login) */
      else if (relogin)
        snprintf (x->gone_msg, sizeof x->gone_msg,
                  "%s: the LUN changed identity during the outage (%s): "
                  "refusing every request",
                  x->dev.name, diff);
      else /* the first words are the ones test-mount-resize.sh knows */
        snprintf (x->gone_msg, sizeof x->gone_msg,
                  "%s: the LUN changed under the gateway (%s): refusing to "
                  "serve it (%s)",
                  x->dev.name,
                  !li.is_disk                  ? "no longer a disk"
                      : li.no_medium           ? "no medium"
                      : li.block_size != x->bs ? "another block size"
                      : strcmp (li.vendor, x->info.vendor) != 0
                          || strcmp (li.product, x->info.product) != 0
                      ? "another vendor or product"
                      : "another serial or designators",
                  diff);
      if (!atomic_load (&x->gone)) {
        lg_error ("%s", x->gone_msg);
        atomic_store (&x->gone, true);
      }
      pthread_mutex_unlock (&x->gone_lock);
    }
    else if (li.size != atomic_load (&x->seen_size)) {
      if (x->dev.follow_resize) {
        lg_warn ("%s: the capacity changed from %" PRIu64 " to %" PRIu64
                 " bytes",
                 x->dev.name, (uint64_t) atomic_load (&x->seen_size), li.size);
        lg_dev_set_size (&x->dev, li.size);
      }
      else
        lg_warn ("%s: the capacity changed from %" PRIu64 " to %" PRIu64
                 " bytes; still serving %" PRIu64 " bytes until restarted%s",
                 x->dev.name, (uint64_t) atomic_load (&x->seen_size), li.size,
                 lg_dev_size (&x->dev),
                 li.size < lg_dev_size (&x->dev)
                     ? " (requests past the new end fail)"
                     : "");
      atomic_store (&x->seen_size, li.size);
    }
    /* A LUN event or a login: the reservation may be gone with it. */
    if (!atomic_load (&x->gone) && e != atomic_load (&x->epoch))
      lg_reserve_recheck (x->res);
    x->seen_logins = logins;
    atomic_store (&x->epoch, e);
    atomic_store (&x->checked_ms, mono_ms ());
  }
  pthread_mutex_unlock (&x->reval);
  if (atomic_load (&x->gone)) {
    /* Said once, when it was found. */
    lg_debug ("%s", x->gone_msg);
    errno = ESHUTDOWN;
    return -1;
  }
  return 0;
}

/* The probe's commands on one session, ahead of what it holds. */
static int
session_task (void *opaque, int lun, struct scsi_task *task, char *msg,
              size_t len)
{
  return lg_session_task_now (opaque, lun, task, NULL, 0, msg, len);
}

/* Reads whole blocks of the LUN on one session, for a login check. */
struct sreader {
  struct lg_dev_reader r;
  struct idev *x;
  struct lg_session *s;
};

static int
sreader_pread (struct lg_dev_reader *rd, void *buf, size_t count, uint64_t off)
{
  struct sreader *r = (struct sreader *) rd;
  uint32_t bs = r->x->bs;
  struct scsi_task *task;
  char msg[256];
  int ret;

  if (off % bs || count % bs || count > r->x->dev.max_io) {
    errno = EINVAL;
    return -1;
  }
  task = scsi_cdb_read16 (off / bs, (uint32_t) count, (int) bs, 0, 0, 0, 0, 0);
  if (task == NULL)
    return -1;
  ret = lg_session_task_now (r->s, r->x->lun, task, buf, count, msg,
                             sizeof msg);
  if (ret < 0) {
    int err = errno;

    lg_warn ("%s: reading LBA %" PRIu64 " after the login: %s", r->x->dev.name,
             off / bs, msg);
    errno = err;
  }
  scsi_free_scsi_task (task);
  return ret;
}

static int
idev_watch_login (struct lg_dev *d, lg_dev_login_check_fn *fn, void *opaque)
{
  struct idev *x = to_idev (d);

  pthread_mutex_lock (&x->upper_lock);
  x->upper_check = fn;
  x->upper_opaque = opaque;
  pthread_mutex_unlock (&x->upper_lock);
  return 0;
}

static int
known_read (void *opaque, uint64_t lba, uint8_t *buf)
{
  struct sreader *r = opaque;

  return sreader_pread (&r->r, buf, r->x->bs, lba * r->x->bs);
}

/* The blocks this writer last wrote, read back on s after its login
 * (known.h): 0 the same, 2 another disk (msg says why), -1 unread. */
static int
known_check (struct idev *x, struct lg_session *s, char *msg, size_t len)
{
  struct sreader r = { { sreader_pread }, x, s };
  unsigned checked;
  int k;

  if (!atomic_load (&x->known_on) || !lg_reserve_held (x->res))
    return 0;
  k = lg_known_check (x->known, known_read, &r, &checked, msg, len);
  if (k < 0) {
    snprintf (msg, len, "reading back the blocks it last wrote failed");
    return -1;
  }
  lg_debug ("%s: %u block%s it last wrote read back%s", x->dev.name, checked,
            checked == 1 ? "" : "s", k ? ": one differs" : " the same");
  return k ? 2 : 0;
}

/* lg_pool_check_fn: a session of the pool logged in again and holds
 * commands for this LUN; it issues none of them until this says the LUN
 * is still the one that was opened (0), or fails them (-1 changed, -2
 * unknown).  Runs on the session's check thread: reval is not taken (a
 * request's revalidate may hold it while its probe waits on the very
 * session that waits for this). */
static int
check_after_login (void *opaque, struct lg_session *s, int lun)
{
  struct idev *x = opaque;
  struct lg_lun_io io = { session_task, s, lg_pool_target (x->pool) };
  struct lg_lun_info li;
  char err[256], diff[384];
  int d;

  if (atomic_load (&x->gone))
    return -1;
  if ((d = probe_identity (x, &io, lun, true, &li, diff, sizeof diff, err,
                           sizeof err))
      < 0) {
    lg_warn ("%s: checking the LUN after the login: %s", x->dev.name, err);
    lg_reserve_unsure (x->res);
    return -2;
  }
  if (d == 0) {
    struct sreader r = { { sreader_pread }, x, s };
    int u = lg_reserve_after_login (x->res, s);

    if (u < 0)
      return u;
    /* The layer above says what it found: -2 when it could not read. */
    pthread_mutex_lock (&x->upper_lock);
    if (x->upper_check)
      u = x->upper_check (x->upper_opaque, &r.r);
    pthread_mutex_unlock (&x->upper_lock);
    /* Then what it last wrote (the layer above names a volume that
     * changed better). */
    if (u == 0 && (d = known_check (x, s, err, sizeof err)) < 0) {
      lg_warn ("%s: checking the LUN after the login: %s", x->dev.name, err);
      return -2;
    }
    if (u != -1 && d == 0)
      return u;
    if (u != -1)
      goto changed;
    pthread_mutex_lock (&x->gone_lock);
    if (!atomic_load (&x->gone)) {
      snprintf (x->gone_msg, sizeof x->gone_msg,
                "%s: the LUN holds something else since the login: refusing "
                "every request",
                x->dev.name);
      atomic_store (&x->gone, true);
    }
    pthread_mutex_unlock (&x->gone_lock);
    return -1;
  }
changed:
  pthread_mutex_lock (&x->gone_lock);
  if (!atomic_load (&x->gone)) {
    snprintf (x->gone_msg, sizeof x->gone_msg,
              "%s: the LUN changed identity during the outage (%s): refusing "
              "every request, and nothing held for it is sent",
              x->dev.name, d == 2 ? err : diff);
    lg_error ("%s", x->gone_msg);
    atomic_store (&x->gone, true);
  }
  pthread_mutex_unlock (&x->gone_lock);
  return -1;
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
      if (write)
        q->known = known_begin (x, q->lba, q->nblocks, q->cmd.iov.iov_base);
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
    if (r == 0 && !ok)
      r = cmd_failed (x, &p[i].cmd, p[i].lba, p[i].nblocks);
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
  uint64_t stripes; /* a write's (span_enter), left at its completion */
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
    if (err == 0 && !ok) {
      cmd_failed (b->x, &b->p[i].cmd, b->p[i].lba, b->p[i].nblocks);
      err = errno;
    }
    scsi_free_scsi_task (b->p[i].cmd.task);
  }
  if (b->stripes)
    span_exit (b->x, b->stripes);
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

  if ((write && refused (x) < 0) || revalidate (to_idev (d), false) < 0)
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
    b->stripes = span_enter (x, lba, nblocks);
  for (unsigned i = 0; i < n; i++) {
    if (write)
      b->p[i].known = known_begin (x, b->p[i].lba, b->p[i].nblocks,
                                   b->p[i].cmd.iov.iov_base);
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

  if (revalidate (to_idev (d), false) < 0)
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

static int
idev_flush (struct lg_dev *d)
{
  struct idev *x = to_idev (d);
  struct lg_cmd cmd;
  int r = 0;

  if (revalidate (to_idev (d), false) < 0)
    return -1;

  memset (&cmd, 0, sizeof cmd);
  cmd.kind = LG_CMD_SCSI;
  cmd.lun = x->lun;
  cmd.task = scsi_cdb_synchronizecache16 (0, 0, 0, 0);
  if (cmd.task == NULL)
    return -1;
  lg_pool_exec (x->pool, &cmd);
  if (lg_scsi_errno (cmd.status, cmd.sense.key, cmd.sense.ascq) != 0)
    r = cmd_failed (x, &cmd, 0, x->info.nblocks);
  scsi_free_scsi_task (cmd.task);
  return r;
}

static int
idev_pread (struct lg_dev *d, void *buf, size_t count, uint64_t off)
{
  struct idev *x = to_idev (d);
  uint8_t *p = buf;
  uint64_t bs = x->bs;
  uint8_t *bounce = NULL;
  int r = 0;

  if (revalidate (to_idev (d), false) < 0)
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
  if (refused (x) < 0 || revalidate (to_idev (d), false) < 0)
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

    uint64_t mask = span_enter (x, off / bs, nb);
    int r;

    /* libiscsi only reads from the buffer of a data-out. */
    r = rw_blocks (x, true, (uint8_t *) p, off / bs, nb, fua);
    span_exit (x, mask);
    if (r < 0)
      return -1;
    p += nb * bs;
    off += nb * bs;
    count -= nb * bs;
  }
  if (count > 0 && rmw_block (x, off / bs, 0, p, count, fua) < 0)
    return -1;
  if ((flags & LG_FUA) && !x->dpofua)
    return idev_flush (d);
  return 0;
}

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
      cmd_failed (x, &cmd, first, covered);
    scsi_free_scsi_task (cmd.task);
    if (bad)
      return -1;
  }
  return 0;
}

static int
idev_trim (struct lg_dev *d, uint64_t count, uint64_t off, unsigned flags)
{
  struct idev *x = to_idev (d);
  uint64_t first = (off + x->bs - 1) / x->bs;
  uint64_t end = (off + count) / x->bs;

  /* refused first: it may wait on the target, and the LUN must be
   * checked after that, just before the request goes out. */
  if (refused (x) < 0 || revalidate (to_idev (d), false) < 0)
    return -1;

  /* Trim is a hint: only the whole blocks inside the range go. */
  if (end > first) {
    uint64_t mask = span_enter (x, first, end - first);
    int r = unmap_blocks (x, first, end - first);

    span_exit (x, mask);
    if (r < 0)
      return -1;
  }
  return (flags & LG_FUA) ? idev_flush (d) : 0;
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
    cmd_failed (x, &cmd, lba, cnt);
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
 * unmap is set.  ENOTSUP: refused, nothing of the range is known zeroed
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
static int
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
  if (refused (x) < 0) {
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
    cmd_failed (x, &cmd, lba, nblocks);
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

static int
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
  if (refused (x) < 0 || revalidate (to_idev (d), false) < 0)
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
  mask = span_enter (x, first, end - first);
  r = write_same_blocks (x, first, end - first, unmap);
  e = errno;
  span_exit (x, mask);
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
  return (flags & LG_FUA) ? idev_flush (d) : 0;
}

static int
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
        lg_debug ("%s: GET LBA STATUS refused (%s): reporting data", d->name,
                  msg);
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

/* Writes fail once the reservation is lost (reserve.h). */
static int
refused (struct idev *x)
{
  char msg[512];
  unsigned seen = atomic_load (&x->pr_seen), now = lg_pool_pr_events (x->pool);
  int64_t t = mono_ms (), last = atomic_load (&x->pr_checked_ms);

  /* tgt drops a LUN's reservation when the LUN is removed and added
   * again (every resize), and tells the nexus nothing: a writer asks
   * every PR_POLL_MS whether the reservation is still there. */

  if (now != seen && atomic_compare_exchange_strong (&x->pr_seen, &seen, now)
      && lg_pool_pr_taken (x->pool, x->lun, seen))
    lg_reserve_taken (x->res);
  if (t - last >= PR_POLL_MS && !atomic_load (&x->gone)
      && atomic_compare_exchange_strong (&x->pr_checked_ms, &last, t))
    lg_reserve_recheck (x->res);
  if (!lg_reserve_refuses (x->res, msg, sizeof msg))
    return 0;
  lg_debug ("%s", msg);
  errno = EPERM;
  return -1;
}

static void
idev_note_reader (struct lg_dev *d, bool volume)
{
  struct idev *x = to_idev (d);

  lg_reserve_note (x->pool, x->lun, volume);
}

static int
idev_claim (struct lg_dev *d, unsigned flags, char *err, size_t errlen)
{
  struct idev *x = to_idev (d);
  bool no_pr;
  int r;

  if (flags & LG_CLAIM_RESET)
    return lg_reserve_fence (x->res, err, errlen);
  /* Pinned first: a session that logs in during the claim registers. */
  if (!x->pinned && !(flags & LG_CLAIM_SHARED)) {
    if (lg_pool_pin (x->pool, x->lun, true) < 0) {
      snprintf (err, errlen, "out of memory");
      errno = ENOMEM;
      return -1;
    }
    x->pinned = true;
  }
  if ((r = lg_reserve_claim (x->res, flags, &no_pr, err, errlen)) < 0
      || no_pr) {
    int e = errno;

    if (x->pinned)
      lg_pool_pin (x->pool, x->lun, false);
    x->pinned = false;
    errno = e;
    return r < 0 ? -1 : 2;
  }
  if (!(flags & LG_CLAIM_SHARED) && x->known
      && !atomic_exchange (&x->known_on, true)) {
    char why[160];
    const char *s = lg_lun_ident_strength (&x->info, why, sizeof why);

    if (strcmp (s, "unique") != 0)
      lg_info ("%s: the target's identity of the LUN is %s (%s): after every "
               "login, the blocks this gateway last wrote are read back too",
               d->name, s, why);
  }
  return r;
}

static void
idev_close (struct lg_dev *d)
{
  struct idev *x = to_idev (d);

  lg_pool_unwatch (x->pool, x);
  if (x->pinned)
    lg_pool_pin (x->pool, x->lun, false);
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
  return revalidate (to_idev (d), true);
}

static void
idev_transport (const struct lg_dev *d, struct lg_dev_transport *t)
{
  const struct idev *x = (const struct idev *) d;

  t->reconnects = lg_pool_reconnects (x->pool);
  t->retries = lg_pool_retries (x->pool);
  t->timeouts = lg_pool_timeouts (x->pool);
  t->unconfirmed = lg_pool_doubts (x->pool, x->lun);
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
  int r = idev_trim (d, count, off, flags), e = errno;

  known_end (to_idev (d), t, false);
  errno = e;
  return r;
}

static int
idev_zero_k (struct lg_dev *d, uint64_t count, uint64_t off, unsigned flags)
{
  unsigned t = known_touch (to_idev (d), count, off);
  int r = idev_zero (d, count, off, flags), e = errno;

  known_end (to_idev (d), t, false);
  errno = e;
  return r;
}

static int
idev_compare_write_k (struct lg_dev *d, const void *expect, const void *buf,
                      size_t count, uint64_t off)
{
  unsigned t = known_touch (to_idev (d), count, off);
  int r = idev_compare_write (d, expect, buf, count, off), e = errno;

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
  .transport = idev_transport,
  .watch_login = idev_watch_login,
  .compare_write = idev_compare_write_k,
  .claim = idev_claim,
  .note_reader = idev_note_reader,
  .revalidate = idev_revalidate,
  .flush = idev_flush,
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
  x->seen_logins = lg_pool_reconnects (p);
  atomic_init (&x->epoch, pool_epoch (x));
  atomic_init (&x->gone, false);
  atomic_init (&x->checked_ms, mono_ms ());
  atomic_init (&x->seen_size, li->size);
  pthread_mutex_init (&x->gone_lock, NULL);
  pthread_mutex_init (&x->upper_lock, NULL);
  if (lg_pool_watch (p, lun, check_after_login, x) < 0) {
    snprintf (err, errlen, "out of memory");
    errno = ENOMEM;
    goto err;
  }

  snprintf (x->dev.name, sizeof x->dev.name, "%s/%d", lg_pool_target (p), lun);
  x->res = lg_reserve_new (p, lun, x->dev.name);
  atomic_init (&x->pr_seen, lg_pool_pr_events (p));
  atomic_init (&x->pr_checked_ms, mono_ms ());
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
  x->dev.size = li->size;
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
