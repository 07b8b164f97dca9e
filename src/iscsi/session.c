/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* One iSCSI session: its loop thread, open, close and submit.  The rest
 * of a session is in login.c, cmds.c and recovery.c (session-int.h).
 *
 * Threads: lg_session_open / _close run on the caller's thread.  Connect
 * and login run on the session's loop thread before anyone else can see
 * the session, and again while it is down.  While it is up the libiscsi
 * context is shared under s->lock: a submitting thread issues its command
 * and writes it to the socket itself (no hand-off, no wake-up of the loop
 * thread), and the loop thread polls the socket without the lock and takes
 * it to read replies, run the completion callbacks, send keepalives and
 * check timeouts.  The lock is held only while libiscsi works on memory or
 * on a non-blocking socket, never across a round trip.  The loop thread is
 * woken (eventfd) only when it must poll for something new: a socket too
 * full to take a whole command, a BUSY retry, a command nobody else polls
 * for, or a stop.  A submitter that waits for one command polls the
 * socket itself when nobody else does, and the loop thread naps meanwhile
 * (selfpoll.c): at a low queue depth no thread is woken to hand a reply
 * over.
 *
 * Lock order (all of it in doc/locking.md): s->lock, then leaves only:
 * the pool's fence lock (fence.h), its pin_lock (pr_event, always), and
 * what a waiter's fn takes.  A waiter has no lock; a waiter's fn runs
 * with s->lock held and must not submit.
 */
#include <config.h>

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <sodium.h>

#include "iscsi/sense.h"
#include "iscsi/session-int.h"
#include "util/log.h"
#include "util/hooks.h"

/* ---- the loop ---- */

static void
logout_cb (struct iscsi_context *ctx, int status, void *command_data,
           void *private_data)
{
  struct lg_session *s = private_data;

  (void) ctx;
  (void) status;
  (void) command_data;
  s->phase = PHASE_LOGGED_OUT;
}

static void
nop_cb (struct iscsi_context *ctx, int status, void *command_data,
        void *private_data)
{
  struct lg_session *s = private_data;

  (void) ctx;
  (void) command_data;
  if (status == SCSI_STATUS_GOOD)
    s->nops_pending = 0;
}

/* Keepalive (s->lock held, connection up): a NOP-Out every
 * KEEPALIVE_MS; a connection that leaves KEEPALIVE_MISSES of them
 * unanswered, and from which nothing at all came for as long, is dead
 * even if its socket never says so (a link down, a target frozen).  A
 * target still heard from is slow, not gone: on a slow link its NOP-Ins
 * queue behind the Data-In of a long read (test-slow-link-keepalive), and
 * a command it does not answer has its own limit (lg_s_scan). */
static void
keepalive (struct lg_session *s, int64_t now)
{
  const int64_t quiet_ms = (int64_t) KEEPALIVE_MS * KEEPALIVE_MISSES;

  if (now - s->last_keepalive < KEEPALIVE_MS)
    return;
  s->last_keepalive = now;
  if (s->nops_pending >= KEEPALIVE_MISSES) {
    char why[96];

    if (now - s->heard_ms < quiet_ms)
      return; /* no more NOP-Outs piled behind the ones it owes */
    snprintf (why, sizeof why,
              "no answer to keepalive, and nothing heard, for %d s",
              (int) (quiet_ms / 1000));
    lg_s_connection_lost (s, why);
    return;
  }
  if (iscsi_nop_out_async (s->ctx, nop_cb, NULL, 0, s) == 0) {
    s->nops_pending++;
    lg_s_flush_out (s);
  }
}

/* Reissues the BUSY / TASK SET FULL commands whose time has come (s->lock
 * held); returns the ms until the next one, or -1. */
