/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Checks common to every device, done once here so that each layer can
 * trust its arguments.  Any thread. */
#include <config.h>

#include <errno.h>
#include <inttypes.h>

#include "dev/dev.h"
#include "util/log.h"

static int
check_range (struct lg_dev *d, const char *op, uint64_t count, uint64_t off)
{
  if (off > d->size || count > d->size - off) {
    lg_error ("%s: %s: range %" PRIu64 "+%" PRIu64 " is beyond the end "
              "(%" PRIu64 " bytes)",
              d->name, op, off, count, d->size);
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

int
lg_dev_pread (struct lg_dev *d, void *buf, size_t count, uint64_t off)
{
  if (check_range (d, "read", count, off) < 0)
    return -1;
  if (count == 0)
    return 0;
  return d->ops->pread (d, buf, count, off);
}

int
lg_dev_pread_multi (struct lg_dev *d, const struct lg_dev_seg *segs, unsigned n)
{
  for (unsigned i = 0; i < n; i++)
    if (check_range (d, "read", segs[i].count, segs[i].off) < 0)
      return -1;
  if (d->ops->pread_multi)
    return d->ops->pread_multi (d, segs, n);
  for (unsigned i = 0; i < n; i++)
    if (segs[i].count
        && d->ops->pread (d, segs[i].buf, segs[i].count, segs[i].off) < 0)
      return -1;
  return 0;
}

int
lg_dev_pwrite (struct lg_dev *d, const void *buf, size_t count, uint64_t off,
               unsigned flags)
{
  if (check_writable (d, "write") < 0
      || check_range (d, "write", count, off) < 0)
    return -1;
  if (count == 0)
    return (flags & LG_FUA) ? lg_dev_flush (d) : 0;
  return d->ops->pwrite (d, buf, count, off, flags);
}

int
lg_dev_flush (struct lg_dev *d)
{
  if (d->read_only)
    return 0;
  return d->ops->flush (d);
}

int
lg_dev_trim (struct lg_dev *d, uint64_t count, uint64_t off, unsigned flags)
{
  if (check_writable (d, "trim") < 0 || check_range (d, "trim", count, off) < 0)
    return -1;
  if (count == 0)
    return 0;
  /* Trim is advisory: a device that cannot does nothing, correctly. */
  if (d->ops->trim == NULL || !d->can_trim)
    return (flags & LG_FUA) ? lg_dev_flush (d) : 0;
  return d->ops->trim (d, count, off, flags);
}

int
lg_dev_zero (struct lg_dev *d, uint64_t count, uint64_t off, unsigned flags)
{
  if (check_writable (d, "zero") < 0 || check_range (d, "zero", count, off) < 0)
    return -1;
  if (count == 0)
    return 0;
  return d->ops->zero (d, count, off, flags);
}

int
lg_dev_extents (struct lg_dev *d, uint64_t count, uint64_t off,
                lg_extent_fn *fn, void *opaque)
{
  if (check_range (d, "extents", count, off) < 0)
    return -1;
  if (count == 0)
    return 0;
  if (d->ops->extents == NULL || !d->can_extents)
    return fn (opaque, off, count, false);
  return d->ops->extents (d, count, off, fn, opaque);
}

void
lg_dev_close (struct lg_dev *d)
{
  if (d)
    d->ops->close (d);
}

int
lg_dev_start_rw (struct lg_dev *d, bool write, void *buf, size_t count,
                 uint64_t off, unsigned flags, lg_dev_done_fn *done,
                 void *opaque)
{
  if ((write && check_writable (d, "write") < 0)
      || check_range (d, write ? "write" : "read", count, off) < 0)
    return -1;
  if (d->ops->start_rw == NULL || count == 0) {
    errno = ENOTSUP;
    return -1;
  }
  return d->ops->start_rw (d, write, buf, count, off, flags, done, opaque);
}

int
lg_dev_revalidate (struct lg_dev *d)
{
  return d->ops->revalidate ? d->ops->revalidate (d) : 0;
}

void
lg_dev_transport (const struct lg_dev *d, struct lg_dev_transport *t)
{
  t->reconnects = t->retries = 0;
  if (d->ops->transport)
    d->ops->transport (d, t);
}

uint64_t
lg_dev_auth_failures (const struct lg_dev *d)
{
  return d->ops->auth_failures ? d->ops->auth_failures (d) : 0;
}
