/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The owner record of a lungate volume: who writes it, where the LUN has
 * no persistent reservations to say so (dev/reserve.h has those).
 *
 * One 4096-byte block in the header area (LG_OWNER_OFFSET; layout in
 * lungate-format(5)): the holder's reservation-style key (iscsi/pr.h),
 * host name, process id, since when, and a heartbeat the holder
 * rewrites every LG_OWNER_BEAT_S seconds, with a checksum.  It is
 * advisory, against a second gateway opened by mistake, not against a
 * hostile one: it is not authenticated.
 *
 * Claiming reads the record; a record of someone else with a heartbeat
 * younger than LG_OWNER_STALE_S refuses, an older one refuses unless
 * taking over; a record of a gateway of this host proven dead
 * (util/alive.h) is taken over at once, without being asked.  Before a
 * record of another gateway is replaced, fence confirms that none of its
 * writes (its last heartbeat among them) can still land; not confirmed,
 * nothing is written and the claim fails.  The new record is written with COMPARE AND WRITE against
 * the bytes read where the LUN has it (a race loses cleanly), else
 * written and read back LG_OWNER_SETTLE_MS later (the later writer of
 * two wins, the other sees it and refuses).  The heartbeat thread finds
 * out when another gateway took the record: writes fail with EPERM from
 * then on.  A clean close clears the record.
 *
 * Clocks: heartbeats are wall-clock seconds, so the hosts' clocks must
 * agree to well within LG_OWNER_STALE_S.
 */
#ifndef LG_CRYPT_OWNER_H
#define LG_CRYPT_OWNER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dev/dev.h"
#include "dev/volume.h"

#define LG_OWNER_OFFSET (128 * 1024)
#define LG_OWNER_SIZE 4096
#define LG_OWNER_BEAT_S 5
#define LG_OWNER_STALE_S 30
#define LG_OWNER_SETTLE_MS 1500

/* What a record says (struct lg_owner_rec), how it is read and
 * described: dev/volume.h.  Parses a block; a block that is not a record,
 * or is damaged, or is cleared, gives valid false.  Pure. */
void lg_owner_parse (const uint8_t *b, struct lg_owner_rec *r);
/* Builds a block from r.  Pure. */
void lg_owner_build (const struct lg_owner_rec *r, uint8_t *b);

struct lg_owner;

/* Claims the volume on lower (a LUN without persistent reservations):
 * the owner, or NULL with errno (EBUSY in use, EIO) and err set; *took
 * says whether a stale record of another was taken over. */
/* Before the record of another gateway is replaced: confirms that none of
 * its commands can still execute in the target (0), else -1 with err. */
typedef int lg_owner_fence_fn (void *opaque, char *err, size_t errlen);

struct lg_owner *lg_owner_claim (struct lg_dev *lower, const char *name,
                                 bool takeover, lg_owner_fence_fn *fence,
                                 void *opaque, bool *took, char *err,
                                 size_t errlen);
/* Whether another gateway took the record (writes must fail). */
bool lg_owner_lost (struct lg_owner *o);
/* keep: the record must outlive this process (what it took over could
 * not be fenced yet): release leaves it, and the proof that this process
 * ended (util/alive.h) stays. */
void lg_owner_keep (struct lg_owner *o, bool keep);
/* Stops the heartbeat, clears the record if it is still ours (and not
 * kept), frees. */
void lg_owner_release (struct lg_owner *o);

#endif
