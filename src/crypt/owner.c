/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The owner record (owner.h). */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <sodium.h>

#include "crypt/owner.h"
#include "iscsi/pr.h"
#include "util/alive.h"
#include "util/log.h"

#define MAGIC "LGOWNER\0"
#define SUM_OFF (LG_OWNER_SIZE - 32)

struct lg_owner {
  struct lg_dev *lower;
  char name[300];
  uint64_t key;
  struct lg_owner_rec mine;
  uint64_t dead; /* the key of a dead holder of this host, taken back
                  * (its runtime file stays: util/alive.h) */
  /* Before a record of another is replaced (lg_owner_claim). */
  lg_owner_fence_fn *fence;
  void *fence_opaque;
  uint64_t fenced;             /* the key fenced against, 0 if none */
  uint8_t last[LG_OWNER_SIZE]; /* what we wrote last (heartbeat thread) */
  atomic_bool lost;
  bool keep; /* lg_owner_keep */
  pthread_mutex_t lock;
  pthread_cond_t cond;
  bool stopping;
  pthread_t thread;
};

static void
put64 (uint8_t *p, uint64_t v)
{
  for (int i = 7; i >= 0; i--, v >>= 8)
    p[i] = (uint8_t) v;
}

static uint64_t
get64 (const uint8_t *p)
{
  uint64_t v = 0;

  for (int i = 0; i < 8; i++)
    v = v << 8 | p[i];
  return v;
}

void
lg_owner_build (const struct lg_owner_rec *r, uint8_t *b)
{
  memset (b, 0, LG_OWNER_SIZE);
  memcpy (b, MAGIC, 8);
  put64 (b + 8, 1); /* version */
  put64 (b + 16, r->key);
  put64 (b + 24, r->pid);
  put64 (b + 32, r->since);
  put64 (b + 40, r->heartbeat);
  snprintf ((char *) b + 48, LG_OWNER_HOST_MAX + 1, "%s", r->host);
  crypto_generichash (b + SUM_OFF, 32, b, SUM_OFF, NULL, 0);
}

void
lg_owner_parse (const uint8_t *b, struct lg_owner_rec *r)
{
  uint8_t sum[32];

  memset (r, 0, sizeof *r);
  if (memcmp (b, MAGIC, 8) != 0 || get64 (b + 8) != 1)
    return;
  crypto_generichash (sum, sizeof sum, b, SUM_OFF, NULL, 0);
  if (sodium_memcmp (sum, b + SUM_OFF, sizeof sum) != 0)
    return;
  r->key = get64 (b + 16);
  r->pid = (uint32_t) get64 (b + 24);
  r->since = get64 (b + 32);
  r->heartbeat = get64 (b + 40);
  for (int i = 0; i < LG_OWNER_HOST_MAX && b[48 + i]; i++)
    r->host[i] = b[48 + i] >= 0x20 && b[48 + i] < 0x7f ? (char) b[48 + i] : '?';
  r->valid = r->key != 0;
}

static uint64_t
now_s (void)
{
  return (uint64_t) time (NULL);
}

void
lg_owner_describe (const struct lg_owner_rec *r, char *buf, size_t len)
{
  time_t t = (time_t) r->since;
  struct tm tm;
  char when[40] = "an unknown time";
  uint64_t now = now_s ();

  if (gmtime_r (&t, &tm))
    strftime (when, sizeof when, "%Y-%m-%d %H:%M UTC", &tm);
  snprintf (buf, len,
            "a gateway on host %s (pid %" PRIu32
            ") since %s, heartbeat %" PRIu64 " s ago",
            r->host[0] ? r->host : "?", r->pid, when,
            now > r->heartbeat ? now - r->heartbeat : 0);
}

static int
read_block (struct lg_dev *lower, uint8_t *b)
{
  return lg_dev_pread (lower, b, LG_OWNER_SIZE, LG_OWNER_OFFSET);
}

int
lg_owner_read (struct lg_dev *lower, struct lg_owner_rec *r)
{
  uint8_t b[LG_OWNER_SIZE];

  if (read_block (lower, b) < 0)
    return -1;
  lg_owner_parse (b, r);
  return 0;
}

/* Writes new over old: COMPARE AND WRITE where there is one (EAGAIN when
 * old is not there any more), else a durable write. */
