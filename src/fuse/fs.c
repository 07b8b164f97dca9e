/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The FUSE file system: a static tree of directories (targets) and files
 * (LUNs), plus a hidden read-only .stats file.  Requests run on libfuse's
 * worker threads (fuse_session_loop_mt), each calling the block-device
 * interface and replying when the iSCSI commands complete.
 *
 * Reads and writes of whole blocks on a device that can start them
 * (lg_dev_start_rw: the iSCSI device) do not hold a worker: the worker
 * starts the commands and goes back for the next request, and the reply is
 * sent from the session thread that completes the last command.  Other
 * requests (unaligned, or through the crypt layer) run on the worker.
 *
 * Threads: the tree is built before the session starts and is immutable
 * afterwards; per-file counters are atomics.  What each file has
 * allocated (st_blocks) is counted from the device's extents by whichever
 * worker asks first, under lg_fs.alloc_lock (never held across a device
 * call or a reply).
 *
 * The .stats file's texts are kept in stats.c; the background, the
 * session's loop and the signals are run.c's.
 */
#include <config.h>

#define FUSE_USE_VERSION 312
#include <fuse_lowlevel.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include <sodium.h>

#include "fuse/fs-int.h"
#include "fuse/fs.h"
#include "util/log.h"

/* How long a count of allocated bytes is shown before it is counted again
 * (seconds), and at least how long after a write, trim or zero through
 * the mount; and how long one stat may spend walking the extents before
 * it answers with what it has (microseconds): a walk of a large, much
 * fragmented LUN goes on at the next stat, from where it stopped. */
#define ALLOC_MAX_AGE_S 5
#define ALLOC_MIN_AGE_S 1
#define ALLOC_WALK_BUDGET_US (100 * 1000)

/* fuse ino = index + 1 (the root is index 0, ino 1 = FUSE_ROOT_ID). */
static struct lg_fs *the_fs;

static struct node *
node_of (fuse_ino_t ino)
{
  if (ino < 1 || ino > (fuse_ino_t) the_fs->n)
    return NULL;
  return &the_fs->nodes[ino - 1];
}

struct lg_fs *
lg_fs_new (const struct lg_fs_opts *o)
{
  struct lg_fs *fs = calloc (1, sizeof *fs);

  if (fs == NULL)
    return NULL;
  fs->o = *o;
  pthread_mutex_init (&fs->alloc_lock, NULL);
  pthread_mutex_init (&fs->ofile_lock, NULL);
  fs->n = 1;
  fs->nodes[0].parent = -1;
  fs->nodes[0].dir = true;
  fs->stats = fs->n++;
  fs->nodes[fs->stats].parent = 0;
  snprintf (fs->nodes[fs->stats].name, sizeof fs->nodes[0].name, "%s",
            STATS_NAME);
  return fs;
}

static int
add (struct lg_fs *fs, int parent, const char *name, bool dir,
     struct lg_dev *dev)
{
  struct node *nd;

  if (fs->n >= MAX_NODES)
    return -1;
  nd = &fs->nodes[fs->n];
  nd->parent = parent;
  snprintf (nd->name, sizeof nd->name, "%s", name);
  nd->dir = dir;
  nd->dev = dev;
  if (dev) {
    dev->loss_tracked = true; /* fs_fsync */
    atomic_init (&nd->told_wb, 0);
    /* Out of memory it only reads nothing ahead. */
    if (lg_dev_read_ahead (dev, fs->o.read_ahead) < 0)
      lg_warn ("%s: no read-ahead: %m", dev->name);
    if (lg_dev_write_behind (dev, fs->o.write_behind) < 0)
      lg_warn ("%s: no write-behind: %m", dev->name);
  }
  return fs->n++;
}

void
lg_fs_on_stop (struct lg_fs *fs, void (*fn) (void *opaque, bool now),
               void *opaque)
{
  fs->on_stop = fn;
  fs->stop_opaque = opaque;
}

