/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* A pool of sessions (connections) to one target, so that requests from
 * many threads are in flight at once.  Each session has its own loop
 * thread; a command goes to the least loaded session. */
#ifndef LG_POOL_H
#define LG_POOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "iscsi/session.h"

#define LG_POOL_MAX 64

struct lg_pool;

/* Opens n sessions to target at portal.  NULL with errno and err set when
 * any of them fails to log in. */
struct lg_pool *lg_pool_open (const struct lg_login *login, const char *portal,
                              const char *target, unsigned n, char *err,
                              size_t errlen);
void lg_pool_close (struct lg_pool *p);

/* lg_session_abandon on every session of the pool. */
void lg_pool_abandon (struct lg_pool *p, const char *why);

/* lg_session_hurry on every session of the pool. */
void lg_pool_hurry (struct lg_pool *p, int secs);

unsigned lg_pool_size (const struct lg_pool *p);
const char *lg_pool_target (const struct lg_pool *p);
const char *lg_pool_portal (const struct lg_pool *p);

/* Sums of the sessions' counters (session.h). */
unsigned lg_pool_reconnects (const struct lg_pool *p);
unsigned lg_pool_retries (const struct lg_pool *p);
unsigned lg_pool_lun_events (const struct lg_pool *p);
unsigned lg_pool_timeouts (const struct lg_pool *p);
/* Sums of the sessions' generations (lg_session_generation): what the
 * devices key their checks on, never the counters above. */
unsigned lg_pool_generation (const struct lg_pool *p, bool logins);

/* Submits to the least loaded session; completes through cmd->waiter. */
void lg_pool_submit (struct lg_pool *p, struct lg_cmd *cmd);

/* After each login of a session of the pool, and before it issues again
 * anything it held, fn (opaque, s, lun) checks that lun is still the LUN
 * that was opened (see lg_shared.validate in session.h for what it may do
 * and return): every watched LUN, after every login, whether or not the
 * session held commands for it (a reservation is registered again on
 * each new nexus, and a barrier starts a new epoch: dev/iscsi.c, the
 * reattach lifecycle of dev/dev.h).  One check a device; lg_pool_unwatch
 * removes those of opaque, waiting for one that runs. */
typedef int lg_pool_check_fn (void *opaque, struct lg_session *s, int lun);
int lg_pool_watch (struct lg_pool *p, int lun, lg_pool_check_fn *fn,
                   void *opaque);
void lg_pool_unwatch (struct lg_pool *p, void *opaque);

/* Unit attentions that said a LUN's reservation was preempted or
 * released: a counter (it changes at each), and whether lun had one
 * after the counter read since. */
unsigned lg_pool_pr_events (const struct lg_pool *p);
bool lg_pool_pr_taken (struct lg_pool *p, int lun, unsigned since);

/* The sessions that may send lun's writes (bit i: session i), when the
 * target lets only some of them write under the LUN's reservation (LIO
 * treats every session of the holder's initiator name but the holder's
 * own as unregistered): write-class commands for lun (everything but the
 * reads and inquiries lg_pool_cdb_reads lists) then go only to those.
 * 0 lifts the limit.  At most LG_POOL_MAX_LIMITS LUNs at once: -1 then. */
#define LG_POOL_MAX_LIMITS 32
int lg_pool_set_writers (struct lg_pool *p, int lun, uint64_t mask);
uint64_t lg_pool_writers (struct lg_pool *p, int lun);
/* Whether cdb neither changes the medium nor the reservation: READ,
 * VERIFY, INQUIRY, MODE SENSE, REPORT LUNS, READ CAPACITY, GET LBA
 * STATUS, PERSISTENT RESERVE IN, TEST UNIT READY, REQUEST SENSE, REPORT
 * SUPPORTED OPERATION CODES. */
bool lg_pool_cdb_reads (const uint8_t *cdb);
/* Which session of p s is, or -1. */
int lg_pool_index (const struct lg_pool *p, const struct lg_session *s);

/* Writes of unknown outcome to lun in the pool's fence (fence.h). */
unsigned lg_pool_doubts (const struct lg_pool *p, int lun);

/* Session i of the pool, or NULL. */
struct lg_session *lg_pool_session (const struct lg_pool *p, unsigned i);

/* Submits and waits. */
void lg_pool_exec (struct lg_pool *p, struct lg_cmd *cmd);

/* Runs task (built with a scsi_cdb_* helper) on lun and waits; returns 0,
 * or -1 with errno set and the failure described in msg.  The task keeps
 * its data-in for scsi_datain_unmarshall; the caller frees it. */
int lg_pool_task (struct lg_pool *p, int lun, struct scsi_task *task, char *msg,
                  size_t len);

#endif
