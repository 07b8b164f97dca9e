/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Whether the gateway behind a reservation key still runs (alive.h). */
#include <config.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/alive.h"

#define MAX_MARKS 4

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
  uint64_t key;
  int fd;
  size_t len; /* of the pid line */
} marks[MAX_MARKS];
static unsigned nmarks;
static bool exit_armed;

/* uid as the parent user namespace knows it (itself outside any user
 * namespace): under unshare -Ur a user is uid 0, and may not write
 * /run. */
static uid_t
outer_uid (uid_t uid)
{
  FILE *f = fopen ("/proc/self/uid_map", "re");
  unsigned long in, out, count;
  uid_t r = uid;

  if (f == NULL)
    return uid;
  while (fscanf (f, "%lu %lu %lu", &in, &out, &count) == 3)
    if (uid >= in && uid - in < count) {
      r = (uid_t) (out + (uid - in));
      break;
    }
  fclose (f);
  return r;
}

int
lg_runtime_dir (char *buf, size_t len, bool create)
{
  const char *xdg = getenv ("XDG_RUNTIME_DIR");
  uid_t uid = outer_uid (geteuid ());
  struct stat st;
  int n;

  /* A user's gateways in and out of a user namespace share /tmp's
   * directory, named by the user's uid outside: each finds the others'
   * runtime files. */
  if (xdg && xdg[0] == '/')
    n = snprintf (buf, len, "%s/lungate", xdg);
  else if (uid == 0)
    n = snprintf (buf, len, "/run/lungate");
  else
    n = snprintf (buf, len, "/tmp/lungate-%u", (unsigned) uid);
  if (n < 0 || (size_t) n >= len) {
    errno = ENAMETOOLONG;
    return -1;
  }
  if (create && mkdir (buf, 0700) < 0 && errno != EEXIST)
    return -1;
  if (lstat (buf, &st) < 0)
    return -1;
  if (!S_ISDIR (st.st_mode) || st.st_uid != geteuid ()
      || (st.st_mode & 022) != 0) {
    errno = EPERM; /* somebody else's: not trusted */
    return -1;
  }
  return 0;
}

static int
key_path (uint64_t key, char *buf, size_t len, bool create)
{
  char dir[4096 - 40];
  int n;

  if (lg_runtime_dir (dir, sizeof dir, create) < 0)
    return -1;
  n = snprintf (buf, len, "%s/lungate-%016" PRIx64 ".alive", dir, key);
  if (n < 0 || (size_t) n >= len) {
    errno = ENAMETOOLONG;
    return -1;
  }
  return 0;
}

/* A clean exit removes its files (a process that keeps a LUN it could
 * not release keeps them: lg_alive_keep). */
static bool keep;

void
lg_alive_exit (void)
{
  char path[4096];

  pthread_mutex_lock (&lock);
  for (unsigned i = 0; i < nmarks; i++) {
    if (!keep && key_path (marks[i].key, path, sizeof path, false) == 0)
      unlink (path);
    close (marks[i].fd);
  }
  nmarks = 0;
  pthread_mutex_unlock (&lock);
}

void
lg_alive_keep (void)
{
  pthread_mutex_lock (&lock);
  keep = true;
  pthread_mutex_unlock (&lock);
}

int
lg_alive_mark (uint64_t key)
{
  char path[4096], pid[32];
  int fd, ret = -1, e;

  pthread_mutex_lock (&lock);
  for (unsigned i = 0; i < nmarks; i++)
    if (marks[i].key == key) {
      ret = 0;
      goto out;
    }
  if (nmarks == MAX_MARKS) {
    errno = ENOSPC;
    goto out;
  }
  if (key_path (key, path, sizeof path, true) < 0)
    goto out;
  fd = open (path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0)
    goto out;
  /* Held by a live process: another gateway has this very key. */
  if (flock (fd, LOCK_EX | LOCK_NB) < 0 || ftruncate (fd, 0) < 0) {
    e = errno;
    close (fd);
    errno = e;
    goto out;
  }
  snprintf (pid, sizeof pid, "%ld\n", (long) getpid ());
  if (write (fd, pid, strlen (pid)) < 0) {
    e = errno;
    close (fd);
    errno = e;
    goto out;
  }
  marks[nmarks].key = key;
  marks[nmarks].fd = fd;
  marks[nmarks].len = strlen (pid);
  nmarks++;
  if (!exit_armed)
    exit_armed = atexit (lg_alive_exit) == 0;
  ret = 0;
out:
  pthread_mutex_unlock (&lock);
  return ret;
}

