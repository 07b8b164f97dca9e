/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* One iSCSI session and its event loop.
 *
 * Threads: lg_session_open / _close run on the caller's thread.  Connect
 * and login run on the session's loop thread before anyone else can see
 * the session.  After that the libiscsi context is shared under s->lock:
 * a submitting thread issues its command and writes it to the socket
 * itself (no hand-off, no wake-up of the loop thread), and the loop thread
 * polls the socket without the lock and takes it to read replies and run
 * the completion callbacks.  The lock is held only while libiscsi works
 * on memory or on a non-blocking socket, never across a round trip.  The
 * loop thread is woken (eventfd) only when it must poll for something new:
 * a socket too full to take a whole command, or a stop.
 *
 * Lock order: s->lock, then a waiter's lock (callbacks complete commands
 * with s->lock held).  Nothing else is taken under either.
 */
#include <config.h>

#include <errno.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "iscsi/session.h"
#include "util/log.h"
#include "util/secret.h"

/* A UNIT ATTENTION (power on, reset, parameters changed) is reported once
 * per I_T nexus and the command is not executed; reissue it a few times. */
#define UA_RETRIES 4

/* libiscsi checks its timeouts only inside iscsi_service: call it at least
 * this often. */
#define SERVICE_INTERVAL_MS 1000

enum phase {
  PHASE_CONNECTING,
  PHASE_LOGGING_IN,
  PHASE_READY,
  PHASE_FAILED,
  PHASE_LOGGED_OUT,
};

struct lg_session {
  struct iscsi_context *ctx; /* loop thread only, after open */
  pthread_t thread;
  int efd; /* eventfd: wakes the loop */
  char portal[300];
  char target[256];
  char initiator[256];
  int connect_timeout;

  /* Open handshake: the loop thread reports the login result. */
  struct lg_waiter opened;
  enum phase phase; /* loop thread; read by open after wait */
  int open_errno;
  char open_err[256];

  pthread_mutex_t lock; /* protects ctx (after open), stopping, dead */
  bool stopping;

  atomic_uint load; /* submitted and not completed */
  bool dead;        /* connection lost */
  char dead_msg[160];
};

/* ---- waiters ---- */

void
lg_waiter_init (struct lg_waiter *w, unsigned n)
{
  atomic_init (&w->pending, n);
  sem_init (&w->sem, 0, 0);
  w->fn = NULL;
  w->opaque = NULL;
}

void
lg_waiter_init_fn (struct lg_waiter *w, unsigned n, void (*fn) (void *),
                   void *opaque)
{
  atomic_init (&w->pending, n);
  w->fn = fn;
  w->opaque = opaque;
}

void
lg_waiter_destroy (struct lg_waiter *w)
{
  if (w->fn == NULL)
    sem_destroy (&w->sem);
}

void
lg_waiter_wait (struct lg_waiter *w)
{
  if (atomic_load (&w->pending) == 0)
    return;
  while (sem_wait (&w->sem) < 0 && errno == EINTR)
    ;
}

void
lg_waiter_done (struct lg_waiter *w)
{
  if (atomic_fetch_sub (&w->pending, 1) == 1) {
    if (w->fn)
      w->fn (w->opaque);
    else
      sem_post (&w->sem);
  }
}

/* ---- login parameters ---- */

int
lg_login_init (struct lg_login *l)
{
  char host[128] = "localhost";
  char name[256];

  memset (l, 0, sizeof *l);
  if (gethostname (host, sizeof host - 1) != 0 || host[0] == '\0')
    strcpy (host, "localhost");
  host[sizeof host - 1] = '\0';
  /* An IQN is lower case; host names are case-insensitive anyway. */
  for (char *p = host; *p; p++)
    if (*p >= 'A' && *p <= 'Z')
      *p = (char) (*p - 'A' + 'a');
  snprintf (name, sizeof name, "iqn.2026-11.org.lungate:%s", host);
  l->initiator_name = strdup (name);
  l->connect_timeout = LG_DEFAULT_CONNECT_TIMEOUT;
  l->io_timeout = LG_DEFAULT_IO_TIMEOUT;
  return l->initiator_name ? 0 : -1;
}

