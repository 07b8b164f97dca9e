/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Session pool: sessions to one target, and the fence they share.
 *
 * Opened and closed on one thread; lg_pool_submit is called from any
 * thread and only reads the immutable session array.  A write that
 * overlaps a range whose earlier write has an unknown outcome waits here,
 * on the submitting thread, before any session sees it (fence.h; the rule
 * is at the top of recovery.c), for at most the outage budget. */
#include <config.h>

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "iscsi/fence.h"
#include "iscsi/pool.h"
#include "iscsi/sense.h"
#include "util/log.h"

/* A device's check of its LUN's identity after a login (lg_pool_watch). */
struct watch {
  int lun;
  lg_pool_check_fn *fn;
  void *opaque;
};

struct lg_pool {
  unsigned n;
  int budget_s;
  struct lg_fence *fence;
  struct lg_shared shared;
  struct lg_said said;
  /* Held while a check runs, so that a device cannot go away under it. */
  pthread_mutex_t watch_lock;
  struct watch *watches;
  size_t nwatches;
  pthread_mutex_t pin_lock;
  int *pins; /* one entry a watch (pin) */
  size_t npins;
  /* The last unit attention that took each LUN's reservation, by the
   * number it had in pr_events. */
  struct {
    int lun;
    unsigned seq;
  } taken[64];
  size_t ntaken;
  atomic_uint pr_events;
  /* lg_pool_set_writers: nlimits entries, read without the lock. */
  pthread_mutex_t limit_lock;
  struct {
    _Atomic int lun;
    _Atomic uint64_t mask;
  } limits[LG_POOL_MAX_LIMITS];
  atomic_uint nlimits;
  char portal[300];
  char target[256];
  struct lg_session *s[];
};

/* lg_shared.validate: the check the device of lun registered, if any. */
static int
validate (void *opaque, struct lg_session *s, int lun)
{
  struct lg_pool *p = opaque;
  int r = 0;

  pthread_mutex_lock (&p->watch_lock);
  for (size_t i = 0; i < p->nwatches; i++)
    if (p->watches[i].lun == lun) {
      r = p->watches[i].fn (p->watches[i].opaque, s, lun);
      break;
    }
  pthread_mutex_unlock (&p->watch_lock);
  return r;
}

/* lg_shared.always: the pinned LUNs, all of them (the first cap in
 * luns; the count returned may be more).  pin_lock is a leaf: a
 * session's loop takes it under its own lock. */
static unsigned
always (void *opaque, int *luns, unsigned cap)
{
  struct lg_pool *p = opaque;
  unsigned n;

  pthread_mutex_lock (&p->pin_lock);
  n = (unsigned) p->npins;
  for (unsigned i = 0; i < n && i < cap; i++)
    luns[i] = p->pins[i];
  pthread_mutex_unlock (&p->pin_lock);
  return n;
}

/* lg_shared.pr_event (a loop thread, its session's lock held). */
static void
pr_event (void *opaque, int lun)
{
  struct lg_pool *p = opaque;
  size_t i;

  pthread_mutex_lock (&p->pin_lock);
  for (i = 0; i < p->ntaken && p->taken[i].lun != lun; i++)
    ;
  if (i == p->ntaken && p->ntaken < sizeof p->taken / sizeof p->taken[0])
    p->taken[p->ntaken++].lun = lun;
  if (i < p->ntaken)
    p->taken[i].seq = atomic_fetch_add (&p->pr_events, 1) + 1;
  else
    atomic_fetch_add (&p->pr_events, 1);
  pthread_mutex_unlock (&p->pin_lock);
}

unsigned
lg_pool_pr_events (const struct lg_pool *p)
{
  return atomic_load (&((struct lg_pool *) p)->pr_events);
}

bool
lg_pool_pr_taken (struct lg_pool *p, int lun, unsigned since)
{
  bool r = false;

  pthread_mutex_lock (&p->pin_lock);
  for (size_t i = 0; i < p->ntaken; i++)
    r |= p->taken[i].lun == lun && p->taken[i].seq > since;
  pthread_mutex_unlock (&p->pin_lock);
  /* A full table forgets nothing it cannot hold: any event counts. */
  return r || (p->ntaken == sizeof p->taken / sizeof p->taken[0]);
}