static int
write_block (struct lg_dev *lower, const uint8_t *old, const uint8_t *new,
             bool *checked)
{
  *checked = true;
  if (lg_dev_compare_write (lower, old, new, LG_OWNER_SIZE, LG_OWNER_OFFSET)
      == 0)
    return 0;
  if (errno != ENOTSUP)
    return -1;
  *checked = false;
  return lg_dev_pwrite (lower, new, LG_OWNER_SIZE, LG_OWNER_OFFSET, LG_FUA);
}

static int
in_use (const char *name, const struct lg_owner_rec *r, bool takeover,
        char *err, size_t errlen)
{
  char who[200];
  uint64_t now = now_s ();
  uint64_t age = now > r->heartbeat ? now - r->heartbeat : 0;

  lg_owner_describe (r, who, sizeof who);
  if (takeover)
    snprintf (err, errlen,
              "%s: in use by %s (owner record): it is alive, not taken over "
              "(a stale owner's heartbeat is over %d s old); open it "
              "read-only (-r, -o ro)",
              name, who, LG_OWNER_STALE_S);
  else
    snprintf (err, errlen,
              "%s: in use by %s (owner record)%s; open it read-only (-r, -o "
              "ro), or take it over with --takeover if that gateway is gone",
              name, who,
              age >= LG_OWNER_STALE_S ? ": its heartbeat stopped" : "");
  errno = EBUSY;
  return -1;
}

/* Whether r is a gateway of this host that has ended: proven only by its
 * runtime file (util/alive.h); a host name alone proves nothing (clones
 * share them).  *pid says which process it was. */
static bool
owner_dead (const struct lg_owner *o, const struct lg_owner_rec *r, pid_t *pid)
{
  return strcmp (r->host, o->mine.host) == 0
      && lg_alive_dead (r->key, pid) == 1;
}

/* One try: 0 claimed, 1 lost a race (try again), -1 refused or failed. */
static int
try_claim (struct lg_owner *o, bool takeover, bool *took, char *err,
           size_t errlen)
{
  uint8_t old[LG_OWNER_SIZE], back[LG_OWNER_SIZE];
  struct lg_owner_rec r;
  bool checked;

  if (read_block (o->lower, old) < 0)
    goto io;
  lg_owner_parse (old, &r);
  *took = false;
  if (r.valid && r.key != o->key) {
    bool stale = now_s () >= r.heartbeat + LG_OWNER_STALE_S;
    pid_t pid;

    /* A gateway of this host that died holding it (kill -9, a crash):
     * its volume comes back without --takeover. */
    if (owner_dead (o, &r, &pid)) {
      if (o->dead != r.key)
        lg_warn ("%s: the owner record names this host's pid %ld, which is "
                 "no longer running: taking the volume back",
                 o->name, (long) pid);
      o->dead = r.key;
    }
    else if (!stale || !takeover)
      return in_use (o->name, &r, takeover, err, errlen);
    *took = true;
    /* Its last writes (data, a heartbeat) may still execute in the
     * target: confirmed gone before our record is written, which they
     * would otherwise overwrite.  Then the record is read again. */
    if (o->fence && o->fenced != r.key) {
      if (o->fence (o->fence_opaque, err, errlen) < 0)
        return -1;
      o->fenced = r.key;
      return 1;
    }
  }
  o->mine.since = o->mine.heartbeat = now_s ();
  lg_owner_build (&o->mine, o->last);
  if (write_block (o->lower, old, o->last, &checked) < 0)
    return errno == EAGAIN ? 1 : -1;
  if (checked)
    return 0;
  /* No COMPARE AND WRITE: the later of two writers wins. */
  usleep (LG_OWNER_SETTLE_MS * 1000);
  if (read_block (o->lower, back) < 0)
    goto io;
  if (memcmp (back, o->last, LG_OWNER_SIZE) == 0)
    return 0;
  lg_owner_parse (back, &r);
  return r.valid ? in_use (o->name, &r, false, err, errlen) : 1;
io:
  snprintf (err, errlen, "%s: reading the owner record: %m", o->name);
  return -1;
}

/* The heartbeat: rewrites the record, and notices when it is not ours. */
static void
beat (struct lg_owner *o)
{
  uint8_t b[LG_OWNER_SIZE], next[LG_OWNER_SIZE];
  struct lg_owner_rec r;
  char who[200];
  bool checked;

  if (read_block (o->lower, b) < 0)
    return; /* the next beat tries again */
  lg_owner_parse (b, &r);
  if (!r.valid || r.key != o->key) {
    if (r.valid)
      lg_owner_describe (&r, who, sizeof who);
    else
      snprintf (who, sizeof who, "nobody (the record was cleared)");
    lg_error ("%s: lost the volume: the owner record names %s now; writes "
              "fail from now on, reads go on",
              o->name, who);
    atomic_store (&o->lost, true);
    return;
  }
  o->mine.heartbeat = now_s ();
  lg_owner_build (&o->mine, next);
  if (write_block (o->lower, b, next, &checked) == 0)
    memcpy (o->last, next, sizeof next);
}

