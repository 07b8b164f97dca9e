/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* How the mount runs (lg_fs_run): into the background, the FUSE session
 * and its loop, and what a signal or an unmount does while it serves.
 * Threads: the main thread runs the loop; one watcher thread takes the
 * signals and the end of the session (watch_exit). */
#include <config.h>

#define FUSE_USE_VERSION 312
#include <fuse_lowlevel.h>

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/nsfs.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include <sodium.h>

#include "fuse/fs-int.h"
#include "fuse/fs.h"
#include "util/alive.h"
#include "util/log.h"

/* Waits for the requests still in flight below (a write waiting for its
 * target, within the outage budget): their answers go to this session and
 * use the devices, so both must outlive them. */
static void
drain (struct lg_fs *fs)
{
  bool said = false;

  for (unsigned ms = 0; atomic_load (&fs->inflight) > 0; ms += 10) {
    if (ms == 1000 && !said) {
      lg_warn ("unmounting: waiting for %u requests in flight",
               atomic_load (&fs->inflight));
      said = true;
    }
    usleep (10 * 1000);
  }
}

/* The file system stops serving: what still waits for a target waits at
 * most the stop budget (on_stop false: the final flush then survives a
 * link that stalls for a moment); now (a second signal): it fails at
 * once. */
static void
stop_once (struct lg_fs *fs, bool now)
{
  if (fs->on_stop == NULL)
    return;
  if (now ? !atomic_exchange (&fs->abandoned, true)
          : !atomic_exchange (&fs->stopped, true))
    fs->on_stop (fs->stop_opaque, now);
}

/* ---- signals while serving ----
 *
 * libfuse's own handlers end the session at once, and the kernel then
 * drops the dirty pages of the writeback cache: writes that write(2) had
 * returned for were lost.  While the loop runs, SIGTERM, SIGINT and
 * SIGHUP come here instead (a pipe to a thread): on_stop first (what
 * waits for a target that is gone fails now), then syncfs on the mount
 * point, which the loop still serves, and only then the end of the
 * session.  The loop's main thread is woken with SIGUSR2. */
static int sig_pipe[2] = { -1, -1 };

static void
on_signal (int sig)
{
  unsigned char c = (unsigned char) sig;
  int saved = errno;

  if (write (sig_pipe[1], &c, 1) < 0) {
    /* Nothing to do in a signal handler. */
  }
  errno = saved;
}

static void
on_wake (int sig)
{
  (void) sig; /* interrupts the loop's sem_wait */
}

static void
set_handlers (bool ours)
{
  static const int sigs[] = { SIGTERM, SIGINT, SIGHUP };
  struct sigaction sa;

  memset (&sa, 0, sizeof sa);
  sigemptyset (&sa.sa_mask);
  sa.sa_handler = ours ? on_signal : SIG_DFL;
  for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
    sigaction (sigs[i], &sa, NULL);
  sa.sa_handler = on_wake;
  sigaction (SIGUSR2, &sa, NULL);
  /* A log on a pipe whose reader left (--log stderr | logger) loses its
   * lines, not the mount (libfuse's own handlers, removed above, ignored
   * SIGPIPE too). */
  sa.sa_handler = SIG_IGN;
  sigaction (SIGPIPE, &sa, NULL);
}

/* The path of node i relative to the mount point ("lun1",
 * "TARGET/lun1"). */
static void
node_path (const struct lg_fs *fs, int i, char *buf, size_t len)
{
  int p = fs->nodes[i].parent;

  if (p < 0 || fs->nodes[p].parent < 0) {
    snprintf (buf, len, "%s", fs->nodes[i].name);
    return;
  }
  node_path (fs, p, buf, len);
  snprintf (buf + strlen (buf), len - strlen (buf), "/%s", fs->nodes[i].name);
}

/* fsync of every file through the mount: the kernel writes the dirty
 * pages of the writeback cache to us (syncfs does not wait for FUSE's).
 * Opened relative to dfd, our root as reaches_us found it: a mount made
 * over the path meanwhile is not written into, and the path may be near
 * PATH_MAX. */
