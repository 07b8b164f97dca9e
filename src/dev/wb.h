/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Write-behind for the top of a stack (dev.c calls it from the checked
 * entry points; front ends only set its size with lg_dev_write_behind).
 *
 * A write is copied into a bounded buffer and acknowledged at once, as a
 * disk's volatile write cache does; worker threads write the buffer to
 * the device, several commands at once across the pool's sessions, and
 * writes that follow each other are joined into commands of up to
 * WB_JOIN bytes.  So a single writer (dd, cp, an NBD client with one
 * request at a time) is not bound by one round trip per write.
 *
 * The promises:
 * - A flush (and so fsync, NBD FLUSH) returns only after every write
 *   acknowledged before it began is written to the device, and then the
 *   device's flush has run (the target's cache).
 * - A read returns the latest write: what it overlaps in the buffer is
 *   laid over what the device returns.  A write, trim, zero,
 *   compare-and-write or extents query that overlaps buffered writes
 *   waits for them first (and they go before older ones): no write
 *   overtakes an older one to the same bytes.  A FUA write is not
 *   buffered.  The first writer waiting for room has it kept for it
 *   (later writes leave it that much).
 * - A write the target gave no answer to (a command timed out, or the
 *   connection was lost, while it ran), or that failed because the device
 *   is closing, makes what is buffered behind it fail at once (counted,
 *   said in one line) rather than each waiting as long; new writes are
 *   written through until the buffer is empty.  A write the target
 *   answered with an error (a bad sector, a full thin LUN) fails alone.
 * - A buffered write that fails is logged with the LUN and the range, and
 *   counted as a possible loss (lg_dev_losses): each client's next flush
 *   fails once (the front ends track it per client).  Nothing is retried
 *   here: the layers below already retried up to the outage budget.
 * - Memory: at most the size set, per device, plus the joined commands
 *   in flight (up to WB_JOIN per worker): a write is copied only once its
 *   room is reserved.  A write larger than half of it is written directly
 *   (after the writes it overlaps).
 *
 * It sits above the crypt layer, with read-ahead: it holds the plaintext
 * a client wrote, as the client's own page cache would, and every write
 * it issues is an ordinary write of the layer below, so the crypt
 * layer's guarantees (each unit old or new after any fault, the barrier
 * before a slot is reused) hold unchanged.  Below the crypt layer it
 * would hold ciphertext whose metadata writes the crypt layer orders by
 * their completion, which an early acknowledgement would break.
 *
 * Locks: wb->lock is a leaf, never held across a request to the device
 * (doc/locking.md).
 */
#ifndef LG_WB_H
#define LG_WB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

struct lg_dev;
struct lg_wb;

/* A write-behind for d of at most max bytes; NULL with errno. */
struct lg_wb *lg_wb_new (struct lg_dev *d, size_t max);
/* Writes everything buffered (waiting for it), stops the workers, frees
 * everything. */
void lg_wb_free (struct lg_wb *wb);

/* Takes a write of [off, off+count): 1 buffered (acknowledged), 0 the
 * caller writes it itself (too large, FUA, or out of memory); either way
 * the buffered writes it overlaps have been written first. */
int lg_wb_write (struct lg_wb *wb, const void *buf, size_t count, uint64_t off,
                 unsigned flags);
/* For a read of [off, off+count): a copy of the buffered writes it
 * overlaps (NULL: none), to lay over what the device returns with
 * lg_wb_snap_apply, so that a read does not wait for the writes ahead of
 * them.  Out of memory it waits for them instead, and returns NULL. */
struct lg_wb_snap;
struct lg_wb_snap *lg_wb_snapshot (struct lg_wb *wb, uint64_t count,
                                   uint64_t off);
/* Lays snap over buf (the device's bytes of [off, off+count); buf NULL:
 * nothing) and frees it. */
void lg_wb_snap_apply (struct lg_wb_snap *snap, void *buf, uint64_t count,
                       uint64_t off);
/* Waits until no buffered write overlaps [off, off+count); those writes
 * go before older ones meanwhile. */
void lg_wb_wait_range (struct lg_wb *wb, uint64_t count, uint64_t off);
/* Whether a buffered write overlaps [off, off+count) now (no wait). */
bool lg_wb_overlaps (struct lg_wb *wb, uint64_t count, uint64_t off);
/* Waits until every write buffered before the call is written (or has
 * failed). */
void lg_wb_drain (struct lg_wb *wb);
/* Buffered writes that failed, in all. */
uint64_t lg_wb_failures (const struct lg_wb *wb);
/* From now on every write is written through (the device was found
 * gone: a write must fail at once, not be acknowledged). */
void lg_wb_through (struct lg_wb *wb);
/* What a flush that reports them fails with: the errno of the last that
 * failed where it is EPERM (this gateway may no longer write the device)
 * or ENOSPC (a thin LUN out of space: what fsync says after a local
 * disk's failed write-back), else EIO; EIO too when the stack counted a
 * loss of its own since (stack_losses, lg_dev_stack_losses: a target
 * that may have restarted), the latest loss being what a flush says. */
int lg_wb_failed_errno (struct lg_wb *wb, uint64_t stack_losses);

/* " wb_writes=... wb_bytes=... wb_depth_bytes=... wb_waits=...
 * wb_failures=..." (a leading space, no newline). */
void lg_wb_stats_print (const struct lg_wb *wb, FILE *f);

#endif
