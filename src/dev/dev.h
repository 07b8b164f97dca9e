/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The block-device interface every front end talks to.  A device is an
 * ops table plus its geometry; stacks (the crypt layer on the iSCSI pool)
 * are devices that hold another device.  All calls may come from many
 * threads at once; implementations say how they cope.
 */
#ifndef LG_DEV_H
#define LG_DEV_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "util/hist.h"

#define LG_FUA 0x01       /* pwrite, zero, trim: durable on return */
#define LG_MAY_TRIM 0x02  /* zero: may deallocate */
#define LG_FAST_ZERO 0x04 /* zero: fail with ENOTSUP unless fast */

#define LG_CLAIM_TAKEOVER 0x01 /* claim: preempt a holder that is gone */
#define LG_CLAIM_SHARED 0x02   /* claim: no exclusive access (plain LUNs) */
/* claim, on a device claimed already (the owner record above it was just
 * taken from another gateway): confirms that no command of the previous
 * writer can still execute (dev/reserve.c, fence) before returning 0. */
#define LG_CLAIM_RESET 0x04
/* claim, by a reader (lg_dev_note_reader): claims nothing, and says what
 * reading beside another gateway's writes means; LG_CLAIM_VOLUME: the
 * device is, or is under, a lungate volume. */
#define LG_CLAIM_READER 0x08
#define LG_CLAIM_VOLUME 0x10
/* claim: the caller has no read-only mode (a command that writes, such
 * as format): a refusal does not offer one. */
#define LG_CLAIM_NO_RO 0x20

struct lg_dev;

/* How a reattach reads the LUN at the bottom of the stack, on the session
 * that logged in (lg_dev_reattach). */
struct lg_dev_reader {
  int (*pread) (struct lg_dev_reader *r, void *buf, size_t count, uint64_t off);
  /* Set by the bottom of the stack during the reattach: the target kept
   * its state across this login (this gateway's persistent reservation,
   * registered without APTPL, was still there), so it did not restart,
   * and a volatile cache did not lose what it held.  False when not
   * known. */
  bool target_kept;
};

/* What the transport under a device went through. */
struct lg_dev_transport {
  uint64_t reconnects; /* logins after a lost connection */
  uint64_t retries;    /* commands retried after BUSY / TASK SET FULL */
  uint64_t timeouts;   /* commands that got no answer in time */
  /* Writes of this device whose outcome is unknown now: the target has
   * not confirmed they can no longer execute (iscsi/fence.h). */
  uint64_t unconfirmed;
};

/* What a device and those under it counted besides the requests
 * (lg_dev_stats): the transport's counters, and the units that failed
 * authentication (the crypt layer). */
struct lg_dev_counters {
  struct lg_dev_transport transport;
  uint64_t auth_failures;
  /* Logins after which acknowledged, unflushed writes may have been
   * lost (the target may have restarted with a volatile cache). */
  uint64_t losses;
  /* The volume's state, where a layer of the stack keeps a volume. */
  enum lg_volume_state {
    LG_VOLUME_NONE,    /* no volume: a plain LUN */
    LG_VOLUME_CLEAN,   /* its header says clean, and nothing written since */
    LG_VOLUME_IN_USE,  /* written by this device: a clean close marks it
                       * clean */
    LG_VOLUME_DIRTY,   /* found dirty, or a write failed: it stays dirty
                      * (lungate verify) */
    LG_VOLUME_UNKNOWN, /* not known here: opened read-only (another
                        * gateway may write it), or the LUN holds another
                        * volume now */
  } volume;
};

/* "clean", "in-use", "dirty", "unknown", or NULL for LG_VOLUME_NONE. */
const char *lg_volume_state_name (enum lg_volume_state v);

/* The counters every device keeps of the requests made to it through the
 * lg_dev_* entry points (so the front end's view when it is the top of a
 * stack).  Atomics: any thread. */
