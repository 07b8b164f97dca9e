/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* faultio: an LD_PRELOAD library for tgtd that stalls, delays, fails or
 * drops chosen backing-store I/O, for the fault tests (tests/test-fault-*.sh
 * through tests/functions-fault.sh).  tgtd's rdwr backing store calls
 * pread/pwrite (pread64/pwrite64 are the same functions in glibc) from its
 * bs worker threads, so a stalled call holds only that one SCSI command
 * while tgtd's main loop keeps answering NOP-Outs and other commands.
 *
 * Environment:
 *   FAULTIO_RULES=FILE  the rules, re-read whenever FILE's mtime, size or
 *                       inode changes (stat on every intercepted call); a
 *                       missing file means no rules.
 *   FAULTIO_LOG=FILE    one line per event, each written with one write(2)
 *                       to an O_APPEND descriptor:
 *                         fire LINE OP OFF LEN       (a rule matched)
 *                         stall-begin LINE OP OFF LEN MS
 *                         stall-end LINE OP OFF LEN RESULT
 *                         delay-end LINE OP OFF LEN RESULT
 *                       LINE is the rule's line number in FILE, OP is read
 *                       or write, RESULT the real call's return value.
 *   FAULTIO_DEBUG=1     say on stderr what is loaded and what fires.
 *   FAULTIO_CACHE=SUBSTR  a volatile write cache, for the files whose path
 *                       contains SUBSTR: writes are kept in memory (reads
 *                       see them) and reach the file only at the next
 *                       fdatasync or fsync of that descriptor, in order;
 *                       killing tgtd loses what was not flushed, as a
 *                       power cut loses a disk's cache.  (tgt flushes with
 *                       fdatasync for SYNCHRONIZE CACHE and for a WRITE
 *                       with FUA.)  Rules apply before the cache.  A
 *                       fallocate (tgt's trim and zeroing) or close of
 *                       the descriptor writes its cache back first, as
 *                       a disk may at any time, so that older cached
 *                       writes never land over a hole punched later.
 *
 * Rules, one a line, '#' starts a comment, fields KEY=VALUE separated by
 * blanks; an I/O matches a rule when every field given matches:
 *   op=write|read|any   (default any)
 *   path=SUBSTR         the fd's path (readlink of /proc/self/fd/N)
 *                       contains SUBSTR
 *   off=START-END       the I/O overlaps the bytes [START, END)
 *   match=ASCII         a write whose buffer starts with these bytes (no
 *                       blanks; for a vector, the first non-empty buffer)
 *   action=stall:MS     sleep MS milliseconds, then do the real I/O
 *          delay:MS     the same (for small delays; logged as delay)
 *          fail:ERRNO   return -1 with errno ERRNO (a number), no I/O
 *          drop         return the full length without doing the I/O
 *          slowfail:MS  sleep MS milliseconds, then return -1 with EIO,
 *                       no I/O (a disk retrying a bad sector); logged
 *                       "slowfail-end LINE OP OFF LEN"
 *   count=N             fire at most N times (default 1; 0: always)
 * The first rule that matches (in file order) fires.  The number of times
 * a rule has fired is kept by the text of its line, so that re-reading
 * the file keeps the count of an unchanged line; two identical lines share
 * one count (add a comment to the line to tell them apart).
 *
 * Threads: any.  One mutex guards the rules and the counts; it is never
 * held while sleeping or doing I/O.  Not async-signal-safe.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define MAX_RULES 64
#define MAX_FIELD 256

enum op { OP_ANY, OP_READ, OP_WRITE };
enum action { ACT_STALL, ACT_DELAY, ACT_FAIL, ACT_DROP, ACT_SLOWFAIL };

struct rule {
  int line;
  enum op op;
  char path[MAX_FIELD];
  bool has_off;
  uint64_t off_lo, off_hi;
  char match[MAX_FIELD];
  size_t match_len;
  enum action action;
  long arg; /* milliseconds or errno */
  long count;
  long *fired; /* in the count table, by line text */
};

/* Fire counts by line text; lives as long as the process. */
struct count {
  struct count *next;
  long fired;
  char text[];
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct rule rules[MAX_RULES];
static int nrules;
static struct count *counts;
static struct stat rules_st;
static bool rules_seen;
static __thread int in_hook;

/* The volatile cache (FAULTIO_CACHE): writes not yet flushed, oldest
 * first. */
struct cached {
  struct cached *next;
  int fd;
  off_t off;
  size_t len;
  uint8_t data[];
};
static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static struct cached *cache_head, **cache_tail = &cache_head;
static int (*real_fdatasync) (int);
static int (*real_fallocate) (int, int, off_t, off_t);
static int (*real_close) (int);
static int (*real_fsync) (int);

static ssize_t (*real_pread) (int, void *, size_t, off_t);
static ssize_t (*real_pwrite) (int, const void *, size_t, off_t);
static ssize_t (*real_preadv) (int, const struct iovec *, int, off_t);
static ssize_t (*real_pwritev) (int, const struct iovec *, int, off_t);

static bool
debug_on (void)
{
  const char *d = getenv ("FAULTIO_DEBUG");

  return d != NULL && *d != '\0' && strcmp (d, "0") != 0;
}

static void debug (const char *fmt, ...)
    __attribute__ ((format (printf, 1, 2)));
static void log_event (const char *fmt, ...)
    __attribute__ ((format (printf, 1, 2)));

static void
debug (const char *fmt, ...)
{
  va_list ap;

  if (!debug_on ())
    return;
  fputs ("faultio: ", stderr);
  va_start (ap, fmt);
  vfprintf (stderr, fmt, ap);
  va_end (ap);
  fputc ('\n', stderr);
}

/* One line to FAULTIO_LOG with one write(2). */
static void
log_event (const char *fmt, ...)
{
  const char *path = getenv ("FAULTIO_LOG");
  char buf[512];
  va_list ap;
  int n, fd;

  va_start (ap, fmt);
  n = vsnprintf (buf, sizeof buf - 1, fmt, ap);
  va_end (ap);
  if (n < 0)
    return;
  if ((size_t) n > sizeof buf - 2)
    n = (int) sizeof buf - 2;
  buf[n++] = '\n';
  debug ("%.*s", n - 1, buf);
  if (path == NULL || *path == '\0')
    return;
  fd = open (path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0)
    return;
  if (write (fd, buf, (size_t) n) < 0)
    debug ("cannot write %s: %s", path, strerror (errno));
  close (fd);
}

static long *
count_for (const char *text)
{
  struct count *c;
  size_t len = strlen (text);

  for (c = counts; c; c = c->next)
    if (strcmp (c->text, text) == 0)
      return &c->fired;
  c = malloc (sizeof *c + len + 1);
  if (c == NULL)
    return NULL;
  c->fired = 0;
  memcpy (c->text, text, len + 1);
  c->next = counts;
  counts = c;
  return &c->fired;
}

static bool
parse_long (const char *s, long *v)
{
  char *end;

  errno = 0;
  *v = strtol (s, &end, 0);
  return errno == 0 && end != s && *end == '\0';
}

/* Parse one line (comment and newline already cut) into *r; false when
 * the line is malformed (it is then ignored, and said so in debug). */
static bool
parse_rule (char *text, struct rule *r)
{
  char *save = NULL, *f;
  bool has_action = false;

  memset (r, 0, sizeof *r);
  r->count = 1;
  for (f = strtok_r (text, " \t", &save); f;
       f = strtok_r (NULL, " \t", &save)) {
    char *v = strchr (f, '=');

    if (v == NULL)
      return false;
    *v++ = '\0';
    if (strcmp (f, "op") == 0) {
      if (strcmp (v, "read") == 0)
        r->op = OP_READ;
      else if (strcmp (v, "write") == 0)
        r->op = OP_WRITE;
      else if (strcmp (v, "any") == 0)
        r->op = OP_ANY;
      else
        return false;
    }
    else if (strcmp (f, "path") == 0) {
      if (strlen (v) >= MAX_FIELD)
        return false;
      strcpy (r->path, v);
    }
    else if (strcmp (f, "off") == 0) {
      char *end;

      errno = 0;
      r->off_lo = strtoull (v, &end, 0);
      if (errno || end == v || *end != '-')
        return false;
      v = end + 1;
      r->off_hi = strtoull (v, &end, 0);
      if (errno || end == v || *end != '\0' || r->off_hi <= r->off_lo)
        return false;
      r->has_off = true;
    }
    else if (strcmp (f, "match") == 0) {
      r->match_len = strlen (v);
      if (r->match_len == 0 || r->match_len >= MAX_FIELD)
        return false;
      memcpy (r->match, v, r->match_len + 1);
    }
    else if (strcmp (f, "action") == 0) {
      char *arg = strchr (v, ':');

      if (arg)
        *arg++ = '\0';
      if (strcmp (v, "stall") == 0)
        r->action = ACT_STALL;
      else if (strcmp (v, "delay") == 0)
        r->action = ACT_DELAY;
      else if (strcmp (v, "fail") == 0)
        r->action = ACT_FAIL;
      else if (strcmp (v, "drop") == 0)
        r->action = ACT_DROP;
      else if (strcmp (v, "slowfail") == 0)
        r->action = ACT_SLOWFAIL;
      else
        return false;
      if (r->action == ACT_DROP) {
        if (arg)
          return false;
      }
      else if (arg == NULL || !parse_long (arg, &r->arg) || r->arg < 0)
        return false;
      has_action = true;
    }
    else if (strcmp (f, "count") == 0) {
      if (!parse_long (v, &r->count) || r->count < 0)
        return false;
    }
    else
      return false;
  }
  return has_action;
}

/* Re-read the rules if the file changed.  Lock held. */
static void
reload_locked (void)
{
  const char *path = getenv ("FAULTIO_RULES");
  struct stat st;
  char line[1024];
  FILE *fp;
  int n = 0;

  if (path == NULL || *path == '\0')
    return;
  if (stat (path, &st) < 0) {
    if (rules_seen)
      debug ("%s: gone: no rules", path);
    nrules = 0;
    rules_seen = false;
    return;
  }
  if (rules_seen && st.st_ino == rules_st.st_ino
      && st.st_size == rules_st.st_size
      && st.st_mtim.tv_sec == rules_st.st_mtim.tv_sec
      && st.st_mtim.tv_nsec == rules_st.st_mtim.tv_nsec)
    return;
  fp = fopen (path, "re");
  if (fp == NULL)
    return;
  rules_st = st;
  rules_seen = true;
  nrules = 0;
  while (fgets (line, sizeof line, fp)) {
    char copy[sizeof line];
    char *hash, *end;
    struct rule r;

    n++;
    line[strcspn (line, "\n")] = '\0';
    /* The count is keyed by the whole line, comment included. */
    memcpy (copy, line, sizeof copy);
    hash = strchr (copy, '#');
    if (hash)
      *hash = '\0';
    end = copy + strlen (copy);
    while (end > copy && (end[-1] == ' ' || end[-1] == '\t'))
      *--end = '\0';
    if (copy[strspn (copy, " \t")] == '\0')
      continue;
    if (!parse_rule (copy, &r)) {
      debug ("%s:%d: malformed rule ignored", path, n);
      continue;
    }
    if (nrules == MAX_RULES) {
      debug ("%s:%d: more than %d rules: ignored", path, n, MAX_RULES);
      continue;
    }
    r.line = n;
    r.fired = count_for (line);
    if (r.fired == NULL)
      continue;
    rules[nrules++] = r;
  }
  fclose (fp);
  debug ("%s: %d rules", path, nrules);
}

/* The first bytes of a write, from a buffer or a vector. */
static bool
starts_with (const void *buf, const struct iovec *iov, int iovcnt,
             const char *m, size_t mlen)
{
  if (iov == NULL)
    return memcmp (buf, m, mlen) == 0;
  for (int i = 0; i < iovcnt; i++) {
    if (iov[i].iov_len == 0)
      continue;
    return iov[i].iov_len >= mlen && memcmp (iov[i].iov_base, m, mlen) == 0;
  }
  return false;
}

/* Find the rule that fires for this I/O and count it, or return false.
 * *out is a copy, so the caller needs no lock. */
static bool
find_rule (int fd, enum op op, const void *buf, const struct iovec *iov,
           int iovcnt, size_t len, off_t off, struct rule *out)
{
  char fdpath[64], target[4096];
  bool have_target = false;
  bool found = false;

  pthread_mutex_lock (&lock);
  reload_locked ();
  for (int i = 0; i < nrules && !found; i++) {
    struct rule *r = &rules[i];

    if (r->op != OP_ANY && r->op != op)
      continue;
    if (r->count > 0 && *r->fired >= r->count)
      continue;
    if (r->has_off
        && ((uint64_t) off >= r->off_hi || (uint64_t) off + len <= r->off_lo))
      continue;
    if (r->match_len) {
      if (op != OP_WRITE || len < r->match_len
          || !starts_with (buf, iov, iovcnt, r->match, r->match_len))
        continue;
    }
    if (r->path[0]) {
      if (!have_target) {
        ssize_t n;

        snprintf (fdpath, sizeof fdpath, "/proc/self/fd/%d", fd);
        n = readlink (fdpath, target, sizeof target - 1);
        if (n < 0)
          n = 0;
        target[n] = '\0';
        have_target = true;
      }
      if (strstr (target, r->path) == NULL)
        continue;
    }
    ++*r->fired;
    *out = *r;
    found = true;
  }
  pthread_mutex_unlock (&lock);
  return found;
}

static void
sleep_ms (long ms)
{
  struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = ms % 1000 * 1000000 };

  while (nanosleep (&ts, &ts) < 0 && errno == EINTR)
    ;
}

static void
resolve (void)
{
  if (real_pread == NULL)
    real_pread
        = (ssize_t (*) (int, void *, size_t, off_t)) dlsym (RTLD_NEXT, "pread");
  if (real_pwrite == NULL)
    real_pwrite = (ssize_t (*) (int, const void *, size_t, off_t)) dlsym (
        RTLD_NEXT, "pwrite");
  if (real_preadv == NULL)
    real_preadv = (ssize_t (*) (int, const struct iovec *, int, off_t)) dlsym (
        RTLD_NEXT, "preadv");
  if (real_pwritev == NULL)
    real_pwritev = (ssize_t (*) (int, const struct iovec *, int, off_t)) dlsym (
        RTLD_NEXT, "pwritev");
  if (real_fdatasync == NULL)
    real_fdatasync = (int (*) (int)) dlsym (RTLD_NEXT, "fdatasync");
  if (real_fsync == NULL)
    real_fsync = (int (*) (int)) dlsym (RTLD_NEXT, "fsync");
  if (real_fallocate == NULL)
    real_fallocate
        = (int (*) (int, int, off_t, off_t)) dlsym (RTLD_NEXT, "fallocate");
  if (real_close == NULL)
    real_close = (int (*) (int)) dlsym (RTLD_NEXT, "close");
}

/* Whether fd is a file of the volatile cache. */
static bool
cached_fd (int fd)
{
  const char *want = getenv ("FAULTIO_CACHE");
  char link[64], path[4096];
  ssize_t n;

  if (want == NULL || want[0] == '\0')
    return false;
  snprintf (link, sizeof link, "/proc/self/fd/%d", fd);
  n = readlink (link, path, sizeof path - 1);
  if (n <= 0)
    return false;
  path[n] = '\0';
  return strstr (path, want) != NULL;
}

/* A write into the cache: the full length, or -1 (ENOMEM). */
static ssize_t
cache_write (int fd, const void *buf, const struct iovec *iov, int iovcnt,
             size_t len, off_t off)
{
  struct cached *c = malloc (sizeof *c + len);
  size_t k = 0;

  if (c == NULL) {
    errno = ENOMEM;
    return -1;
  }
  c->next = NULL;
  c->fd = fd;
  c->off = off;
  c->len = len;
  if (iov)
    for (int i = 0; i < iovcnt; i++) {
      memcpy (c->data + k, iov[i].iov_base, iov[i].iov_len);
      k += iov[i].iov_len;
    }
  else
    memcpy (c->data, buf, len);
  pthread_mutex_lock (&cache_lock);
  *cache_tail = c;
  cache_tail = &c->next;
  pthread_mutex_unlock (&cache_lock);
  return (ssize_t) len;
}

/* A read of [off, off+len) into buf: the file, then what the cache
 * holds over it, oldest first, so that the newest wins; under the cache
 * lock, so that no flush moves bytes between the two. */
static ssize_t
cache_read (int fd, uint8_t *buf, size_t len, off_t off)
{
  ssize_t ret;

  pthread_mutex_lock (&cache_lock);
  ret = real_pread (fd, buf, len, off);
  if (ret > 0)
    len = (size_t) ret;
  for (struct cached *c = cache_head; c; c = c->next) {
    off_t lo = c->off > off ? c->off : off;
    off_t hi = c->off + (off_t) c->len < off + (off_t) len
        ? c->off + (off_t) c->len
        : off + (off_t) len;

    if (ret > 0 && c->fd == fd && lo < hi)
      memcpy (buf + (lo - off), c->data + (lo - c->off), (size_t) (hi - lo));
  }
  pthread_mutex_unlock (&cache_lock);
  return ret;
}

/* fd's cached writes reach the file, in order. */
static int
cache_flush (int fd)
{
  struct cached **p, *c;
  int ret = 0;

  pthread_mutex_lock (&cache_lock);
  for (p = &cache_head; (c = *p);) {
    if (c->fd != fd) {
      p = &c->next;
      continue;
    }
    if (real_pwrite (fd, c->data, c->len, c->off) != (ssize_t) c->len)
      ret = -1;
    *p = c->next;
    free (c);
  }
  cache_tail = p;
  for (c = cache_head; c; c = c->next)
    cache_tail = &c->next;
  pthread_mutex_unlock (&cache_lock);
  return ret;
}

static size_t
iov_len (const struct iovec *iov, int iovcnt)
{
  size_t n = 0;

  for (int i = 0; i < iovcnt; i++)
    n += iov[i].iov_len;
  return n;
}

/* The common path of every hook.  FD, OP, RBUF (a read) or WBUF (a write)
 * or IOV, LEN, OFF describe the call. */
static ssize_t
hook (int fd, enum op op, void *rbuf, const void *wbuf, const struct iovec *iov,
      int iovcnt, size_t len, off_t off)
{
  const char *name = op == OP_READ ? "read" : "write";
  struct rule r;
  ssize_t ret;
  int saved;

  resolve ();
  if (in_hook || !find_rule (fd, op, wbuf, iov, iovcnt, len, off, &r))
    goto real;
  log_event ("fire %d %s %jd %zu", r.line, name, (intmax_t) off, len);
  switch (r.action) {
  case ACT_FAIL:
    errno = (int) r.arg;
    return -1;
  case ACT_DROP:
    return (ssize_t) len;
  case ACT_SLOWFAIL:
    sleep_ms (r.arg);
    log_event ("slowfail-end %d %s %jd %zu", r.line, name, (intmax_t) off, len);
    errno = EIO;
    return -1;
  case ACT_STALL:
    log_event ("stall-begin %d %s %jd %zu %ld", r.line, name, (intmax_t) off,
               len, r.arg);
    sleep_ms (r.arg);
    break;
  case ACT_DELAY:
    sleep_ms (r.arg);
    break;
  }
  in_hook++;
  if (iov)
    ret = op == OP_READ ? real_preadv (fd, iov, iovcnt, off)
                        : real_pwritev (fd, iov, iovcnt, off);
  else
    ret = op == OP_READ ? real_pread (fd, rbuf, len, off)
                        : real_pwrite (fd, wbuf, len, off);
  in_hook--;
  saved = errno;
  log_event ("%s %d %s %jd %zu %zd",
             r.action == ACT_STALL ? "stall-end" : "delay-end", r.line, name,
             (intmax_t) off, len, ret);
  errno = saved;
  return ret;

real:
  if (!in_hook && cached_fd (fd)) {
    if (op == OP_WRITE)
      return cache_write (fd, wbuf, iov, iovcnt, len, off);
    if (iov) {
      /* Read whole, then overlay and scatter. */
      uint8_t *tmp = malloc (len ? len : 1);
      size_t k = 0;

      if (tmp == NULL) {
        errno = ENOMEM;
        return -1;
      }
      ret = cache_read (fd, tmp, len, off);
      if (ret >= 0) {
        for (int i = 0; i < iovcnt && k < (size_t) ret; i++) {
          size_t n = iov[i].iov_len < (size_t) ret - k ? iov[i].iov_len
                                                       : (size_t) ret - k;

          memcpy (iov[i].iov_base, tmp + k, n);
          k += n;
        }
      }
      free (tmp);
      return ret;
    }
    return cache_read (fd, rbuf, len, off);
  }
  if (iov)
    return op == OP_READ ? real_preadv (fd, iov, iovcnt, off)
                         : real_pwritev (fd, iov, iovcnt, off);
  return op == OP_READ ? real_pread (fd, rbuf, len, off)
                       : real_pwrite (fd, wbuf, len, off);
}

int
fdatasync (int fd)
{
  resolve ();
  if (cache_flush (fd) < 0)
    return -1;
  return real_fdatasync (fd);
}

int
fsync (int fd)
{
  resolve ();
  if (cache_flush (fd) < 0)
    return -1;
  return real_fsync (fd);
}

/* The interposed symbols (their prototypes are glibc's).  On 64-bit
 * glibc pread64 is pread (off_t is 64 bits), but both names are exported
 * and tgtd imports both. */
ssize_t
pread (int fd, void *buf, size_t len, off_t off)
{
  return hook (fd, OP_READ, buf, NULL, NULL, 0, len, off);
}

ssize_t
pwrite (int fd, const void *buf, size_t len, off_t off)
{
  return hook (fd, OP_WRITE, NULL, buf, NULL, 0, len, off);
}

ssize_t
pread64 (int fd, void *buf, size_t len, off64_t off)
{
  return hook (fd, OP_READ, buf, NULL, NULL, 0, len, off);
}

ssize_t
pwrite64 (int fd, const void *buf, size_t len, off64_t off)
{
  return hook (fd, OP_WRITE, NULL, buf, NULL, 0, len, off);
}

ssize_t
preadv (int fd, const struct iovec *iov, int iovcnt, off_t off)
{
  return hook (fd, OP_READ, NULL, NULL, iov, iovcnt, iov_len (iov, iovcnt),
               off);
}

ssize_t
pwritev (int fd, const struct iovec *iov, int iovcnt, off_t off)
{
  return hook (fd, OP_WRITE, NULL, NULL, iov, iovcnt, iov_len (iov, iovcnt),
               off);
}

ssize_t
preadv64 (int fd, const struct iovec *iov, int iovcnt, off64_t off)
{
  return hook (fd, OP_READ, NULL, NULL, iov, iovcnt, iov_len (iov, iovcnt),
               off);
}

ssize_t
pwritev64 (int fd, const struct iovec *iov, int iovcnt, off64_t off)
{
  return hook (fd, OP_WRITE, NULL, NULL, iov, iovcnt, iov_len (iov, iovcnt),
               off);
}

int
fallocate (int fd, int mode, off_t off, off_t len)
{
  resolve ();
  if (cache_flush (fd) < 0)
    return -1;
  return real_fallocate (fd, mode, off, len);
}

int
fallocate64 (int fd, int mode, off64_t off, off64_t len)
{
  return fallocate (fd, mode, off, len);
}

int
close (int fd)
{
  resolve ();
  cache_flush (fd);
  return real_close (fd);
}