static void
sync_files (struct lg_fs *fs, int dfd)
{
  char path[4200];

  for (int i = 0; i < fs->n; i++) {
    int fd;

    if (fs->nodes[i].dev == NULL)
      continue;
    node_path (fs, i, path, sizeof path);
    fd = openat (dfd, path,
                 (fs->o.read_only ? O_RDONLY : O_WRONLY) | O_CLOEXEC);
    if (fd < 0 || fsync (fd) < 0) {
      lg_error ("%s: %s: writing back before unmounting: %m",
                fs->nodes[i].dev->name, path);
      atomic_store (&fs->nodes[i].stop_failed, true);
    }
    if (fd >= 0)
      close (fd);
  }
}

/* ---- whether the path still reaches this mount ----
 *
 * Known for sure by a lookup of a name nobody else can guess
 * (LG_FS_PROBE_PREFIX and a random number), through the path: only this
 * session sees it (fs_lookup notes it), and only while the path leads
 * here: not after a lazy unmount (fusermount3 -uz, umount -l), nor with
 * any other mount over this one or over a directory above it.  The
 * lookup runs on a thread of its own, as the path may lead to a mount
 * that does not answer; no answer within PROBE_MS counts as "not here"
 * (asked again later), and no new lookup starts while one is stuck.
 * Mostly the id alone answers, at once, even while every worker waits for
 * the target: the id of the mount the path reaches (statx, which asks no
 * file system), against ours, read just after mounting (lg_fs_run; a
 * mount made over it in that instant would be taken for ours) or proved
 * by a lookup where it could not be read then. */
#define PROBE_MS 3000

struct probe {
  atomic_int refs; /* the asker and the thread */
  atomic_bool done;
  int dfd; /* the thread's own, closed once it looked */
  char name[64];
};

static void
probe_put (struct probe *p)
{
  if (atomic_fetch_sub (&p->refs, 1) == 1)
    free (p);
}

static void *
probe_run (void *arg)
{
  struct probe *p = arg;
  struct stat st;

  if (fstatat (p->dfd, p->name, &st, AT_SYMLINK_NOFOLLOW) == 0) {
    /* Nothing is ever there. */
  }
  /* At once: a descriptor of our root would keep a lazily unmounted
   * mount alive after its last file is closed. */
  close (p->dfd);
  atomic_store (&p->done, true);
  probe_put (p);
  return NULL;
}

#ifndef STATX_MNT_ID_UNIQUE
#define STATX_MNT_ID_UNIQUE 0x00004000U /* Linux 6.8 */
#endif

/* The id of the mount dfd is on, 0 when not known, and in *dev the
 * device of its file system.  The id is never reused where the kernel
 * has unique ids (6.8 on); an older kernel's is, lowest free first (a
 * tmpfs mounted after a lazy unmount gets ours), but the device of a
 * file system is not while it lives, and ours lives while anything
 * holds it: both must match (helper-27). */
static uint64_t
mnt_id_of (int dfd, uint64_t *dev)
{
  struct statx stx;
  const int fl = AT_EMPTY_PATH | AT_STATX_DONT_SYNC;

  if (statx (dfd, "", fl, STATX_MNT_ID_UNIQUE, &stx) != 0
      || !(stx.stx_mask & STATX_MNT_ID_UNIQUE)) {
    if (statx (dfd, "", fl, STATX_MNT_ID, &stx) != 0
        || !(stx.stx_mask & STATX_MNT_ID))
      return 0;
  }
  *dev = makedev (stx.stx_dev_major, stx.stx_dev_minor);
  return stx.stx_mnt_id;
}

/* The lookup through dfd: true when this session saw it. */
static bool
probe (struct lg_fs *fs, int dfd)
{
  struct probe *p = fs->probe_out;
  pthread_attr_t attr;
  pthread_t t;
  uint64_t tok;
  bool started, seen = false;

  if (p != NULL) {
    if (!atomic_load (&p->done))
      return false; /* the last one is stuck: not here, for now */
    probe_put (p);
    fs->probe_out = NULL;
  }
  p = calloc (1, sizeof *p);
  if (p == NULL || (p->dfd = fcntl (dfd, F_DUPFD_CLOEXEC, 0)) < 0) {
    free (p);
    return false;
  }
  do
    randombytes_buf (&tok, sizeof tok);
  while (tok == 0);
  atomic_init (&p->refs, 2);
  snprintf (p->name, sizeof p->name, "%s%" PRIu64, LG_FS_PROBE_PREFIX, tok);
  pthread_attr_init (&attr);
  pthread_attr_setdetachstate (&attr, PTHREAD_CREATE_DETACHED);
  started = pthread_create (&t, &attr, probe_run, p) == 0;
  pthread_attr_destroy (&attr);
  if (!started) {
    close (p->dfd);
    free (p);
    return false;
  }
  for (unsigned ms = 0; ms < PROBE_MS; ms += 5) {
    bool done = atomic_load (&p->done);

    seen = atomic_load (&fs->probe_seen) == tok;
    if (seen || done)
      break;
    usleep (5 * 1000);
  }
  fs->probe_out = p; /* released at the next probe, or at the end */
  return seen;
}