int
lg_fs_add_dir (struct lg_fs *fs, int parent, const char *name)
{
  return add (fs, parent, name, true, NULL);
}

int
lg_fs_add_file (struct lg_fs *fs, int parent, const char *name,
                struct lg_dev *dev)
{
  return add (fs, parent, name, false, dev);
}

/* What the unmount says of the writes d may have lost: buffered writes
 * that failed (write-behind), and a target that restarted. */
static void
say_losses (struct lg_dev *d)
{
  uint64_t all = lg_dev_losses (d), wb = lg_dev_wb_failures (d);

  if (wb > 0)
    lg_error ("%s: %" PRIu64 " buffered write%s failed while mounted "
              "(write-behind: the log above names the bytes)",
              d->name, wb, wb == 1 ? "" : "s");
  if (all > wb)
    lg_error ("%s: the target may have restarted while mounted, losing "
              "writes it had acknowledged and not yet flushed",
              d->name);
}

int
lg_fs_free (struct lg_fs *fs)
{
  int failed;

  if (fs == NULL)
    return 0;
  failed = 0;
  for (int i = 0; i < fs->n; i++)
    if (fs->nodes[i].dev) {
      /* A LUN is counted once, whatever failed for it. */
      bool lost = atomic_load (&fs->nodes[i].stop_failed);

      if (lg_dev_flush (fs->nodes[i].dev) < 0) {
        lg_error ("%s: flush at unmount failed", fs->nodes[i].dev->name);
        lost = lost || !fs->nodes[i].dev->read_only;
      }
      /* Files told of a loss at their fsync, or not (fs_fsync): the
       * unmount says so too, whether its own flush worked or not. */
      if (lg_dev_losses (fs->nodes[i].dev) > 0
          && !fs->nodes[i].dev->read_only) {
        say_losses (fs->nodes[i].dev);
        lost = true;
      }
      failed += lost;
      lg_dev_close (fs->nodes[i].dev);
    }
  /* The flushes are done: a signal is the default's again. */
  lg_fs_end_signals (fs);
  pthread_mutex_destroy (&fs->alloc_lock);
  while (fs->ofiles != NULL) {
    struct ofile *o = fs->ofiles;

    fs->ofiles = o->next;
    free (o);
  }
  pthread_mutex_destroy (&fs->ofile_lock);
  free (fs);
  return failed;
}

/* ---- attributes ---- */

/* A write, trim or zero through the mount completed on nd. */
static void
written (struct node *nd)
{
  atomic_fetch_add (&nd->writes_gen, 1);
}

struct alloc_walk {
  uint64_t cursor, bytes, deadline_us;
  bool out_of_time;
};

static int
alloc_extent (void *opaque, uint64_t off, uint64_t len, bool hole)
{
  struct alloc_walk *w = opaque;

  if (!hole)
    w->bytes += len;
  w->cursor = off + len;
  if (lg_dev_now_us () >= w->deadline_us) {
    w->out_of_time = true;
    return -1;
  }
  return 0;
}

/* What nd's LUN has allocated, in bytes: counted from its extents, at
 * most ALLOC_MAX_AGE_S old, again after a write (no sooner than
 * ALLOC_MIN_AGE_S).  Where the device has no extents (a thick LUN, the
 * crypt layer), or before a first walk has finished, or when the walk
 * failed: the whole size, which is never less than what is allocated.
 * With may_walk false the last count is given as it is, without walking
 * (see fs_setattr). */
