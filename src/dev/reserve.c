/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* One writer per LUN: the reservation a device holds (reserve.h). */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "dev/dev.h"
#include "dev/reserve.h"
#include "util/alive.h"
#include "util/log.h"
#include "util/hooks.h"

enum mode {
  MODE_NONE,     /* not claimed (read-only, or not yet) */
  MODE_CLAIMING, /* registering: a new login registers too */
  MODE_HELD,
  MODE_SHARED, /* --shared: no reservation of ours */
  MODE_NO_PR,  /* the LUN has no persistent reservations */
};

struct lg_reserve {
  struct lg_pool *p;
  int lun;
  char name[300];
  uint64_t key;
  _Atomic int mode;
  atomic_bool lost;
  /* The claim's caller has no read-only mode (LG_CLAIM_NO_RO). */
  bool no_ro;
  /* A login's check could not finish: that session may not be
   * registered.  The next write registers every session first. */
  atomic_bool unsure;
  /* A write met RESERVATION CONFLICT, or a unit attention said the LUN
   * was taken: the next write asks the target whether it still is ours
   * (lost then, or the writing sessions probed again). */
  atomic_bool doubt;
  /* The session holding the reservation, where only it may write (the
   * probe found so), or -1. */
  _Atomic int holder;
  /* Taken from another holder, but the target did not confirm that its
   * commands can no longer execute: held, and not to be written, until a
   * claim confirms it (lg_reserve_fence). */
  bool unfenced;
  /* The PR generation last read while the LUN was ours (gen_known once
   * read): it only grows until the target forgets every reservation
   * (restarted, the LUN reconfigured), which sets it back to 0.  Found
   * unreserved with a higher generation, or any but 0 with none of our
   * keys registered, someone else took the LUN and let it go (tgt_spc:
   * REGISTER, PREEMPT, RELEASE raise it): not taken back
   * (taken_meanwhile). */
  _Atomic uint32_t gen_seen;
  atomic_bool gen_known;
  pthread_mutex_t redo; /* one such registration at a time */
  pthread_mutex_t lock; /* msg, named */
  bool named;           /* the holder after the loss was asked for */
  char msg[512];
};

static int
pool_task (void *opaque, int lun, struct scsi_task *task, char *msg, size_t len)
{
  return lg_pool_task (opaque, lun, task, msg, len);
}

static int
session_task (void *opaque, int lun, struct scsi_task *task, char *msg,
              size_t len)
{
  return lg_session_task_now (opaque, lun, task, NULL, 0, msg, len);
}

struct lg_reserve *
lg_reserve_new (struct lg_pool *p, int lun, const char *name)
{
  struct lg_reserve *r = calloc (1, sizeof *r);

  if (r == NULL)
    return NULL;
  r->p = p;
  r->lun = lun;
  snprintf (r->name, sizeof r->name, "%s", name);
  r->key = lg_pr_my_key ();
  atomic_init (&r->mode, MODE_NONE);
  atomic_init (&r->lost, false);
  atomic_init (&r->unsure, false);
  atomic_init (&r->doubt, false);
  atomic_init (&r->holder, -1);
  atomic_init (&r->gen_seen, 0);
  atomic_init (&r->gen_known, false);
  pthread_mutex_init (&r->lock, NULL);
  pthread_mutex_init (&r->redo, NULL);
  return r;
}

int
lg_reserve_read (struct lg_pool *p, int lun, struct lg_pr_state *st, char *err,
                 size_t errlen)
{
  struct lg_lun_io io = { pool_task, p, lg_pool_target (p) };
  char msg[256];

  if (lg_pr_read (&io, lun, st, msg, sizeof msg) < 0) {
    int e = errno;

    snprintf (err, errlen, "%s/%d: reading its reservation: %s",
              lg_pool_target (p), lun, msg);
    errno = e;
    return -1;
  }
  return 0;
}

/* st was read while the LUN is ours: its generation is the least the
 * target can show until it forgets the reservation. */
static void
note_gen (struct lg_reserve *r, const struct lg_pr_state *st)
{
  if (st->reserved && st->holder == r->key) {
    atomic_store (&r->gen_seen, st->generation);
    atomic_store (&r->gen_known, true);
  }
}

/* Reads the state after the LUN was (re)taken, for note_gen: through
 * io, or the pool when NULL (never from a login's check, whose session
 * holds every command but its own: io is that session then). */
static void
note_gen_now (struct lg_reserve *r, const struct lg_lun_io *io)
{
  struct lg_pr_state st;
  char err[256];
  int ret = io ? lg_pr_read (io, r->lun, &st, err, sizeof err)
               : lg_reserve_read (r->p, r->lun, &st, err, sizeof err);

  if (ret == 0)
    note_gen (r, &st);
  else
    lg_debug ("%s: reading the reservation: %s", r->name, err);
}

/* Nothing is reserved, where this process held the LUN: true when that is
 * another initiator's doing (a preempt, then a release or a CLEAR), not
 * a target that only forgot every reservation.  Another's takeover
 * raises the generation past what was seen.  A forgetting target sets
 * it back to 0 (SPC: at power on), and from there only PR commands
 * raise it: with none of this process's keys registered, those were
 * another initiator's, which took the LUN after the restart and let it
 * go (or is taking it now).  This process's own key registered means
 * one of its sessions, logging in after the same restart, is reserving
 * again (a preempt removed the key). */
