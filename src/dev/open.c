/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The one way front ends open LUNs (open.h): the pool of sessions, the
 * iSCSI device, and stack.h's crypt layer over it. */
#include <config.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "crypt/owner.h"
#include "dev/iscsi.h"
#include "dev/open.h"
#include "dev/reserve.h"
#include "iscsi/pool.h"
#include "iscsi/pr.h"

struct lg_tgt {
  struct lg_pool *pool;
};

struct lg_tgt *
lg_target_open (const struct lg_login *login, const char *portal,
                const char *target, unsigned connections, char *err,
                size_t errlen)
{
  struct lg_tgt *t = calloc (1, sizeof *t);

  if (t == NULL) {
    snprintf (err, errlen, "out of memory");
    return NULL;
  }
  t->pool = lg_pool_open (login, portal, target, connections, err, errlen);
  if (t->pool == NULL) {
    int e = errno;

    free (t);
    errno = e;
    return NULL;
  }
  return t;
}

int
lg_target_luns (struct lg_tgt *t, const struct lg_url *u, int **luns, size_t *n,
                char *err, size_t errlen)
{
  if (u == NULL || u->kind != LG_URL_LUN)
    return lg_report_luns (t->pool, luns, n, err, errlen);
  *luns = malloc (sizeof **luns);
  if (*luns == NULL) {
    snprintf (err, errlen, "out of memory");
    errno = ENOMEM;
    return -1;
  }
  (*luns)[0] = u->lun;
  *n = 1;
  return 0;
}

struct lg_dev *
lg_target_open_lun (struct lg_tgt *t, int lun, unsigned flags,
                    const struct lg_keytab *keys, size_t md_cache_blocks,
                    struct lg_lun_info *info, bool *volume, char *err,
                    size_t errlen)
{
  struct lg_dev *raw, *d;

  raw = lg_iscsi_dev_open (t->pool, false, lun,
                           (flags & LG_OPEN_READ_ONLY) != 0, err, errlen);
  if (raw == NULL)
    return NULL;
  if (info)
    *info = *lg_iscsi_dev_info (raw);
  d = keys ? lg_stack_wrap_lun (raw, keys, lun, (flags & LG_OPEN_NAMED) != 0,
                                md_cache_blocks, err, errlen)
           : raw;
  if (d == NULL)
    return NULL; /* raw closed by lg_stack_wrap_lun */
  /* A plain LUN's size may follow the LUN's; a volume's is in its
   * header. */
  if (d == raw && (flags & LG_OPEN_FOLLOW_RESIZE))
    d->follow_resize = true;
  if (volume)
    *volume = d != raw;
  return d;
}

int
lg_target_probe (struct lg_tgt *t, int lun, struct lg_lun_info *li,
                 char *lbas_refused, size_t rlen, char *err, size_t errlen)
{
  struct scsi_task *task;

  if (lg_lun_probe (t->pool, lun, li, err, errlen) < 0)
    return -1;
  if (lbas_refused == NULL)
    return 0;
  lbas_refused[0] = '\0';
  if (!li->is_disk || li->no_medium || !li->lbpme
      || (task = scsi_cdb_get_lba_status (0, 24)) == NULL)
    return 0;
  if (lg_pool_task (t->pool, lun, task, lbas_refused, rlen) == 0)
    lbas_refused[0] = '\0';
  else if (lbas_refused[0] == '\0')
    snprintf (lbas_refused, rlen, "refused");
  scsi_free_scsi_task (task);
  return 0;
}

uint32_t
lg_target_max_blocks (const struct lg_lun_info *li)
{
  return lg_iscsi_max_blocks (li);
}

int
lg_target_reservation (struct lg_tgt *t, int lun, struct lg_pr_state *st,
                       char *err, size_t errlen)
{
  return lg_reserve_read (t->pool, lun, st, err, errlen);
}

void
lg_target_abandon (struct lg_tgt *t, const char *why)
{
  if (t)
    lg_pool_abandon (t->pool, why);
}

void
lg_target_hurry (struct lg_tgt *t, int secs)
{
  if (t)
    lg_pool_hurry (t->pool, secs);
}

void
lg_target_close (struct lg_tgt *t)
{
  if (t == NULL)
    return;
  lg_pool_close (t->pool);
  free (t);
}

/* No persistent reservations on the LUN: a volume's owner record (a
 * gateway serving it) refuses, unless LG_CLAIM_TAKEOVER and its heartbeat
 * stopped.  0, or -1 with errno and err set. */
static int
owned_by_another (struct lg_dev *d, unsigned claim_flags, char *err,
                  size_t errlen)
{
  struct lg_owner_rec r;
  char who[200];
  bool stale;

  if (lg_owner_read (d, &r) < 0 || !r.valid || r.key == lg_pr_my_key ())
    return 0;
  stale = (uint64_t) time (NULL) >= r.heartbeat + LG_OWNER_STALE_S;
  if (stale && (claim_flags & LG_CLAIM_TAKEOVER))
    return 0;
  lg_owner_describe (&r, who, sizeof who);
  snprintf (err, errlen, "%s: in use by %s (owner record)%s; %s%s", d->name,
            who, stale ? ": its heartbeat stopped" : "",
            (claim_flags & LG_CLAIM_NO_RO) ? "" : "open it read-only, or ",
            stale ? "take it over with --takeover if that gateway is gone"
                  : "stop that gateway first");
  errno = EBUSY;
  return -1;
}

struct lg_dev *
lg_lun_open_raw (const struct lg_login *login, const struct lg_url *u,
                 unsigned connections, bool read_only, unsigned claim_flags,
                 char *err, size_t errlen)
{
  struct lg_pool *p
      = lg_pool_open (login, u->portal, u->target, connections, err, errlen);
  struct lg_dev *d;
  int r, e;

  if (p == NULL)
    return NULL;
  d = lg_iscsi_dev_open (p, true, u->lun, read_only, err, errlen);
  if (d == NULL) {
    e = errno;
    lg_pool_close (p);
    errno = e;
    return NULL;
  }
  r = lg_dev_claim (d, claim_flags, err, errlen);
  if (r < 0
      || (r == LG_CLAIM_UNHELD
          && owned_by_another (d, claim_flags, err, errlen) < 0)) {
    e = errno;
    lg_dev_close (d);
    errno = e;
    return NULL;
  }
  return d;
}