void
lg_login_clear (struct lg_login *l)
{
  free (l->initiator_name);
  free (l->user);
  free (l->target_user);
  lg_secret_free (l->secret);
  lg_secret_free (l->target_secret);
  memset (l, 0, sizeof *l);
}

/* ---- target lists ---- */

void
lg_target_list_free (struct lg_target_list *l)
{
  if (l == NULL)
    return;
  for (size_t i = 0; i < l->n; i++) {
    free (l->t[i].name);
    for (size_t j = 0; j < l->t[i].nportals; j++)
      free (l->t[i].portals[j]);
    free (l->t[i].portals);
  }
  free (l->t);
  free (l);
}

/* libiscsi frees its list when the callback returns: copy it. */
static struct lg_target_list *
copy_targets (const struct iscsi_discovery_address *da)
{
  struct lg_target_list *l = calloc (1, sizeof *l);
  size_t n = 0;

  if (l == NULL)
    return NULL;
  for (const struct iscsi_discovery_address *a = da; a; a = a->next)
    n++;
  l->t = calloc (n ? n : 1, sizeof *l->t);
  if (l->t == NULL)
    goto err;
  for (const struct iscsi_discovery_address *a = da; a; a = a->next) {
    struct lg_target *t = &l->t[l->n++];
    size_t np = 0;

    t->name = strdup (a->target_name ? a->target_name : "");
    if (t->name == NULL)
      goto err;
    for (const struct iscsi_target_portal *p = a->portals; p; p = p->next)
      np++;
    t->portals = calloc (np ? np : 1, sizeof *t->portals);
    if (t->portals == NULL)
      goto err;
    for (const struct iscsi_target_portal *p = a->portals; p; p = p->next) {
      t->portals[t->nportals] = strdup (p->portal ? p->portal : "");
      if (t->portals[t->nportals] == NULL)
        goto err;
      t->nportals++;
    }
  }
  return l;

err:
  lg_target_list_free (l);
  return NULL;
}

/* ---- completion (loop thread) ---- */

static void
complete (struct lg_session *s, struct lg_cmd *cmd)
{
  atomic_fetch_sub (&s->load, 1);
  lg_waiter_done (cmd->waiter);
}

static void issue (struct lg_session *s, struct lg_cmd *cmd);

static void
scsi_cb (struct iscsi_context *ctx, int status, void *command_data,
         void *private_data)
{
  struct lg_cmd *cmd = private_data;
  struct lg_session *s = cmd->session;
  struct scsi_task *task = command_data;

  (void) task;
  cmd->status = status;
  if (status == SCSI_STATUS_CHECK_CONDITION) {
    cmd->sense = cmd->task->sense;
    if (cmd->sense.key == SCSI_SENSE_UNIT_ATTENTION
        && cmd->retries++ < UA_RETRIES && !s->dead) {
      lg_debug ("%s: LUN %d: unit attention (%s), reissuing", s->target,
                cmd->lun, scsi_sense_ascq_str (cmd->sense.ascq));
      /* Reissue the same task: libiscsi reassigns ITT and CmdSN; a
       * CHECK CONDITION carried no data, only sense. */
      cmd->task->status = 0;
      cmd->task->residual = 0;
      cmd->task->residual_status = SCSI_RESIDUAL_NO_RESIDUAL;
      memset (&cmd->task->sense, 0, sizeof cmd->task->sense);
      /* libiscsi left the sense bytes in datain (freed, as by
       * scsi_free_scsi_task, with free). */
      free (cmd->task->datain.data);
      cmd->task->datain.data = NULL;
      cmd->task->datain.size = 0;
      issue (s, cmd);
      return;
    }
  }
  else if (status != SCSI_STATUS_GOOD && status != SCSI_STATUS_CONDITION_MET)
    snprintf (cmd->msg, sizeof cmd->msg, "%s",
              s->dead ? s->dead_msg : iscsi_get_error (ctx));
  complete (s, cmd);
}