static bool
taken_meanwhile (struct lg_reserve *r, const struct lg_pr_state *st)
{
  if (st->reserved || !atomic_load (&r->gen_known))
    return false;
  for (unsigned i = 0; i < st->nkeys && i < LG_PR_MAX_KEYS; i++)
    if (st->keys[i] == r->key)
      return false;
  /* (Above gen_seen, or anywhere from 1 up to it: not 0 either way.) */
  return st->generation != 0;
}

/* Registers the key on every session of the pool that is up; one that
 * is down registers after its next login (the pool checks every LUN it
 * serves after every login: lg_reserve_after_login).  -1 when none could, or the target refused. */
static int
register_all (struct lg_reserve *r, char *msg, size_t len)
{
  unsigned done = 0;

  for (unsigned i = 0; i < lg_pool_size (r->p); i++) {
    struct lg_lun_io io
        = { session_task, lg_pool_session (r->p, i), lg_pool_target (r->p) };

    if (lg_pr_register (&io, r->lun, r->key, msg, len) == 0)
      done++;
    else if (errno == EPERM || errno == ENOTSUP)
      return -1;
    else
      lg_debug ("%s: session %u registers after its next login: %s", r->name, i,
                msg);
  }
  return done > 0 ? 0 : -1;
}

static void
unregister_all (struct lg_reserve *r)
{
  char msg[256];

  for (unsigned i = 0; i < lg_pool_size (r->p); i++) {
    struct lg_lun_io io
        = { session_task, lg_pool_session (r->p, i), lg_pool_target (r->p) };

    if (lg_pr_unregister (&io, r->lun, r->key, msg, sizeof msg) < 0)
      lg_debug ("%s: unregistering: %s", r->name, msg);
  }
}

/* Which sessions may write under the reservation.  tgt and istgt let
 * every registered nexus write; LIO only the nexus that reserved, and
 * takes the other sessions of its initiator name for unregistered
 * whatever they registered.  The holder's session is found by its ISID
 * in READ FULL STATUS; every other session sends a RELEASE, a no-op from
 * a registered nexus that does not hold the reservation, and a
 * RESERVATION CONFLICT where the target takes it for unregistered.  When
 * some did, the pool sends this LUN's writes (and PR OUT) to the holder
 * and the sessions that passed (lg_pool_set_writers), reads to all.
 * Nothing is written to the LUN. */
static void
probe_writers (struct lg_reserve *r)
{
  unsigned n = lg_pool_size (r->p), refused = 0, ok = 0;
  struct lg_lun_io io = { pool_task, r->p, lg_pool_target (r->p) };
  uint64_t mask = 0;
  uint8_t isid[6], mine[6];
  char name[256], msg[256];
  uint64_t key;
  int h = -1;

  if (lg_pr_holder_port (&io, r->lun, name, sizeof name, isid, &key, msg,
                         sizeof msg)
      < 0) {
    lg_debug ("%s: which session holds the reservation: %s", r->name, msg);
    lg_pool_set_writers (r->p, r->lun, 0);
    return;
  }
  for (unsigned i = 0; i < n && h < 0; i++) {
    lg_session_isid (lg_pool_session (r->p, i), mine);
    if (memcmp (mine, isid, sizeof mine) == 0)
      h = (int) i;
  }
  if (h < 0) {
    lg_debug ("%s: the holder's nexus (%s) is none of the pool's", r->name,
              name);
    lg_pool_set_writers (r->p, r->lun, 0);
    return;
  }
  mask = 1ull << h;
  for (unsigned i = 0; i < n; i++) {
    struct lg_lun_io si
        = { session_task, lg_pool_session (r->p, i), lg_pool_target (r->p) };

    if ((int) i == h)
      continue;
    if (lg_pr_release (&si, r->lun, r->key, msg, sizeof msg) == 0) {
      mask |= 1ull << i;
      ok++;
    }
    else if (errno == EPERM)
      refused++;
    else
      lg_debug ("%s: session %u: %s", r->name, i, msg);
  }
  if (refused == 0) {
    lg_pool_set_writers (r->p, r->lun, 0);
    atomic_store (&r->holder, -1);
    return;
  }
  atomic_store (&r->holder, h);
  if (lg_pool_set_writers (r->p, r->lun, mask) < 0) {
    lg_warn ("%s: too many LUNs limited to some sessions", r->name);
    return;
  }
  lg_warn ("%s: the target lets %u of the %u sessions write under the "
           "reservation (LIO lets only the nexus that reserved): writes go "
           "to %s, reads to all",
           r->name, ok + 1, n, ok == 0 ? "that one" : "those");
}

/* Whether the target says this process holds the LUN. */
static bool
still_held (struct lg_reserve *r)
{
  struct lg_pr_state st;
  char err[256];

  if (lg_reserve_read (r->p, r->lun, &st, err, sizeof err) < 0) {
    lg_warn ("%s", err);
    return false;
  }
  note_gen (r, &st);
  return st.reserved && st.holder == r->key;
}

/* Whether process pid runs in a mount namespace other than this one's
 * (a mount made inside unshare -m: not in this /proc/mounts, and
 * fusermount3 -u cannot reach it from here). */
static bool
other_mount_ns (pid_t pid)
{
  char path[64], mine[64], theirs[64];
  ssize_t a, b;

  snprintf (path, sizeof path, "/proc/%ld/ns/mnt", (long) pid);
  a = readlink ("/proc/self/ns/mnt", mine, sizeof mine - 1);
  b = readlink (path, theirs, sizeof theirs - 1);
  if (a <= 0 || b <= 0)
    return false;
  mine[a] = theirs[b] = '\0';
  return strcmp (mine, theirs) != 0;
}