static int64_t
run_delayed (struct lg_session *s, int64_t now)
{
  struct lg_cmd *c = s->delayed, *keep = NULL, *keep_tail = NULL;
  int64_t next = -1;

  s->delayed = s->delayed_tail = NULL;
  while (c) {
    struct lg_cmd *n = c->next;

    if (c->due_ms <= now)
      lg_s_issue (s, c);
    else {
      lg_s_push (&keep, &keep_tail, c);
      if (next < 0 || c->due_ms - now < next)
        next = c->due_ms - now;
    }
    c = n;
  }
  /* issue() may have delayed nothing new here (no callbacks run), so the
   * kept list is the whole list. */
  s->delayed = keep;
  s->delayed_tail = keep_tail;
  lg_s_flush_out (s);
  return next;
}

/* Polls the sockets (pfd from lg_s_poll_set) and the eventfd, or the
 * eventfd alone while napping; then, napping or not, at least once a
 * SERVICE_INTERVAL_MS the sockets without waiting. */
static void
loop_poll (struct lg_session *s, struct pollfd *pfd, unsigned n, bool nap,
           int timeout, int64_t last)
{
  int fd0 = pfd[0].fd, fd2 = pfd[2].fd;

  if (nap)
    pfd[0].fd = pfd[2].fd = -1;
  if (poll (pfd, n, timeout) < 0 && errno != EINTR)
    lg_error ("%s: poll: %m", s->portal);
  if (pfd[1].revents & POLLIN)
    lg_s_efd_drain (s->efd);
  if (nap && lg_mono_ms () - last >= SERVICE_INTERVAL_MS) {
    pfd[0].fd = fd0;
    pfd[2].fd = fd2;
    (void) poll (pfd, n, 0);
  }
}

/* One turn of the loop with the connection up: poll without the lock,
 * service with it.  The loop naps while a submitter polls or nothing is
 * in flight (selfpoll.c). */
static void
loop_up (struct lg_session *s, int64_t *last)
{
  struct pollfd pfd[3] = { { .fd = -1 }, { .fd = -1 }, { .fd = -1 } };
  unsigned n;
  int64_t now, next;
  int timeout = SERVICE_INTERVAL_MS;
  bool nap;

  pthread_mutex_lock (&s->lock);
  lg_s_poll_set (s, pfd, &n);
  next = s->delayed ? run_delayed (s, lg_mono_ms ()) : -1;
  nap = s->poller == POLLER_SUBMITTER
      || (s->poller == POLLER_NONE && lg_s_idle (s));
  if (!nap)
    s->poller = POLLER_LOOP;
  s->loop_napping = nap;
  pthread_mutex_unlock (&s->lock);
  if (nap)
    timeout = s->nap_ms;
  if (next >= 0 && next < timeout)
    timeout = (int) next;
  loop_poll (s, pfd, n, nap, timeout, *last);
  now = lg_mono_ms ();
  pthread_mutex_lock (&s->lock);
  s->loop_napping = false;
  if (s->poller == POLLER_LOOP)
    s->poller = POLLER_NONE;
  /* A submitter may have found the connection dead meanwhile. */
  if (s->up
      && (pfd[0].revents != 0 || (n == 3 && pfd[2].revents != 0)
          || now - *last >= SERVICE_INTERVAL_MS)) {
    *last = now;
    if (lg_s_service (s, pfd[0].revents) < 0 || s->broken) {
      char why[256];

      lg_s_connection_lost (s, lg_s_why (s, why, sizeof why));
    }
  }
  if (s->up)
    keepalive (s, now);
  if (s->up && now - s->last_scan >= SERVICE_INTERVAL_MS) {
    s->last_scan = now;
    lg_s_scan (s, now);
    if (s->up && s->broken)
      lg_s_connection_lost (s,
                            "the target did not answer a task "
                            "management function as asked");
    lg_s_flush_out (s);
  }
  pthread_mutex_unlock (&s->lock);
}

/* ---- the identity check after a login ---- */

/* The LUNs a check must cover: those of held commands, of doubts lost
 * with the connection, and every one the pool checks after every login,
 * however many (s->lock held).  Fills s->vluns: 1, or 0 when none, -1
 * out of memory. */