enum lg_dev_op {
  LG_OP_READ,
  LG_OP_WRITE,
  LG_OP_TRIM,
  LG_OP_ZERO,
  LG_OP_FLUSH,
  LG_OP_MAX
};
/* Errors by errno: EIO, EPERM, ENOSPC, EINVAL, ENOTSUP, ESHUTDOWN, other. */
#define LG_DEV_ERRNOS 7

struct lg_dev_stats {
  atomic_uint_fast64_t ops[LG_OP_MAX], bytes[LG_OP_MAX];
  atomic_uint_fast64_t errors[LG_DEV_ERRNOS];
  struct lg_hist latency; /* reads and writes, microseconds */
};

/* An extent callback: [offset, offset+length) is a hole (is_hole:
 * deallocated; it reads as zeroes only where the device's holes_zero says
 * so) or data.  Return -1 to stop. */
typedef int lg_extent_fn (void *opaque, uint64_t offset, uint64_t length,
                          bool is_hole);

/* Completion of a started request: err is 0 or an errno. */
typedef void lg_dev_done_fn (void *opaque, int err);

/* One range of a multi-range read. */
struct lg_dev_seg {
  void *buf;
  size_t count;
  uint64_t off;
};

struct lg_dev_ops {
  const char *name;
  int (*pread) (struct lg_dev *d, void *buf, size_t count, uint64_t off);
  /* Optional: several reads in flight together (else one by one). */
  int (*pread_multi) (struct lg_dev *d, const struct lg_dev_seg *segs,
                      unsigned n);
  int (*pwrite) (struct lg_dev *d, const void *buf, size_t count, uint64_t off,
                 unsigned flags);
  int (*flush) (struct lg_dev *d);
  int (*trim) (struct lg_dev *d, uint64_t count, uint64_t off, unsigned flags);
  int (*zero) (struct lg_dev *d, uint64_t count, uint64_t off, unsigned flags);
  int (*extents) (struct lg_dev *d, uint64_t count, uint64_t off,
                  lg_extent_fn *fn, void *opaque);
  void (*close) (struct lg_dev *d);
  /* Optional: starts a read or a write of whole blocks and returns at
   * once; done runs exactly once, on a thread of the device's or on the
   * caller's before start_rw returns (a write the fence refuses, a
   * session that is failing), possibly under a session lock: it must not
   * call into the device, block, or take any but a leaf lock
   * (doc/locking.md).  Returns -1 with errno
   * ENOTSUP when it cannot start this request that way (the caller uses
   * pread or pwrite), and then done never runs. */
  int (*start_rw) (struct lg_dev *d, bool write, void *buf, size_t count,
                   uint64_t off, unsigned flags, lg_dev_done_fn *done,
                   void *opaque);
  /* Optional: checks that the device is still what was opened, and takes
   * a new size where follow_resize allows (dev/iscsi.c). */
  int (*revalidate) (struct lg_dev *d);
  /* Optional: adds this device's counters, and those of the devices
   * under it, to c (a stack passes them up). */
  void (*counters) (const struct lg_dev *d, struct lg_dev_counters *c);
  /* Optional: see lg_dev_reattach (0 where absent). */
  int (*reattach) (struct lg_dev *d, struct lg_dev_reader *r);
  /* Optional: see lg_dev_set_top. */
  int (*set_top) (struct lg_dev *d, struct lg_dev *top);
  /* Optional: see lg_dev_compare_write. */
  int (*compare_write) (struct lg_dev *d, const void *expect, const void *buf,
                        size_t count, uint64_t off);
  /* Optional: see lg_dev_claim (and LG_CLAIM_READER: err may be NULL). */
  int (*claim) (struct lg_dev *d, unsigned flags, char *err, size_t errlen);
};