static int
in_use (struct lg_reserve *r, const struct lg_pr_state *st, char *err,
        size_t errlen)
{
  char who[160], pid_s[160] = "";
  pid_t pid;

  lg_pr_describe_key (st->holder, who, sizeof who);
  /* A gateway of this host known to run: which process, and where.  The
   * pid its file names is its own: here, another process when it runs
   * in another PID namespace, so it counts only if that process holds
   * the file. */
  if (lg_pr_key_here (st->holder) && lg_alive_dead (st->holder, &pid) == 0) {
    if (lg_alive_pid_holds (st->holder, pid))
      snprintf (pid_s, sizeof pid_s, ", pid %ld%s", (long) pid,
                other_mount_ns (pid) ? ", in another mount namespace (a "
                                       "mount of it is not listed here)"
                                     : "");
    else
      snprintf (pid_s, sizeof pid_s,
                ", running, its pid not visible here (another PID "
                "namespace, or another user's)");
  }
  snprintf (err, errlen,
            "%s: in use by %s (reservation key 0x%016" PRIx64 ", %s%s); "
            "%s%s",
            r->name, who, st->holder, lg_pr_type_name (st->type), pid_s,
            r->no_ro ? "" : "open it read-only (-r, -o ro), or ",
            strncmp (pid_s, ", pid ", 6) == 0
                ? "stop that gateway first (lungate status shows it)"
                : pid_s[0]
                ? "stop that gateway first"
                : "take it over with --takeover if that gateway is gone");
  errno = EBUSY;
  return -1;
}

static int reserve (struct lg_reserve *r, char *err, size_t errlen);

/* A RESERVE or PREEMPT of ours that failed while a session lost its
 * connection may have been executed, its answer lost (and one sent again
 * after the login then refused, the first one having made it the
 * holder's): when the LUN is now held under this process's key, it was
 * this command.  Only then: without a reconnection, a holder with this
 * key is another process that made the same key (pr.c), never taken for
 * ours.  The sessions register again, in case the login lost some. */
static bool
own_after_loss (struct lg_reserve *r, unsigned reconnects_before)
{
  struct lg_pr_state st;
  char msg[256];

  if (lg_pool_generation (r->p, true) == reconnects_before
      || lg_reserve_read (r->p, r->lun, &st, msg, sizeof msg) < 0
      || !st.reserved || st.holder != r->key)
    return false;
  if (register_all (r, msg, sizeof msg) < 0)
    lg_debug ("%s: registering again: %s", r->name, msg);
  lg_warn ("%s: the answer to its reservation command was lost with the "
           "connection; the target shows the LUN held under this "
           "gateway's key, so it was executed",
           r->name);
  return true;
}

/* Logs in once as the nexus with isid (random type) and CLEARs lun's
 * reservation with key there: 0, or -1 with msg. */
static int
clear_on_nexus (struct lg_reserve *r, const uint8_t isid[6], uint64_t key,
                char *msg, size_t len)
{
  struct lg_login l = *lg_session_login (lg_pool_session (r->p, 0));
  struct lg_lun_io io;
  struct lg_session *s;
  char why[256];
  int ret;

  l.isid_set = true;
  l.isid_rnd = (uint32_t) isid[1] << 16 | (uint32_t) isid[2] << 8 | isid[3];
  l.isid_qual = (uint32_t) isid[4] << 8 | isid[5];
  s = lg_session_open (&l, lg_pool_portal (r->p), lg_pool_target (r->p), NULL,
                       why, sizeof why);
  if (s == NULL) {
    snprintf (msg, len, "logging in as the holder's nexus: %s", why);
    return -1;
  }
  io = (struct lg_lun_io){ session_task, s, lg_pool_target (r->p) };
  ret = lg_pr_clear (&io, r->lun, key, why, sizeof why);
  lg_session_close (s);
  if (ret < 0) {
    snprintf (msg, len, "clearing it as the holder's nexus: %s", why);
    return -1;
  }
  lg_debug ("%s: cleared the reservation as the holder's own nexus "
            "(ISID 0x%02x%02x%02x%02x%02x%02x)",
            r->name, isid[0], isid[1], isid[2], isid[3], isid[4], isid[5]);
  return 0;
}

/* LIO refuses PREEMPT from every session of the holder's initiator name
 * but the holder's own nexus (it takes them for unregistered).  When the
 * holder has this process's initiator name (a gateway of this host that
 * died), a session logs in with the holder's ISID, which reinstates its
 * nexus (the target aborts what the dead session still had), and CLEARs
 * the reservation as the holder; then the LUN is reserved as usual.
 * Only while st->holder still holds it: another gateway of this host
 * that took the dead one's LUN back meanwhile holds it from a nexus of
 * the same name, and logging in with its ISID would reinstate its live
 * session.  The key comes in the same reply as the port.  0 when cleared
 * so, -1 when this does not apply or failed (msg says why when the
 * holder changed). */
static int
clear_as_holder (struct lg_reserve *r, const struct lg_pr_state *st, char *msg,
                 size_t len)
{
  struct lg_lun_io io = { pool_task, r->p, lg_pool_target (r->p) };
  const struct lg_login *l = lg_session_login (lg_pool_session (r->p, 0));
  const char *nap = lg_test_hook ("LUNGATE_TEST_TAKEOVER_NAP_MS");
  long ms = nap ? strtol (nap, NULL, 10) : 0;
  char name[256], why[256], who[160];
  uint8_t isid[6];
  uint64_t key;

  if (ms > 0 && ms <= 60000) {
    lg_warn ("%s: test hook: %ld ms before clearing it as the holder's nexus",
             r->name, ms);
    nanosleep (&(struct timespec){ ms / 1000, (ms % 1000) * 1000000L }, NULL);
  }
  if (lg_pr_holder_port (&io, r->lun, name, sizeof name, isid, &key, why,
                         sizeof why)
          < 0
      || strcasecmp (name, l->initiator_name) != 0 || isid[0] != 0x80)
    return -1;
  if (key != st->holder) {
    lg_pr_describe_key (key, who, sizeof who);
    snprintf (msg, len,
              "it changed hands meanwhile: %s holds it now (reservation key "
              "0x%016" PRIx64 ")",
              who, key);
    return -1;
  }
  return clear_on_nexus (r, isid, st->holder, msg, len);
}