/* An O_PATH descriptor of this mount's root, reached by the path now,
 * or -1 when the path does not reach it. */
static int
reaches_us (struct lg_fs *fs)
{
  int dfd = open (fs->dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
  uint64_t id, dev = 0;
  bool ours;

  if (dfd < 0)
    return -1;
  id = mnt_id_of (dfd, &dev);
  if (fs->mnt_id != 0 && id != 0)
    ours = id == fs->mnt_id && dev == fs->mnt_dev;
  else if ((ours = probe (fs, dfd)) && id != 0) {
    fs->mnt_id = id;
    fs->mnt_dev = dev;
  }
  if (!ours) {
    close (dfd);
    return -1;
  }
  return dfd;
}

/* Whether the path reaches the mount now, asking no file system: false
 * only when known not to. */
static bool
still_ours (const struct lg_fs *fs)
{
  int dfd;
  uint64_t id, dev = 0;

  if (fs->mnt_id == 0)
    return true;
  if ((dfd = open (fs->dir, O_PATH | O_DIRECTORY | O_CLOEXEC)) < 0)
    return false;
  id = mnt_id_of (dfd, &dev);
  close (dfd);
  return id == 0 || (id == fs->mnt_id && dev == fs->mnt_dev);
}

/* Ends the loop, from a thread other than the loop's. */
static void
end_loop (struct lg_fs *fs)
{
  fuse_session_exit (fs->se);
  pthread_kill (fs->main_tid, SIGUSR2);
}

/* While the path does not reach the mount: serve on (what is still open
 * through it can be written back only by the kernel, at its last close,
 * which ends the session by itself), and ask again every second, and at
 * once on another signal.  The root's descriptor once the path reaches
 * it again; -1 when the session ended, or another signal stopped it
 * while the path still did not. */
static int
wait_reachable (struct lg_fs *fs)
{
  bool said = false;
  int dfd;

  while ((dfd = reaches_us (fs)) < 0) {
    atomic_store (&fs->detached, true);
    if (!said)
      lg_warn ("%s: the mount was detached (a lazy unmount), or another "
               "mount covers it: files still open through it are served "
               "until the last one is closed, and the mount stops by itself "
               "once uncovered (another signal stops now: what they have "
               "not written back is lost, and a covered mount stays, for "
               "fusermount3 -u once it is uncovered)",
               fs->dir);
    said = true;
    for (int i = 0; i < 10 && !atomic_load (&fs->again); i++) {
      if (!atomic_load (&fs->serving) || fuse_session_exited (fs->se))
        return -1;
      usleep (100 * 1000);
    }
    if (atomic_exchange (&fs->again, false) && (dfd = reaches_us (fs)) < 0) {
      lg_warn ("%s: signalled again while detached or covered: stopping "
               "now; what files still open have not written back is lost",
               fs->dir);
      atomic_store (&fs->unmount_ok, false);
      stop_once (fs, true);
      end_loop (fs);
      return -1;
    }
    if (dfd >= 0)
      break;
  }
  if (said)
    lg_info ("%s: the path reaches the mount again: writing back, then "
             "unmounting",
             fs->dir);
  atomic_store (&fs->detached, false);
  return dfd;
}

/* The first signal: write back what is cached, waiting for the target
 * as any request does (a slow target is no reason to lose what write(2)
 * returned for), but no longer than LG_FS_STOP_BUDGET_S for a target
 * that does not answer; then end the session.  Only through a path that
 * reaches this mount (wait_reachable). */
static void *
sync_and_exit (void *arg)
{
  struct lg_fs *fs = arg;
  int dfd = wait_reachable (fs);

  if (dfd < 0)
    return NULL;
  atomic_store (&fs->writing_back, true);
  /* A signal that came while the path was asked about is a second one. */
  if (atomic_exchange (&fs->again, false)) {
    lg_warn ("%s: second signal: no longer waiting for the target; what "
             "is not written back yet is lost",
             fs->dir);
    stop_once (fs, true);
  }
  /* Only now the shorter budget of a stop (on_stop): a detached mount
   * serves on with its own. */
  if (fs->on_stop)
    fs->on_stop (fs->stop_opaque, false);
  if (!fs->o.read_only)
    sync_files (fs, dfd);
  close (dfd);
  /* Covered during the write-back (it went through our root all the
   * same): the unmount by the path would take the cover. */
  if (!still_ours (fs))
    atomic_store (&fs->unmount_ok, false);
  stop_once (fs, false);
  end_loop (fs);
  return NULL;
}

/* After the loop: a signal while the final flushes wait for the target
 * stops the waiting (on_stop now), as a second signal does. */
static void *
watch_final (void *arg)
{
  struct lg_fs *fs = arg;
  struct pollfd pfd = { .fd = sig_pipe[0], .events = POLLIN };

  while (!atomic_load (&fs->finished)) {
    unsigned char c;

    if (poll (&pfd, 1, 100) <= 0 || read (sig_pipe[0], &c, 1) != 1 || c == 0)
      continue;
    lg_warn ("%s: signalled (SIG%s) during the final flush: no longer "
             "waiting for the target; what is not flushed yet may be lost",
             fs->dir ? fs->dir : "the mount", sigabbrev_np (c));
    stop_once (fs, true);
  }
  return NULL;
}

void
lg_fs_end_signals (struct lg_fs *fs)
{
  if (sig_pipe[0] < 0)
    return;
  atomic_store (&fs->finished, true);
  if (fs->final_on)
    pthread_join (fs->final, NULL);
  fs->final_on = false;
  set_handlers (false);
  close (sig_pipe[0]);
  close (sig_pipe[1]);
  sig_pipe[0] = sig_pipe[1] = -1;
}

/* The signal thread; it also notices the session ending otherwise (an
 * unmount) and runs on_stop then, since libfuse's loop returns only once
 * its workers are done, and a worker may wait for a target that is gone.
 * A second signal while the first writes back gives up on the target
 * (on_stop): what still waits fails, and is logged as lost. */
static void *
watch_exit (void *arg)
{
  struct lg_fs *fs = arg;
  struct pollfd pfd = { .fd = sig_pipe[0], .events = POLLIN };
  pthread_t syncer;
  bool syncing = false;
  while (atomic_load (&fs->serving)) {
    unsigned char c;

    if (fuse_session_exited (fs->se)) {
      stop_once (fs, false);
      break;
    }
    if (poll (&pfd, 1, 100) <= 0 || read (sig_pipe[0], &c, 1) != 1 || c == 0)
      continue;
    if (syncing && !atomic_load (&fs->writing_back)) {
      atomic_store (&fs->again, true); /* wait_reachable asks again */
      continue;
    }
    if (syncing) {
      lg_warn ("%s: second signal (SIG%s): no longer waiting for the "
               "target; what is not written back yet is lost",
               fs->dir, sigabbrev_np (c));
      stop_once (fs, true);
      continue;
    }
    lg_info ("%s: signalled (SIG%s): writing back what is cached, then "
             "unmounting (a second signal stops waiting for the target)",
             fs->dir, sigabbrev_np (c));
    syncing = pthread_create (&syncer, NULL, sync_and_exit, fs) == 0;
    if (!syncing) {
      sync_and_exit (fs);
      break;
    }
  }
  if (syncing)
    pthread_join (syncer, NULL);
  return NULL;
}

/* Into the background (instead of fuse_daemonize, which lets the parent
 * exit before the devices are open): the parent waits until the child says it serves
 * (a byte 0 on the pipe) and exits 0, or exits 1 when the child fails
 * before (it said why on the shared stderr).  The child returns the
 * pipe's write end. */
static int
background (void)
{
  int fds[2];
  pid_t pid;
  char c = 1;

  if (pipe (fds) < 0) {
    lg_error ("pipe: %m");
    return -1;
  }
  pid = fork ();
  if (pid < 0) {
    lg_error ("fork: %m");
    return -1;
  }
  if (pid > 0) {
    close (fds[1]);
    while (read (fds[0], &c, 1) < 0 && errno == EINTR)
      ;
    _exit (c == 0 ? 0 : 1);
  }
  close (fds[0]);
  setsid ();
  return fds[1];
}

/* The child serves: tell the parent, and leave the terminal; messages
 * go to the log chosen (--log) from here on. */
static void
served (struct lg_fs *fs, int fd)
{
  char c = 0;
  int null = open ("/dev/null", O_RDWR);

  if (fs->o.log_syslog)
    lg_log_to_syslog ();
  else if (fs->o.log_fd >= 0)
    lg_log_stamp (true);
  if (write (fd, &c, 1) != 1)
    lg_debug ("telling the parent: %m");
  close (fd);
  if (null >= 0) {
    dup2 (null, 0);
    dup2 (null, 1);
    dup2 (fs->o.log_fd >= 0 ? fs->o.log_fd : null, 2);
    if (null > 2)
      close (null);
  }
  if (chdir ("/") < 0)
    lg_debug ("chdir /: %m");
}

/* /etc/fuse.conf lets users mount with allow_other: 1 yes, 0 no, -1 it
 * cannot be read.  Read as fusermount3 reads it: a line cut at '#',
 * blanks trimmed, then the whole of it the option's name. */
static int
user_allow_other (void)
{
  FILE *f = fopen ("/etc/fuse.conf", "re");
  char *line = NULL;
  size_t cap = 0;
  int yes = 0;

  if (f == NULL)
    return errno == ENOENT ? 0 : -1;
  while (!yes && getline (&line, &cap, f) >= 0) {
    char *p = line, *end;

    p[strcspn (p, "#")] = '\0';
    while (isspace ((unsigned char) *p))
      p++;
    end = p + strlen (p);
    while (end > p && isspace ((unsigned char) end[-1]))
      *--end = '\0';
    yes = strcmp (p, "user_allow_other") == 0;
  }
  free (line);
  fclose (f);
  return yes;
}

/* Root of a user namespace whose mount namespace belongs to another user
 * namespace (unshare -Ur without -m): it may not mount. */
static bool
foreign_mount_ns (void)
{
  struct stat mine, owner;
  int fd, ufd;
  bool foreign = false;

  if (geteuid () != 0 || stat ("/proc/self/ns/user", &mine) < 0)
    return false;
  fd = open ("/proc/self/ns/mnt", O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return false;
  /* EPERM: the owner is an ancestor of this user namespace, out of its
   * scope: not this one. */
  ufd = ioctl (fd, NS_GET_USERNS);
  if (ufd >= 0) {
    foreign = fstat (ufd, &owner) == 0 && owner.st_ino != mine.st_ino;
    close (ufd);
  }
  else
    foreign = errno == EPERM;
  close (fd);
  return foreign;
}

/* -o allow_other among the options (a word of its own: an fsname may
 * hold the letters). */
static bool
allow_other (int argc, char **argv)
{
  for (int i = 1; i < argc; i++) {
    const char *o = argv[i];
    size_t n;

    if (strcmp (argv[i - 1], "-o") != 0)
      continue;
    for (; *o; o += n + (o[n] == ',')) {
      n = strcspn (o, ",");
      if (n == 11 && strncmp (o, "allow_other", 11) == 0)
        return true;
    }
  }
  return false;
}

/* Why a FUSE mount failed, as far as can be told from here. */
static void
mount_failed (const char *dir, bool allow_other)
{
  struct stat st;
  int fd = open ("/dev/fuse", O_RDWR | O_CLOEXEC), err = errno;

  if (fd < 0 && err == ENOENT)
    lg_error ("%s: cannot mount: there is no /dev/fuse (load the fuse "
              "module, or give the container the device)",
              dir);
  else if (fd < 0 && stat ("/dev/fuse", &st) == 0)
    lg_error ("%s: cannot mount: /dev/fuse: %s (mode %04o, owner uid %u): "
              "this user may not use FUSE; root can make it mode 0666, "
              "as usual",
              dir, strerror (err), (unsigned) (st.st_mode & 07777),
              (unsigned) st.st_uid);
  else if (fd < 0)
    lg_error ("%s: cannot mount: /dev/fuse: %s", dir, strerror (err));
  else if (foreign_mount_ns ())
    lg_error ("%s: cannot mount: this user namespace has no mount "
              "namespace of its own (unshare -Urm, with -m)",
              dir);
  else if (allow_other && geteuid () != 0 && user_allow_other () == 0)
    lg_error ("%s: cannot mount: -o allow_other needs user_allow_other in "
              "/etc/fuse.conf (root adds it), or mount without it",
              dir);
  else
    lg_error ("%s: cannot mount (see above; is fusermount3 installed "
              "and set-user-ID root?)",
              dir);
  if (fd >= 0)
    close (fd);
}

int
lg_fs_run (struct lg_fs *fs, const char *dir, int fuse_argc, char **fuse_argv,
           bool foreground, int (*ready) (struct lg_fs *, void *), void *opaque)
{
  int bg = -1;
  struct fuse_args args = FUSE_ARGS_INIT (fuse_argc, fuse_argv);
  struct fuse_session *se;
  struct fuse_loop_config *cfg;
  pthread_t watch;
  bool watching;
  int r = -1;

  fs->mounted = time (NULL);
  atomic_store (&fs->unmount_ok, true);
  if (!foreground && (bg = background ()) < 0)
    return -1;
  se = fuse_session_new (&args, lg_fs_ops_for (fs),
                         sizeof (struct fuse_lowlevel_ops), NULL);
  if (se == NULL) {
    lg_error ("cannot start a FUSE session (bad -o option?)");
    return -1;
  }
  if (fuse_session_mount (se, dir) != 0) {
    mount_failed (dir, allow_other (fuse_argc, fuse_argv));
    goto out_destroy;
  }
  /* Our mount's id (reaches_us), from the path just mounted: no request
   * to any file system (nothing serves ours yet), and no descriptor kept
   * (it would make an unmount busy).  Unknown (0): the lookup decides. */
  {
    int dfd = open (dir, O_PATH | O_DIRECTORY | O_CLOEXEC);

    if (dfd >= 0) {
      fs->mnt_id = mnt_id_of (dfd, &fs->mnt_dev);
      close (dfd);
    }
  }
  /* The handlers first: a signal while ready() waits (a claim waits for
   * a holder that is closing) unmounts, rather than leaving the mount
   * with nobody serving it. */
  if (fuse_set_signal_handlers (se) != 0)
    goto out_unmount;
  if ((ready && ready (fs, opaque) < 0) || fuse_session_exited (se)) {
    fuse_remove_signal_handlers (se);
    goto out_unmount;
  }
  if (bg >= 0)
    served (fs, bg);
  fs->se = se;
  fs->dir = dir;
  fs->main_tid = pthread_self ();
  atomic_store (&fs->serving, true);
  watching = pipe2 (sig_pipe, O_CLOEXEC | O_NONBLOCK) == 0
      && pthread_create (&watch, NULL, watch_exit, fs) == 0;
  if (watching) {
    fuse_remove_signal_handlers (se);
    set_handlers (true);
  }
  cfg = fuse_loop_cfg_create ();
  fuse_loop_cfg_set_max_threads (cfg, 64);
  fuse_loop_cfg_set_idle_threads (cfg, 64);
  r = fuse_session_loop_mt (se, cfg);
  /* libfuse reports the signal that ended the loop: that is a clean
   * stop. */
  r = (r == 0 || r == SIGTERM || r == SIGINT || r == SIGHUP) ? 0 : -1;
  atomic_store (&fs->serving, false);
  /* The next mount of these LUNs waits for their release (reserve.c). */
  lg_alive_closing ();
  if (watching) {
    pthread_join (watch, NULL);
    /* Until lg_fs_free's final flushes are done (lg_fs_end_signals), a
     * signal gives up on the target instead of killing the daemon with
     * nothing said. */
    fs->final_on = pthread_create (&fs->final, NULL, watch_final, fs) == 0;
    if (!fs->final_on)
      lg_fs_end_signals (fs);
  }
  else
    fuse_remove_signal_handlers (se);
  fuse_loop_cfg_destroy (cfg);
  stop_once (fs, false);
  drain (fs);
  /* Stopped while the path did not reach our mount and its connection
   * lives (wait_reachable): libfuse's unmount would take whatever is at
   * the path now (as root, umount2 of it).  Once the kernel ended the
   * connection (an unmount, the last close after a lazy one) it only
   * closes and frees, and must run. */
  fs->dir = dir;
  {
    struct pollfd pf = { .fd = fuse_session_fd (se), .events = 0 };
    bool ended = poll (&pf, 1, 0) == 1 && (pf.revents & POLLERR);

    if (!ended && (!atomic_load (&fs->unmount_ok) || !still_ours (fs)))
      goto out_destroy;
  }
out_unmount:
  fuse_session_unmount (se);
out_destroy:
  if (fs->probe_out != NULL)
    probe_put (fs->probe_out);
  fs->probe_out = NULL;
  fuse_session_destroy (se);
  fuse_opt_free_args (&args);
  return r;
}