struct lg_dev {
  const struct lg_dev_ops *ops;
  char name[300];      /* for messages: "TARGET/LUN" */
  uint64_t size_;      /* bytes; may change while served (follow_resize): read
                  * it with lg_dev_size, set it with lg_dev_set_size */
  uint32_t block_size; /* smallest write that needs no RMW */
  uint32_t pref_block_size; /* preferred I/O granularity */
  uint32_t max_io;          /* largest efficient request, bytes */
  bool read_only;
  bool can_trim;
  bool can_zero; /* a native zeroing command exists */
  /* Zeroing with LG_FAST_ZERO can succeed: a native command zeroes by
   * deallocating (it may still fail with ENOTSUP, and then did nothing). */
  bool can_fast_zero;
  bool can_extents;
  bool holes_zero; /* deallocated blocks read as zeroes (LBPRZ) */
  bool can_fua;
  /* Acknowledged writes may sit in a cache that a power loss empties,
   * until a flush or a FUA write (the LUN reports WCE=1): the crypt layer
   * then orders its metadata before its data with barriers. */
  bool volatile_cache;
  /* Set by the front end: take a new capacity the LUN reports (the FUSE
   * file shows it); else the device keeps its size (NBD clients cache
   * it). */
  bool follow_resize;
  /* Set by lg_dev_claim: this process may write the device alone. */
  bool claimed;
  /* Set by the front end: it tells each of its clients of a possible
   * loss itself (lg_dev_losses); else a flush fails once for it. */
  bool loss_tracked;
  struct lg_dev_stats stats; /* zeroed with the device */
  /* Read-ahead at this device, the top of its stack (lg_dev_read_ahead):
   * the checked entry points use it. */
  struct lg_ra *ra;
  /* Write-behind at this device, the top of its stack
   * (lg_dev_write_behind): the checked entry points use it. */
  struct lg_wb *wb;
  /* Failed buffered writes a flush has reported (for a front end that
   * does not track losses per client). */
  atomic_uint_fast64_t wb_told;
};

/* The checked entry points.  Each returns 0, or -1 with errno set (one of
 * EIO, EPERM, ENOSPC, EINVAL, ENOTSUP, ESHUTDOWN) and a message logged
 * naming the device and the range.  Requests beyond the end fail with
 * EINVAL; writes to a read-only device with EPERM. */
int lg_dev_pread (struct lg_dev *d, void *buf, size_t count, uint64_t off);
int lg_dev_pread_multi (struct lg_dev *d, const struct lg_dev_seg *segs,
                        unsigned n);
int lg_dev_pwrite (struct lg_dev *d, const void *buf, size_t count,
                   uint64_t off, unsigned flags);
int lg_dev_flush (struct lg_dev *d);
/* Writes buf over [off, off+count) only if that range holds expect now,
 * in one step of the target (SCSI COMPARE AND WRITE).  -1 with errno
 * EAGAIN when it does not (nothing written), ENOTSUP when the device has
 * no such command or not for this length; else as lg_dev_pwrite. */
int lg_dev_compare_write (struct lg_dev *d, const void *expect, const void *buf,
                          size_t count, uint64_t off);
int lg_dev_trim (struct lg_dev *d, uint64_t count, uint64_t off,
                 unsigned flags);
int lg_dev_zero (struct lg_dev *d, uint64_t count, uint64_t off,
                 unsigned flags);

/* For a device's zero op that has nothing better: writes zeroes over
 * [off, off+count) with the device's own pwrite op (no statistics: the
 * zero is counted), in pieces of max_io bytes (1 MiB when unset), each
 * with flags' LG_FUA.  0, or -1 with errno. */
int lg_dev_write_zeroes (struct lg_dev *d, uint64_t count, uint64_t off,
                         unsigned flags);
int lg_dev_extents (struct lg_dev *d, uint64_t count, uint64_t off,
                    lg_extent_fn *fn, void *opaque);
void lg_dev_close (struct lg_dev *d);