/* Whether the holder is a gateway of this host that has ended, proven
 * by its runtime file (util/alive.h); how says which process it was.
 * Nothing else proves it: the key's host part is a 12-bit hash of the
 * host name, the default initiator name is the host name again, and
 * clones share both, so a holder started before this host's boot may
 * well run on another machine (and clocks get stepped).  After a power
 * loss of this host, then, the LUN needs --takeover. */
static bool
holder_dead (uint64_t holder, char *how, size_t len)
{
  pid_t pid;

  if (!lg_pr_key_here (holder) || lg_alive_dead (holder, &pid) != 1)
    return false;
  snprintf (how, len, "pid %ld, which is no longer running", (long) pid);
  return true;
}

/* The LUN was just taken from another holder, which may have died with a
 * write still executing in the target; it would land over what this
 * gateway writes next.  Before the first write, a LUN RESET on a session
 * of its own, and the target's answer: what that confirms per target is
 * established in iscsi/recovery.c (tgt answers only once every task of
 * the LUN, the dead nexus's too, has finished; LIO drains them the same
 * way; istgt answers at once, its own ordering then being the only
 * guarantee).  Waits as long as the outage budget, at least
 * RESET_WAIT_MIN_S, for ever with a budget of -1.  0, or -1 with err:
 * the reservation is then kept (and the proof that this process ended),
 * nothing is written, and the next gateway of this host takes it back
 * the same way. */
#define RESET_WAIT_MIN_S 30
int
lg_reserve_fence (struct lg_reserve *r, char *err, size_t errlen)
{
  const struct lg_login *l = lg_session_login (lg_pool_session (r->p, 0));
  int wait = l->io_timeout < 0           ? -1
      : l->io_timeout < RESET_WAIT_MIN_S ? RESET_WAIT_MIN_S
                                         : l->io_timeout;
  struct lg_session *s;
  char why[256];
  int ret;

  lg_warn ("%s: confirming that no command of the previous holder can still "
           "execute (LUN RESET) before the first write",
           r->name);
  s = lg_session_open (l, lg_pool_portal (r->p), lg_pool_target (r->p), NULL,
                       why, sizeof why);
  if (s == NULL)
    ret = -1;
  else {
    ret = lg_session_lun_reset (s, r->lun, wait, why, sizeof why);
    lg_session_close (s);
  }
  if (ret == 0) {
    lg_warn ("%s: LUN RESET complete: the previous holder's commands can no "
             "longer execute",
             r->name);
    return 0;
  }
  lg_alive_keep ();
  snprintf (err, errlen,
            "%s: took it over, but the target did not confirm that the "
            "previous holder's commands can no longer execute (%s): nothing "
            "written, and the LUN stays reserved to this gateway's key; try "
            "again later",
            r->name, why);
  errno = EIO;
  return -1;
}

/* Takes the reservation from st->holder: registered first, then PREEMPT,
 * which removes every registration of the holder's key. */
static int
take_over (struct lg_reserve *r, const struct lg_pr_state *st, char *err,
           size_t errlen)
{
  struct lg_lun_io io = { pool_task, r->p, lg_pool_target (r->p) };
  char msg[256], who[160];
  unsigned before = lg_pool_generation (r->p, true);

  lg_pr_describe_key (st->holder, who, sizeof who);
  if (register_all (r, msg, sizeof msg) < 0
      || lg_pr_preempt (&io, r->lun, r->key, st->holder, msg, sizeof msg) < 0) {
    int e = errno;

    if (e != ENOTSUP && own_after_loss (r, before)) {
      lg_warn ("%s: took it over from %s (reservation key 0x%016" PRIx64 ")",
               r->name, who, st->holder);
      return 1;
    }

    if (e == EPERM && clear_as_holder (r, st, msg, sizeof msg) == 0) {
      if (reserve (r, err, errlen) < 0)
        return -1;
      lg_warn ("%s: took it over from %s (reservation key 0x%016" PRIx64
               "), as its own nexus",
               r->name, who, st->holder);
      return 1;
    }

    snprintf (err, errlen, "%s: taking it over from %s: %s", r->name, who, msg);
    unregister_all (r);
    errno = e == EPERM ? EBUSY : e;
    return -1;
  }
  lg_warn ("%s: took it over from %s (reservation key 0x%016" PRIx64 ")",
           r->name, who, st->holder);
  return 1;
}