static uint64_t
allocated_bytes (struct node *nd, bool may_walk)
{
  struct lg_dev *d = nd->dev;
  struct alloc *a = &nd->alloc;
  uint64_t size = lg_dev_size (d);
  uint64_t now = lg_dev_now_us (), gen = atomic_load (&nd->writes_gen);
  uint64_t age, res;
  struct alloc_walk w;
  int r;

  if (!d->can_extents || size == 0)
    return size;
  pthread_mutex_lock (&the_fs->alloc_lock);
  age = now - a->counted_us;
  if (a->walking || !may_walk
      || (a->known && a->cursor == 0 && age < ALLOC_MAX_AGE_S * 1000000
          && (a->gen == gen || age < ALLOC_MIN_AGE_S * 1000000))) {
    res = a->known ? a->bytes : size;
    pthread_mutex_unlock (&the_fs->alloc_lock);
    return res < size ? res : size;
  }
  a->walking = true;
  if (a->cursor == 0 || a->cursor >= size) {
    a->cursor = 0;
    a->partial = 0;
    a->walk_us = now;
    a->walk_gen = gen;
  }
  w.cursor = a->cursor;
  w.bytes = a->partial;
  pthread_mutex_unlock (&the_fs->alloc_lock);

  lg_debug ("%s: counting the allocated blocks from byte %" PRIu64, d->name,
            w.cursor);
  w.deadline_us = now + ALLOC_WALK_BUDGET_US;
  w.out_of_time = false;
  r = lg_dev_extents (d, size - w.cursor, w.cursor, alloc_extent, &w);

  pthread_mutex_lock (&the_fs->alloc_lock);
  a->walking = false;
  if (r < 0 && !w.out_of_time) {
    /* The device logged it; counted again at the next stat. */
    a->cursor = 0;
    a->known = false;
  }
  else if (w.out_of_time && w.cursor < size) {
    a->cursor = w.cursor;
    a->partial = w.bytes;
  }
  else {
    a->known = true;
    a->bytes = w.bytes;
    a->counted_us = a->walk_us;
    a->gen = a->walk_gen;
    a->cursor = 0;
  }
  res = a->known ? a->bytes : size;
  pthread_mutex_unlock (&the_fs->alloc_lock);
  return res < size ? res : size;
}

/* A file's attributes; with fresh false the LUN is neither checked nor
 * its extents walked, and st_blocks is the last count (fs_setattr). */
static void
fill_stat (fuse_ino_t ino, struct stat *st, bool fresh)
{
  struct node *nd = node_of (ino);

  memset (st, 0, sizeof *st);
  st->st_ino = ino;
  st->st_uid = the_fs->o.uid;
  st->st_gid = the_fs->o.gid;
  st->st_atime = st->st_mtime = st->st_ctime = the_fs->mounted;
  if (nd->dir) {
    st->st_mode = S_IFDIR | 0755;
    st->st_nlink = 2;
  }
  else if (nd->dev == NULL) { /* .stats */
    st->st_mode = S_IFREG | 0444;
    st->st_nlink = 1;
    st->st_size = 0;
    st->st_blksize = 4096;
  }
  else {
    st->st_mode = S_IFREG | (the_fs->o.file_mode & 07777);
    if (the_fs->o.read_only || nd->dev->read_only)
      st->st_mode &= ~(mode_t) 0222;
    st->st_nlink = 1;
    /* A LUN that reported a change is checked first: a resized plain LUN
     * shows its new size (a LUN that is no longer the one opened keeps
     * its size and fails every request). */
    if (fresh)
      lg_dev_revalidate (nd->dev);
    st->st_size = (off_t) lg_dev_size (nd->dev);
    st->st_blksize
        = (blksize_t) (nd->dev->pref_block_size ? nd->dev->pref_block_size
                                                : 4096);
    /* du shows what the LUN holds, not its size. */
    st->st_blocks = (blkcnt_t) ((allocated_bytes (nd, fresh) + 511) / 512);
  }
}

static void
fs_lookup (fuse_req_t req, fuse_ino_t parent, const char *name)
{
  struct fuse_entry_param e;

  for (int i = 1; i < the_fs->n; i++)
    if ((fuse_ino_t) the_fs->nodes[i].parent + 1 == parent
        && strcmp (the_fs->nodes[i].name, name) == 0) {
      memset (&e, 0, sizeof e);
      e.ino = (fuse_ino_t) i + 1;
      e.attr_timeout = 1.0;
      e.entry_timeout = 1.0;
      fill_stat (e.ino, &e.attr, true);
      fuse_reply_entry (req, &e);
      return;
    }
  /* run.c asks whether its path still leads here. */
  if (parent == FUSE_ROOT_ID
      && strncmp (name, LG_FS_PROBE_PREFIX, strlen (LG_FS_PROBE_PREFIX)) == 0)
    atomic_store (&the_fs->probe_seen,
                  strtoull (name + strlen (LG_FS_PROBE_PREFIX), NULL, 10));
  fuse_reply_err (req, ENOENT);
}

