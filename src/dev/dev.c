/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Checks common to every device, done once here so that each layer can
 * trust its arguments.  Any thread. */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dev/dev.h"
#include "dev/ra.h"
#include "dev/wb.h"
#include "util/fmt.h"
#include "util/hooks.h"
#include "util/log.h"

static int
check_range (struct lg_dev *d, const char *op, uint64_t count, uint64_t off)
{
  uint64_t size = lg_dev_size (d);

  if (off > size || count > size - off) {
    lg_error ("%s: %s: range %" PRIu64 "+%" PRIu64 " is beyond the end "
              "(%" PRIu64 " bytes)",
              d->name, op, off, count, size);
    errno = EINVAL;
    return -1;
  }
  return 0;
}

static int
check_writable (struct lg_dev *d, const char *op)
{
  if (d->read_only) {
    lg_error ("%s: %s: the device is read-only", d->name, op);
    errno = EPERM;
    return -1;
  }
  return 0;
}

uint64_t
lg_dev_now_us (void)
{
  struct timespec ts;

  clock_gettime (CLOCK_MONOTONIC, &ts);
  return (uint64_t) ts.tv_sec * 1000000 + (uint64_t) ts.tv_nsec / 1000;
}

static unsigned
errno_slot (int err)
{
  switch (err) {
  case EIO:
    return 0;
  case EPERM:
    return 1;
  case ENOSPC:
    return 2;
  case EINVAL:
    return 3;
  case ENOTSUP:
    return 4;
  case ESHUTDOWN:
    return 5;
  default:
    return 6;
  }
}

/* Counts one request of kind op and bytes that started at start_us and
 * ended with err (0 or an errno). */
static void
tally (struct lg_dev *d, enum lg_dev_op op, uint64_t bytes, uint64_t start_us,
       int err)
{
  struct lg_dev_stats *st = &d->stats;

  if (err) {
    atomic_fetch_add_explicit (&st->errors[errno_slot (err)], 1,
                               memory_order_relaxed);
    /* The device is gone (or closing): no write is acknowledged before
     * it reaches it any more. */
    if (err == ESHUTDOWN && d->wb)
      lg_wb_through (d->wb);
    return;
  }
  atomic_fetch_add_explicit (&st->ops[op], 1, memory_order_relaxed);
  atomic_fetch_add_explicit (&st->bytes[op], bytes, memory_order_relaxed);
  if (op == LG_OP_READ || op == LG_OP_WRITE)
    lg_hist_add (&st->latency, lg_dev_now_us () - start_us);
}

/* Accounts a synchronous call's result r (0 or -1 with errno). */
static int
account (struct lg_dev *d, enum lg_dev_op op, uint64_t bytes, uint64_t start_us,
         int r)
{
  int saved = errno;

  tally (d, op, bytes, start_us, r < 0 ? (saved ? saved : EIO) : 0);
  errno = saved;
  return r;
}

static struct lg_dev_counters counters_of (const struct lg_dev *d);