/* Nobody holds it: registers and reserves; whoever reserves first wins. */
static int
reserve (struct lg_reserve *r, char *err, size_t errlen)
{
  struct lg_lun_io io = { pool_task, r->p, lg_pool_target (r->p) };
  struct lg_pr_state st;
  char msg[256];
  unsigned before = lg_pool_generation (r->p, true);
  int e;

  if (register_all (r, msg, sizeof msg) == 0
      && lg_pr_reserve (&io, r->lun, r->key, msg, sizeof msg) == 0)
    return 0;
  e = errno;
  if (e != ENOTSUP && own_after_loss (r, before))
    return 0;
  if (e == EPERM && lg_reserve_read (r->p, r->lun, &st, err, errlen) == 0
      && st.reserved) {
    unregister_all (r);
    return in_use (r, &st, err, errlen);
  }
  snprintf (err, errlen, "%s: reserving it: %s", r->name, msg);
  errno = e == ENOTSUP ? ENOTSUP : EIO;
  if (errno != ENOTSUP)
    unregister_all (r);
  return -1;
}

/* A gateway that is closing releases the LUN within moments (an unmount
 * returns before its process has): wait a little for that before a
 * refusal; longer for a gateway of this host that said it is closing
 * (lg_alive_closing: its final flush may wait for a stalled target up to
 * the stop budget), while it runs.  0 when st changed (read again) or
 * the holder has ended, 1 when still held. */
#define HOLDER_WAIT_MS 3000
#define CLOSING_WAIT_MS 30000
static int
wait_for_holder (struct lg_reserve *r, struct lg_pr_state *st, char *err,
                 size_t errlen)
{
  uint64_t holder = st->holder;
  bool here = lg_pr_key_here (holder);
  bool said = false;
  pid_t pid;

  for (int waited = 0;; waited += 100) {
    struct timespec ts = { 0, 100 * 1000 * 1000 };

    if (here && !said && lg_alive_is_closing (holder)) {
      said = true;
      lg_info ("%s: the gateway holding it (pid %ld) is closing: waiting "
               "for it to release the LUN",
               r->name, (long) (lg_alive_dead (holder, &pid) == 0 ? pid : 0));
    }
    if (waited >= (said ? CLOSING_WAIT_MS : HOLDER_WAIT_MS))
      return 1;
    nanosleep (&ts, NULL);
    if (lg_reserve_read (r->p, r->lun, st, err, errlen) < 0)
      return -1;
    if (!st->reserved || st->holder != holder)
      return 0;
    if (said && lg_alive_dead (holder, &pid) == 1)
      return 0; /* ended holding it: claim_held sees it dead */
  }
}

static int
claim_held (struct lg_reserve *r, struct lg_pr_state *st, unsigned flags,
            char *err, size_t errlen)
{
  char how[128], who[160];
  int w;

  /* A holder with this process's key is another process that made the
   * same key (started in the same second, with the same random bits):
   * never taken for ourselves. */
  if (!st->reserved)
    return reserve (r, err, errlen);
  if (flags & LG_CLAIM_TAKEOVER && st->holder != r->key)
    return take_over (r, st, err, errlen);
  /* A gateway of this host that died holding it (kill -9, a crash, a
   * power cut): its LUN comes back without --takeover. */
  if (st->holder != r->key && holder_dead (st->holder, how, sizeof how)) {
    lg_pr_describe_key (st->holder, who, sizeof who);
    lg_warn ("%s: held by %s, %s: taking it back", r->name, who, how);
    /* Its runtime file stays: it may have held other LUNs, each taken
     * back on the same proof (alive.h). */
    return take_over (r, st, err, errlen);
  }
  if ((w = wait_for_holder (r, st, err, errlen)) == 0)
    return claim_held (r, st, flags, err, errlen);
  return w < 0 ? -1 : in_use (r, st, err, errlen);
}

/* The target reports persistent reservations but refuses to change them:
 * handled as a target without them, saying why. */
static int
unusable (struct lg_reserve *r, bool *no_pr, const char *why)
{
  lg_warn ("%s: the target refuses persistent reservations (%s): nothing "
           "on the target keeps a second writer out",
           r->name, why);
  unregister_all (r);
  atomic_store (&r->mode, MODE_NO_PR);
  *no_pr = true;
  return 0;
}

int
lg_reserve_claim (struct lg_reserve *r, unsigned flags, bool *no_pr, char *err,
                  size_t errlen)
{
  struct lg_pr_state st;
  int ret;

  /* Claimed before: say again what was found then (the crypt layer
   * takes the owner record when there are no reservations: a claim that
   * says 'held' instead lets a second writer in through it). */
  *no_pr = atomic_load (&r->mode) == MODE_NO_PR;
  if (atomic_load (&r->mode) != MODE_NONE)
    return 0;
  r->no_ro = (flags & LG_CLAIM_NO_RO) != 0;
  if (lg_reserve_read (r->p, r->lun, &st, err, errlen) < 0)
    return -1;
  if (r->unfenced && st.reserved && st.holder == r->key) {
    if (lg_reserve_fence (r, err, errlen) < 0)
      return -1;
    r->unfenced = false;
    probe_writers (r);
    note_gen_now (r, NULL);
    atomic_store (&r->mode, MODE_HELD);
    return 1;
  }
  /* LUNGATE_TEST_IGNORE_PR: behave as on a target without persistent
   * reservations (test-header-race runs several writers so); never for
   * use. */
  if (lg_test_hook ("LUNGATE_TEST_IGNORE_PR"))
    st.supported = false;
  if (!st.supported) {
    lg_debug ("%s: no persistent reservations: nothing keeps a second "
              "writer out",
              r->name);
    atomic_store (&r->mode, MODE_NO_PR);
    *no_pr = true;
    return 0;
  }
  if (flags & LG_CLAIM_SHARED) {
    if (st.reserved && st.holder != 0)
      return in_use (r, &st, err, errlen);
    atomic_store (&r->mode, MODE_SHARED);
    return 0;
  }
  /* Before anything is reserved under the key: the proof that this
   * process ended, for the next gateway of this host. */
  if (lg_alive_mark (r->key) < 0)
    lg_debug ("%s: cannot keep a runtime file (%m): if this gateway dies "
              "holding the LUN, the next one needs --takeover",
              r->name);
  atomic_store (&r->mode, MODE_CLAIMING);
  if ((ret = claim_held (r, &st, flags, err, errlen)) < 0
      || (ret == 1 && (r->unfenced = lg_reserve_fence (r, err, errlen) < 0))) {
    atomic_store (&r->mode, MODE_NONE);
    if (errno == ENOTSUP)
      return unusable (r, no_pr, err);
    return -1;
  }
  probe_writers (r);
  note_gen_now (r, NULL);
  atomic_store (&r->mode, MODE_HELD);
  lg_debug ("%s: reserved (key 0x%016" PRIx64 ")", r->name, r->key);
  return ret;
}

