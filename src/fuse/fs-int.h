/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The mount's parts, inside src/fuse: the tree and its requests (fs.c),
 * the .stats file (stats.c), and how it runs: the background, the
 * session's loop, signals (run.c). */
#ifndef LG_FS_INT_H
#define LG_FS_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include "dev/dev.h"
#include "fuse/fs.h"

#define MAX_NODES 1024

/* An open LUN file: the possible losses it was told of. */
struct ofile {
  struct ofile *prev, *next;
  atomic_uint_fast64_t seen;
};
#define STATS_NAME ".stats"
#define LG_FS_PROBE_PREFIX ".lungate-probe-"

/* The allocation count of a file (fs->alloc_lock). */
struct alloc {
  bool known;                 /* bytes holds a complete count */
  bool walking;               /* a worker walks the extents now */
  uint64_t bytes;             /* allocated bytes, at the last complete walk */
  uint64_t counted_us;        /* when that walk started */
  uint64_t gen;               /* writes_gen when that walk started */
  uint64_t cursor;            /* where an unfinished walk goes on; 0: none */
  uint64_t partial;           /* allocated bytes below cursor */
  uint64_t walk_us, walk_gen; /* the unfinished walk's start */
};

struct node {
  int parent; /* index, -1 for the root */
  char name[256];
  bool dir;
  struct lg_dev *dev; /* files; counters in dev->stats */
  /* Writes, trims and zeroes completed: a count older than that is stale. */
  atomic_uint_fast64_t writes_gen;
  struct alloc alloc;
  /* Its write-back before unmounting failed (run.c sync_files). */
  atomic_bool stop_failed;
  /* The failed buffered writes (lg_dev_wb_failures) some open file was
   * told of: a file opened later hears of those nobody was told of (a
   * write-back that failed after the last close), as the kernel reports
   * an unseen write-back error to the next opener. */
  atomic_uint_fast64_t told_wb;
  /* The last bytes past the LUN's end that were refused (past_end),
   * under alloc_lock. */
  uint64_t past_off;
  size_t past_len;
  uint8_t past_hash[16];
};

struct lg_fs {
  struct lg_fs_opts o;
  int n;
  struct node nodes[MAX_NODES];
  int stats; /* index of .stats */
  time_t mounted;
  pthread_mutex_t alloc_lock; /* every node's alloc; a leaf lock */
  /* The open LUN files (fi->fh): what each was told (fs_fsync), freed at
   * its release or, for those still open at the end, by lg_fs_free. */
  struct ofile *ofiles;
  pthread_mutex_t ofile_lock; /* ofiles; a leaf lock */
  /* Whole-block requests started and not yet answered (areq_done): the
   * session is not destroyed, nor a device closed, while any is. */
  atomic_uint inflight;
  void (*on_stop) (void *opaque, bool now); /* lg_fs_on_stop */
  void *stop_opaque;
  struct fuse_session *se;
  const char *dir;    /* the mount point, for syncfs at a signal */
  pthread_t main_tid; /* in fuse_session_loop_mt */
  atomic_bool serving, stopped, abandoned; /* stop_once */
  /* Whether the path reaches the mount (run.c's reaches_us): the last
   * probe name's number fs_lookup saw; the path did not reach it at a
   * signal; another signal came since; the loop may end with an
   * unmount by the path. */
  atomic_uint_fast64_t probe_seen;
  atomic_bool detached, again, unmount_ok;
  atomic_bool writing_back; /* the path reached it: writing back now */
  /* The final phase's signal watcher (lg_fs_end_signals). */
  pthread_t final;
  bool final_on;
  atomic_bool finished;
  uint64_t mnt_id, mnt_dev; /* our mount's id (0: not known), its device */
  struct probe *probe_out;  /* the last lookup (run.c), maybe stuck */
};

/* The FUSE operations, serving fs from now on. */
const struct fuse_lowlevel_ops *lg_fs_ops_for (struct lg_fs *fs);

/* .stats: a new text for an open (NULL when out of memory); its number
 * (0 when out of memory); a read; the release. */
char *lg_fs_stats_text (const struct lg_fs *fs, size_t *len);
uint64_t lg_fs_stats_add (char *text, size_t len);
void lg_fs_stats_read (fuse_req_t req, uint64_t id, size_t size, off_t off);
/* The final flushes are done (lg_fs_free): the signal watcher that
 * lg_fs_run left for them ends, and signals take their default action. */
void lg_fs_end_signals (struct lg_fs *fs);
void lg_fs_stats_remove (uint64_t id);

#endif