static int
luns_to_check (struct lg_session *s)
{
  int *always = NULL;
  unsigned cap = 0, nalways = 0;

  /* The pins may change between the two calls (a device opening): ask
   * again until they fit. */
  for (;;) {
    unsigned n;

    if (s->shared == NULL || s->shared->always == NULL)
      break;
    n = s->shared->always (s->shared->opaque, always, nalways);
    if (n <= nalways) {
      nalways = n;
      break;
    }
    free (always);
    if ((always = calloc (n, sizeof *always)) == NULL)
      return -1;
    nalways = n;
  }
  cap = nalways;
  free (s->vluns);
  s->vluns = NULL;
  s->nvluns = 0;
  for (const struct lg_cmd *c = s->held; c; c = c->next)
    cap++;
  for (const struct lg_doubt *d = s->doubts; d; d = d->snext)
    cap += d->lost;
  if (cap == 0 || (s->vluns = calloc (cap, sizeof *s->vluns)) == NULL) {
    free (always);
    return cap == 0 ? 0 : -1;
  }
  for (unsigned i = 0; i < nalways; i++)
    lg_s_add_lun (s->vluns, &s->nvluns, always[i]);
  free (always);
  for (const struct lg_cmd *c = s->held; c; c = c->next)
    lg_s_add_lun (s->vluns, &s->nvluns, c->lun);
  for (const struct lg_doubt *d = s->doubts; d; d = d->snext)
    if (d->lost)
      lg_s_add_lun (s->vluns, &s->nvluns, d->lun);
  return s->nvluns > 0;
}

/* The check cannot run: what was held for the LUNs known fails, and the
 * connection goes again, so that nothing is sent to a LUN unchecked (the
 * next login checks again). */
static void
cannot_check (struct lg_session *s, const char *why)
{
  lg_error ("%s: cannot check the LUNs after the login (%s): logging in "
            "again",
            lg_s_name (s), why);
  for (unsigned i = 0; i < s->nvluns; i++)
    lg_s_lun_changed (s, s->vluns[i], false,
                      "the LUN could not be checked again");
  lg_s_connection_lost (s, "the LUNs could not be checked after the login");
}

static void *
validator (void *arg)
{
  struct lg_session *s = arg;
  int *r = calloc (s->nvluns ? s->nvluns : 1, sizeof *r);

  /* s->vluns is not touched by the loop while validating is set. */
  for (unsigned i = 0; r && i < s->nvluns; i++)
    r[i] = s->shared->validate (s->shared->opaque, s, s->vluns[i]);
  pthread_mutex_lock (&s->lock);
  /* Could not tell because the connection went again: the next login
   * checks again. */
  for (unsigned i = 0; i < s->nvluns; i++)
    if (r && r[i] == -3)
      lg_s_lun_refuse_writes (s, s->vluns[i],
                              "writes refused: the reservation was lost "
                              "during the outage");
    else if (r == NULL || r[i] == -1 || (r[i] < 0 && s->up))
      lg_s_lun_changed (s, s->vluns[i], r && r[i] == -1,
                        r && r[i] == -1 ? "the LUN changed identity"
                                        : "the LUN could not be checked "
                                          "again after the login");
  s->validating = false;
  if (s->up && !atomic_load (&s->stopping))
    lg_s_recover (s);
  pthread_mutex_unlock (&s->lock);
  free (r);
  return NULL;
}

/* A thread of the session's own joins only the loop thread's wait for
 * a check that ended (loop thread, s->lock not held). */
static void
join_validator (struct lg_session *s)
{
  if (s->validator_started) {
    pthread_join (s->validator, NULL);
    s->validator_started = false;
  }
}

/* Logged in again (s->lock held): the LUNs of what was held are checked
 * first, on a thread of their own, since the check waits for commands
 * this loop serves; then recovery.  Everything but the check's commands
 * is held meanwhile. */
void
lg_s_after_login (struct lg_session *s)
{
  int err, n = 0;

  if (s->shared && s->shared->validate && (n = luns_to_check (s)) < 0) {
    cannot_check (s, "out of memory");
    return;
  }
  if (n == 0) {
    lg_s_recover (s);
    return;
  }
  s->validating = s->recovering = true;
  lg_s_set_ready (s);
  if ((err = pthread_create (&s->validator, NULL, validator, s)) != 0) {
    s->validating = s->recovering = false;
    cannot_check (s, strerror (err));
    return;
  }
  s->validator_started = true;
}

