/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The one way front ends open LUNs (the NBD plugin, the mount, the
 * commands that write a LUN): a target, logged in through a pool of
 * sessions; the LUNs it has; and for each, its stack of block devices,
 * the iSCSI device with the crypt layer over it when the LUN is a lungate
 * volume (stack.h decides, from the key table).  What a front end needs
 * besides is the block-device interface (dev.h), which the devices
 * returned here implement, and the URL and login options it parses
 * (declared in the headers included below).
 *
 * Who may write (reservations, the owner record, takeover, shared,
 * read-only) is lg_dev_claim's business, on the device returned here.
 *
 * Threads: a target is opened, listed and closed by one thread; the
 * devices it returns are thread-safe (dev.h); lg_target_abandon may be
 * called from any thread while the target is open. */
#ifndef LG_OPEN_H
#define LG_OPEN_H

#include <stdbool.h>
#include <stddef.h>

#include "dev/dev.h"
#include "dev/stack.h"
#include "iscsi/lun.h"
#include "iscsi/pr.h"
#include "iscsi/session.h"
#include "iscsi/targets.h"
#include "iscsi/url.h"

struct
    lg_tgt; /* a target, logged in (targets.h's lg_target is a name found by discovery) */

/* Logs in to target at portal with connections sessions.  NULL with
 * errno and err set. */
struct lg_tgt *lg_target_open (const struct lg_login *login, const char *portal,
                               const char *target, unsigned connections,
                               char *err, size_t errlen);

/* The LUNs to serve: the one u names (a LUN URL), else (or u NULL) every
 * LUN the target reports.  *luns is malloc'ed.  0, or -1 with err set. */
int lg_target_luns (struct lg_tgt *t, const struct lg_url *u, int **luns,
                    size_t *n, char *err, size_t errlen);

enum {
  LG_OPEN_READ_ONLY = 1,     /* no writes through this stack */
  LG_OPEN_NAMED = 2,         /* the URL named this LUN (stack.h: keys) */
  LG_OPEN_FOLLOW_RESIZE = 4, /* a plain LUN's size follows the LUN's */
};

/* Opens LUN lun of t as what it is: the iSCSI device, and the crypt layer
 * over it when the LUN holds a lungate header (or a key was given for it
 * by LUN number, or it was named).  keys may be NULL: then the raw LUN.
 * info (if not NULL) gets what the LUN is, *volume (if not NULL) whether
 * the crypt layer is on it.  NULL with errno and err set: ENOTBLK for a
 * LUN that is not a disk (the controller at LUN 0), EACCES and EINVAL as
 * lg_stack_wrap. */
struct lg_dev *lg_target_open_lun (struct lg_tgt *t, int lun, unsigned flags,
                                   const struct lg_keytab *keys,
                                   size_t md_cache_blocks,
                                   struct lg_lun_info *info, bool *volume,
                                   char *err, size_t errlen);

/* What LUN lun of t is, without opening it (info, discover).  For a disk
 * whose LBPME says it maps, GET LBA STATUS is tried too, not only
 * inferred (LIO 6.1 sets LBPME and refuses the command): *lbas_refused
 * says why it was refused, or is empty (lbas_refused NULL: not tried).
 * 0, or -1 with err set. */
int lg_target_probe (struct lg_tgt *t, int lun, struct lg_lun_info *li,
                     char *lbas_refused, size_t rlen, char *err, size_t errlen);

/* The largest transfer, in blocks, the stacks of LUN li use. */
uint32_t lg_target_max_blocks (const struct lg_lun_info *li);

/* LUN lun's persistent reservation as the target shows it, read-only.
 * 0, or -1 with err set. */
int lg_target_reservation (struct lg_tgt *t, int lun, struct lg_pr_state *st,
                           char *err, size_t errlen);

/* What still waits for the target fails now (a stop). */
void lg_target_abandon (struct lg_tgt *t, const char *why);

/* An orderly stop: the outage budget becomes at most secs
 * (lg_session_hurry). */
void lg_target_hurry (struct lg_tgt *t, int secs);

/* Closes the sessions; the devices opened from t must be closed first.
 * NULL is fine. */
void lg_target_close (struct lg_tgt *t);

/* The raw device of the LUN u names, for a command that reads or writes
 * the LUN itself (format, key, verify --repair, bench), owning its own
 * target (closing the device logs out), and claimed with claim_flags
 * (lg_dev_claim).  Where nothing can be held (no persistent
 * reservations), a volume's owner record refuses it while a gateway
 * serves it, or with LG_CLAIM_TAKEOVER until that gateway's heartbeat
 * stopped.  NULL with errno and err set. */
struct lg_dev *lg_lun_open_raw (const struct lg_login *login,
                                const struct lg_url *u, unsigned connections,
                                bool read_only, unsigned claim_flags, char *err,
                                size_t errlen);

#endif
