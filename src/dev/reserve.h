/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Write access to one LUN of a pool, held with a persistent reservation
 * (iscsi/pr.h says which) for as long as the device is open.
 *
 * lg_reserve_claim registers this process's key on every session of the
 * pool and reserves the LUN, or refuses (EBUSY) with a message naming the
 * holder; with LG_CLAIM_TAKEOVER it preempts the holder instead.  After
 * every later login of a session (the pool pins the LUN, so that the
 * device's login check runs), lg_reserve_after_login registers the new
 * nexus again; when the target forgot every reservation (a restart) the
 * LUN is reserved again first.  When someone else holds it then, or a
 * write met RESERVATION CONFLICT, the reservation is lost for good:
 * lg_reserve_refuses says so to every later write (EPERM), reads go on.
 *
 * Threads: claim and release on the opener's thread; after_login on a
 * session's check thread; conflict on a completing loop thread (it only
 * sets a flag); refuses on any requesting thread.
 */
#ifndef LG_DEV_RESERVE_H
#define LG_DEV_RESERVE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "iscsi/pool.h"
#include "iscsi/pr.h"

struct lg_reserve;

struct lg_reserve *lg_reserve_new (struct lg_pool *p, int lun,
                                   const char *name);
/* Releases what is held (RELEASE and unregister, by CLEAR) and frees;
 * but never while a write of the pool's has an unknown outcome (after
 * waiting a few seconds for the target to confirm it): the LUN then stays
 * reserved, and a warning says why. */
void lg_reserve_free (struct lg_reserve *r);

/* flags: LG_CLAIM_TAKEOVER, LG_CLAIM_SHARED (dev.h).  0 when the process
 * may write (held; or shared and nobody holds it; or the LUN has no
 * persistent reservations, *no_pr then set); 1 when held after
 * preempting another holder; -1 with errno (EBUSY: in use; EIO) and a
 * sentence in err.  A holder that goes away within a few seconds (a
 * gateway closing) is waited for. */
int lg_reserve_claim (struct lg_reserve *r, unsigned flags, bool *no_pr,
                      char *err, size_t errlen);

/* The LUN was taken from another writer (by a claim here, or by the
 * owner record above): a LUN RESET, and its answer awaited, before the
 * first write (reserve.c says what it confirms, and how long it waits).
 * 0, or -1 with err: then nothing may be written, and the LUN must stay
 * held (its runtime file kept, util/alive.h). */
int lg_reserve_fence (struct lg_reserve *r, char *err, size_t errlen);

/* After a login of s: 0, or -2 when the reservation could not be checked
 * (what s held for the LUN fails).  *kept: this gateway's reservation
 * was found in place, its generation no lower than seen (the target did
 * not restart: it would have forgotten it).  It is also so when another
 * session of this gateway, checking its own login after a restart,
 * found it forgotten and reserved again: whoever decides from kept waits
 * for every login being checked (crypt/barrier.h, idev_flush_client), and
 * the first check after a restart always finds it forgotten. */
int lg_reserve_after_login (struct lg_reserve *r, struct lg_session *s,
                            bool *kept);

/* A login's check of the LUN could not finish: before the next write,
 * every session registers again (lg_reserve_refuses does). */
void lg_reserve_unsure (struct lg_reserve *r);

/* The target said the LUN may have changed (a reset, REPORTED LUNS DATA
 * HAS CHANGED: tgt forgets a LUN's reservation when it is removed and
 * added again): the reservation is read, and taken again when the
 * target forgot it, or counted lost when someone else holds it.  On a
 * requesting thread, before the request goes out. */
void lg_reserve_recheck (struct lg_reserve *r);

/* A writer's poll of the reservation (every period_ms, *checked_ms the
 * last): lg_reserve_recheck when due.  Writers that find it due while
 * another reads it wait until that read is done. */
void lg_reserve_poll (struct lg_reserve *r, _Atomic int64_t *checked_ms,
                      int64_t now_ms, int64_t period_ms);

/* Whether this process holds the LUN alone now (reserved, not lost). */
bool lg_reserve_held (struct lg_reserve *r);
/* Whether it held the LUN and lost it (writes fail from now on). */
bool lg_reserve_lost (struct lg_reserve *r);

/* A write came back with RESERVATION CONFLICT. */
void lg_reserve_conflict (struct lg_reserve *r);
/* A unit attention said the reservation was preempted or released. */
void lg_reserve_taken (struct lg_reserve *r);

/* Whether writes must fail (the reservation is lost): then msg says why,
 * naming the holder now (asked once, on the calling thread). */
bool lg_reserve_refuses (struct lg_reserve *r, char *msg, size_t len);

/* A read-only open: when another gateway holds lun, a warning says what
 * reading beside a writer means (volume: a lungate volume). */
void lg_reserve_note (struct lg_pool *p, int lun, bool volume);

/* Who holds the LUN, for lungate info: 0 and st filled, or -1. */
int lg_reserve_read (struct lg_pool *p, int lun, struct lg_pr_state *st,
                     char *err, size_t errlen);

#endif