static int
pin (struct lg_pool *p, int lun, bool on)
{
  int r = 0;

  pthread_mutex_lock (&p->pin_lock);
  if (on) {
    int *np = realloc (p->pins, (p->npins + 1) * sizeof *np);

    if (np == NULL)
      r = -1;
    else {
      p->pins = np;
      p->pins[p->npins++] = lun;
    }
  }
  else
    for (size_t i = 0; i < p->npins; i++)
      if (p->pins[i] == lun) {
        p->pins[i] = p->pins[--p->npins];
        break;
      }
  pthread_mutex_unlock (&p->pin_lock);
  return r;
}

int
lg_pool_watch (struct lg_pool *p, int lun, lg_pool_check_fn *fn, void *opaque)
{
  struct watch *w;

  /* Checked after every login of every session, held commands or not. */
  if (pin (p, lun, true) < 0)
    return -1;
  pthread_mutex_lock (&p->watch_lock);
  w = realloc (p->watches, (p->nwatches + 1) * sizeof *w);
  if (w == NULL) {
    pthread_mutex_unlock (&p->watch_lock);
    pin (p, lun, false);
    return -1;
  }
  p->watches = w;
  w[p->nwatches++] = (struct watch){ lun, fn, opaque };
  pthread_mutex_unlock (&p->watch_lock);
  return 0;
}

void
lg_pool_unwatch (struct lg_pool *p, void *opaque)
{
  pthread_mutex_lock (&p->watch_lock);
  for (size_t i = 0; i < p->nwatches;)
    if (p->watches[i].opaque == opaque) {
      pin (p, p->watches[i].lun, false); /* pin_lock is a leaf */
      p->watches[i] = p->watches[--p->nwatches];
    }
    else
      i++;
  pthread_mutex_unlock (&p->watch_lock);
}

struct lg_pool *
lg_pool_open (const struct lg_login *login, const char *portal,
              const char *target, unsigned n, char *err, size_t errlen)
{
  struct lg_pool *p;
  int saved;

  if (n == 0 || n > LG_POOL_MAX) {
    snprintf (err, errlen, "connections must be from 1 to %d", LG_POOL_MAX);
    errno = EINVAL;
    return NULL;
  }
  p = calloc (1, sizeof *p + n * sizeof p->s[0]);
  if (p == NULL) {
    snprintf (err, errlen, "out of memory");
    return NULL;
  }
  p->budget_s = login->io_timeout;
  p->fence = lg_fence_new ();
  if (p->fence == NULL) {
    free (p);
    snprintf (err, errlen, "out of memory");
    return NULL;
  }
  p->shared.fence = p->fence;
  pthread_mutex_init (&p->said.lock, NULL);
  p->shared.said = &p->said;
  p->shared.validate = validate;
  p->shared.always = always;
  p->shared.pr_event = pr_event;
  p->shared.opaque = p;
  pthread_mutex_init (&p->watch_lock, NULL);
  pthread_mutex_init (&p->pin_lock, NULL);
  pthread_mutex_init (&p->limit_lock, NULL);
  snprintf (p->portal, sizeof p->portal, "%s", portal);
  snprintf (p->target, sizeof p->target, "%s", target);
  for (p->n = 0; p->n < n; p->n++) {
    p->s[p->n]
        = lg_session_open (login, portal, target, &p->shared, err, errlen);
    if (p->s[p->n] == NULL) {
      saved = errno;
      lg_pool_close (p);
      errno = saved;
      return NULL;
    }
  }
  return p;
}

void
lg_pool_close (struct lg_pool *p)
{
  if (p == NULL)
    return;
  for (unsigned i = 0; i < p->n; i++)
    lg_session_close (p->s[i]);
  lg_fence_free (p->fence);
  pthread_mutex_destroy (&p->said.lock);
  pthread_mutex_destroy (&p->watch_lock);
  pthread_mutex_destroy (&p->pin_lock);
  pthread_mutex_destroy (&p->limit_lock);
  free (p->watches);
  free (p->pins);
  free (p);
}