/* Waits on the eventfd only (a stop, or nothing), at most ms. */
static void
nap (struct lg_session *s, int64_t ms)
{
  struct pollfd pfd = { .fd = s->efd, .events = POLLIN, .revents = 0 };

  if (ms <= 0)
    return;
  if (poll (&pfd, 1, ms > SERVICE_INTERVAL_MS ? SERVICE_INTERVAL_MS : (int) ms)
          > 0
      && (pfd.revents & POLLIN))
    lg_s_efd_drain (s->efd);
}

/* Whether this login is news for the pool: the first of its sessions to
 * log in again at this portal (lg_s_first_say; the time it took is left
 * out of the line's identity). */
static bool
said_login (struct lg_session *s)
{
  char key[sizeof s->target + sizeof s->portal + 32];

  snprintf (key, sizeof key, "%s: logged in again at %s", s->target, s->portal);
  return lg_s_first_say (s, key);
}

/* One turn of the loop with the connection down: after a backoff, log in
 * again (to the next portal when one fails) and reissue what was held;
 * past the outage budget, fail what waits and whatever comes, and go on
 * trying.  Never spins: every attempt is followed by a backoff of up to
 * MAX_BACKOFF_MS. */
static void
loop_down (struct lg_session *s)
{
  int64_t now = lg_mono_ms (), limit = -1;
  pthread_mutex_lock (&s->lock);
  lg_s_drop_ctx (s);
  if (!s->failing && s->budget_s > 0
      && now - s->down_since >= (int64_t) s->budget_s * 1000) {
    char why[sizeof s->dead_msg];

    snprintf (why, sizeof why, "%s", s->dead_msg);
    snprintf (s->dead_msg, sizeof s->dead_msg,
              "%s: unreachable for %d s (the outage budget): %s", s->target,
              s->budget_s, why);
    lg_error ("%s; failing requests until it is back", s->dead_msg);
    s->failing = true;
    lg_s_set_ready (s);
    lg_s_fail_waiting (s);
  }
  lg_s_scan (s, now);
  if (!s->failing && s->budget_s > 0)
    limit = s->down_since + (int64_t) s->budget_s * 1000 - now;
  pthread_mutex_unlock (&s->lock);
  if (s->discovery) {
    nap (s, SERVICE_INTERVAL_MS);
    return;
  }
  if (now < s->next_attempt) {
    nap (s,
         limit >= 0 && limit < s->next_attempt - now ? limit
                                                     : s->next_attempt - now);
    return;
  }

  join_validator (s);
  if (lg_s_connect_any (s, limit) < 0) {
    if (s->open_errno == ECANCELED)
      return;
    /* Say it when it changes, and every 30 s: a wrong secret on a
     * reconnect is as visible as on the first login. */
    if (strcmp (s->open_err, s->last_err) != 0
        || now - s->last_err_log >= 30000) {
      char line[sizeof s->open_err + 160];

      snprintf (line, sizeof line, "%s: reconnecting: %s", s->target,
                s->open_err);
      /* A warning: requests wait within the outage budget (recovery.c
       * says when they start failing). */
      if (lg_s_first_say (s, line))
        lg_warn ("%s", line);
      else
        lg_debug ("%s", line);
      snprintf (s->last_err, sizeof s->last_err, "%s", s->open_err);
      s->last_err_log = now;
    }
    s->cur = (s->cur + 1) % s->nportals;
    s->backoff_ms = s->backoff_ms ? s->backoff_ms * 2 : MIN_BACKOFF_MS;
    if (s->backoff_ms > MAX_BACKOFF_MS)
      s->backoff_ms = MAX_BACKOFF_MS;
    s->next_attempt = lg_mono_ms () + s->backoff_ms / 2
        + (int64_t) randombytes_uniform (s->backoff_ms / 2 + 1);
    return;
  }

  pthread_mutex_lock (&s->lock);
  s->up = true;
  s->failing = false;
  s->nops_pending = 0;
  s->up_since = s->last_keepalive = lg_mono_ms ();
  s->answered = false;
  s->last_err[0] = '\0';
  atomic_fetch_add (&s->reconnects, 1);
  atomic_fetch_add (&s->login_gen, 1);
  /* Once for the pool (the other sessions' logins at debug); a storm is
   * said once a minute. */
  if (s->short_conns <= STORM_AFTER && said_login (s))
    lg_warn ("%s: logged in again at %s after %.1f s", s->target, s->portal,
             (double) (lg_mono_ms () - s->down_since) / 1000.0);
  else if (s->short_conns <= STORM_AFTER)
    lg_debug ("%s: logged in again at %s after %.1f s (another session "
              "of the pool too)",
              s->target, s->portal,
              (double) (lg_mono_ms () - s->down_since) / 1000.0);
  else
    lg_debug ("%s: logged in again at %s (%u short connections)", s->target,
              s->portal, s->short_conns);
  lg_s_after_login (s);
  pthread_mutex_unlock (&s->lock);
}

