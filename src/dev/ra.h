/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Read-ahead for the top of a stack (dev.c calls it from the checked
 * entry points; front ends only set its size with lg_dev_read_ahead).
 *
 * A reader that goes forward through the device (one file copy, dd, an
 * NBD client reading in order) is seen after RA_TRIGGER bytes read in
 * order past its first request (one large read, random reads and a
 * reader going backwards are not read ahead of), and the
 * next window is read ahead in chunks by worker threads, several at once
 * across the pool's sessions, so that a single stream is not bound by one
 * round trip per request.  The window doubles while the reader keeps up,
 * up to the size set, and is dropped when it stops.  Random reads only
 * look up the chunks.
 *
 * It sits above the crypt layer: its chunks hold authenticated plaintext,
 * and a read the crypt layer repeats after a failed unit goes to the
 * target again.  What it holds is never newer than the device: a write,
 * trim or zero drops the chunks it overlaps when it starts and again when
 * it completes (a chunk read while the write ran may hold either), every
 * reattach drops them all (lg_dev_reattach), and a chunk not read within
 * RA_MAX_AGE_MS is dropped unread (a reader beside another gateway's
 * writer sees its writes within that time, as lungate(1) says; the age
 * counts from when the chunk's read was issued).  Memory: at most the
 * size set, per device; the buffers of one stream are given back when
 * another starts, and at close.  A chunk whose read failed stays, and is
 * not read again, until it expires or is dropped.
 *
 * Locks: ra->lock is a leaf: held only to look up and change the chunk
 * table, never across a request to the device (doc/locking.md).
 */
#ifndef LG_RA_H
#define LG_RA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

struct lg_dev;
struct lg_ra;

/* A read-ahead for d of at most max bytes (0: none); NULL out of
 * memory. */
struct lg_ra *lg_ra_new (struct lg_dev *d, size_t max);
/* Stops the workers, waits for them, frees everything. */
void lg_ra_free (struct lg_ra *ra);

/* Serves [off, off+count) from the chunks when they hold all of it (waiting
 * for chunks being read), and notes the reader's position either way:
 * 1 served, 0 not (the caller reads the device), -1 with errno when the
 * device is no longer the one opened (revalidate). */
int lg_ra_read (struct lg_ra *ra, void *buf, size_t count, uint64_t off);
/* For a read that would start without waiting: notes the reader's
 * position, and says whether the chunks hold any of it: 2 (then the
 * caller reads with lg_ra_read, which checks the device's identity
 * first), or 0 (the caller reads the device). */
int lg_ra_try_read (struct lg_ra *ra, void *buf, size_t count, uint64_t off);
/* Drops what overlaps [off, off+count) (count 0: everything). */
void lg_ra_drop (struct lg_ra *ra, uint64_t count, uint64_t off);

/* Whether this thread is a read-ahead worker.  A read of theirs that
 * fails was asked for by no client, and is not an error: the device logs
 * it as debug (a read the stop of the gateway cut short, most often); a
 * client's read of the same bytes goes to the target and says why. */
bool lg_ra_worker (void);

/* " ra_hits=... ra_read_bytes=... ra_used_bytes=... ra_wasted_bytes=..."
 * (a leading space, no newline). */
void lg_ra_stats_print (const struct lg_ra *ra, FILE *f);

#endif
