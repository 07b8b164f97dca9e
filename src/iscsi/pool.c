/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Session pool.  Opened and closed on one thread; lg_pool_submit is called
 * from any thread and only reads the immutable session array. */
#include <config.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "iscsi/pool.h"
#include "iscsi/sense.h"
#include "util/log.h"

struct lg_pool {
  unsigned n;
  char portal[300];
  char target[256];
  struct lg_session *s[];
};

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
  snprintf (p->portal, sizeof p->portal, "%s", portal);
  snprintf (p->target, sizeof p->target, "%s", target);
  for (p->n = 0; p->n < n; p->n++) {
    p->s[p->n] = lg_session_open (login, portal, target, err, errlen);
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
  free (p);
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

void
lg_pool_submit (struct lg_pool *p, struct lg_cmd *cmd)
{
  struct lg_session *best = p->s[0];
  unsigned best_load = lg_session_load (best);

  /* The loads are read without a lock: a stale value only makes the
   * balance slightly worse, never wrong. */
  for (unsigned i = 1; i < p->n && best_load > 0; i++) {
    unsigned l = lg_session_load (p->s[i]);

    if (l < best_load) {
      best = p->s[i];
      best_load = l;
    }
  }
  lg_session_submit (best, cmd);
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