static void
discovery_cb (struct iscsi_context *ctx, int status, void *command_data,
              void *private_data)
{
  struct lg_cmd *cmd = private_data;

  cmd->status = status;
  if (status == SCSI_STATUS_GOOD) {
    cmd->targets = copy_targets (command_data);
    if (cmd->targets == NULL) {
      cmd->status = SCSI_STATUS_ERROR;
      snprintf (cmd->msg, sizeof cmd->msg, "out of memory");
    }
  }
  else
    snprintf (cmd->msg, sizeof cmd->msg, "%s", iscsi_get_error (ctx));
  complete (cmd->session, cmd);
}

static void
fail_cmd (struct lg_session *s, struct lg_cmd *cmd, const char *msg)
{
  cmd->status = SCSI_STATUS_ERROR;
  snprintf (cmd->msg, sizeof cmd->msg, "%s", msg);
  complete (s, cmd);
}

static void
issue (struct lg_session *s, struct lg_cmd *cmd)
{
  int r;

  if (s->dead) {
    fail_cmd (s, cmd, s->dead_msg);
    return;
  }
  switch (cmd->kind) {
  case LG_CMD_SCSI:
    if (cmd->iov.iov_base != NULL) {
      if (cmd->task->xfer_dir == SCSI_XFER_WRITE)
        scsi_task_set_iov_out (cmd->task, &cmd->iov, 1);
      else
        scsi_task_set_iov_in (cmd->task, &cmd->iov, 1);
    }
    r = iscsi_scsi_command_async (s->ctx, cmd->lun, cmd->task, scsi_cb, NULL,
                                  cmd);
    break;
  case LG_CMD_DISCOVERY:
    r = iscsi_discovery_async (s->ctx, discovery_cb, cmd);
    break;
  default:
    r = -1;
  }
  if (r != 0)
    fail_cmd (s, cmd, iscsi_get_error (s->ctx));
}

/* ---- connect and login (loop thread) ---- */

/* Turns libiscsi's text into an errno and a sentence a person reads. */
static void
set_open_error (struct lg_session *s, const char *what, const char *libmsg)
{
  const char *st = strstr (libmsg, "Status: ");
  const char *paren = st ? strrchr (st, '(') : NULL;
  int code = paren ? atoi (paren + 1) : -1;
  const char *t = s->target[0] ? s->target : "discovery session";

  s->phase = PHASE_FAILED;
  if (strstr (libmsg, "CHAP_R") != NULL) {
    s->open_errno = EACCES;
    snprintf (s->open_err, sizeof s->open_err,
              "%s: %s: mutual CHAP authentication failed: the target did "
              "not prove it knows the target secret (wrong --target-user or "
              "target secret?)",
              s->portal, t);
  }
  else if (code == 0x0201) {
    s->open_errno = EACCES;
    snprintf (s->open_err, sizeof s->open_err,
              "%s: %s: authentication failed (wrong CHAP user or secret?)",
              s->portal, t);
  }
  else if (code == 0x0202) {
    s->open_errno = EPERM;
    snprintf (s->open_err, sizeof s->open_err,
              "%s: %s: not authorized: the target's ACL does not allow "
              "this initiator",
              s->portal, t);
  }
  else if (code == 0x0203 || code == 0x0204) {
    /* Targets (tgt among them) answer an initiator their ACL refuses as
     * if the target did not exist: say both. */
    s->open_errno = ENOENT;
    snprintf (s->open_err, sizeof s->open_err,
              "%s: %s: target not found, or not authorized: its ACL does "
              "not admit initiator %s",
              s->portal, t, s->initiator);
  }
  else if (strstr (libmsg, "refused")) {
    s->open_errno = ECONNREFUSED;
    snprintf (s->open_err, sizeof s->open_err,
              "%s: cannot connect: Connection refused", s->portal);
  }
  else {
    s->open_errno = strstr (what, "connect") ? ECONNREFUSED : EIO;
    snprintf (s->open_err, sizeof s->open_err, "%s: %s: %s: %s", s->portal, t,
              what, libmsg);
  }
}