static void
fs_getattr (fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
  struct stat st;

  (void) fi;
  if (node_of (ino) == NULL) {
    fuse_reply_err (req, ENOENT);
    return;
  }
  fill_stat (ino, &st, true);
  fuse_reply_attr (req, &st, 1.0);
}

static void
fs_setattr (fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set,
            struct fuse_file_info *fi)
{
  struct node *nd = node_of (ino);
  struct stat st;

  (void) fi;
  if (nd == NULL) {
    fuse_reply_err (req, ENOENT);
    return;
  }
  /* A LUN has the size it has: only a no-op truncate is accepted.  Times
   * and modes are not stored: accepted and ignored (tools set them). */
  if ((to_set & FUSE_SET_ATTR_SIZE)
      && (nd->dev == NULL
          || (uint64_t) attr->st_size != lg_dev_size (nd->dev))) {
    fuse_reply_err (req, nd->dir ? EISDIR : EINVAL);
    return;
  }
  /* With the writeback cache the kernel keeps the file's times and sends
   * them here from every fsync, between the writes and the FSYNC, with
   * the inode locked (the loop device's whole queue waits): the answer
   * is the last count, not a walk of the extents (up to 100 ms) nor a
   * check of the LUN.  A stat (getattr) still counts afresh. */
  fill_stat (ino, &st, false);
  fuse_reply_attr (req, &st, 1.0);
}

static void
fs_readdir (fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
            struct fuse_file_info *fi)
{
  char *buf = malloc (size);
  size_t used = 0;
  off_t k = 0;

  (void) fi;
  if (buf == NULL) {
    fuse_reply_err (req, ENOMEM);
    return;
  }
  for (int i = -2; i < the_fs->n; i++) {
    const char *name;
    struct stat st;
    fuse_ino_t cino;
    size_t len;

    if (i == -2) {
      name = ".";
      cino = ino;
    }
    else if (i == -1) {
      name = "..";
      cino = node_of (ino)->parent >= 0 ? (fuse_ino_t) node_of (ino)->parent + 1
                                        : ino;
    }
    else if ((fuse_ino_t) the_fs->nodes[i].parent + 1 == ino && i > 0) {
      name = the_fs->nodes[i].name;
      cino = (fuse_ino_t) i + 1;
    }
    else
      continue;
    k++;
    if (k <= off)
      continue;
    memset (&st, 0, sizeof st);
    st.st_ino = cino;
    st.st_mode = node_of (cino)->dir ? S_IFDIR : S_IFREG;
    len = fuse_add_direntry (req, buf + used, size - used, name, &st, k);
    if (len > size - used)
      break;
    used += len;
  }
  fuse_reply_buf (req, buf, used);
  free (buf);
}

/* ---- files ---- */

