/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Fences: the block ranges of writes whose outcome is unknown.
 *
 * A write that timed out, or whose connection was lost, may still execute
 * inside the target at any later time: tgt, for one, does not abort a
 * command already in its backing store when the session is reinstated.
 * Until the target has confirmed that such a write can no longer execute
 * (a SCSI response for it, or a task management function that the target
 * answers only once the task is gone: see recovery.c), its range is
 * fenced: no later write that overlaps it is issued, on any session of
 * the pool.  A write whose outcome the target cannot confirm stays fenced
 * for good, and every write that overlaps it then fails.
 *
 * One fence per pool.  Sessions add and remove doubts with their own lock
 * held (the fence's lock nests inside a session's); submitters wait with
 * no session lock held.
 */
#ifndef LG_FENCE_H
#define LG_FENCE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct lg_fence;
struct lg_cmd;

/* One write of unknown outcome.  The fence owns the range; the session
 * that issued the write owns the rest (under its lock). */
struct lg_doubt {
  struct lg_doubt *prev, *next; /* the fence's list (fence lock) */
  struct lg_doubt *snext;       /* the session's list (session lock) */
  int lun;
  uint64_t lba, nblocks;
  bool permanent;     /* never confirmed: overlapping writes fail */
  struct lg_cmd *cmd; /* until the command is reported (session lock) */
  bool lost;          /* the connection was lost under it (session lock) */
};

struct lg_fence *lg_fence_new (void);
void lg_fence_free (struct lg_fence *f);

/* Fences lba + nblocks of lun; NULL when out of memory: the fence is
 * then broken for good, and lg_fence_wait fails every later write of
 * every LUN at once (the range of the unrecorded doubt is not kept, so
 * nothing can be let through). */
struct lg_doubt *lg_fence_add (struct lg_fence *f, int lun, uint64_t lba,
                               uint64_t nblocks);
/* The target confirmed it: the range is free again (d is freed). */
void lg_fence_remove (struct lg_fence *f, struct lg_doubt *d);
/* The target cannot confirm it: the range stays fenced for good. */
void lg_fence_make_permanent (struct lg_fence *f, struct lg_doubt *d);

/* Waits until lba + nblocks of lun overlaps no doubt, or until deadline_ms
 * (CLOCK_MONOTONIC milliseconds; < 0 for ever).  0 when clear; -1 with a
 * sentence in msg when the deadline passed or a permanent doubt
 * overlaps. */
int lg_fence_wait (struct lg_fence *f, int lun, uint64_t lba, uint64_t nblocks,
                   int64_t deadline_ms, char *msg, size_t len);

/* Doubts now (a hint without the lock: 0 means nothing to wait for, for a
 * write that was not yet issued). */
unsigned lg_fence_count (const struct lg_fence *f);
/* Doubts of lun now (under the lock; a broken fence counts for every
 * LUN). */
unsigned lg_fence_count_lun (struct lg_fence *f, int lun);

/* Whether cdb changes the medium, and which blocks: *nblocks is
 * UINT64_MAX - *lba for commands whose range is not in the CDB (UNMAP's
 * is in its parameter list).  For the 16-byte CDBs lungate sends, and
 * WRITE(10)/(12) for completeness. */
bool lg_cdb_write_range (const uint8_t *cdb, uint64_t *lba, uint64_t *nblocks);

int64_t lg_mono_ms (void);

#endif