/* Starts a read or write without waiting (see start_rw above): 0 when
 * started (done will run, after the request is counted in d->stats as
 * the synchronous calls count theirs), or -1 with errno, not counted:
 * ENOTSUP when the device or this request (unaligned, say) needs the
 * synchronous call; EINVAL and EPERM as for pread and pwrite; ENOMEM. */
int lg_dev_start_rw (struct lg_dev *d, bool write, void *buf, size_t count,
                     uint64_t off, unsigned flags, lg_dev_done_fn *done,
                     void *opaque);

/* Whether lg_dev_start_rw can take a request of count bytes at off (a
 * device that can start requests, whole blocks): a front end asks before
 * it sets up a request of its own. */
bool lg_dev_can_start_rw (const struct lg_dev *d, uint64_t count, uint64_t off);

/* Units that failed authentication in this device or below; 0 where
 * nothing authenticates. */
uint64_t lg_dev_auth_failures (const struct lg_dev *d);

/* The count of possible losses (lg_dev_counters.losses).  A flush
 * reports a loss once, to whichever client flushes first; a front end
 * with several clients (NBD connections, open files) remembers the count
 * each has seen, and fails the flush of a client that has not seen the
 * latest (as the kernel reports a writeback error to every file open
 * when it happened). */
uint64_t lg_dev_losses (const struct lg_dev *d);
/* Those of the stack below write-behind (a target that may have
 * restarted, a write of unknown outcome): lg_dev_losses without the
 * buffered writes that failed. */
uint64_t lg_dev_stack_losses (const struct lg_dev *d);

/* Checks the device again if its transport saw a sign that it changed,
 * or if it was last checked seconds ago (cheap otherwise): 0, or -1 with errno ESHUTDOWN when it is no longer
 * the device that was opened.  Front ends call it before they report the
 * size. */
int lg_dev_revalidate (struct lg_dev *d);

/* The transport's counters (zero where there is none). */
void lg_dev_transport (const struct lg_dev *d, struct lg_dev_transport *t);

/* The reattach lifecycle (doc/design.md).  After each login of a session
 * under a stack, before that session issues anything it held, the session
 * calls the top of the stack once: each layer checks that what it opened
 * is still there, reading the LUN through r (on that session: everything
 * else waits), and asks the layer below with lg_dev_reattach (lower, r):
 * the crypt layer its volume header, the iSCSI device the LUN's identity,
 * its reservation and the blocks it last wrote.  0 all still there; -1
 * not (the layer refuses every request from now on and has said why; what
 * was held fails); -2 could not tell (what was held fails, and the layer
 * checks again before its next request); -3 still there, but this
 * gateway may no longer write it (its reservation was taken: the writes
 * held fail, as conflicts, and the reads go out).  It runs on a thread of the
 * session's and must not wait for a lock that a request holds while it
 * waits on the target.  A device without the op answers 0. */
int lg_dev_reattach (struct lg_dev *d, struct lg_dev_reader *r);

/* Names top as the top of the stack d is the bottom of (the layer that
 * opens over d calls it; NULL when it closes, which waits for a reattach
 * that runs).  -1 with errno ENOTSUP where d has no sessions (nothing is
 * held across a login there). */
int lg_dev_set_top (struct lg_dev *d, struct lg_dev *top);

/* What lg_dev_claim got, when it did not fail. */
enum lg_claim_got {
  LG_CLAIM_HELD = 0,      /* held alone; also for a read-only device */
  LG_CLAIM_PREEMPTED = 1, /* held after preempting another holder */
  /* Nothing can be held here (no persistent reservations, or a device
   * without claims): the crypt layer then keeps an owner record
   * (crypt/owner.h), and a command checks it (dev/open.h). */
  LG_CLAIM_UNHELD = 2,
};