static void *
heartbeat (void *arg)
{
  struct lg_owner *o = arg;

  pthread_mutex_lock (&o->lock);
  while (!o->stopping && !atomic_load (&o->lost)) {
    struct timespec ts;

    clock_gettime (CLOCK_REALTIME, &ts);
    ts.tv_sec += LG_OWNER_BEAT_S;
    pthread_cond_timedwait (&o->cond, &o->lock, &ts);
    if (o->stopping)
      break;
    pthread_mutex_unlock (&o->lock);
    beat (o);
    pthread_mutex_lock (&o->lock);
  }
  pthread_mutex_unlock (&o->lock);
  return NULL;
}

static struct lg_owner *
owner_new (struct lg_dev *lower, const char *name)
{
  struct lg_owner *o = calloc (1, sizeof *o);

  if (o == NULL)
    return NULL;
  o->lower = lower;
  snprintf (o->name, sizeof o->name, "%s", name);
  o->key = lg_pr_my_key ();
  o->mine.key = o->key;
  o->mine.pid = (uint32_t) getpid ();
  if (gethostname (o->mine.host, sizeof o->mine.host - 1) != 0)
    snprintf (o->mine.host, sizeof o->mine.host, "localhost");
  atomic_init (&o->lost, false);
  pthread_mutex_init (&o->lock, NULL);
  pthread_cond_init (&o->cond, NULL);
  return o;
}

static void
owner_free (struct lg_owner *o)
{
  pthread_mutex_destroy (&o->lock);
  pthread_cond_destroy (&o->cond);
  free (o);
}

struct lg_owner *
lg_owner_claim (struct lg_dev *lower, const char *name, bool takeover,
                lg_owner_fence_fn *fence, void *opaque, bool *took, char *err,
                size_t errlen)
{
  struct lg_owner *o = owner_new (lower, name);
  int r = 1, err_no;

  if (o == NULL) {
    snprintf (err, errlen, "out of memory");
    return NULL;
  }
  o->fence = fence;
  o->fence_opaque = opaque;
  /* Before the record names this process: the proof that it ended, for
   * the next gateway of this host. */
  if (lg_alive_mark (o->key) < 0)
    lg_debug ("%s: cannot keep a runtime file (%m): if this gateway dies "
              "holding the volume, the next one needs --takeover",
              name);
  for (int i = 0; i < 5 && r == 1; i++)
    r = try_claim (o, takeover, took, err, errlen);
  if (r == 1) {
    snprintf (err, errlen,
              "%s: the owner record keeps changing: another "
              "gateway is opening it too",
              name);
    errno = EBUSY;
  }
  if (r == 0
      && (err_no = pthread_create (&o->thread, NULL, heartbeat, o)) != 0) {
    snprintf (err, errlen, "cannot start the heartbeat: %s", strerror (err_no));
    errno = err_no;
    r = -1;
  }
  if (r != 0) {
    err_no = errno;
    owner_free (o);
    errno = err_no;
    return NULL;
  }
  return o;
}

void
lg_owner_keep (struct lg_owner *o, bool keep)
{
  o->keep = keep;
  if (keep)
    lg_alive_keep ();
}

bool
lg_owner_lost (struct lg_owner *o)
{
  return atomic_load (&o->lost);
}

void
lg_owner_release (struct lg_owner *o)
{
  uint8_t b[LG_OWNER_SIZE], zero[LG_OWNER_SIZE] = { 0 };
  struct lg_owner_rec r;
  bool checked;

  if (o == NULL)
    return;
  pthread_mutex_lock (&o->lock);
  o->stopping = true;
  pthread_cond_signal (&o->cond);
  pthread_mutex_unlock (&o->lock);
  pthread_join (o->thread, NULL);
  if (!o->keep && !atomic_load (&o->lost) && read_block (o->lower, b) == 0) {
    lg_owner_parse (&b[0], &r);
    if (r.valid && r.key == o->key
        && write_block (o->lower, b, zero, &checked) < 0)
      lg_warn ("%s: clearing the owner record: %m", o->name);
  }
  owner_free (o);
}
