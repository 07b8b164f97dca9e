/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The iSCSI device (iscsi-int.h): is the LUN still the one that was
 * opened, and still this writer's?  The identity probe before requests
 * (idev_check_identity), the check on a session after each login
 * (idev_check_after_login), and the reservation's refusal of writes
 * (idev_refused), claims and readers.  Threads and locks: iscsi.c. */
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

/* Changes whenever the LUN may have changed under us. */
unsigned
idev_pool_epoch (struct idev *x)
{
  return lg_pool_generation (x->pool, false)
      + lg_pool_generation (x->pool, true);
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
 * before idev_check_after_login has made the same comparison on that session. */
int64_t
idev_mono_ms (void)
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

int
idev_check_identity (struct idev *x, bool poll)
{
  unsigned e = idev_pool_epoch (x);
  bool stale
      = poll && idev_mono_ms () - atomic_load (&x->checked_ms) >= POLL_MS;

  if (!atomic_load (&x->gone) && e == atomic_load (&x->epoch) && !stale)
    return 0;
  pthread_mutex_lock (&x->reval);
  e = idev_pool_epoch (x);
  stale = poll && idev_mono_ms () - atomic_load (&x->checked_ms) >= POLL_MS;
  if (!atomic_load (&x->gone) && (e != atomic_load (&x->epoch) || stale)) {
    unsigned logins = lg_pool_generation (x->pool, true);
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
        ; /* found by the session's check first (idev_check_after_login) */
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
    atomic_store (&x->checked_ms, idev_mono_ms ());
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

int
idev_set_top (struct lg_dev *d, struct lg_dev *top)
{
  struct idev *x = to_idev (d);

  pthread_mutex_lock (&x->top_lock);
  x->top = top;
  atomic_store (&x->stacked, top != NULL);
  pthread_mutex_unlock (&x->top_lock);
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
  struct sreader r = { { sreader_pread, false }, x, s };
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

/* lg_pool_check_fn: a session of the pool logged in again (the pool
 * checks every LUN it serves after every login); it issues nothing it
 * holds until the stack over this LUN says, through the reattach
 * lifecycle from its top (lg_dev_reattach), that what it opened is still
 * there (0), or fails what it holds (-1 changed, -2 unknown).  Runs on the
 * session's check thread: reval is not taken (a request's revalidate may
 * hold it while its probe waits on the very session that waits for
 * this). */
int
idev_check_after_login (void *opaque, struct lg_session *s, int lun)
{
  struct idev *x = opaque;
  struct sreader r = { { sreader_pread, false }, x, s };
  bool plain, unstable = false;
  int ret;

  (void) lun;
  if (atomic_load (&x->gone))
    return -1;
  pthread_mutex_lock (&x->top_lock);
  /* A plain LUN: writes not yet flushed now are lost if the target
   * restarted (a volume's crypt layer decides for itself). */
  if ((plain = x->top == NULL)) {
    atomic_fetch_add (&x->vc_checking, 1);
    unstable = idev_vc_unstable (x);
  }
  ret = lg_dev_reattach (x->top ? x->top : &x->dev, &r.r);
  if (plain) {
    if (unstable && !(ret == 0 && r.r.target_kept)) {
      atomic_store (&x->vc_lost, true);
      atomic_fetch_add (&x->vc_losses, 1);
    }
    atomic_fetch_sub (&x->vc_checking, 1);
  }
  pthread_mutex_unlock (&x->top_lock);
  if (ret == -1) {
    /* A layer above found another volume here (and said so): nothing
     * goes to this LUN any more, not even a close's owner record. */
    pthread_mutex_lock (&x->gone_lock);
    if (!atomic_load (&x->gone)) {
      snprintf (x->gone_msg, sizeof x->gone_msg,
                "%s: the LUN holds something else since the login: refusing "
                "every request",
                x->dev.name);
      atomic_store (&x->gone, true);
    }
    pthread_mutex_unlock (&x->gone_lock);
  }
  return ret;
}

/* Marks the LUN gone after a login, once, saying why. */
static void
gone_after_login (struct idev *x, const char *why)
{
  pthread_mutex_lock (&x->gone_lock);
  if (!atomic_load (&x->gone)) {
    snprintf (x->gone_msg, sizeof x->gone_msg,
              "%s: the LUN changed identity during the outage (%s): refusing "
              "every request, and nothing held for it is sent",
              x->dev.name, why);
    lg_error ("%s", x->gone_msg);
    atomic_store (&x->gone, true);
  }
  pthread_mutex_unlock (&x->gone_lock);
}

/* The bottom of the reattach lifecycle: the LUN's identity, then the
 * blocks this writer last wrote, then the reservation on the new nexus;
 * r is the reader idev_check_after_login made (the layers above read
 * through it first). */
int
idev_reattach (struct lg_dev *d, struct lg_dev_reader *rd)
{
  struct idev *x = to_idev (d);
  struct sreader *r = (struct sreader *) rd;
  struct lg_lun_io io = { session_task, r->s, lg_pool_target (x->pool) };
  struct lg_lun_info li;
  char err[256], diff[384];
  int d2, u;

  if (rd->pread != sreader_pread || r->x != x) {
    errno = EINVAL; /* not a reader of this LUN's session */
    return -2;
  }
  if (atomic_load (&x->gone))
    return -1;
  if ((d2 = probe_identity (x, &io, x->lun, true, &li, diff, sizeof diff, err,
                            sizeof err))
      < 0) {
    lg_warn ("%s: checking the LUN after the login: %s", x->dev.name, err);
    lg_reserve_unsure (x->res);
    return -2;
  }
  if (d2 > 0) {
    gone_after_login (x, diff);
    return -1;
  }
  /* The blocks before the reservation: a disk that replaced the LUN is
   * not reserved again by a gateway that refuses it (it stayed so until
   * the gateway stopped). */
  if ((d2 = known_check (x, r->s, err, sizeof err)) < 0) {
    lg_warn ("%s: checking the LUN after the login: %s", x->dev.name, err);
    lg_reserve_unsure (x->res);
    return -2;
  }
  if (d2 > 0) {
    /* Not only another disk: the same one, restarted, whose volatile
     * cache lost writes not yet flushed (refused all the same). */
    if (idev_vc_unstable (x)) {
      size_t n = strlen (err);

      snprintf (err + n, sizeof err - n,
                "; or, as writes to it were not yet flushed, the target "
                "restarted and lost them with its volatile write cache");
    }
    gone_after_login (x, err);
    return -1;
  }
  if ((u = lg_reserve_after_login (x->res, r->s, &rd->target_kept)) < 0)
    return u;
  /* Writes held across the outage passed idev_refused before it: the
   * session fails them now. */
  return lg_reserve_lost (x->res) ? -3 : 0;
}

/* Writes fail once the reservation is lost (reserve.h). */
int
idev_refused (struct idev *x)
{
  char msg[512];
  unsigned seen = atomic_load (&x->pr_seen), now = lg_pool_pr_events (x->pool);
  int64_t t = idev_mono_ms ();

  /* tgt drops a LUN's reservation when the LUN is removed and added
   * again (every resize), and tells the nexus nothing: a writer asks
   * every PR_POLL_MS whether the reservation is still there. */

  if (now != seen && atomic_compare_exchange_strong (&x->pr_seen, &seen, now)
      && lg_pool_pr_taken (x->pool, x->lun, seen))
    lg_reserve_taken (x->res);
  if (t - atomic_load (&x->pr_checked_ms) >= PR_POLL_MS
      && !atomic_load (&x->gone))
    lg_reserve_poll (x->res, &x->pr_checked_ms, t, PR_POLL_MS);
  if (!lg_reserve_refuses (x->res, msg, sizeof msg))
    return 0;
  lg_debug ("%s", msg);
  errno = EPERM;
  return -1;
}

int
idev_claim (struct lg_dev *d, unsigned flags, char *err, size_t errlen)
{
  struct idev *x = to_idev (d);
  bool no_pr;
  int r;

  if (flags & LG_CLAIM_READER) {
    lg_reserve_note (x->pool, x->lun, (flags & LG_CLAIM_VOLUME) != 0);
    return LG_CLAIM_UNHELD;
  }
  if (flags & LG_CLAIM_RESET)
    return lg_reserve_fence (x->res, err, errlen);
  /* A session that logs in during the claim registers: the pool checks
   * this LUN after every login (idev_check_after_login). */
  if ((r = lg_reserve_claim (x->res, flags, &no_pr, err, errlen)) < 0 || no_pr)
    return r < 0 ? -1 : LG_CLAIM_UNHELD;
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
