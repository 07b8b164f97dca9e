/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* A file or block device as an lg_dev: pread and pwrite, fdatasync for
 * flush, fallocate for zero and trim where the file system has it, and
 * an exclusive flock as the claim. */
#include <config.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/fs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dev/file.h"
#include "util/log.h"

struct fdev {
  struct lg_dev dev;
  int fd;
};

static struct fdev *
to_fdev (struct lg_dev *d)
{
  return (struct fdev *) d;
}

/* Reads or writes all of [off, off+count), a short transfer retried;
 * 0 bytes means the file shrank under us: EIO. */
static int
transfer (struct lg_dev *d, bool write, void *buf, size_t count, uint64_t off)
{
  int fd = to_fdev (d)->fd;
  char *p = buf;

  while (count > 0) {
    ssize_t n = write ? pwrite (fd, p, count, (off_t) off)
                      : pread (fd, p, count, (off_t) off);

    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      if (n == 0)
        errno = EIO;
      lg_error ("%s: %s at %" PRIu64 ": %m", d->name, write ? "write" : "read",
                off);
      return -1;
    }
    p += n;
    off += (uint64_t) n;
    count -= (size_t) n;
  }
  return 0;
}

static int
fdev_pread (struct lg_dev *d, void *buf, size_t count, uint64_t off)
{
  return transfer (d, false, buf, count, off);
}

static int
fdev_flush (struct lg_dev *d)
{
  if (fdatasync (to_fdev (d)->fd) < 0) {
    lg_error ("%s: flush: %m", d->name);
    return -1;
  }
  return 0;
}

static int
fdev_pwrite (struct lg_dev *d, const void *buf, size_t count, uint64_t off,
             unsigned flags)
{
  if (transfer (d, true, (void *) buf, count, off) < 0)
    return -1;
  return (flags & LG_FUA) ? fdev_flush (d) : 0;
}

/* Punching a hole reads back zeroes in a file; ZERO_RANGE keeps the
 * blocks.  Either may be missing: then zeroes are written. */
static int
fdev_zero (struct lg_dev *d, uint64_t count, uint64_t off, unsigned flags)
{
  struct fdev *x = to_fdev (d);
  int mode = (flags & LG_MAY_TRIM) ? FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE
                                   : FALLOC_FL_ZERO_RANGE;

  if (fallocate (x->fd, mode, (off_t) off, (off_t) count) == 0)
    return (flags & LG_FUA) ? fdev_flush (d) : 0;
  if (flags & LG_FAST_ZERO) {
    errno = ENOTSUP;
    return -1;
  }
  if (lg_dev_write_zeroes (d, count, off, 0) < 0)
    return -1;
  return (flags & LG_FUA) ? fdev_flush (d) : 0;
}

static int
fdev_trim (struct lg_dev *d, uint64_t count, uint64_t off, unsigned flags)
{
  /* A hint: a file system without hole punching keeps the data. */
  (void) fallocate (to_fdev (d)->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                    (off_t) off, (off_t) count);
  return (flags & LG_FUA) ? fdev_flush (d) : 0;
}

static int
fdev_claim (struct lg_dev *d, unsigned flags, char *err, size_t errlen)
{
  (void) flags;
  if (flock (to_fdev (d)->fd, LOCK_EX | LOCK_NB) < 0) {
    snprintf (err, errlen,
              "%s: in use by another process on this host (locked): "
              "stop it, or open it read-only",
              d->name);
    errno = EBUSY;
    return -1;
  }
  return 0;
}

static void
fdev_close (struct lg_dev *d)
{
  struct fdev *x = to_fdev (d);

  close (x->fd); /* releases the flock */
  free (x);
}

static const struct lg_dev_ops fdev_ops = {
  .name = "file",
  .pread = fdev_pread,
  .pwrite = fdev_pwrite,
  .flush = fdev_flush,
  .trim = fdev_trim,
  .zero = fdev_zero,
  .close = fdev_close,
  .claim = fdev_claim,
};

static int
file_size (int fd, const struct stat *st, uint64_t *size)
{
  if (S_ISREG (st->st_mode)) {
    *size = (uint64_t) st->st_size;
    return 0;
  }
  if (S_ISBLK (st->st_mode))
    return ioctl (fd, BLKGETSIZE64, size);
  errno = EINVAL;
  return -1;
}

struct lg_dev *
lg_file_dev_open (const char *path, bool read_only, char *err, size_t errlen)
{
  struct fdev *x = calloc (1, sizeof *x);
  struct stat st;
  uint64_t size = 0;
  int saved;

  if (x == NULL) {
    snprintf (err, errlen, "out of memory");
    return NULL;
  }
  /* O_NONBLOCK so that a FIFO is refused below instead of waiting for a
   * writer; it is cleared again for the file's I/O. */
  x->fd = open (path, (read_only ? O_RDONLY : O_RDWR) | O_CLOEXEC | O_NONBLOCK);
  if (x->fd < 0 || fstat (x->fd, &st) < 0
      || fcntl (x->fd, F_SETFL, fcntl (x->fd, F_GETFL) & ~O_NONBLOCK) < 0) {
    snprintf (err, errlen, "%s: %s", path, strerror (errno));
    goto fail;
  }
  if (file_size (x->fd, &st, &size) < 0) {
    snprintf (err, errlen, "%s: not a regular file or a block device", path);
    goto fail;
  }
  snprintf (x->dev.name, sizeof x->dev.name, "%s", path);
  x->dev.ops = &fdev_ops;
  lg_dev_set_size (&x->dev, size);
  x->dev.block_size = 512;
  x->dev.pref_block_size = 4096;
  x->dev.max_io = 4u << 20;
  x->dev.read_only = read_only;
  x->dev.can_trim = true;
  x->dev.can_zero = S_ISREG (st.st_mode);
  x->dev.can_fua = true;
  /* The page cache holds writes until fdatasync: order metadata first. */
  x->dev.volatile_cache = true;
  return &x->dev;

fail:
  saved = errno ? errno : EINVAL;
  if (x->fd >= 0)
    close (x->fd);
  free (x);
  errno = saved;
  return NULL;
}