void
lg_dev_stats_print (const struct lg_dev *d, FILE *f)
{
  const struct lg_dev_stats *st = &d->stats;
  struct lg_dev_counters c = counters_of (d);
  const struct lg_dev_transport tr = c.transport;
  uint64_t e[LG_DEV_ERRNOS], all = 0;

#define LD(x) ((uint64_t) atomic_load_explicit (&(x), memory_order_relaxed))
  for (unsigned i = 0; i < LG_DEV_ERRNOS; i++)
    all += e[i] = LD (st->errors[i]);
  fprintf (f,
           "read_ops=%" PRIu64 " read_bytes=%" PRIu64 " write_ops=%" PRIu64
           " written_bytes=%" PRIu64 " trim_ops=%" PRIu64 " trim_bytes=%" PRIu64
           " zero_ops=%" PRIu64 " zero_bytes=%" PRIu64 " flush_ops=%" PRIu64
           " errors=%" PRIu64 " errors_eio=%" PRIu64 " errors_eperm=%" PRIu64
           " errors_enospc=%" PRIu64 " errors_einval=%" PRIu64
           " errors_enotsup=%" PRIu64 " errors_eshutdown=%" PRIu64
           " errors_other=%" PRIu64 " reconnects=%" PRIu64 " retries=%" PRIu64
           " timeouts=%" PRIu64 " auth_failures=%" PRIu64
           " latency_p50_us=%" PRIu64 " latency_p99_us=%" PRIu64
           " latency_p999_us=%" PRIu64,
           LD (st->ops[LG_OP_READ]), LD (st->bytes[LG_OP_READ]),
           LD (st->ops[LG_OP_WRITE]), LD (st->bytes[LG_OP_WRITE]),
           LD (st->ops[LG_OP_TRIM]), LD (st->bytes[LG_OP_TRIM]),
           LD (st->ops[LG_OP_ZERO]), LD (st->bytes[LG_OP_ZERO]),
           LD (st->ops[LG_OP_FLUSH]), all, e[0], e[1], e[2], e[3], e[4], e[5],
           e[6], tr.reconnects, tr.retries, tr.timeouts, c.auth_failures,
           lg_hist_quantile (&st->latency, 0.50),
           lg_hist_quantile (&st->latency, 0.99),
           lg_hist_quantile (&st->latency, 0.999));
  fprintf (f, " unconfirmed=%" PRIu64 " losses=%" PRIu64, tr.unconfirmed,
           lg_dev_losses (d));
  if (lg_volume_state_name (c.volume))
    fprintf (f, " volume=%s", lg_volume_state_name (c.volume));
  if (d->ra)
    lg_ra_stats_print (d->ra, f);
  if (d->wb)
    lg_wb_stats_print (d->wb, f);
#undef LD
}

const char *
lg_volume_state_name (enum lg_volume_state v)
{
  switch (v) {
  case LG_VOLUME_CLEAN:
    return "clean";
  case LG_VOLUME_IN_USE:
    return "in-use";
  case LG_VOLUME_DIRTY:
    return "dirty";
  case LG_VOLUME_UNKNOWN:
    return "unknown";
  case LG_VOLUME_NONE:
    break;
  }
  return NULL;
}

int
lg_dev_pread (struct lg_dev *d, void *buf, size_t count, uint64_t off)
{
  struct lg_wb_snap *snap;
  uint64_t t0;
  int r = 0;

  if (check_range (d, "read", count, off) < 0)
    return account (d, LG_OP_READ, 0, 0, -1);
  if (count == 0)
    return 0;
  t0 = lg_dev_now_us ();
  /* The buffered writes it overlaps, laid over what is read. */
  snap = d->wb ? lg_wb_snapshot (d->wb, count, off) : NULL;
  if (d->ra)
    r = lg_ra_read (d->ra, buf, count, off);
  if (r == 0)
    r = d->ops->pread (d, buf, count, off);
  else if (r > 0)
    r = 0;
  lg_wb_snap_apply (snap, r == 0 ? buf : NULL, count, off);
  return account (d, LG_OP_READ, count, t0, r);
}

/* A write, trim or zero of [off, off+count) starts or ended: the chunks
 * read ahead over it may hold either version (ra.h). */
static void
changing (struct lg_dev *d, uint64_t count, uint64_t off)
{
  if (d->ra)
    lg_ra_drop (d->ra, count ? count : 1, off);
}

/* The result r of a change of [off, off+count), after it ended. */
static int
changed (struct lg_dev *d, uint64_t count, uint64_t off, int r)
{
  int saved = errno;

  changing (d, count, off);
  errno = saved;
  return r;
}

int
lg_dev_read_ahead (struct lg_dev *d, size_t max)
{
  struct lg_ra *ra = NULL;

  if (max && (ra = lg_ra_new (d, max)) == NULL)
    return -1;
  lg_ra_free (d->ra);
  d->ra = ra;
  return 0;
}