/* Logs out politely, bounded: the target frees the session at once.  The
 * identity check's thread may still submit (and is refused: stopping), so
 * the context is serviced under the lock. */
static void
log_out (struct lg_session *s)
{
  int64_t deadline = lg_mono_ms () + 2000;
  bool out;

  pthread_mutex_lock (&s->lock);
  out = s->up && iscsi_logout_async (s->ctx, logout_cb, s) == 0;
  pthread_mutex_unlock (&s->lock);
  while (out && s->phase != PHASE_LOGGED_OUT && lg_mono_ms () < deadline) {
    struct pollfd pfd[3];
    unsigned n;

    pthread_mutex_lock (&s->lock);
    lg_s_poll_set (s, pfd, &n);
    pthread_mutex_unlock (&s->lock);
    if (poll (pfd, n, 100) < 0 && errno != EINTR)
      break;
    pthread_mutex_lock (&s->lock);
    out = lg_s_service (s, pfd[0].revents) == 0;
    pthread_mutex_unlock (&s->lock);
  }
}

/* The session's first login.  A connection that closes during the login
 * (a reset on a flaky link, a target restarting) is tried again within
 * the connect timeout, as open-iscsi does; an answer (a refusal, a wrong
 * secret), a refused connection or a timeout ends it at once. */
static int
first_login (struct lg_session *s)
{
  int64_t until = lg_mono_ms () + (int64_t) s->connect_timeout * 1000;

  for (unsigned tries = 1;; tries++) {
    int64_t left = until - lg_mono_ms ();

    if (lg_s_connect_any (s, tries == 1 ? -1 : left) == 0)
      return 0;
    left = until - lg_mono_ms ();
    /* Another attempt only with a second left after the nap: less would
     * end in a timeout that names that slice, not the connect timeout. */
    if (!s->open_lost || left < 1500 || atomic_load (&s->stopping))
      return -1;
    lg_debug ("%s: %s (attempt %u): trying again", s->portal, s->open_err,
              tries);
    for (int t = 0; t < 10 && !atomic_load (&s->stopping); t++)
      nanosleep (&(struct timespec){ 0, 50 * 1000000L }, NULL);
  }
}

static void *
loop (void *arg)
{
  struct lg_session *s = arg;
  int64_t last = lg_mono_ms ();

  if (first_login (s) < 0) {
    lg_waiter_done (&s->opened);
    return NULL;
  }
  pthread_mutex_lock (&s->lock);
  s->up = true;
  s->up_since = s->last_keepalive = lg_mono_ms ();
  lg_s_set_ready (s);
  pthread_mutex_unlock (&s->lock);
  lg_waiter_done (&s->opened);

  while (!atomic_load (&s->stopping)) {
    bool up;

    pthread_mutex_lock (&s->lock);
    up = s->up;
    pthread_mutex_unlock (&s->lock);
    if (up)
      loop_up (s, &last);
    else
      loop_down (s);
  }

  log_out (s);
  return NULL;
}

/* ---- public ---- */

