/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The mount's hidden .stats file (fs-int.h): a text made at each open,
 * kept by a number of its own until the release.  Threads: libfuse's
 * workers; stats_lock is a leaf lock. */
#include <config.h>

#define FUSE_USE_VERSION 312
#include <fuse_lowlevel.h>

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "fuse/fs-int.h"

char *
lg_fs_stats_text (const struct lg_fs *fs, size_t *len)
{
  char *buf = NULL;
  size_t sz = 0;
  FILE *f = open_memstream (&buf, &sz);

  if (f == NULL)
    return NULL;
  fprintf (f, "# lungate mount statistics: one line per LUN, key=value\n");
  fprintf (f, "# mount pid=%d mounted=%lld\n", (int) getpid (),
           (long long) fs->mounted);
  fprintf (f, "# log %s\n", fs->o.log_name[0] ? fs->o.log_name : "none");
  for (int i = 0; i < fs->n; i++) {
    const struct node *nd = &fs->nodes[i];
    char path[600] = "";

    if (nd->dev == NULL)
      continue;
    if (nd->parent > 0)
      snprintf (path, sizeof path, "%s/", fs->nodes[nd->parent].name);
    fprintf (f, "file=%s%s lun=%s size=%" PRIu64 " ", path, nd->name,
             nd->dev->name, (uint64_t) lg_dev_size (nd->dev));
    lg_dev_stats_print (nd->dev, f);
    fputc ('\n', f);
  }
  fclose (f);
  *len = sz;
  return buf;
}

/* The text each open of .stats got, by a number of its own in fi->fh,
 * never a pointer: libfuse may run a READ after the RELEASE of its file
 * on another thread (a reader killed during the read), and a READ that
 * finds its number gone reads nothing (AddressSanitizer found fs_read
 * replying from a buffer fs_release had freed).  The lock is held while
 * a read replies: the texts are small. */
struct stats_fh {
  uint64_t id;
  char *text;
  size_t len;
};
static pthread_mutex_t stats_lock = PTHREAD_MUTEX_INITIALIZER;
static struct stats_fh *stats_open;
static size_t nstats_open, stats_cap;
static uint64_t stats_next_id = 1;

/* A new open: its number, or 0 when out of memory. */
uint64_t
lg_fs_stats_add (char *text, size_t len)
{
  uint64_t id = 0;

  pthread_mutex_lock (&stats_lock);
  if (nstats_open == stats_cap) {
    size_t cap = stats_cap ? 2 * stats_cap : 8;
    struct stats_fh *a = realloc (stats_open, cap * sizeof *a);

    if (a == NULL)
      goto out;
    stats_open = a;
    stats_cap = cap;
  }
  id = stats_next_id++;
  stats_open[nstats_open++] = (struct stats_fh){ id, text, len };
out:
  pthread_mutex_unlock (&stats_lock);
  return id;
}

void
lg_fs_stats_remove (uint64_t id)
{
  pthread_mutex_lock (&stats_lock);
  for (size_t i = 0; i < nstats_open; i++)
    if (stats_open[i].id == id) {
      free (stats_open[i].text);
      stats_open[i] = stats_open[--nstats_open];
      break;
    }
  pthread_mutex_unlock (&stats_lock);
}

void
lg_fs_stats_read (fuse_req_t req, uint64_t id, size_t size, off_t off)
{
  const struct stats_fh *s = NULL;

  pthread_mutex_lock (&stats_lock);
  for (size_t i = 0; i < nstats_open && s == NULL; i++)
    if (stats_open[i].id == id)
      s = &stats_open[i];
  if (s == NULL || off < 0 || (size_t) off >= s->len)
    fuse_reply_buf (req, NULL, 0);
  else
    fuse_reply_buf (req, s->text + off,
                    size < s->len - (size_t) off ? size
                                                 : s->len - (size_t) off);
  pthread_mutex_unlock (&stats_lock);
}