int
lg_dev_write_behind (struct lg_dev *d, size_t max)
{
  const char *hook = lg_test_hook ("LUNGATE_TEST_WRITE_BEHIND");
  struct lg_wb *wb = NULL;
  uint64_t v;

  /* The fault tests again, with write-behind on where none was asked
   * for (test-faults-wb.sh). */
  if (max == 0 && hook && lg_parse_size (hook, &v) == 0 && v <= SIZE_MAX)
    max = (size_t) v;
  if (max && max < LG_WRITE_BEHIND_MIN) {
    errno = EINVAL;
    return -1;
  }
  if (max && !d->read_only && (wb = lg_wb_new (d, max)) == NULL)
    return -1;
  lg_wb_free (d->wb);
  d->wb = wb;
  return 0;
}

int
lg_dev_pread_multi (struct lg_dev *d, const struct lg_dev_seg *segs, unsigned n)
{
  uint64_t t0, total = 0;
  int r = 0;

  for (unsigned i = 0; i < n; i++) {
    if (check_range (d, "read", segs[i].count, segs[i].off) < 0)
      return account (d, LG_OP_READ, 0, 0, -1);
    total += segs[i].count;
  }
  t0 = lg_dev_now_us ();
  for (unsigned i = 0; d->wb && i < n; i++)
    lg_wb_wait_range (d->wb, segs[i].count, segs[i].off);
  if (d->ops->pread_multi)
    r = d->ops->pread_multi (d, segs, n);
  else
    for (unsigned i = 0; i < n && r == 0; i++)
      if (segs[i].count)
        r = d->ops->pread (d, segs[i].buf, segs[i].count, segs[i].off);
  return account (d, LG_OP_READ, total, t0, r);
}

int
lg_dev_pwrite (struct lg_dev *d, const void *buf, size_t count, uint64_t off,
               unsigned flags)
{
  uint64_t t0;

  if (check_writable (d, "write") < 0
      || check_range (d, "write", count, off) < 0)
    return account (d, LG_OP_WRITE, 0, 0, -1);
  if (count == 0)
    return (flags & LG_FUA) ? lg_dev_flush (d) : 0;
  t0 = lg_dev_now_us ();
  changing (d, count, off);
  /* Buffered: its worker drops what was read ahead over it again once it
   * is written.  (Not once the device was found gone: lg_wb_through.) */
  if (d->wb && lg_wb_write (d->wb, buf, count, off, flags) == 1)
    return account (d, LG_OP_WRITE, count, t0, 0);
  return account (
      d, LG_OP_WRITE, count, t0,
      changed (d, count, off, d->ops->pwrite (d, buf, count, off, flags)));
}

int
lg_dev_compare_write (struct lg_dev *d, const void *expect, const void *buf,
                      size_t count, uint64_t off)
{
  uint64_t t0;

  if (d->ops->compare_write == NULL) {
    errno = ENOTSUP;
    return -1;
  }
  if (check_writable (d, "compare and write") < 0
      || check_range (d, "compare and write", count, off) < 0)
    return account (d, LG_OP_WRITE, 0, 0, -1);
  t0 = lg_dev_now_us ();
  if (d->wb)
    lg_wb_wait_range (d->wb, count, off);
  changing (d, count, off);
  return account (d, LG_OP_WRITE, count, t0,
                  changed (d, count, off,
                           d->ops->compare_write (d, expect, buf, count, off)));
}

int
lg_dev_flush (struct lg_dev *d)
{
  int r;

  if (d->read_only)
    return 0;
  /* What was acknowledged before it is written first. */
  if (d->wb)
    lg_wb_drain (d->wb);
  r = d->ops->flush (d);
  /* Buffered writes that failed: a front end that tracks possible
   * losses per client tells each (lg_dev_losses); else this flush
   * fails, once for them. */
  if (r == 0 && d->wb && !d->loss_tracked) {
    uint64_t failed = lg_wb_failures (d->wb);

    if (atomic_exchange (&d->wb_told, failed) != failed) {
      lg_error ("%s: the flush fails: writes acknowledged before it were "
                "lost (the log above names them)",
                d->name);
      errno = lg_dev_loss_errno (d);
      r = -1;
    }
  }
  return account (d, LG_OP_FLUSH, 0, 0, r);
}