struct lg_session *
lg_session_open (const struct lg_login *login, const char *portal,
                 const char *target, const struct lg_shared *shared, char *err,
                 size_t errlen)
{
  struct lg_session *s;
  const char *nap;
  int saved;

  s = calloc (1, sizeof *s);
  if (s == NULL) {
    snprintf (err, errlen, "out of memory");
    return NULL;
  }
  s->efd = s->pefd = -1;
  s->login = login;
  /* Tests stretch the nap, so that a command issued while the loop naps
   * with nobody polling for it shows as a wait of seconds, not of one. */
  s->nap_ms = SERVICE_INTERVAL_MS;
  if ((nap = lg_test_hook ("LUNGATE_TEST_NAP_MS")) != NULL) {
    long ms = strtol (nap, NULL, 10);

    if (ms >= 100 && ms <= 60000)
      s->nap_ms = (int) ms;
  }
  s->shared = shared;
  s->fence = shared ? shared->fence : NULL;
  if (s->fence == NULL) {
    s->fence = lg_fence_new ();
    s->own_fence = true;
    if (s->fence == NULL) {
      snprintf (err, errlen, "out of memory");
      free (s);
      return NULL;
    }
  }
  /* portal: one or more, separated by spaces. */
  for (const char *p = portal; *p && s->nportals < LG_MAX_PORTALS;) {
    size_t len = strcspn (p, " ");

    if (len > 0 && len < sizeof s->portals[0]) {
      memcpy (s->portals[s->nportals], p, len);
      s->portals[s->nportals++][len] = '\0';
    }
    p += len;
    p += strspn (p, " ");
  }
  if (s->nportals == 0) {
    snprintf (err, errlen, "no portal");
    if (s->own_fence)
      lg_fence_free (s->fence);
    free (s);
    errno = EINVAL;
    return NULL;
  }
  snprintf (s->portal, sizeof s->portal, "%s", s->portals[0]);
  snprintf (s->target, sizeof s->target, "%s", target ? target : "");
  snprintf (s->initiator, sizeof s->initiator, "%s", login->initiator_name);
  s->discovery = target == NULL;
  s->connect_timeout = login->connect_timeout > 0 ? login->connect_timeout
                                                  : LG_DEFAULT_CONNECT_TIMEOUT;
  s->budget_s = login->io_timeout;
  /* The ISID is this session's for its whole life (see make_context). */
  s->isid_rnd
      = login->isid_set ? login->isid_rnd : randombytes_uniform (1u << 22);
  s->isid_qual
      = login->isid_set ? login->isid_qual : randombytes_uniform (1u << 16);
  {
    pthread_mutexattr_t a;

    /* Held for microseconds by several threads: spin a little before
     * sleeping. */
    pthread_mutexattr_init (&a);
    pthread_mutexattr_settype (&a, PTHREAD_MUTEX_ADAPTIVE_NP);
    pthread_mutex_init (&s->lock, &a);
    pthread_mutexattr_destroy (&a);
  }
  lg_waiter_init (&s->opened, 1);
  s->efd = eventfd (0, EFD_CLOEXEC | EFD_NONBLOCK);
  s->pefd = eventfd (0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (s->efd < 0 || s->pefd < 0) {
    saved = errno;
    snprintf (err, errlen, "eventfd: %s", strerror (saved));
    goto err;
  }
  if ((saved = pthread_create (&s->thread, NULL, loop, s)) != 0) {
    snprintf (err, errlen, "pthread_create: %s", strerror (saved));
    goto err;
  }
  lg_waiter_wait (&s->opened);
  if (s->phase != PHASE_READY) {
    pthread_join (s->thread, NULL);
    saved = s->open_errno ? s->open_errno : EIO;
    snprintf (err, errlen, "%s", s->open_err);
    goto err;
  }
  lg_debug ("%s: logged in to %s", s->portal,
            target ? target : "discovery session");
  return s;

err:
  lg_s_drop_ctx (s);
  if (s->efd >= 0)
    close (s->efd);
  if (s->pefd >= 0)
    close (s->pefd);
  lg_waiter_destroy (&s->opened);
  pthread_mutex_destroy (&s->lock);
  if (s->own_fence)
    lg_fence_free (s->fence);
  free (s);
  errno = saved;
  return NULL;
}

void
lg_session_submit (struct lg_session *s, struct lg_cmd *cmd)
{
  bool need_wake, self_poll;

  cmd->session = s;
  cmd->next = cmd->prev = NULL;
  cmd->doubt = NULL;
  cmd->tmf = NULL;
  cmd->state = CMD_IDLE;
  cmd->confirmed = cmd->expired = false;
  cmd->retries = 0;
  cmd->trouble_ms = 0;
  /* The pool may have set it before it waited at the fence. */
  if (cmd->first_ms == 0)
    cmd->first_ms = lg_mono_ms ();
  cmd->status = SCSI_STATUS_GOOD;
  cmd->msg[0] = '\0';
  /* The waiter's only command left: its thread may poll for it. */
  self_poll = cmd->waiter && cmd->waiter->fn == NULL
      && atomic_load (&cmd->waiter->pending) == 1;
  if (self_poll)
    cmd->waiter->home = s;
  atomic_fetch_add (&s->load, 1);
  pthread_mutex_lock (&s->lock);
  lg_s_issue (s, cmd);
  /* Write it now, on this thread: what does not fit is left for the loop
   * thread, which must then poll for POLLOUT.  A napping loop must poll
   * for a command whose submitter will not. */
  need_wake = lg_s_flush_out (s)
      || (!self_poll && s->loop_napping && s->poller == POLLER_NONE);
  pthread_mutex_unlock (&s->lock);
  if (need_wake)
    lg_s_wake (s);
}

struct lg_target_list *
lg_discover (const struct lg_login *login, const char *portal, char *err,
             size_t errlen)
{
  struct lg_session *s;
  struct lg_cmd cmd;

  s = lg_session_open (login, portal, NULL, NULL, err, errlen);
  if (s == NULL)
    return NULL;
  memset (&cmd, 0, sizeof cmd);
  cmd.kind = LG_CMD_DISCOVERY;
  lg_session_exec (s, &cmd);
  lg_session_close (s);
  if (cmd.status != SCSI_STATUS_GOOD) {
    snprintf (err, errlen, "%s: SendTargets discovery failed: %s", portal,
              cmd.msg[0] ? cmd.msg
                         : "the connection was closed (by the target or the "
                           "network)");
    return NULL;
  }
  if (cmd.targets->dropped)
    lg_warn ("%s: SendTargets: %zu target(s) left out (a name that is not "
             "1-%d bytes of printable ASCII without space or '/', a repeated "
             "name, or more than %d targets)",
             portal, cmd.targets->dropped, LG_ISCSI_NAME_MAX, LG_TARGETS_MAX);
  if (cmd.targets->dropped_portals)
    lg_warn ("%s: SendTargets: %zu target address(es) left out (not 1-%d "
             "bytes of printable ASCII, or more than %d for one target)",
             portal, cmd.targets->dropped_portals, LG_TARGET_ADDRESS_MAX,
             LG_TARGET_PORTALS_MAX);
  return cmd.targets;
}

void
lg_session_exec_now (struct lg_session *s, struct lg_cmd *cmd)
{
  cmd->priority = true;
  lg_session_exec (s, cmd);
  cmd->priority = false;
}

int
lg_session_task_now (struct lg_session *s, int lun, struct scsi_task *task,
                     void *buf, size_t buflen, char *msg, size_t len)
{
  struct lg_cmd cmd;
  int err;

  memset (&cmd, 0, sizeof cmd);
  cmd.kind = LG_CMD_SCSI;
  cmd.task = task;
  cmd.lun = lun;
  cmd.iov.iov_base = buf;
  cmd.iov.iov_len = buflen;
  lg_session_exec_now (s, &cmd);
  err = lg_cmd_errno (&cmd, msg, len);
  if (err) {
    errno = err;
    return -1;
  }
  return 0;
}

void
lg_session_exec (struct lg_session *s, struct lg_cmd *cmd)
{
  struct lg_waiter w;

  lg_waiter_init (&w, 1);
  cmd->waiter = &w;
  lg_session_submit (s, cmd);
  lg_waiter_wait (&w);
  lg_waiter_destroy (&w);
  cmd->waiter = NULL;
}

unsigned
lg_session_load (const struct lg_session *s)
{
  return atomic_load (&s->load);
}

int
lg_session_health (const struct lg_session *s)
{
  return atomic_load (&s->health);
}

unsigned
lg_session_generation (const struct lg_session *s, bool logins)
{
  return atomic_load (logins ? &s->login_gen : &s->lun_gen);
}

unsigned
lg_session_reconnects (const struct lg_session *s)
{
  return atomic_load (&s->reconnects);
}

unsigned
lg_session_retries (const struct lg_session *s)
{
  return atomic_load (&s->retries);
}

unsigned
lg_session_timeouts (const struct lg_session *s)
{
  return atomic_load (&s->timeouts);
}

unsigned
lg_session_lun_events (const struct lg_session *s)
{
  return atomic_load (&s->lun_events);
}

void
lg_session_abandon (struct lg_session *s, const char *why)
{
  if (s == NULL)
    return;
  pthread_mutex_lock (&s->lock);
  /* A budget of 0 fails whatever gets into trouble from now on at once;
   * what waits for a connection now fails now; what the target does not
   * answer is aborted after ABANDON_ABORT_MS (lg_s_scan).  A target that
   * answers still serves the last flush and the reservation's release. */
  s->budget_s = 0;
  s->abandoning = true;
  if (!s->up) {
    snprintf (s->dead_msg, sizeof s->dead_msg, "%s: %s", s->target, why);
    s->failing = true;
  }
  lg_s_fail_waiting (s);
  lg_s_set_ready (s);
  pthread_mutex_unlock (&s->lock);
  lg_s_wake (s);
}

void
lg_session_hurry (struct lg_session *s, int secs)
{
  if (s == NULL)
    return;
  pthread_mutex_lock (&s->lock);
  if (s->budget_s < 0 || s->budget_s > secs)
    s->budget_s = secs;
  pthread_mutex_unlock (&s->lock);
  lg_s_wake (s);
}

void
lg_session_close (struct lg_session *s)
{
  if (s == NULL)
    return;
  atomic_store (&s->stopping, true);
  lg_s_wake (s);
  pthread_join (s->thread, NULL);
  /* Nothing should be pending (see session.h); whatever is fails rather
   * than leaks, and a write among it stays fenced. */
  pthread_mutex_lock (&s->lock);
  snprintf (s->dead_msg, sizeof s->dead_msg, "%s: session closed", s->portal);
  s->failing = true;
  if (s->ctx && (s->inflight || s->tmfs))
    lg_s_connection_lost (s, "session closed");
  s->up = false;
  lg_s_set_ready (s);
  lg_s_fail_waiting (s);
  lg_s_drop_doubts (s);
  pthread_mutex_unlock (&s->lock);
  /* A submitter that polled for a command failed just now may still be
   * on its way out of the session (selfpoll.c). */
  while (atomic_load (&s->npollers) > 0)
    nanosleep (&(struct timespec){ .tv_nsec = 1000000 }, NULL);
  /* Its commands fail at once now. */
  join_validator (s);
  free (s->vluns);
  lg_s_drop_ctx (s);
  if (s->own_fence)
    lg_fence_free (s->fence);
  close (s->efd);
  close (s->pefd);
  lg_waiter_destroy (&s->opened);
  pthread_mutex_destroy (&s->lock);
  free (s);
}

const struct lg_login *
lg_session_login (const struct lg_session *s)
{
  return s->login;
}

void
lg_session_isid (const struct lg_session *s, uint8_t isid[6])
{
  /* As libiscsi's iscsi_set_isid_random lays it out. */
  isid[0] = 0x80;
  isid[1] = (uint8_t) (s->isid_rnd >> 16);
  isid[2] = (uint8_t) (s->isid_rnd >> 8);
  isid[3] = (uint8_t) s->isid_rnd;
  isid[4] = (uint8_t) (s->isid_qual >> 8);
  isid[5] = (uint8_t) s->isid_qual;
}