static void
fs_open (fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
  struct node *nd = node_of (ino);

  if (nd == NULL || nd->dir) {
    fuse_reply_err (req, nd ? EISDIR : ENOENT);
    return;
  }
  if ((fi->flags & O_ACCMODE) != O_RDONLY
      && (nd->dev == NULL || the_fs->o.read_only || nd->dev->read_only)) {
    fuse_reply_err (req, EROFS);
    return;
  }
  if (nd->dev == NULL) {
    size_t len;
    char *text = lg_fs_stats_text (the_fs, &len);

    if (text == NULL || (fi->fh = lg_fs_stats_add (text, len)) == 0) {
      free (text);
      fuse_reply_err (req, ENOMEM);
      return;
    }
    fi->direct_io = 1;
  }
  else {
    /* The possible losses this open file was told of (fs_fsync). */
    struct ofile *o = calloc (1, sizeof *o);

    if (o == NULL) {
      fuse_reply_err (req, ENOMEM);
      return;
    }
    atomic_init (
        &o->seen,
        lg_dev_losses (nd->dev)
            - (lg_dev_wb_failures (nd->dev) - atomic_load (&nd->told_wb)));
    pthread_mutex_lock (&the_fs->ofile_lock);
    o->next = the_fs->ofiles;
    if (o->next)
      o->next->prev = o;
    the_fs->ofiles = o;
    pthread_mutex_unlock (&the_fs->ofile_lock);
    fi->fh = (uint64_t) (uintptr_t) o;
    if (the_fs->o.direct_io)
      fi->direct_io = 1;
  }
  fuse_reply_open (req, fi);
}

static void
fs_release (fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
  struct node *nd = node_of (ino);

  if (nd && nd->dev == NULL && fi->fh)
    lg_fs_stats_remove (fi->fh);
  else if (nd && fi->fh) {
    struct ofile *o = (struct ofile *) (uintptr_t) fi->fh;

    pthread_mutex_lock (&the_fs->ofile_lock);
    if (o->prev)
      o->prev->next = o->next;
    else
      the_fs->ofiles = o->next;
    if (o->next)
      o->next->prev = o->prev;
    pthread_mutex_unlock (&the_fs->ofile_lock);
    free (o);
  }
  fuse_reply_err (req, 0);
}

/* The errno a file gives for a device error: the device speaks NBD's
 * errnos (EPERM for read-only, ESHUTDOWN for a LUN or medium gone); the
 * log already names the cause. */
static int
file_errno (int err)
{
  switch (err) {
  case 0:
  case ESHUTDOWN:
    return EIO;
  case EPERM:
    return EROFS;
  default:
    return err;
  }
}

/* A read or write started without waiting. */
struct areq {
  fuse_req_t req;
  struct node *nd;
  bool write;
  size_t size;
  char buf[]; /* the data, read or to write */
};

static void
areq_done (void *opaque, int err)
{
  struct areq *a = opaque;
  struct node *nd = a->nd;

  if (a->write)
    written (nd);
  if (err)
    fuse_reply_err (a->req, file_errno (err));
  else if (a->write)
    fuse_reply_write (a->req, a->size);
  else
    fuse_reply_buf (a->req, a->buf, a->size);
  free (a);
  atomic_fetch_sub (&the_fs->inflight, 1);
}

/* Starts a whole-block read or write and returns true when it will be
 * answered by areq_done; false when the caller must do it itself. */
static bool
start_async (fuse_req_t req, struct node *nd, bool write, const char *data,
             size_t size, uint64_t off, unsigned flags)
{
  struct areq *a;

  if (!lg_dev_can_start_rw (nd->dev, size, off))
    return false;
  a = malloc (sizeof *a + size);
  if (a == NULL)
    return false;
  a->req = req;
  a->nd = nd;
  a->write = write;
  a->size = size;
  if (write)
    memcpy (a->buf, data, size);
  atomic_fetch_add (&the_fs->inflight, 1);
  if (lg_dev_start_rw (nd->dev, write, a->buf, size, off, flags, areq_done, a)
      < 0) {
    atomic_fetch_sub (&the_fs->inflight, 1);
    free (a);
    return false;
  }
  return true;
}

static void
fs_read (fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
         struct fuse_file_info *fi)
{
  struct node *nd = node_of (ino);
  uint64_t end, dsize;
  char *buf;