static void
login_cb (struct iscsi_context *ctx, int status, void *command_data,
          void *private_data)
{
  struct lg_session *s = private_data;

  (void) command_data;
  if (status != SCSI_STATUS_GOOD)
    set_open_error (s, "login failed", iscsi_get_error (ctx));
  else
    s->phase = PHASE_READY;
}

static void
connect_cb (struct iscsi_context *ctx, int status, void *command_data,
            void *private_data)
{
  struct lg_session *s = private_data;

  (void) command_data;
  if (status != SCSI_STATUS_GOOD) {
    set_open_error (s, "cannot connect", iscsi_get_error (ctx));
    return;
  }
  s->phase = PHASE_LOGGING_IN;
  if (iscsi_login_async (ctx, login_cb, s) != 0)
    set_open_error (s, "login failed", iscsi_get_error (ctx));
}

static int64_t
now_ms (void)
{
  struct timespec ts;

  clock_gettime (CLOCK_MONOTONIC, &ts);
  return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Services the context once, waiting at most timeout_ms.  Returns -1 when
 * libiscsi reports the connection broken. */
static int
service_once (struct lg_session *s, int timeout_ms, int64_t *last_service)
{
  struct pollfd pfd[2];
  int64_t now;
  int r;

  pfd[0].fd = iscsi_get_fd (s->ctx);
  pfd[0].events = (short) iscsi_which_events (s->ctx);
  pfd[0].revents = 0;
  pfd[1].fd = s->efd;
  pfd[1].events = POLLIN;
  pfd[1].revents = 0;
  r = poll (pfd, 2, timeout_ms);
  if (r < 0 && errno != EINTR) {
    lg_error ("%s: poll: %m", s->portal);
    return -1;
  }
  if (pfd[1].revents & POLLIN) {
    uint64_t v;

    if (read (s->efd, &v, sizeof v) < 0 && errno != EAGAIN)
      lg_debug ("eventfd read: %m");
  }
  now = now_ms ();
  if (pfd[0].revents == 0 && now - *last_service < SERVICE_INTERVAL_MS)
    return 0;
  *last_service = now;
  return iscsi_service (s->ctx, pfd[0].revents) < 0 ? -1 : 0;
}

static int
connect_and_login (struct lg_session *s)
{
  int64_t deadline = now_ms () + (int64_t) s->connect_timeout * 1000;
  int64_t last = 0;

  s->phase = PHASE_CONNECTING;
  if (iscsi_connect_async (s->ctx, s->portal, connect_cb, s) != 0) {
    set_open_error (s, "cannot connect", iscsi_get_error (s->ctx));
    return -1;
  }
  while (s->phase == PHASE_CONNECTING || s->phase == PHASE_LOGGING_IN) {
    int64_t left = deadline - now_ms ();

    if (left <= 0) {
      snprintf (s->open_err, sizeof s->open_err, "%s: %s: timed out after %d s",
                s->portal,
                s->phase == PHASE_CONNECTING ? "cannot connect"
                                             : "no answer to login",
                s->connect_timeout);
      s->phase = PHASE_FAILED;
      s->open_errno = ETIMEDOUT;
      return -1;
    }
    if (service_once (s, left < 200 ? (int) left : 200, &last) < 0
        && s->phase != PHASE_FAILED)
      set_open_error (s, "connection lost during login",
                      iscsi_get_error (s->ctx));
  }
  return s->phase == PHASE_READY ? 0 : -1;
}

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
connection_lost (struct lg_session *s)
{
  snprintf (s->dead_msg, sizeof s->dead_msg, "%s: connection lost: %s",
            s->portal, iscsi_get_error (s->ctx));
  lg_error ("%s", s->dead_msg);
  s->dead = true;
  /* XXX: reconnect and reinstate the session (resilience issue).  Until
   * then every command in flight fails, through its callback. */
  iscsi_scsi_cancel_all_tasks (s->ctx);
}

/* One turn of the main loop: poll without the lock, service with it. */
static void
loop_turn (struct lg_session *s, int64_t *last)
{
  struct pollfd pfd[2];
  int64_t now;

  pthread_mutex_lock (&s->lock);
  /* A dead connection's socket reports POLLHUP for ever, whatever the
   * events asked for: leave it out, or this loop spins. */
  pfd[0].fd = s->dead ? -1 : iscsi_get_fd (s->ctx);
  pfd[0].events = s->dead ? 0 : (short) iscsi_which_events (s->ctx);
  pthread_mutex_unlock (&s->lock);
  pfd[0].revents = 0;
  pfd[1].fd = s->efd;
  pfd[1].events = POLLIN;
  pfd[1].revents = 0;
  if (poll (pfd, 2, SERVICE_INTERVAL_MS) < 0 && errno != EINTR) {
    lg_error ("%s: poll: %m", s->portal);
    return;
  }
  if (pfd[1].revents & POLLIN) {
    uint64_t v;

    if (read (s->efd, &v, sizeof v) < 0 && errno != EAGAIN)
      lg_debug ("eventfd read: %m");
  }
  now = now_ms ();
  if (pfd[0].revents == 0 && now - *last < SERVICE_INTERVAL_MS)
    return;
  *last = now;
  pthread_mutex_lock (&s->lock);
  if (!s->dead && iscsi_service (s->ctx, pfd[0].revents) < 0)
    connection_lost (s);
  pthread_mutex_unlock (&s->lock);
}

static void *
loop (void *arg)
{
  struct lg_session *s = arg;
  int64_t last = now_ms ();
  bool stop = false;

  if (connect_and_login (s) < 0) {
    lg_waiter_done (&s->opened);
    return NULL;
  }
  lg_waiter_done (&s->opened);

  while (!stop) {
    loop_turn (s, &last);
    pthread_mutex_lock (&s->lock);
    stop = s->stopping;
    pthread_mutex_unlock (&s->lock);
  }

  /* Log out politely, bounded: the target frees the session at once.  No
   * submitter is left (close requires it), so the lock is not needed. */
  if (!s->dead && iscsi_logout_async (s->ctx, logout_cb, s) == 0) {
    int64_t deadline = now_ms () + 2000;

    while (s->phase != PHASE_LOGGED_OUT && now_ms () < deadline)
      if (service_once (s, 100, &last) < 0)
        break;
  }
  return NULL;
}

/* ---- public ---- */

struct lg_session *
lg_session_open (const struct lg_login *login, const char *portal,
                 const char *target, char *err, size_t errlen)
{
  struct lg_session *s;
  int saved;

  s = calloc (1, sizeof *s);
  if (s == NULL) {
    snprintf (err, errlen, "out of memory");
    return NULL;
  }
  s->efd = -1;
  snprintf (s->portal, sizeof s->portal, "%s", portal);
  snprintf (s->target, sizeof s->target, "%s", target ? target : "");
  snprintf (s->initiator, sizeof s->initiator, "%s", login->initiator_name);
  s->connect_timeout = login->connect_timeout > 0 ? login->connect_timeout
                                                  : LG_DEFAULT_CONNECT_TIMEOUT;
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

  s->ctx = iscsi_create_context (login->initiator_name);
  if (s->ctx == NULL) {
    saved = ENOMEM;
    snprintf (err, errlen, "cannot create an iSCSI context");
    goto err;
  }
  s->efd = eventfd (0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (s->efd < 0) {
    saved = errno;
    snprintf (err, errlen, "eventfd: %s", strerror (saved));
    goto err;
  }
  /* Reconnection is ours to do (and to bound); libiscsi's would re-send
   * queued commands behind our back. */
  iscsi_set_noautoreconnect (s->ctx, 1);
  /* Reuse libiscsi's small allocations (PDUs, tasks' buffers) instead of
   * a malloc and free per command. */
  iscsi_set_cache_allocations (s->ctx, 1);
  iscsi_set_header_digest (s->ctx,
                           login->header_digest ? ISCSI_HEADER_DIGEST_CRC32C
                                                : ISCSI_HEADER_DIGEST_NONE);
  if (target) {
    iscsi_set_session_type (s->ctx, ISCSI_SESSION_NORMAL);
    iscsi_set_targetname (s->ctx, target);
  }
  else
    iscsi_set_session_type (s->ctx, ISCSI_SESSION_DISCOVERY);
  /* XXX: libiscsi keeps its own (malloc'd) copy of the secrets. */
  if (login->user && login->secret
      && iscsi_set_initiator_username_pwd (s->ctx, login->user, login->secret)
          != 0) {
    saved = EINVAL;
    snprintf (err, errlen, "CHAP: %s", iscsi_get_error (s->ctx));
    goto err;
  }
  if (login->target_user && login->target_secret
      && iscsi_set_target_username_pwd (s->ctx, login->target_user,
                                        login->target_secret)
          != 0) {
    saved = EINVAL;
    snprintf (err, errlen, "mutual CHAP: %s", iscsi_get_error (s->ctx));
    goto err;
  }
  if (login->io_timeout > 0)
    iscsi_set_timeout (s->ctx, login->io_timeout);

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
  lg_debug ("%s: logged in to %s", portal,
            target ? target : "discovery session");
  return s;

err:
  if (s->ctx)
    iscsi_destroy_context (s->ctx);
  if (s->efd >= 0)
    close (s->efd);
  lg_waiter_destroy (&s->opened);
  pthread_mutex_destroy (&s->lock);
  free (s);
  errno = saved;
  return NULL;
}

static void
wake (struct lg_session *s)
{
  uint64_t one = 1;

  if (write (s->efd, &one, sizeof one) < 0 && errno != EAGAIN)
    lg_error ("eventfd write: %m");
}

void
lg_session_submit (struct lg_session *s, struct lg_cmd *cmd)
{
  bool need_wake = false;

  cmd->session = s;
  cmd->next = NULL;
  cmd->retries = 0;
  cmd->status = SCSI_STATUS_GOOD;
  cmd->msg[0] = '\0';
  atomic_fetch_add (&s->load, 1);
  pthread_mutex_lock (&s->lock);
  issue (s, cmd);
  /* Write it now, on this thread: the socket is non-blocking, and what
   * does not fit is left for the loop thread, which must then poll for
   * POLLOUT. */
  if (!s->dead && (iscsi_which_events (s->ctx) & POLLOUT)) {
    if (iscsi_service (s->ctx, POLLOUT) < 0)
      connection_lost (s);
    else
      need_wake = (iscsi_which_events (s->ctx) & POLLOUT) != 0;
  }
  pthread_mutex_unlock (&s->lock);
  if (need_wake)
    wake (s);
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

void
lg_session_close (struct lg_session *s)
{
  if (s == NULL)
    return;
  pthread_mutex_lock (&s->lock);
  s->stopping = true;
  pthread_mutex_unlock (&s->lock);
  wake (s);
  pthread_join (s->thread, NULL);
  iscsi_destroy_context (s->ctx);
  close (s->efd);
  lg_waiter_destroy (&s->opened);
  pthread_mutex_destroy (&s->lock);
  free (s);
}