int
lg_dev_trim (struct lg_dev *d, uint64_t count, uint64_t off, unsigned flags)
{
  if (check_writable (d, "trim") < 0 || check_range (d, "trim", count, off) < 0)
    return account (d, LG_OP_TRIM, 0, 0, -1);
  if (count == 0)
    return 0;
  /* Trim is advisory: a device that cannot does nothing, correctly. */
  if (d->ops->trim == NULL || !d->can_trim)
    return (flags & LG_FUA) ? lg_dev_flush (d) : 0;
  if (d->wb)
    lg_wb_wait_range (d->wb, count, off);
  changing (d, count, off);
  return account (d, LG_OP_TRIM, count, 0,
                  changed (d, count, off, d->ops->trim (d, count, off, flags)));
}

int
lg_dev_zero (struct lg_dev *d, uint64_t count, uint64_t off, unsigned flags)
{
  if (check_writable (d, "zero") < 0 || check_range (d, "zero", count, off) < 0)
    return account (d, LG_OP_ZERO, 0, 0, -1);
  if (count == 0)
    return 0;
  if (d->wb)
    lg_wb_wait_range (d->wb, count, off);
  changing (d, count, off);
  return account (d, LG_OP_ZERO, count, 0,
                  changed (d, count, off, d->ops->zero (d, count, off, flags)));
}

int
lg_dev_write_zeroes (struct lg_dev *d, uint64_t count, uint64_t off,
                     unsigned flags)
{
  static const uint8_t fallback[64 * 1024];
  size_t chunk = d->max_io ? d->max_io : 1u << 20;
  const uint8_t *zero;
  uint8_t *mem = NULL;
  int r = 0;

  if (count == 0)
    return 0;
  if (chunk > count)
    chunk = (size_t) count;
  /* Pieces as large as the device takes (a FUA write of each costs the
   * iSCSI device a SYNCHRONIZE CACHE where the LUN has no FUA bit); calloc
   * maps zero pages, and out of memory the writes are only smaller. */
  zero = mem = calloc (1, chunk);
  if (mem == NULL) {
    zero = fallback;
    if (chunk > sizeof fallback)
      chunk = sizeof fallback;
  }
  while (count > 0 && r == 0) {
    size_t n = count < chunk ? (size_t) count : chunk;

    r = d->ops->pwrite (d, zero, n, off, flags & LG_FUA);
    off += n;
    count -= n;
  }
  if (r < 0) {
    int saved = errno;

    free (mem);
    errno = saved;
    return -1;
  }
  free (mem);
  return 0;
}

int
lg_dev_extents (struct lg_dev *d, uint64_t count, uint64_t off,
                lg_extent_fn *fn, void *opaque)
{
  if (check_range (d, "extents", count, off) < 0)
    return -1;
  if (count == 0)
    return 0;
  if (d->wb)
    lg_wb_wait_range (d->wb, count, off);
  if (d->ops->extents == NULL || !d->can_extents)
    return fn (opaque, off, count, false);
  return d->ops->extents (d, count, off, fn, opaque);
}

void
lg_dev_close (struct lg_dev *d)
{
  if (d == NULL)
    return;
  /* Their workers write and read through d; the buffered writes are
   * written first, and drop what was read ahead over them. */
  lg_wb_free (d->wb);
  d->wb = NULL;
  lg_ra_free (d->ra);
  d->ra = NULL;
  d->ops->close (d);
}

/* A started request, to be counted when it completes. */
struct counted {
  struct lg_dev *d;
  lg_dev_done_fn *done;
  void *opaque;
  bool write;
  size_t count;
  uint64_t start_us, off;
};

static void
counted_done (void *opaque, int err)
{
  struct counted c = *(struct counted *) opaque;

  free (opaque);
  if (c.write)
    changing (c.d, c.count, c.off);
  tally (c.d, c.write ? LG_OP_WRITE : LG_OP_READ, c.count, c.start_us, err);
  c.done (c.opaque, err);
}

