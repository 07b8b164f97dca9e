/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The iSCSI block device's parts (dev/iscsi.h): the requests (iscsi.c),
 * whether the LUN is still the one opened and still this writer's
 * (iscsi-ident.c: identity, the check after a login, the reservation),
 * and zeroing, trims, COMPARE AND WRITE and extents with the limits the
 * LUN taught (iscsi-zero.c).  The threads and locks are described at the
 * top of iscsi.c. */
#ifndef LG_ISCSI_INT_H
#define LG_ISCSI_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "dev/iscsi.h"
#include "iscsi/lun.h"
#include "iscsi/pool.h"
#include "iscsi/session.h"

#define RMW_STRIPES 64
/* When the LUN reports no limit, the size of one command. */
#define DEFAULT_MAX_XFER (4u << 20)
#define DEFAULT_MAX_WS_BLOCKS 32768u
/* WRITE SAMEs refused in a row (INVALID FIELD and the like) before zeroing
 * goes by writes for good. */
#define WS_REFUSALS_MAX 8
/* lg_dev_revalidate (a FUSE stat) probes the LUN at most this often even
 * when nothing said it changed: not every target reports a resize. */
#define POLL_MS 3000
/* A writer reads the reservation again at most this often (refused). */
#define PR_POLL_MS 3000
/* Commands per batch on the stack; larger batches are allocated. */
#define STACK_CMDS 16

/* One stripe of blocks (lba % RMW_STRIPES): what writes over it now
 * (under the device's stripe_lock).  RMWs take tickets and run one at a
 * time in ticket order, each when no whole-block request is in flight
 * there; a whole-block request waits only for the RMWs ticketed before
 * it came, on all its stripes at once, then counts itself on all of them
 * at once.  So neither kind starves the other, and nothing is held while
 * waiting. */
struct stripe {
  unsigned writers;       /* whole-block requests in flight over it */
  uint64_t next, serving; /* RMW tickets: the next to give, the one to run */
};

struct idev {
  struct lg_dev dev;
  struct lg_pool *pool;
  bool owns_pool;
  int lun;
  struct lg_lun_info info;
  uint32_t bs;
  uint32_t max_blocks; /* per READ/WRITE command */
  uint32_t max_ws_blocks;
  uint32_t max_caw_blocks; /* 0: no COMPARE AND WRITE */
  bool dpofua;
  atomic_bool no_write_same; /* learned: the LUN rejects WRITE SAME */
  atomic_bool no_ws_unmap;   /* learned: it rejects WRITE SAME's UNMAP bit */
  atomic_uint ws_refusals;   /* WRITE SAMEs refused in a row (EINVAL) */
  atomic_bool no_lba_status; /* learned: the LUN rejects GET LBA STATUS */
  /* Revalidation: after a reconnection or a unit attention that says the
   * LUN may have changed, it is probed again before the next request. */
  pthread_mutex_t reval;
  atomic_uint epoch;          /* the pool's epoch when last validated */
  atomic_bool gone;           /* no longer the LUN that was opened */
  char gone_msg[512];         /* set once, before gone */
  _Atomic uint64_t seen_size; /* the last capacity accepted (written under
                                 reval) */
  pthread_mutex_t gone_lock;  /* gone_msg and gone are set under it */
  /* The top of the stack over this device (lg_dev_set_top; NULL: this
   * device), under top_lock, held while a reattach runs so that the stack
   * cannot go away under it. */
  pthread_mutex_t top_lock;
  struct lg_dev *top;
  unsigned seen_logins; /* lg_pool_generation (logins) then (under reval) */
  atomic_int_fast64_t checked_ms; /* when last probed */
  struct lg_reserve *res;         /* write access (reserve.h) */
  atomic_uint pr_seen;            /* lg_pool_pr_events when last looked */
  _Atomic int64_t pr_checked_ms;  /* the reservation last read (refused) */
  /* Blocks whose content this writer knows (known.h): tracked from its
   * claim on, checked after every login while the LUN is held. */
  struct lg_known *known;
  atomic_bool known_on;
  /* What a restart of the target may have lost from a volatile cache,
   * for a LUN served plain (no layer above: stacked false; a volume's
   * crypt layer keeps its own, crypt/barrier.h): writes started and
   * completed (every write, trim, zero), vc_done when the last flush
   * that succeeded began, the logins being checked now, and whether
   * one of them may have lost writes (the next flush says so, once). */
  atomic_bool stacked;
  atomic_uint vc_inflight, vc_checking;
  atomic_uint_fast64_t vc_done, vc_durable;
  atomic_bool vc_lost;
  atomic_uint_fast64_t vc_losses; /* times vc_lost was set */
  pthread_mutex_t stripe_lock;
  pthread_cond_t stripe_cond;
  struct stripe rmw[RMW_STRIPES];
};

static inline struct idev *
to_idev (struct lg_dev *d)
{
  return (struct idev *) d;
}

/* Shared between the parts (each described where it is defined). */
int idev_cmd_failed (struct idev *x, const struct lg_cmd *cmd, uint64_t lba,
                     uint64_t nblocks);
int idev_flush (struct lg_dev *d);
/* A flush a client asked for (the op, and FUA emulated by a flush):
 * also reports a possible loss at a login (iscsi.c). */
int idev_flush_client (struct lg_dev *d);
void idev_vc_begin (struct idev *x);
void idev_vc_end (struct idev *x);
bool idev_vc_unstable (struct idev *x);
int idev_compare_write (struct lg_dev *d, const void *expect, const void *buf,
                        size_t count, uint64_t off);
int idev_extents (struct lg_dev *d, uint64_t count, uint64_t off,
                  lg_extent_fn *fn, void *opaque);
int idev_trim (struct lg_dev *d, uint64_t count, uint64_t off, unsigned flags);
int idev_zero (struct lg_dev *d, uint64_t count, uint64_t off, unsigned flags);
int idev_claim (struct lg_dev *d, unsigned flags, char *err, size_t errlen);
int idev_set_top (struct lg_dev *d, struct lg_dev *top);
int idev_reattach (struct lg_dev *d, struct lg_dev_reader *r);
int idev_check_after_login (void *opaque, struct lg_session *s, int lun);
int64_t idev_mono_ms (void);
unsigned idev_pool_epoch (struct idev *x);
int idev_refused (struct idev *x);
int idev_check_identity (struct idev *x, bool poll);
uint64_t idev_span_enter (struct idev *x, uint64_t lba, uint64_t nblocks);
void idev_span_exit (struct idev *x, uint64_t mask);

#endif