bool
lg_reserve_held (struct lg_reserve *r)
{
  return atomic_load (&r->mode) == MODE_HELD && !atomic_load (&r->lost);
}

bool
lg_reserve_lost (struct lg_reserve *r)
{
  return atomic_load (&r->lost);
}

static void
set_lost (struct lg_reserve *r, const char *why)
{
  pthread_mutex_lock (&r->lock);
  if (!atomic_load (&r->lost)) {
    snprintf (r->msg, sizeof r->msg,
              "%s: lost its reservation (%s): writes fail from now on, "
              "reads go on",
              r->name, why);
    lg_error ("%s", r->msg);
    atomic_store (&r->lost, true);
  }
  pthread_mutex_unlock (&r->lock);
}

void
lg_reserve_conflict (struct lg_reserve *r)
{
  int m = atomic_load (&r->mode);

  if (m == MODE_HELD || m == MODE_CLAIMING)
    atomic_store (&r->doubt, true);
}

void
lg_reserve_taken (struct lg_reserve *r)
{
  lg_reserve_conflict (r);
}

/* After a conflict or a unit attention about the reservation: lost when
 * the target says someone else holds it now; otherwise the conflict was
 * a session that may not write (probed again) or the attention was meant
 * for another nexus of this initiator name. */
static void
settle_doubt (struct lg_reserve *r)
{
  /* The doubt stays set until settled: a writer that comes meanwhile
   * waits here, not past it (the hostile review: a burst of writes
   * after a preempt went out while the first one asked the target). */
  pthread_mutex_lock (&r->redo);
  if (atomic_load (&r->doubt) && !atomic_load (&r->lost)) {
    if (!still_held (r))
      set_lost (r,
                "a write met RESERVATION CONFLICT, or a unit attention "
                "said it was taken, and the target says it is not ours");
    else {
      lg_debug ("%s: still holding the reservation after a conflict or a "
                "unit attention: probing which sessions may write",
                r->name);
      probe_writers (r);
    }
  }
  atomic_store (&r->doubt, false);
  pthread_mutex_unlock (&r->redo);
}

/* The target forgot every reservation (restarted): reserve again. */
static int
reserve_again (struct lg_reserve *r, struct lg_session *s,
               const struct lg_lun_io *io)
{
  char msg[256];
  struct lg_pr_state st;

  if (lg_pr_register (io, r->lun, r->key, msg, sizeof msg) < 0
      || lg_pr_reserve (io, r->lun, r->key, msg, sizeof msg) < 0) {
    int e = errno;
    char why[256];

    /* Another session of ours, logging in at the same time, won. */
    if (e == EPERM && lg_pr_read (io, r->lun, &st, why, sizeof why) == 0
        && st.reserved && st.holder == r->key)
      return 0;
    /* A registrant may write under the other's reservation: not this
     * session any more. */
    if (lg_pr_unregister (io, r->lun, r->key, why, sizeof why) < 0)
      lg_debug ("%s: unregistering: %s", r->name, why);
    if (e == EPERM) {
      set_lost (r,
                "someone else reserved the LUN when the target had "
                "forgotten ours");
      return 0;
    }
    lg_warn ("%s: reserving it again after the login: %s", r->name, msg);
    return -2;
  }
  lg_warn ("%s: the target had forgotten the reservation (restarted?): "
           "reserved it again",
           r->name);
  note_gen_now (r, io);
  /* Where only the reserving nexus may write, that is this one now. */
  if (lg_pool_writers (r->p, r->lun) != 0) {
    lg_pool_set_writers (r->p, r->lun, 1ull << lg_pool_index (r->p, s));
    atomic_store (&r->holder, lg_pool_index (r->p, s));
  }
  return 0;
}

static int after_login (struct lg_reserve *r, struct lg_session *s, bool *kept);

int
lg_reserve_after_login (struct lg_reserve *r, struct lg_session *s, bool *kept)
{
  int ret;

  *kept = false;
  ret = after_login (r, s, kept);
  if (ret < 0)
    lg_reserve_unsure (r);
  return ret;
}

void
lg_reserve_unsure (struct lg_reserve *r)
{
  int m = atomic_load (&r->mode);

  if (m == MODE_HELD || m == MODE_CLAIMING)
    atomic_store (&r->unsure, true);
}

/* A write after a login whose check did not finish: register every
 * session again, reserving first if the target forgot the reservation. */
