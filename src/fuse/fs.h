/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The FUSE front end: LUNs (block devices) as regular files in a tree,
 * served with libfuse's low-level API. */
#ifndef LG_FUSE_FS_H
#define LG_FUSE_FS_H

#include <limits.h>
#include <stdbool.h>
#include <sys/types.h>

#include "dev/dev.h"

struct lg_fs;

struct lg_fs_opts {
  bool read_only;
  mode_t file_mode; /* default 0600 (0400 read-only) */
  uid_t uid;
  gid_t gid;
  bool direct_io;      /* bypass the page cache */
  size_t read_ahead;   /* lg_dev_read_ahead for each file's device */
  size_t write_behind; /* lg_dev_write_behind for each file's device */
  /* In the background, once it serves: standard error goes to log_fd
   * (-1: /dev/null), and messages to syslog if log_syslog. */
  int log_fd;
  bool log_syslog;
  /* Where messages go, for lungate status: "stderr", "syslog", a file's
   * absolute path, or "" (lost). */
  char log_name[PATH_MAX];
};

struct lg_fs *lg_fs_new (const struct lg_fs_opts *o);

/* fn (opaque, false) runs on a signal, before the write-back of what the
 * kernel caches, and when the file system stops serving (unmounted, or
 * signalled and written back), before the requests still in flight and
 * the final flush are waited for: the mount shortens its waits for the
 * target there (LG_FS_STOP_BUDGET_S), so that a target that is gone does
 * not hold the end for the whole outage budget, and a link that stalls
 * for a moment does not fail the final flush.  fn (opaque, true) runs
 * once on a second signal: what waits for a target fails at once. */
void lg_fs_on_stop (struct lg_fs *fs, void (*fn) (void *opaque, bool now),
                    void *opaque);

/* How long, at most, a signalled mount's write-back waits for a target
 * (less where the outage budget is less). */
#define LG_FS_STOP_BUDGET_S 10

/* Adds a directory under parent (0: the root), returns its handle. */
int lg_fs_add_dir (struct lg_fs *fs, int parent, const char *name);

/* Adds a file for dev under parent; the file system closes dev at the
 * end.  -1 when full. */
int lg_fs_add_file (struct lg_fs *fs, int parent, const char *name,
                    struct lg_dev *dev);

/* Mounts at dir and serves until unmounted or signalled.  fuse_argv holds
 * libfuse's options ("-o", "allow_other", ...).  With foreground false
 * the process goes to the background after mounting; ready (if not NULL)
 * is called after that, in the process that serves, to open devices. */
int lg_fs_run (struct lg_fs *fs, const char *dir, int fuse_argc,
               char **fuse_argv, bool foreground,
               int (*ready) (struct lg_fs *fs, void *opaque), void *opaque);

/* Flushes and closes every device, frees. */
/* Flushes and closes every LUN, and frees fs: the number of LUNs whose
 * final flush or write-back failed (their data may be lost). */
int lg_fs_free (struct lg_fs *fs);

#endif
