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
#include <inttypes.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <sodium.h>

#include "iscsi/sense.h"
#include "iscsi/session.h"
#include "util/log.h"
#include "util/secret.h"

/* A UNIT ATTENTION (power on, reset, parameters changed) is reported once
 * per I_T nexus and the command is not executed; reissue it a few times. */
#define UA_RETRIES 4

/* libiscsi checks its timeouts only inside iscsi_service: call it at least
 * this often. */
#define SERVICE_INTERVAL_MS 1000

/* A NOP-Out this often; this many unanswered and the connection is dead. */
#define KEEPALIVE_MS 2000
#define KEEPALIVE_MISSES 3

/* A command without an answer for this long means a connection that is
 * alive but stuck: log in again (which aborts it on the target) and issue
 * it again, at most CMD_TIMEOUT_TRIES times before failing it. */
#define CMD_TIMEOUT_S 30
#define CMD_TIMEOUT_TRIES 3

/* Between two reconnection attempts (jittered, doubling). */
#define MIN_BACKOFF_MS 100
#define MAX_BACKOFF_MS 5000

enum phase {
  PHASE_CONNECTING,
  PHASE_LOGGING_IN,
  PHASE_READY,
  PHASE_FAILED,
  PHASE_LOGGED_OUT,
};

struct lg_session {
  struct iscsi_context *ctx; /* see the lock */
  pthread_t thread;
  int efd;                      /* eventfd: wakes the loop */
  const struct lg_login *login; /* the caller's; outlives the session */
  char portals[LG_MAX_PORTALS][300];
  unsigned nportals;
  unsigned cur;     /* loop thread: the portal in use or tried next */
  char portal[300]; /* the portal in use (for messages) */
  char target[256];
  char initiator[256];
  bool discovery;
  int connect_timeout;
  int budget_s; /* outage budget: > 0 seconds, 0 fail at once, < 0 never */
  uint32_t isid_rnd, isid_qual;

  /* Open handshake: the loop thread reports the login result. */
  struct lg_waiter opened;
  enum phase phase; /* loop thread; read by open after wait */
  int open_errno;
  char open_err[256];

  /* Protects ctx while up, up, failing, the lists, dead_msg, nops. */
  pthread_mutex_t lock;
  atomic_bool stopping;
  bool up;      /* logged in: commands go to ctx */
  bool failing; /* down past the budget: commands fail at once */
  bool broken;  /* libiscsi cancelled tasks: the connection is going */
  char dead_msg[320];
  struct lg_cmd *held, *held_tail;       /* waiting for a connection */
  struct lg_cmd *delayed, *delayed_tail; /* BUSY / TASK SET FULL */
  unsigned nops_pending;
  int64_t last_keepalive;

  /* Loop thread only: the reconnection schedule. */
  int64_t down_since, next_attempt;
  unsigned backoff_ms;
  char last_err[256];
  int64_t last_err_log;

  atomic_uint load; /* submitted and not completed */
  atomic_uint reconnects, retries, lun_events, timeouts;
};

static void connection_lost (struct lg_session *s, const char *why);
static void wake (struct lg_session *s);

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

static void
wake (struct lg_session *s)
{
  uint64_t one = 1;

  if (write (s->efd, &one, sizeof one) < 0 && errno != EAGAIN)
    lg_error ("eventfd write: %m");
}

/* libiscsi's error text, fit for a log line: no trailing newline, and its
 * words for a connection that just closed replaced by what happened. */
static const char *
why_text (struct iscsi_context *ctx, char *buf, size_t len)
{
  const char *e = ctx ? iscsi_get_error (ctx) : NULL;
  size_t n;

  if (e == NULL || *e == '\0')
    e = "unknown error";
  if (strstr (e, "reconnect_if_loggedin") != NULL)
    e = "the connection was closed (by the target or the network)";
  snprintf (buf, len, "%s", e);
  n = strlen (buf);
  while (n > 0
         && (buf[n - 1] == '\n' || buf[n - 1] == ' ' || buf[n - 1] == '.'))
    buf[--n] = '\0';
  return buf;
}

/* ---- command lists (s->lock held) ---- */