int
lg_alive_dead (uint64_t key, pid_t *pid)
{
  char path[4096], buf[32];
  ssize_t n;
  int fd, ret;

  *pid = 0;
  if (key_path (key, path, sizeof path, false) < 0)
    return -1;
  fd = open (path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0)
    return -1;
  if (flock (fd, LOCK_SH | LOCK_NB) == 0)
    ret = 1;
  else
    ret = errno == EWOULDBLOCK ? 0 : -1;
  n = pread (fd, buf, sizeof buf - 1, 0);
  if (n > 0) {
    buf[n] = '\0';
    *pid = (pid_t) strtol (buf, NULL, 10);
  }
  close (fd);
  return ret;
}

void
lg_alive_closing (void)
{
  static const char line[] = "closing\n";

  pthread_mutex_lock (&lock);
  for (unsigned i = 0; i < nmarks; i++)
    if (pwrite (marks[i].fd, line, sizeof line - 1, (off_t) marks[i].len) < 0)
      continue; /* only a shorter wait for the next gateway */
  pthread_mutex_unlock (&lock);
}

bool
lg_alive_is_closing (uint64_t key)
{
  char path[4096], buf[64];
  ssize_t n;
  int fd;

  if (key_path (key, path, sizeof path, false) < 0)
    return false;
  fd = open (path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0)
    return false;
  n = pread (fd, buf, sizeof buf - 1, 0);
  close (fd);
  if (n <= 0)
    return false;
  buf[n] = '\0';
  return strstr (buf, "\nclosing\n") != NULL;
}

bool
lg_alive_pid_holds (uint64_t key, pid_t pid)
{
  char path[4096], real[PATH_MAX], dir[64], link[64], got[PATH_MAX];
  struct dirent *e;
  bool found = false;
  DIR *d;

  if (pid <= 0 || key_path (key, path, sizeof path, false) < 0
      || realpath (path, real) == NULL)
    return false;
  snprintf (dir, sizeof dir, "/proc/%ld/fd", (long) pid);
  if ((d = opendir (dir)) == NULL)
    return false;
  while (!found && (e = readdir (d)) != NULL) {
    ssize_t n;

    if (e->d_name[0] == '.')
      continue;
    snprintf (link, sizeof link, "%s/%.16s", dir, e->d_name);
    n = readlink (link, got, sizeof got - 1);
    if (n > 0) {
      got[n] = '\0';
      found = strcmp (got, real) == 0;
    }
  }
  closedir (d);
  return found;
}

static int
failed_path (pid_t pid, char *path, size_t len, bool create)
{
  char dir[4096];

  if (lg_runtime_dir (dir, sizeof dir, create) < 0)
    return -1;
  if ((size_t) snprintf (path, len, "%s/lungate-mount-%ld.failed", dir,
                         (long) pid)
      >= len) {
    errno = ENAMETOOLONG;
    return -1;
  }
  return 0;
}

int
lg_alive_failed_write (const char *why)
{
  char path[4200];
  FILE *f;
  int fd;

  if (failed_path (getpid (), path, sizeof path, true) < 0)
    return -1;
  fd = open (path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0 || (f = fdopen (fd, "w")) == NULL) {
    if (fd >= 0)
      close (fd);
    return -1;
  }
  fprintf (f, "%s\n", why);
  return fclose (f) == 0 ? 0 : -1;
}

int
lg_alive_failed_take (pid_t pid, char *why, size_t len)
{
  char path[4200];
  FILE *f;
  int fd;

  if (failed_path (pid, path, sizeof path, false) < 0)
    return -1;
  if ((fd = open (path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)) < 0)
    return errno == ENOENT ? 0 : -1;
  if ((f = fdopen (fd, "r")) == NULL) {
    close (fd);
    return -1;
  }
  if (fgets (why, (int) len, f) == NULL)
    why[0] = '\0';
  why[strcspn (why, "\n")] = '\0';
  fclose (f);
  unlink (path);
  return 1;
}