  if (nd->dev == NULL) {
    lg_fs_stats_read (req, fi->fh, size, off);
    return;
  }
  /* One reading of the size: it may change under a resize. */
  dsize = lg_dev_size (nd->dev);
  if (off < 0 || (uint64_t) off >= dsize) {
    fuse_reply_buf (req, NULL, 0);
    return;
  }
  end = (uint64_t) off + size;
  if (end > dsize)
    size = (size_t) (dsize - (uint64_t) off);
  if (start_async (req, nd, false, NULL, size, (uint64_t) off, 0))
    return;
  buf = malloc (size ? size : 1);
  if (buf == NULL) {
    fuse_reply_err (req, ENOMEM);
    return;
  }
  if (lg_dev_pread (nd->dev, buf, size, (uint64_t) off) < 0) {
    int err = errno ? errno : EIO;

    free (buf);
    fuse_reply_err (req, file_errno (err));
    return;
  }
  fuse_reply_buf (req, buf, size);
  free (buf);
}

/* Written back from the page cache past the LUN's end (the kernel owns
 * the file size there and let a write grow the file): lost, said, and
 * true.  But the kernel keeps that size, and writes the last page back
 * again with each change to it, the same stale bytes past the end among
 * them: those, refused already, are false (the write-back is not failed
 * again for them). */
static bool
past_end (struct node *nd, uint64_t off, const char *bytes, size_t len)
{
  uint8_t h[16];
  bool again;

  crypto_generichash (h, sizeof h, (const uint8_t *) bytes, len, NULL, 0);
  pthread_mutex_lock (&the_fs->alloc_lock);
  again = nd->past_off == off && nd->past_len == len
      && memcmp (nd->past_hash, h, sizeof h) == 0;
  nd->past_off = off;
  nd->past_len = len;
  memcpy (nd->past_hash, h, sizeof h);
  pthread_mutex_unlock (&the_fs->alloc_lock);
  if (again)
    return false;
  lg_error ("%s: a write of bytes %" PRIu64 "-%" PRIu64 " past the LUN's end "
            "(%" PRIu64 " bytes) was refused: those bytes are on no LUN, and "
            "the next fsync of the file fails",
            nd->dev->name, off, off + len - 1, lg_dev_size (nd->dev));
  return true;
}

static void
fs_write (fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size,
          off_t off, struct fuse_file_info *fi)
{
  struct node *nd = node_of (ino);
  /* O_SYNC, O_DSYNC, and RWF_DSYNC or RWF_SYNC on one write (the kernel
   * passes those as the write's flags): on the target's medium before
   * the answer.  (Through the page cache the kernel asks with fsync.) */
  unsigned flags = fi->flags & (O_SYNC | O_DSYNC) ? LG_FUA : 0;
  uint64_t dsize;
  int r;

  if (nd->dev == NULL) {
    fuse_reply_err (req, EROFS);
    return;
  }
  dsize = lg_dev_size (nd->dev); /* once: it may change under a resize */
  if (off < 0 || (uint64_t) off >= dsize) {
    if (fi->writepage && off >= 0 && size
        && !past_end (nd, (uint64_t) off, buf, size)) {
      fuse_reply_write (req, size);
      return;
    }
    fuse_reply_err (req, (off >= 0 && size) ? ENOSPC : EINVAL);
    return;
  }
  if ((uint64_t) off + size > dsize) {
    size_t inside = (size_t) (dsize - (uint64_t) off);

    /* The kernel's writeback ignores a short count: the part inside is
     * written, and the whole write fails, so that the next fsync does. */
    if (fi->writepage) {
      bool lost
          = past_end (nd, (uint64_t) off + inside, buf + inside, size - inside);

      r = lg_dev_pwrite (nd->dev, buf, inside, (uint64_t) off, flags);
      written (nd);
      if (r < 0)
        fuse_reply_err (req, file_errno (errno));
      else if (lost)
        fuse_reply_err (req, ENOSPC);
      else
        fuse_reply_write (req, size);
      return;
    }
    size = inside;
  }
  if (!nd->dev->read_only
      && start_async (req, nd, true, buf, size, (uint64_t) off, flags))
    return;
  r = lg_dev_pwrite (nd->dev, buf, size, (uint64_t) off, flags);
  written (nd); /* a failed write may have written a part */
  if (r < 0) {
    fuse_reply_err (req, file_errno (errno));
    return;
  }
  fuse_reply_write (req, size);
}