void
lg_pool_abandon (struct lg_pool *p, const char *why)
{
  if (p == NULL)
    return;
  for (unsigned i = 0; i < p->n; i++)
    lg_session_abandon (p->s[i], why);
}

void
lg_pool_hurry (struct lg_pool *p, int secs)
{
  if (p == NULL)
    return;
  for (unsigned i = 0; i < p->n; i++)
    lg_session_hurry (p->s[i], secs);
}

struct lg_session *
lg_pool_session (const struct lg_pool *p, unsigned i)
{
  return i < p->n ? p->s[i] : NULL;
}

unsigned
lg_pool_size (const struct lg_pool *p)
{
  return p->n;
}

const char *
lg_pool_target (const struct lg_pool *p)
{
  return p->target;
}

const char *
lg_pool_portal (const struct lg_pool *p)
{
  return p->portal;
}

/* The sum of one session counter over the pool. */
static unsigned
sum (const struct lg_pool *p, unsigned (*counter) (const struct lg_session *))
{
  unsigned n = 0;

  for (unsigned i = 0; i < p->n; i++)
    n += counter (p->s[i]);
  return n;
}

unsigned
lg_pool_reconnects (const struct lg_pool *p)
{
  return sum (p, lg_session_reconnects);
}

unsigned
lg_pool_retries (const struct lg_pool *p)
{
  return sum (p, lg_session_retries);
}

unsigned
lg_pool_timeouts (const struct lg_pool *p)
{
  return sum (p, lg_session_timeouts);
}

unsigned
lg_pool_lun_events (const struct lg_pool *p)
{
  return sum (p, lg_session_lun_events);
}

unsigned
lg_pool_generation (const struct lg_pool *p, bool logins)
{
  unsigned n = 0;

  for (unsigned i = 0; i < p->n; i++)
    n += lg_session_generation (p->s[i], logins);
  return n;
}

unsigned
lg_pool_doubts (const struct lg_pool *p, int lun)
{
  return lg_fence_count_lun (p->fence, lun);
}

int
lg_pool_index (const struct lg_pool *p, const struct lg_session *s)
{
  for (unsigned i = 0; i < p->n; i++)
    if (p->s[i] == s)
      return (int) i;
  return -1;
}

bool
lg_pool_cdb_reads (const uint8_t *cdb)
{
  switch (cdb[0]) {
  case 0x00: /* TEST UNIT READY */
  case 0x03: /* REQUEST SENSE */
  case 0x08: /* READ(6) */
  case 0x12: /* INQUIRY */
  case 0x1a: /* MODE SENSE(6) */
  case 0x25: /* READ CAPACITY(10) */
  case 0x28: /* READ(10) */
  case 0x2f: /* VERIFY(10) */
  case 0x5a: /* MODE SENSE(10) */
  case 0x5e: /* PERSISTENT RESERVE IN */
  case 0x88: /* READ(16) */
  case 0x8f: /* VERIFY(16) */
  case 0x9e: /* READ CAPACITY(16), GET LBA STATUS */
  case 0xa0: /* REPORT LUNS */
  case 0xa3: /* MAINTENANCE IN */
  case 0xa8: /* READ(12) */
  case 0xaf: /* VERIFY(12) */
    return true;
  default:
    return false;
  }
}

uint64_t
lg_pool_writers (struct lg_pool *p, int lun)
{
  unsigned n = atomic_load (&p->nlimits);

  for (unsigned i = 0; i < n && i < LG_POOL_MAX_LIMITS; i++)
    if (atomic_load (&p->limits[i].lun) == lun)
      return atomic_load (&p->limits[i].mask);
  return 0;
}