/* Takes exclusive write access to a writable device, for as long as it
 * is open (dev/reserve.h): before anything is written.  flags:
 * LG_CLAIM_TAKEOVER preempts the holder; LG_CLAIM_SHARED takes no
 * exclusive access (refused where one writer is required: the crypt
 * layer).  An enum lg_claim_got, or -1 with errno (EBUSY when another
 * gateway holds it, EINVAL for a shared claim that cannot be) and a
 * sentence in err. */
int lg_dev_claim (struct lg_dev *d, unsigned flags, char *err, size_t errlen);

/* For a front end that reads d without claiming it: when another
 * gateway holds the LUN for writing, a warning says what reading beside
 * a writer means.  Nothing where the device has no claims. */
void lg_dev_note_reader (struct lg_dev *d);

/* Reads ahead of a reader that goes forward through d, at most max bytes
 * (dev/ra.h); 0 reads nothing ahead.  For the top of a stack, by its
 * front end, before the first request.  0, or -1 with errno (EINVAL: max
 * is below two chunks; ENOMEM). */
/* The default: a long fat link fills only with many reads in flight, and
 * the window never grows past what the stream reads in a second (ra.c),
 * so a slow link is not flooded by it. */
#define LG_READ_AHEAD_DEFAULT (32u << 20)
#define LG_READ_AHEAD_MIN (256u << 10) /* what the front ends accept */
#define LG_READ_AHEAD_MAX (1u << 30)
int lg_dev_read_ahead (struct lg_dev *d, size_t max);

/* Acknowledges writes once they are in a buffer of at most max bytes,
 * and writes them behind (dev/wb.h); 0 writes through.  For the top of a
 * stack, by its front end, before the first request; nothing for a
 * read-only device.  0, or -1 with errno (EINVAL: max below
 * LG_WRITE_BEHIND_MIN; ENOMEM, EAGAIN). */
#define LG_WRITE_BEHIND_MIN (256u << 10) /* what the front ends accept */
#define LG_WRITE_BEHIND_MAX (1u << 30)
int lg_dev_write_behind (struct lg_dev *d, size_t max);
/* Waits until every write buffered (write-behind) before the call is
 * written, or has failed (then counted in lg_dev_losses, for the next
 * flush to report); no cache flush.  Nothing without write-behind. */
void lg_dev_drain (struct lg_dev *d);
/* Buffered writes that failed (counted in lg_dev_losses too): a front end
 * tells a client that opens later of those nobody was told of. */
uint64_t lg_dev_wb_failures (const struct lg_dev *d);
/* The errno for a flush that reports possible losses, the latest's: EPERM
 * when it is a buffered write that was refused so (another gateway took
 * the LUN or the volume), ENOSPC when it is one the target had no room
 * for (a thin LUN), else EIO (a target that may have restarted since
 * counts as later). */
int lg_dev_loss_errno (const struct lg_dev *d);

/* Microseconds on the monotonic clock. */
uint64_t lg_dev_now_us (void);

/* One line of key=value pairs (no newline): the counters, the transport's
 * and the authentication failures: read_ops=... read_bytes=...
 * write_ops=... written_bytes=... trim_ops trim_bytes zero_ops zero_bytes
 * flush_ops errors (all) errors_eio errors_eperm errors_enospc
 * errors_einval errors_enotsup errors_eshutdown errors_other reconnects
 * retries timeouts auth_failures latency_p50_us latency_p99_us
 * latency_p999_us.  The FUSE .stats file and the plugin's log use it. */
void lg_dev_stats_print (const struct lg_dev *d, FILE *f);

/* The size, one way for every thread (a plain LUN's mount follows a
 * resize while requests run). */
static inline uint64_t
lg_dev_size (const struct lg_dev *d)
{
  return __atomic_load_n (&d->size_, __ATOMIC_RELAXED);
}

static inline void
lg_dev_set_size (struct lg_dev *d, uint64_t size)
{
  __atomic_store_n (&d->size_, size, __ATOMIC_RELAXED);
}

#endif