int
lg_dev_start_rw (struct lg_dev *d, bool write, void *buf, size_t count,
                 uint64_t off, unsigned flags, lg_dev_done_fn *done,
                 void *opaque)
{
  struct counted *c;

  if ((write && check_writable (d, "write") < 0)
      || check_range (d, write ? "write" : "read", count, off) < 0)
    return -1;
  if (d->ops->start_rw == NULL || count == 0) {
    errno = ENOTSUP;
    return -1;
  }
  /* Read ahead (or being read): lg_dev_pread serves it, after the
   * identity check that may probe the LUN. */
  if (d->ra && !write && lg_ra_try_read (d->ra, buf, count, off) != 0) {
    errno = ENOTSUP;
    return -1;
  }
  /* Write-behind takes writes on lg_dev_pwrite's path; a read that
   * overlaps what it holds waits there. */
  if (d->wb && (write || lg_wb_overlaps (d->wb, count, off))) {
    errno = ENOTSUP;
    return -1;
  }
  c = malloc (sizeof *c);
  if (c == NULL)
    return -1;
  *c = (struct counted){ d, done, opaque, write, count, lg_dev_now_us (), off };
  if (write)
    changing (d, count, off);
  if (d->ops->start_rw (d, write, buf, count, off, flags, counted_done, c)
      < 0) {
    int e = errno;

    free (c);
    errno = e;
    return -1;
  }
  /* c is counted_done's now. */
  /* cppcheck-suppress memleak */
  return 0;
}

bool
lg_dev_can_start_rw (const struct lg_dev *d, uint64_t count, uint64_t off)
{
  return d->ops->start_rw != NULL && count != 0 && count % d->block_size == 0
      && off % d->block_size == 0;
}

int
lg_dev_revalidate (struct lg_dev *d)
{
  return d->ops->revalidate ? d->ops->revalidate (d) : 0;
}

/* The stack's counters: zero where the device keeps none. */
static struct lg_dev_counters
counters_of (const struct lg_dev *d)
{
  struct lg_dev_counters c;

  memset (&c, 0, sizeof c);
  if (d->ops->counters)
    d->ops->counters (d, &c);
  return c;
}

void
lg_dev_transport (const struct lg_dev *d, struct lg_dev_transport *t)
{
  *t = counters_of (d).transport;
}

int
lg_dev_reattach (struct lg_dev *d, struct lg_dev_reader *r)
{
  /* The target may have lost what it had cached, or the LUN changed:
   * nothing read before this login is served after it. */
  if (d->ra)
    lg_ra_drop (d->ra, 0, 0);
  return d->ops->reattach ? d->ops->reattach (d, r) : 0;
}

int
lg_dev_set_top (struct lg_dev *d, struct lg_dev *top)
{
  if (d->ops->set_top == NULL) {
    errno = ENOTSUP;
    return -1;
  }
  return d->ops->set_top (d, top);
}

uint64_t
lg_dev_auth_failures (const struct lg_dev *d)
{
  return counters_of (d).auth_failures;
}

uint64_t
lg_dev_wb_failures (const struct lg_dev *d)
{
  return d->wb ? lg_wb_failures (d->wb) : 0;
}

void
lg_dev_drain (struct lg_dev *d)
{
  if (d->wb)
    lg_wb_drain (d->wb);
}

int
lg_dev_loss_errno (const struct lg_dev *d)
{
  return d->wb ? lg_wb_failed_errno (d->wb, counters_of (d).losses) : EIO;
}

uint64_t
lg_dev_stack_losses (const struct lg_dev *d)
{
  return counters_of (d).losses;
}

uint64_t
lg_dev_losses (const struct lg_dev *d)
{
  return counters_of (d).losses + (d->wb ? lg_wb_failures (d->wb) : 0);
}

void
lg_dev_note_reader (struct lg_dev *d)
{
  if (d->ops->claim)
    d->ops->claim (d, LG_CLAIM_READER, NULL, 0);
}

int
lg_dev_claim (struct lg_dev *d, unsigned flags, char *err, size_t errlen)
{
  int r;

  if (d->read_only)
    return LG_CLAIM_HELD;
  if (d->ops->claim == NULL)
    return LG_CLAIM_UNHELD;
  r = d->ops->claim (d, flags, err, errlen);
  if (r == LG_CLAIM_HELD || r == LG_CLAIM_PREEMPTED)
    d->claimed = true;
  return r;
}