/* An entry is never removed, only set to 0 (the reader needs no lock). */
int
lg_pool_set_writers (struct lg_pool *p, int lun, uint64_t mask)
{
  unsigned n;
  int ret = 0;

  pthread_mutex_lock (&p->limit_lock);
  n = atomic_load (&p->nlimits);
  for (unsigned i = 0; i < n; i++)
    if (atomic_load (&p->limits[i].lun) == lun) {
      atomic_store (&p->limits[i].mask, mask);
      goto out;
    }
  if (mask == 0)
    goto out;
  if (n == LG_POOL_MAX_LIMITS) {
    ret = -1;
    goto out;
  }
  atomic_store (&p->limits[n].lun, lun);
  atomic_store (&p->limits[n].mask, mask);
  atomic_store (&p->nlimits, n + 1);
out:
  pthread_mutex_unlock (&p->limit_lock);
  return ret;
}

/* The least loaded of the healthiest sessions (lg_session_health): one
 * that is down fails or holds what it gets, and must not take traffic
 * from one that is up; one that is down but within its budget is better
 * than one failing at once.  The loads are read without a lock: a stale
 * value only makes the balance slightly worse, never wrong. */
static struct lg_session *
choose (const struct lg_pool *p, uint64_t only)
{
  struct lg_session *best = NULL;
  int best_health = -1;
  unsigned best_load = 0;

  for (unsigned i = 0; i < p->n; i++) {
    int h;
    unsigned l;

    if (only && !(only >> i & 1))
      continue;
    h = lg_session_health (p->s[i]);
    l = lg_session_load (p->s[i]);
    if (best == NULL || h > best_health
        || (h == best_health && l < best_load)) {
      best = p->s[i];
      best_health = h;
      best_load = l;
    }
  }
  return best ? best : p->s[0];
}

/* The sessions cmd may go to: 0 for any. */
static uint64_t
allowed (struct lg_pool *p, const struct lg_cmd *cmd)
{
  if (atomic_load (&p->nlimits) == 0 || cmd->task == NULL
      || lg_pool_cdb_reads (cmd->task->cdb))
    return 0;
  return lg_pool_writers (p, cmd->lun);
}

/* A write waits while it overlaps a write of unknown outcome (fence.h). */
static int
fence_wait (struct lg_pool *p, struct lg_cmd *cmd)
{
  uint64_t lba, n;
  int64_t deadline;

  if (lg_fence_count (p->fence) == 0 || cmd->kind != LG_CMD_SCSI
      || cmd->task == NULL || !lg_cdb_write_range (cmd->task->cdb, &lba, &n))
    return 0;
  cmd->first_ms = lg_mono_ms ();
  deadline = p->budget_s < 0 ? -1 : cmd->first_ms + p->budget_s * 1000LL;
  if (lg_fence_wait (p->fence, cmd->lun, lba, n, deadline, cmd->msg,
                     sizeof cmd->msg)
      == 0)
    return 0;
  lg_error ("%s: %s", p->target, cmd->msg);
  return -1;
}

void
lg_pool_submit (struct lg_pool *p, struct lg_cmd *cmd)
{
  cmd->first_ms = 0;
  if (fence_wait (p, cmd) < 0) {
    cmd->status = SCSI_STATUS_ERROR;
    lg_waiter_done (cmd->waiter);
    return;
  }
  lg_session_submit (choose (p, allowed (p, cmd)), cmd);
}

void
lg_pool_exec (struct lg_pool *p, struct lg_cmd *cmd)
{
  struct lg_waiter w;

  lg_waiter_init (&w, 1);
  cmd->waiter = &w;
  lg_pool_submit (p, cmd);
  lg_waiter_wait (&w);
  lg_waiter_destroy (&w);
  cmd->waiter = NULL;
}

int
lg_pool_task (struct lg_pool *p, int lun, struct scsi_task *task, char *msg,
              size_t len)
{
  struct lg_cmd cmd;
  int err;

  memset (&cmd, 0, sizeof cmd);
  cmd.kind = LG_CMD_SCSI;
  cmd.task = task;
  cmd.lun = lun;
  lg_pool_exec (p, &cmd);
  err = lg_cmd_errno (&cmd, msg, len);
  if (err) {
    errno = err;
    return -1;
  }
  return 0;
}