static void
fs_fsync (fuse_req_t req, fuse_ino_t ino, int datasync,
          struct fuse_file_info *fi)
{
  struct node *nd = node_of (ino);
  struct ofile *o = nd->dev && fi ? (struct ofile *) (uintptr_t) fi->fh : NULL;
  atomic_uint_fast64_t *seen = o ? &o->seen : NULL;
  uint64_t now;
  bool told;

  (void) datasync;
  if (nd->dev && lg_dev_flush (nd->dev) < 0) {
    if (seen) {
      now = lg_dev_losses (nd->dev);
      atomic_store (seen, now);
      atomic_store (&nd->told_wb, lg_dev_wb_failures (nd->dev));
    }
    fuse_reply_err (req, file_errno (errno));
    return;
  }
  /* Each file open when writes may have been lost hears of it, as the
   * kernel reports a writeback error to every such file, not only to
   * the first that syncs. */
  if (seen) {
    now = lg_dev_losses (nd->dev);
    told = atomic_exchange (seen, now) == now;
    if (!told) {
      atomic_store (&nd->told_wb, lg_dev_wb_failures (nd->dev));
      lg_error ("%s: writes acknowledged and not yet flushed may be lost "
                "(the target may have restarted, or a buffered write "
                "failed: the log says which)",
                nd->dev->name);
      fuse_reply_err (req, file_errno (lg_dev_loss_errno (nd->dev)));
      return;
    }
  }
  fuse_reply_err (req, 0);
}

/* A close (of each descriptor).  With write-behind, what the file wrote
 * may wait in the buffer: the close waits until it is written (not for
 * the target's cache: fsync's), within this request and the mount's own
 * outage budget, as a close without write-behind waits for the kernel's
 * write-back.  Otherwise the last close of a lazily unmounted mount ends
 * the session, and the stop's shorter budget would apply to what is
 * still buffered.  A failed write is reported as without write-behind:
 * at the next fsync, or the unmount. */
static void
fs_flush (fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
  struct node *nd = node_of (ino);

  (void) fi;
  if (nd->dev && !nd->dev->read_only)
    lg_dev_drain (nd->dev);
  fuse_reply_err (req, 0);
}

static void
fs_fallocate (fuse_req_t req, fuse_ino_t ino, int mode, off_t off, off_t len,
              struct fuse_file_info *fi)
{
  struct node *nd = node_of (ino);
  uint64_t dsize;
  int r;

  (void) fi;
  if (nd->dev == NULL) {
    fuse_reply_err (req, EROFS);
    return;
  }
  dsize = lg_dev_size (nd->dev); /* once: it may change under a resize */
  if (off < 0 || len <= 0 || (uint64_t) off > dsize
      || (uint64_t) len > dsize - (uint64_t) off) {
    fuse_reply_err (req, mode == 0 ? EFBIG : EINVAL);
    return;
  }
  if (mode == (FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE))
    /* A punched range must read back as zeroes: zero it, deallocating
     * where the LUN can (a trim alone is only a hint). */
    r = lg_dev_zero (nd->dev, (uint64_t) len, (uint64_t) off, LG_MAY_TRIM);
  else if (mode == FALLOC_FL_ZERO_RANGE
           || mode == (FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE))
    r = lg_dev_zero (nd->dev, (uint64_t) len, (uint64_t) off, 0);
  else if (mode == 0 || mode == FALLOC_FL_KEEP_SIZE)
    r = 0; /* inside the LUN everything is allocated already */
  else {
    fuse_reply_err (req, EOPNOTSUPP);
    return;
  }
  written (nd);
  if (r < 0) {
    fuse_reply_err (req, file_errno (errno));
    return;
  }
  fuse_reply_err (req, 0);
}

struct seek_state {
  uint64_t from;
  int whence;
  uint64_t found;
  bool done;
  bool holes_zero; /* else a hole is data to SEEK_HOLE (it may not read 0) */
};