static void
redo (struct lg_reserve *r)
{
  struct lg_lun_io io = { pool_task, r->p, lg_pool_target (r->p) };
  struct lg_pr_state st;
  char err[256], msg[256];

  /* Writers wait here (unsure stays set until done), so that none goes
   * to a session not registered yet. */
  pthread_mutex_lock (&r->redo);
  if (!atomic_load (&r->unsure) || atomic_load (&r->lost))
    goto out;
  if (lg_reserve_read (r->p, r->lun, &st, err, sizeof err) < 0) {
    lg_warn ("%s", err);
    goto out;
  }
  note_gen (r, &st);
  if (st.reserved && st.holder != r->key) {
    lg_pr_describe (&st, msg, sizeof msg);
    snprintf (err, sizeof err, "now %s", msg);
    set_lost (r, err);
  }
  else if (taken_meanwhile (r, &st))
    set_lost (r,
              "another initiator took the LUN and released it during a "
              "reconnection (the PR generation went up)");
  else if (register_all (r, msg, sizeof msg) < 0
           || (!st.reserved
               && lg_pr_reserve (&io, r->lun, r->key, msg, sizeof msg) < 0)) {
    if (errno == EPERM) {
      unregister_all (r);
      set_lost (r, "someone else reserved the LUN during a reconnection");
    }
    else {
      lg_warn ("%s: registering again: %s", r->name, msg);
      goto out;
    }
  }
  atomic_store (&r->unsure, false);
out:
  pthread_mutex_unlock (&r->redo);
}

static int
after_login (struct lg_reserve *r, struct lg_session *s, bool *kept)
{
  struct lg_lun_io io = { session_task, s, lg_pool_target (r->p) };
  struct lg_pr_state st;
  char msg[256], why[256];
  int m = atomic_load (&r->mode);

  if ((m != MODE_HELD && m != MODE_CLAIMING) || atomic_load (&r->lost))
    return 0;
  if (lg_pr_read (&io, r->lun, &st, msg, sizeof msg) < 0) {
    lg_warn ("%s: checking the reservation after the login: %s", r->name, msg);
    return -2;
  }
  if (!st.supported) {
    set_lost (r, "the LUN no longer reports persistent reservations");
    return 0;
  }
  if (!st.reserved && m == MODE_HELD) {
    if (taken_meanwhile (r, &st)) {
      set_lost (r,
                "another initiator took the LUN and released it while "
                "this gateway was logged out (the PR generation went up)");
      return 0;
    }
    return reserve_again (r, s, &io);
  }
  note_gen (r, &st);
  if (!st.reserved || st.holder == r->key) {
    if (lg_pr_register (&io, r->lun, r->key, msg, sizeof msg) < 0) {
      lg_warn ("%s: registering again after the login: %s", r->name, msg);
      return -2;
    }
    /* Held by this gateway, with a generation no lower than seen: the
     * target kept what it knew (a restart forgets a reservation made
     * without APTPL, and sets the generation back to 0). */
    *kept = m == MODE_HELD && st.reserved
        && st.generation >= atomic_load (&r->gen_seen);
    return 0;
  }
  lg_pr_describe (&st, msg, sizeof msg);
  snprintf (why, sizeof why, "now %s", msg);
  set_lost (r, why);
  return 0;
}

/* lg_reserve_recheck's body, r->redo held. */
static void
recheck_locked (struct lg_reserve *r)
{
  struct lg_lun_io io = { pool_task, r->p, lg_pool_target (r->p) };
  struct lg_pr_state st;
  char err[256], msg[256];
  unsigned events;

  /* After a conflict or a preempt's unit attention, the doubt decides:
   * a LUN preempted and then released must not be taken back. */
  if (atomic_load (&r->mode) != MODE_HELD || atomic_load (&r->lost)
      || atomic_load (&r->doubt))
    return;
  events = lg_pool_pr_events (r->p);
  if (lg_reserve_read (r->p, r->lun, &st, err, sizeof err) < 0)
    ; /* the write's own path says what is wrong */
  else if (note_gen (r, &st), st.reserved && st.holder != r->key) {
    lg_pr_describe (&st, msg, sizeof msg);
    snprintf (err, sizeof err, "now %s", msg);
    set_lost (r, err);
  }
  /* The read itself met the unit attention of a preempt (the nexus was
   * idle since): settle_doubt decides, at the write. */
  else if (!st.reserved && lg_pool_pr_taken (r->p, r->lun, events))
    atomic_store (&r->doubt, true);
  else if (taken_meanwhile (r, &st))
    set_lost (r,
              "another initiator took the LUN and released it (the PR "
              "generation went up)");
  else if (!st.reserved) {
    if (register_all (r, msg, sizeof msg) == 0
        && lg_pr_reserve (&io, r->lun, r->key, msg, sizeof msg) == 0) {
      lg_warn ("%s: the target had forgotten the reservation (the LUN was "
               "reconfigured?): reserved it again",
               r->name);
      probe_writers (r);
      note_gen_now (r, NULL);
    }
    else if (errno == EPERM) {
      unregister_all (r);
      set_lost (r,
                "someone else reserved the LUN after the target had "
                "forgotten ours");
    }
    else {
      lg_warn ("%s: reserving it again: %s", r->name, msg);
      atomic_store (&r->unsure, true);
    }
  }
}

void
lg_reserve_recheck (struct lg_reserve *r)
{
  if (atomic_load (&r->mode) != MODE_HELD || atomic_load (&r->lost)
      || atomic_load (&r->doubt))
    return;
  pthread_mutex_lock (&r->redo);
  recheck_locked (r);
  pthread_mutex_unlock (&r->redo);
}