static int64_t
now_ms (void)
{
  struct timespec ts;

  clock_gettime (CLOCK_MONOTONIC, &ts);
  return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void
list_push (struct lg_cmd **head, struct lg_cmd **tail, struct lg_cmd *cmd)
{
  cmd->next = NULL;
  if (*tail)
    (*tail)->next = cmd;
  else
    *head = cmd;
  *tail = cmd;
}

/* Makes a task that was cancelled or answered BUSY new again: libiscsi
 * gives it a new ITT and CmdSN when it is issued; the data buffers are the
 * caller's and are sent (or filled) again from their start.  A write keeps
 * its exact bytes, so a crypt-layer unit goes out with its original nonce
 * and tag. */
static void
reset_task (struct lg_cmd *cmd)
{
  struct scsi_task *t = cmd->task;

  t->status = 0;
  t->residual = 0;
  t->residual_status = SCSI_RESIDUAL_NO_RESIDUAL;
  memset (&t->sense, 0, sizeof t->sense);
  /* libiscsi's own data-in (sense bytes, small replies): freed as
   * scsi_free_scsi_task would, with free. */
  free (t->datain.data);
  t->datain.data = NULL;
  t->datain.size = 0;
  t->iovector_in.offset = 0;
  t->iovector_in.consumed = 0;
  t->iovector_out.offset = 0;
  t->iovector_out.consumed = 0;
}

/* ---- completion (loop thread, or a submitter; s->lock held) ---- */

static void
complete (struct lg_session *s, struct lg_cmd *cmd)
{
  atomic_fetch_sub (&s->load, 1);
  lg_waiter_done (cmd->waiter);
}

static void issue (struct lg_session *s, struct lg_cmd *cmd);

static void
fail_cmd (struct lg_session *s, struct lg_cmd *cmd, const char *msg)
{
  cmd->status = SCSI_STATUS_ERROR;
  snprintf (cmd->msg, sizeof cmd->msg, "%s", msg);
  complete (s, cmd);
}

/* Keeps a command until the session is back. */
static void
hold (struct lg_session *s, struct lg_cmd *cmd)
{
  list_push (&s->held, &s->held_tail, cmd);
}

/* Fails every command waiting for the connection or for a retry. */
static void
fail_waiting (struct lg_session *s)
{
  struct lg_cmd *lists[2] = { s->held, s->delayed };

  s->held = s->held_tail = NULL;
  s->delayed = s->delayed_tail = NULL;
  for (int i = 0; i < 2; i++)
    while (lists[i]) {
      struct lg_cmd *c = lists[i];

      lists[i] = c->next;
      fail_cmd (s, c, s->dead_msg);
    }
}

/* How long a BUSY or TASK SET FULL command may keep being retried. */
static bool
may_retry (const struct lg_session *s, const struct lg_cmd *cmd, int64_t now)
{
  if (s->budget_s < 0)
    return true;
  return now - cmd->first_ms < (int64_t) (s->budget_s ? s->budget_s : 1) * 1000;
}

/* -v -v (or nbdkit -D lungate.verbose=1): one line per completed
 * command, with the LUN, the LBA range and the status. */
static void
trace (const struct lg_session *s, const struct lg_cmd *cmd, int status)
{
  const uint8_t *c;
  char range[64] = "";

  if (lg_log_get_level () < LG_LOG_DEBUG || cmd->task == NULL)
    return;
  c = cmd->task->cdb;
  /* The 16-byte CDBs with an LBA and a block count. */
  if (c[0] == 0x88 || c[0] == 0x8a || c[0] == 0x93 || c[0] == 0x91) {
    uint64_t lba = 0;
    uint32_t n = 0;

    for (int i = 2; i < 10; i++)
      lba = lba << 8 | c[i];
    for (int i = 10; i < 14; i++)
      n = n << 8 | c[i];
    snprintf (range, sizeof range, " LBA %" PRIu64 "+%" PRIu32, lba, n);
  }
  lg_debug ("%s/%d: %s%s: %s%s", s->target, cmd->lun, lg_scsi_opname (c[0]),
            range,
            status == SCSI_STATUS_GOOD                  ? "GOOD"
                : status == SCSI_STATUS_CHECK_CONDITION ? "CHECK CONDITION "
                : status == SCSI_STATUS_CANCELLED       ? "cancelled"
                : status == SCSI_STATUS_TIMEOUT         ? "timed out"
                : status == SCSI_STATUS_BUSY            ? "BUSY"
                : status == SCSI_STATUS_TASK_SET_FULL   ? "TASK SET FULL"
                                                        : "failed",
            status == SCSI_STATUS_CHECK_CONDITION
                ? scsi_sense_ascq_str (cmd->task->sense.ascq)
                : "");
}

static void
scsi_cb (struct iscsi_context *ctx, int status, void *command_data,
         void *private_data)
{
  struct lg_cmd *cmd = private_data;
  struct lg_session *s = cmd->session;
  int64_t now;

  (void) command_data;
  /* The connection went away under this command: connection_lost cancels
   * every task, and so does libiscsi itself when the socket fails (then
   * iscsi_service returns and connection_lost follows; s->broken makes
   * sure of it).  Keep the command for the next connection. */
  if (status == SCSI_STATUS_TIMEOUT)
    atomic_fetch_add (&s->timeouts, 1);
  trace (s, cmd, status);
  if (status == SCSI_STATUS_TIMEOUT && !s->discovery
      && ++cmd->timeouts < CMD_TIMEOUT_TRIES) {
    lg_warn ("%s: LUN %d: no answer to a command for %d s", s->target, cmd->lun,
             CMD_TIMEOUT_S);
    status = SCSI_STATUS_CANCELLED;
  }
  if (!s->discovery
      && (status == SCSI_STATUS_CANCELLED
          || (!s->up && status != SCSI_STATUS_GOOD
              && status != SCSI_STATUS_CHECK_CONDITION
              && status != SCSI_STATUS_CONDITION_MET))) {
    reset_task (cmd);
    if (s->up)
      s->broken = true;
    if (s->failing)
      fail_cmd (s, cmd, s->dead_msg);
    else
      hold (s, cmd);
    return;
  }
  cmd->status = status;
  if (status == SCSI_STATUS_CHECK_CONDITION) {
    cmd->sense = cmd->task->sense;
    /* A UNIT ATTENTION (reset, I_T nexus loss after a reconnect,
     * parameters or capacity changed, LUN inventory changed) is reported
     * once per nexus and the command was not executed: issue it again.
     * A changed medium is not transient: the data may not be what the
     * client had, so that fails. */
    if (cmd->sense.key == SCSI_SENSE_UNIT_ATTENTION
        && (cmd->sense.ascq >> 8) != 0x28 && cmd->retries++ < UA_RETRIES) {
      /* Reset, capacity changed, LUN inventory changed: the LUN may not
       * be what it was (dev/iscsi.c checks it again). */
      if ((cmd->sense.ascq >> 8) == 0x29
          || cmd->sense.ascq == SCSI_SENSE_ASCQ_CAPACITY_DATA_HAS_CHANGED
          || cmd->sense.ascq == 0x3f0e)
        atomic_fetch_add (&s->lun_events, 1);
      lg_debug ("%s: LUN %d: unit attention (%s), reissuing", s->target,
                cmd->lun, scsi_sense_ascq_str (cmd->sense.ascq));
      reset_task (cmd);
      issue (s, cmd);
      return;
    }
  }
  else if ((status == SCSI_STATUS_BUSY || status == SCSI_STATUS_TASK_SET_FULL)
           && may_retry (s, cmd, now = now_ms ())) {
    /* Capped, jittered backoff: 1, 2, 4 ... 256 ms, then 256-512 ms. */
    unsigned shift = cmd->retries < 8 ? cmd->retries : 8;
    unsigned base = 1u << shift;

    cmd->retries++;
    atomic_fetch_add (&s->retries, 1);
    lg_debug ("%s: LUN %d: %s, retrying in about %u ms", s->target, cmd->lun,
              status == SCSI_STATUS_BUSY ? "BUSY" : "TASK SET FULL", base);
    reset_task (cmd);
    cmd->due_ms = now + base + (int64_t) randombytes_uniform (base);
    list_push (&s->delayed, &s->delayed_tail, cmd);
    wake (s);
    return;
  }
  else if (status != SCSI_STATUS_GOOD && status != SCSI_STATUS_CONDITION_MET)
    snprintf (cmd->msg, sizeof cmd->msg, "%s",
              s->up ? iscsi_get_error (ctx) : s->dead_msg);
  complete (s, cmd);
}

static void
discovery_cb (struct iscsi_context *ctx, int status, void *command_data,
              void *private_data)
{
  struct lg_cmd *cmd = private_data;

  cmd->status = status;
  if (status == SCSI_STATUS_GOOD) {
    cmd->targets = lg_targets_copy (command_data);
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
issue (struct lg_session *s, struct lg_cmd *cmd)
{
  int r;

  if (!s->up) {
    if (s->failing)
      fail_cmd (s, cmd, s->dead_msg);
    else
      hold (s, cmd);
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

/* Sends what libiscsi has queued, on this thread (the socket is
 * non-blocking).  Returns true when some is left for the loop thread. */
static bool
flush_out (struct lg_session *s)
{
  if (!s->up || !(iscsi_which_events (s->ctx) & POLLOUT))
    return false;
  if (iscsi_service (s->ctx, POLLOUT) < 0 || s->broken) {
    {
      char why[256];

      connection_lost (s, why_text (s->ctx, why, sizeof why));
    }
    return true;
  }
  return (iscsi_which_events (s->ctx) & POLLOUT) != 0;
}

/* The connection is gone (s->lock held, any thread): every command on it
 * is kept for the next one, unless the outage budget is 0. */
static void
connection_lost (struct lg_session *s, const char *why)
{
  if (!s->up)
    return;
  snprintf (s->dead_msg, sizeof s->dead_msg, "%s: connection lost: %s",
            s->portal, why);
  s->up = false;
  s->broken = false;
  s->down_since = now_ms ();
  s->next_attempt = s->down_since;
  s->backoff_ms = 0;
  if (s->discovery || s->budget_s == 0)
    s->failing = true;
  lg_warn ("%s: %s%s", s->target[0] ? s->target : "discovery", s->dead_msg,
           s->failing ? "" : "; reconnecting");
  iscsi_scsi_cancel_all_tasks (s->ctx);
  if (s->failing)
    fail_waiting (s);
  /* The loop thread, which polls this context's socket, destroys it. */
  wake (s);
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

static void
libiscsi_log (int level, const char *msg)
{
  (void) level;
  lg_debug ("libiscsi: %s", msg);
}

/* A new context for this session, with the same initiator name and ISID
 * every time, so that logging in again reinstates the session: the target
 * drops the old connection and aborts its tasks, and a write stuck there
 * can never land after a newer one. */
static struct iscsi_context *
make_context (struct lg_session *s, char *err, size_t errlen)
{
  const struct lg_login *login = s->login;
  struct iscsi_context *ctx = iscsi_create_context (login->initiator_name);

  if (ctx == NULL) {
    snprintf (err, errlen, "cannot create an iSCSI context");
    return NULL;
  }
  iscsi_set_isid_random (ctx, s->isid_rnd, s->isid_qual);
  /* Reconnection is ours to do (and to bound); libiscsi's would re-send
   * queued commands behind our back. */
  iscsi_set_noautoreconnect (ctx, 1);
  iscsi_set_timeout (ctx, CMD_TIMEOUT_S);
  /* libiscsi's own messages go to our log, at debug level. */
  if (lg_log_get_level () >= LG_LOG_DEBUG) {
    iscsi_set_log_fn (ctx, libiscsi_log);
    iscsi_set_log_level (ctx, 2);
  }
  /* Reuse libiscsi's small allocations (PDUs, tasks' buffers) instead of
   * a malloc and free per command. */
  iscsi_set_cache_allocations (ctx, 1);
  iscsi_set_header_digest (ctx,
                           login->header_digest ? ISCSI_HEADER_DIGEST_CRC32C
                                                : ISCSI_HEADER_DIGEST_NONE);
  if (!s->discovery) {
    iscsi_set_session_type (ctx, ISCSI_SESSION_NORMAL);
    iscsi_set_targetname (ctx, s->target);
  }
  else
    iscsi_set_session_type (ctx, ISCSI_SESSION_DISCOVERY);
  /* XXX: libiscsi keeps its own (malloc'd) copy of the secrets. */
  if (login->user && login->secret
      && iscsi_set_initiator_username_pwd (ctx, login->user, login->secret)
          != 0) {
    snprintf (err, errlen, "CHAP: %s", iscsi_get_error (ctx));
    iscsi_destroy_context (ctx);
    return NULL;
  }
  if (login->target_user && login->target_secret
      && iscsi_set_target_username_pwd (ctx, login->target_user,
                                        login->target_secret)
          != 0) {
    snprintf (err, errlen, "mutual CHAP: %s", iscsi_get_error (ctx));
    iscsi_destroy_context (ctx);
    return NULL;
  }
  return ctx;
}

/* Connects s->ctx to s->portal and logs in, giving up at deadline (or when
 * the session is closed). */
static int
connect_and_login (struct lg_session *s, int64_t deadline, int timeout_s)
{
  int64_t last = 0;

  s->phase = PHASE_CONNECTING;
  if (iscsi_connect_async (s->ctx, s->portal, connect_cb, s) != 0) {
    set_open_error (s, "cannot connect", iscsi_get_error (s->ctx));
    return -1;
  }
  while (s->phase == PHASE_CONNECTING || s->phase == PHASE_LOGGING_IN) {
    int64_t left = deadline - now_ms ();

    if (atomic_load (&s->stopping)) {
      s->phase = PHASE_FAILED;
      s->open_errno = ECANCELED;
      snprintf (s->open_err, sizeof s->open_err, "%s: closed", s->portal);
      return -1;
    }
    if (left <= 0) {
      snprintf (s->open_err, sizeof s->open_err, "%s: %s: timed out after %d s",
                s->portal,
                s->phase == PHASE_CONNECTING ? "cannot connect"
                                             : "no answer to login",
                timeout_s);
      s->phase = PHASE_FAILED;
      s->open_errno = ETIMEDOUT;
      return -1;
    }
    if (service_once (s, left < 200 ? (int) left : 200, &last) < 0
        && s->phase != PHASE_FAILED) {
      char why[256];

      set_open_error (s, "connection lost during login",
                      why_text (s->ctx, why, sizeof why));
    }
  }
  return s->phase == PHASE_READY ? 0 : -1;
}

/* Tries each portal in turn, from s->cur, once.  Loop thread; s->ctx is
 * its own (the session is down or not yet open).  On success s->ctx is the
 * logged-in context and s->portal its portal. */
static int
connect_any (struct lg_session *s, int64_t limit_ms)
{
  for (unsigned k = 0; k < s->nportals; k++) {
    unsigned i = (s->cur + k) % s->nportals;
    int64_t t = (int64_t) s->connect_timeout * 1000;
    char err[256];

    if (limit_ms >= 0 && limit_ms < t)
      t = limit_ms < 1000 ? 1000 : limit_ms;
    snprintf (s->portal, sizeof s->portal, "%s", s->portals[i]);
    s->ctx = make_context (s, err, sizeof err);
    if (s->ctx == NULL) {
      s->phase = PHASE_FAILED;
      s->open_errno = ENOMEM;
      snprintf (s->open_err, sizeof s->open_err, "%s", err);
      return -1;
    }
    if (connect_and_login (s, now_ms () + t, (int) ((t + 999) / 1000)) == 0) {
      s->cur = i;
      return 0;
    }
    iscsi_destroy_context (s->ctx);
    s->ctx = NULL;
    if (atomic_load (&s->stopping))
      break;
  }
  return -1;
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
 * unanswered is dead even if its socket never says so (a link down, a
 * target frozen). */
static void
keepalive (struct lg_session *s, int64_t now)
{
  if (now - s->last_keepalive < KEEPALIVE_MS)
    return;
  s->last_keepalive = now;
  if (s->nops_pending >= KEEPALIVE_MISSES) {
    char why[96];

    snprintf (why, sizeof why, "no answer to keepalive for %d s",
              KEEPALIVE_MS * KEEPALIVE_MISSES / 1000);
    connection_lost (s, why);
    return;
  }
  if (iscsi_nop_out_async (s->ctx, nop_cb, NULL, 0, s) == 0) {
    s->nops_pending++;
    flush_out (s);
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
      issue (s, c);
    else {
      list_push (&keep, &keep_tail, c);
      if (next < 0 || c->due_ms - now < next)
        next = c->due_ms - now;
    }
    c = n;
  }
  /* issue() may have delayed nothing new here (no callbacks run), so the
   * kept list is the whole list. */
  s->delayed = keep;
  s->delayed_tail = keep_tail;
  flush_out (s);
  return next;
}

/* One turn of the loop with the connection up: poll without the lock,
 * service with it. */
static void
loop_up (struct lg_session *s, int64_t *last)
{
  struct pollfd pfd[2];
  int64_t now, next;
  int timeout = SERVICE_INTERVAL_MS;

  pthread_mutex_lock (&s->lock);
  pfd[0].fd = iscsi_get_fd (s->ctx);
  pfd[0].events = (short) iscsi_which_events (s->ctx);
  next = s->delayed ? run_delayed (s, now_ms ()) : -1;
  pthread_mutex_unlock (&s->lock);
  if (next >= 0 && next < timeout)
    timeout = (int) next;
  pfd[0].revents = 0;
  pfd[1].fd = s->efd;
  pfd[1].events = POLLIN;
  pfd[1].revents = 0;
  if (poll (pfd, 2, timeout) < 0 && errno != EINTR) {
    lg_error ("%s: poll: %m", s->portal);
    return;
  }
  if (pfd[1].revents & POLLIN) {
    uint64_t v;

    if (read (s->efd, &v, sizeof v) < 0 && errno != EAGAIN)
      lg_debug ("eventfd read: %m");
  }
  now = now_ms ();
  pthread_mutex_lock (&s->lock);
  /* A submitter may have found the connection dead meanwhile. */
  if (s->up && (pfd[0].revents != 0 || now - *last >= SERVICE_INTERVAL_MS)) {
    *last = now;
    if (iscsi_service (s->ctx, pfd[0].revents) < 0 || s->broken) {
      char why[256];

      connection_lost (s, why_text (s->ctx, why, sizeof why));
    }
  }
  if (s->up)
    keepalive (s, now);
  pthread_mutex_unlock (&s->lock);
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
      && (pfd.revents & POLLIN)) {
    uint64_t v;

    if (read (s->efd, &v, sizeof v) < 0 && errno != EAGAIN)
      lg_debug ("eventfd read: %m");
  }
}

/* One turn of the loop with the connection down: after a backoff, log in
 * again (to the next portal when one fails) and reissue what was held;
 * past the outage budget, fail what waits and whatever comes, and go on
 * trying.  Never spins: every attempt is followed by a backoff of up to
 * MAX_BACKOFF_MS. */
static void
loop_down (struct lg_session *s)
{
  int64_t now = now_ms (), limit = -1;
  unsigned n = 0;

  pthread_mutex_lock (&s->lock);
  if (s->ctx) {
    iscsi_destroy_context (s->ctx);
    s->ctx = NULL;
  }
  if (!s->failing && s->budget_s > 0
      && now - s->down_since >= (int64_t) s->budget_s * 1000) {
    char why[sizeof s->dead_msg];

    snprintf (why, sizeof why, "%s", s->dead_msg);
    snprintf (s->dead_msg, sizeof s->dead_msg,
              "%s: unreachable for %d s (the outage budget): %s", s->target,
              s->budget_s, why);
    lg_error ("%s; failing requests until it is back", s->dead_msg);
    s->failing = true;
    fail_waiting (s);
  }
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

  if (connect_any (s, limit) < 0) {
    if (s->open_errno == ECANCELED)
      return;
    /* Say it when it changes, and every 30 s: a wrong secret on a
     * reconnect is as visible as on the first login. */
    if (strcmp (s->open_err, s->last_err) != 0
        || now - s->last_err_log >= 30000) {
      lg_error ("%s: reconnecting: %s", s->target, s->open_err);
      snprintf (s->last_err, sizeof s->last_err, "%s", s->open_err);
      s->last_err_log = now;
    }
    s->cur = (s->cur + 1) % s->nportals;
    s->backoff_ms = s->backoff_ms ? s->backoff_ms * 2 : MIN_BACKOFF_MS;
    if (s->backoff_ms > MAX_BACKOFF_MS)
      s->backoff_ms = MAX_BACKOFF_MS;
    s->next_attempt = now_ms () + s->backoff_ms / 2
        + (int64_t) randombytes_uniform (s->backoff_ms / 2 + 1);
    return;
  }

  pthread_mutex_lock (&s->lock);
  s->up = true;
  s->failing = false;
  s->nops_pending = 0;
  s->last_keepalive = now_ms ();
  s->last_err[0] = '\0';
  atomic_fetch_add (&s->reconnects, 1);
  {
    struct lg_cmd *c = s->held;

    s->held = s->held_tail = NULL;
    while (c) {
      struct lg_cmd *next = c->next;

      issue (s, c);
      n++;
      c = next;
    }
  }
  flush_out (s);
  pthread_mutex_unlock (&s->lock);
  lg_warn ("%s: logged in again at %s after %.1f s; %u commands reissued",
           s->target, s->portal, (double) (now_ms () - s->down_since) / 1000.0,
           n);
}

static void *
loop (void *arg)
{
  struct lg_session *s = arg;
  int64_t last = now_ms ();

  if (connect_any (s, -1) < 0) {
    lg_waiter_done (&s->opened);
    return NULL;
  }
  pthread_mutex_lock (&s->lock);
  s->up = true;
  s->last_keepalive = now_ms ();
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

  /* Log out politely, bounded: the target frees the session at once.  No
   * submitter is left (close requires it), so the lock is not needed. */
  if (s->up && iscsi_logout_async (s->ctx, logout_cb, s) == 0) {
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
  s->login = login;
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
  s->isid_rnd = randombytes_uniform (1u << 22);
  s->isid_qual = randombytes_uniform (1u << 16);
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
  if (s->efd < 0) {
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

void
lg_session_submit (struct lg_session *s, struct lg_cmd *cmd)
{
  bool need_wake;

  cmd->session = s;
  cmd->next = NULL;
  cmd->retries = 0;
  cmd->timeouts = 0;
  cmd->first_ms = now_ms ();
  cmd->status = SCSI_STATUS_GOOD;
  cmd->msg[0] = '\0';
  atomic_fetch_add (&s->load, 1);
  pthread_mutex_lock (&s->lock);
  issue (s, cmd);
  /* Write it now, on this thread: what does not fit is left for the loop
   * thread, which must then poll for POLLOUT. */
  need_wake = flush_out (s);
  pthread_mutex_unlock (&s->lock);
  if (need_wake)
    wake (s);
}

struct lg_target_list *
lg_discover (const struct lg_login *login, const char *portal, char *err,
             size_t errlen)
{
  struct lg_session *s;
  struct lg_cmd cmd;

  s = lg_session_open (login, portal, NULL, err, errlen);
  if (s == NULL)
    return NULL;
  memset (&cmd, 0, sizeof cmd);
  cmd.kind = LG_CMD_DISCOVERY;
  lg_session_exec (s, &cmd);
  lg_session_close (s);
  if (cmd.status != SCSI_STATUS_GOOD) {
    snprintf (err, errlen, "%s: SendTargets discovery failed: %s", portal,
              cmd.msg);
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
lg_session_close (struct lg_session *s)
{
  if (s == NULL)
    return;
  atomic_store (&s->stopping, true);
  wake (s);
  pthread_join (s->thread, NULL);
  /* Nothing may be pending (see session.h); whatever a failed close left
   * waiting fails rather than leaks. */
  pthread_mutex_lock (&s->lock);
  snprintf (s->dead_msg, sizeof s->dead_msg, "%s: session closed", s->portal);
  fail_waiting (s);
  pthread_mutex_unlock (&s->lock);
  if (s->ctx)
    iscsi_destroy_context (s->ctx);
  close (s->efd);
  lg_waiter_destroy (&s->opened);
  pthread_mutex_destroy (&s->lock);
  free (s);
}