static int
seek_extent (void *opaque, uint64_t off, uint64_t len, bool hole)
{
  struct seek_state *s = opaque;
  uint64_t a = off < s->from ? s->from : off;

  hole = hole && s->holes_zero;
  if (a >= off + len)
    return 0;
  if ((s->whence == SEEK_DATA && !hole) || (s->whence == SEEK_HOLE && hole)) {
    s->found = a;
    s->done = true;
    return -1;
  }
  return 0;
}

static void
fs_lseek (fuse_req_t req, fuse_ino_t ino, off_t off, int whence,
          struct fuse_file_info *fi)
{
  struct node *nd = node_of (ino);
  struct seek_state s = { (uint64_t) off, whence, 0, false, false };
  uint64_t dsize;

  (void) fi;
  if (nd->dev == NULL || off < 0
      || (whence != SEEK_DATA && whence != SEEK_HOLE)) {
    fuse_reply_err (req, EINVAL);
    return;
  }
  dsize = lg_dev_size (nd->dev); /* once: it may change under a resize */
  if ((uint64_t) off >= dsize) {
    fuse_reply_err (req, ENXIO);
    return;
  }
  /* Through the page cache, pages the kernel has not written back yet
   * are data the LUN's map does not show: no holes are reported there
   * (all data, the one hole at the end), as for a file system without
   * SEEK_DATA. */
  if (!the_fs->o.direct_io) {
    fuse_reply_lseek (req, whence == SEEK_DATA ? off : (off_t) dsize);
    return;
  }
  s.holes_zero = nd->dev->holes_zero;
  if (lg_dev_extents (nd->dev, dsize - (uint64_t) off, (uint64_t) off,
                      seek_extent, &s)
          < 0
      && !s.done) {
    fuse_reply_err (req, file_errno (errno));
    return;
  }
  if (s.done)
    fuse_reply_lseek (req, (off_t) s.found);
  else if (whence == SEEK_HOLE)
    fuse_reply_lseek (req, (off_t) dsize); /* the implicit hole */
  else
    fuse_reply_err (req, ENXIO);
}

static void
fs_statfs (fuse_req_t req, fuse_ino_t ino)
{
  struct statvfs sv;
  uint64_t total = 0;

  (void) ino;
  for (int i = 0; i < the_fs->n; i++)
    if (the_fs->nodes[i].dev)
      total += lg_dev_size (the_fs->nodes[i].dev);
  memset (&sv, 0, sizeof sv);
  sv.f_bsize = sv.f_frsize = 4096;
  sv.f_blocks = total / 4096;
  sv.f_files = (fsfilcnt_t) the_fs->n;
  sv.f_namemax = 255;
  fuse_reply_statfs (req, &sv);
}

static void
fs_init (void *userdata, struct fuse_conn_info *conn)
{
  (void) userdata;
  /* Without the writeback cache the kernel sends one write per file at a
   * time (it holds the inode lock), so writes run at queue depth 1.  With
   * it, writes are gathered and sent in parallel; fsync still sends them
   * all and then SYNCHRONIZE CACHE before it returns. */
  if (!the_fs->o.direct_io && (conn->capable & FUSE_CAP_WRITEBACK_CACHE))
    conn->want |= FUSE_CAP_WRITEBACK_CACHE;
  conn->max_write = 1 << 20;
  conn->max_background = 64;
  conn->congestion_threshold = 48;
}

static const struct fuse_lowlevel_ops ops = {
  .init = fs_init,
  .lookup = fs_lookup,
  .getattr = fs_getattr,
  .setattr = fs_setattr,
  .readdir = fs_readdir,
  .open = fs_open,
  .release = fs_release,
  .read = fs_read,
  .write = fs_write,
  .flush = fs_flush,
  .fsync = fs_fsync,
  .fallocate = fs_fallocate,
  .lseek = fs_lseek,
  .statfs = fs_statfs,
};

const struct fuse_lowlevel_ops *
lg_fs_ops_for (struct lg_fs *fs)
{
  the_fs = fs;
  return &ops;
}