void
lg_reserve_poll (struct lg_reserve *r, _Atomic int64_t *checked_ms,
                 int64_t now_ms, int64_t period_ms)
{
  if (atomic_load (&r->mode) != MODE_HELD || atomic_load (&r->lost))
    return;
  /* Every writer that finds the poll due waits here: the first reads
   * the reservation, the others go on only once it has (a burst of
   * writes after a quiet spell must not pass while the read that meets
   * a preempt's unit attention is in flight). */
  pthread_mutex_lock (&r->redo);
  if (now_ms - atomic_load (checked_ms) >= period_ms) {
    recheck_locked (r);
    /* Only now: a writer that came meanwhile found it due, and waited. */
    atomic_store (checked_ms, now_ms);
  }
  pthread_mutex_unlock (&r->redo);
}

bool
lg_reserve_refuses (struct lg_reserve *r, char *msg, size_t len)
{
  struct lg_pr_state st;
  char err[256], who[320];
  bool ask;

  if (atomic_load (&r->unsure))
    redo (r);
  if (atomic_load (&r->doubt))
    settle_doubt (r);
  if (!atomic_load (&r->lost))
    return false;
  pthread_mutex_lock (&r->lock);
  ask = !r->named;
  r->named = true;
  pthread_mutex_unlock (&r->lock);
  if (ask && lg_reserve_read (r->p, r->lun, &st, err, sizeof err) == 0) {
    lg_pr_describe (&st, who, sizeof who);
    lg_error ("%s: held now: %s", r->name, who);
  }
  pthread_mutex_lock (&r->lock);
  snprintf (msg, len, "%s", r->msg);
  pthread_mutex_unlock (&r->lock);
  return true;
}

/* Writes of unknown outcome in the pool after waiting up to
 * RELEASE_WAIT_MS for the target to confirm them (a stopping session
 * aborts what is not answered within 1 s: session.h). */
#define RELEASE_WAIT_MS 5000
static unsigned
unconfirmed (struct lg_reserve *r)
{
  unsigned n = lg_pool_doubts (r->p, r->lun);

  for (int waited = 0; n > 0 && waited < RELEASE_WAIT_MS; waited += 100) {
    struct timespec ts = { 0, 100 * 1000 * 1000 };

    nanosleep (&ts, NULL);
    n = lg_pool_doubts (r->p, r->lun);
  }
  return n;
}

/* CLEAR, which also drops the registrations of nexuses the target kept
 * from before a reconnection.  Never while a write of this process may
 * still execute in the target: the next gateway would be admitted, write,
 * and then have that write land over its own.  Where only the holder's
 * session may send PR OUT (LIO) and it is not logged in (the process
 * stops during a reconnection), the holder's nexus is logged into once
 * more for it. */
static void
release (struct lg_reserve *r)
{
  struct lg_lun_io io = { pool_task, r->p, lg_pool_target (r->p) };
  int h = atomic_load (&r->holder);
  char msg[256], why[256];
  unsigned n;
  int e;

  if ((n = unconfirmed (r)) > 0) {
    struct lg_pr_state st;

    /* Nothing to keep where the target forgot it (restarted, and the
     * LUN was then refused before it was reserved again). */
    if (lg_reserve_read (r->p, r->lun, &st, why, sizeof why) == 0
        && st.supported && !(st.reserved && st.holder == r->key)) {
      lg_debug ("%s: not reserved to this gateway any more: nothing to "
                "release",
                r->name);
      return;
    }
    lg_warn ("%s: not releasing the reservation: %u write%s of unknown "
             "outcome may still execute in the target, which has not "
             "confirmed that %s cannot; the LUN stays reserved to this "
             "gateway (take it over when the target has settled)",
             r->name, n, n == 1 ? "" : "s", n == 1 ? "it" : "they");
    lg_alive_keep ();
    return;
  }
  if (lg_pr_clear (&io, r->lun, r->key, msg, sizeof msg) == 0)
    return;
  e = errno;
  if (h >= 0 && e != EPERM) {
    uint8_t isid[6];

    lg_session_isid (lg_pool_session (r->p, (unsigned) h), isid);
    if (clear_on_nexus (r, isid, r->key, why, sizeof why) == 0)
      return;
    lg_debug ("%s: %s", r->name, why);
  }
  lg_warn ("%s: releasing the reservation: %s%s", r->name, msg,
           e == EPERM ? ""
                      : ": the LUN may stay reserved to this gateway "
                        "(the next of this host takes it back)");
  /* Not known to be released (no answer, or the CLEAR never reached the
   * target): the proof that this process ended is kept, so that the next
   * gateway of this host takes the LUN back without --takeover, as
   * after a kill -9.  (EPERM: it was not this gateway's any more.) */
  if (e != EPERM)
    lg_alive_keep ();
}

void
lg_reserve_free (struct lg_reserve *r)
{
  if (r == NULL)
    return;
  if (atomic_load (&r->mode) == MODE_HELD && !atomic_load (&r->lost))
    release (r);
  lg_pool_set_writers (r->p, r->lun, 0);
  pthread_mutex_destroy (&r->lock);
  pthread_mutex_destroy (&r->redo);
  free (r);
}

void
lg_reserve_note (struct lg_pool *p, int lun, bool volume)
{
  struct lg_pr_state st;
  char err[256], who[160];

  if (lg_reserve_read (p, lun, &st, err, sizeof err) < 0 || !st.reserved
      || st.holder == lg_pr_my_key ())
    return;
  lg_pr_describe_key (st.holder, who, sizeof who);
  lg_warn ("%s/%d: read-only beside the writer, %s: %s", lg_pool_target (p),
           lun, who,
           volume ? "a unit it rewrites at the moment it is read may read as "
                    "EIO (read it again)"
                  : "what it writes changes under the reader");
}
