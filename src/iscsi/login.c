/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Logging in: the login parameters, a libiscsi context made for this
 * session, connect and login with a deadline, and the portals tried in
 * turn.
 *
 * Threads: the session's loop thread, on a context that nobody else sees
 * yet (before the open returns, or while the session is down), so
 * s->lock is not needed.  The parameters are the caller's.
 *
 * The same initiator name and ISID on every login: the target reinstates
 * the session (tgt closes the old connection).  That does NOT abort a
 * command already in tgt's backing store, so nothing here is taken as a
 * confirmation that an old command is gone: recovery.c asks for one.
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "iscsi/relay.h"
#include "iscsi/session-int.h"
#include "util/log.h"
#include "util/secret.h"
#include "util/hooks.h"

/* ---- login parameters ---- */

int
lg_login_init (struct lg_login *l)
{
  char host[128] = "localhost";
  char name[256];
  const char *no_relay;

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
  no_relay = lg_test_hook ("LUNGATE_NO_RELAY");
  l->no_relay = no_relay != NULL && strcmp (no_relay, "1") == 0;
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

/* libiscsi's error text, fit for a log line: no trailing newline, and its
 * words for a connection that just closed replaced by what happened. */
const char *
lg_s_why (struct lg_session *s, char *buf, size_t len)
{
  const char *e = s->ctx ? iscsi_get_error (s->ctx) : NULL;
  size_t n;

  if (s->relay && lg_relay_error (s->relay)[0]) {
    /* What the relay saw comes first: libiscsi only saw a closed socket. */
    if (lg_relay_broke_protocol (s->relay)) {
      s->answered = false; /* no connection that broke it counts as working */
      snprintf (buf, len, "the target broke the protocol: %s",
                lg_relay_error (s->relay));
    }
    else
      snprintf (buf, len, "%s", lg_relay_error (s->relay));
    return buf;
  }
  /* libiscsi's text stays from whatever failed last (a unit attention's
   * sense, long ago): only a text the failing service set is the cause;
   * none means the socket closed. */
  if (e == NULL || *e == '\0' || strcmp (e, s->err_before) == 0
      || strstr (e, "reconnect_if_loggedin") != NULL)
    e = "the connection was closed (by the target or the network)";
  snprintf (buf, len, "%s", e);
  n = strlen (buf);
  while (n > 0
         && (buf[n - 1] == '\n' || buf[n - 1] == ' ' || buf[n - 1] == '.'))
    buf[--n] = '\0';
  return buf;
}

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
  else if (code == 0x0201 && (s->login->user == NULL || !*s->login->user)) {
    s->open_errno = EACCES;
    snprintf (s->open_err, sizeof s->open_err,
              "%s: %s: authentication failed: the target requires CHAP, "
              "and no user was given (--user and --password-file; plugin: "
              "user= and password=)",
              s->portal, t);
  }
  else if (code == 0x0201) {
    s->open_errno = EACCES;
    snprintf (s->open_err, sizeof s->open_err,
              "%s: %s: authentication failed (wrong CHAP user or secret?)",
              s->portal, t);
  }
  else if (strstr (libmsg, "resolv") != NULL) {
    s->open_errno = ECONNREFUSED;
    snprintf (s->open_err, sizeof s->open_err,
              "%s: cannot connect: the host name does not resolve", s->portal);
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
  if (status == SCSI_STATUS_REDIRECT) {
    const char *a = iscsi_get_target_address (ctx);

    snprintf (s->redirect, sizeof s->redirect, "%s", a ? a : "");
    s->redirect[strcspn (s->redirect, ",")] = '\0'; /* the ,TPGT */
    s->phase = PHASE_REDIRECTED;
  }
  else if (status != SCSI_STATUS_GOOD)
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
  if (!s->login->no_relay) {
    char err[256];

    s->relay = lg_relay_attach (iscsi_get_fd (ctx), err, sizeof err);
    if (s->relay == NULL) {
      set_open_error (s, "cannot connect", err);
      return;
    }
  }
  s->phase = PHASE_LOGGING_IN;
  if (iscsi_login_async (ctx, login_cb, s) != 0)
    set_open_error (s, "login failed", iscsi_get_error (ctx));
}

void
lg_s_drop_ctx (struct lg_session *s)
{
  if (s->ctx)
    iscsi_destroy_context (s->ctx);
  s->ctx = NULL;
  if (s->relay) {
    uint64_t copied, spliced;

    lg_relay_bytes (s->relay, &copied, &spliced);
    lg_debug ("%s: relay: %" PRIu64 " bytes copied through, %" PRIu64
              " spliced",
              s->portal, copied, spliced);
  }
  lg_relay_free (s->relay);
  s->relay = NULL;
  /* A submitter that polled the old sockets must not service the new. */
  s->ctx_gen++;
}

void
lg_s_poll_set (struct lg_session *s, struct pollfd *pfd, unsigned *n)
{
  pfd[0].fd = iscsi_get_fd (s->ctx);
  pfd[0].events = (short) iscsi_which_events (s->ctx);
  pfd[0].revents = 0;
  pfd[1].fd = s->efd;
  pfd[1].events = POLLIN;
  pfd[1].revents = 0;
  *n = 2;
  if (s->relay) {
    pfd[2].fd = lg_relay_net_fd (s->relay);
    pfd[2].events = lg_relay_net_events (s->relay);
    pfd[2].revents = 0;
    *n = 3;
  }
}

int
lg_s_service (struct lg_session *s, short revents)
{
  bool in = false;
  int r;

  /* A caller that only sends (a submitter) reads nothing here: what it
   * sends is read after iscsi_service. */
  if (s->relay
      && lg_relay_pump (
             s->relay,
             revents == POLLOUT ? 0 : LG_RELAY_FROM_LIB | LG_RELAY_FROM_NET,
             &in)
          < 0)
    return -1;
  /* Bytes the relay just passed are read now, unless the caller only
   * sends. */
  if (in && revents != POLLOUT)
    revents |= POLLIN;
  /* The target was heard from: a PDU came (the relay saw its header), not
   * a close, which polls as POLLIN too (the hostile review of 35d5979). */
  if (s->relay) {
    int64_t h = lg_relay_heard_ms (s->relay);

    if (h > s->heard_ms)
      s->heard_ms = h;
  }
  else if (revents & POLLIN)
    s->heard_ms = lg_mono_ms ();
  /* What libiscsi says after a failure is its cause only if it changed
   * (lg_s_why). */
  snprintf (s->err_before, sizeof s->err_before, "%s",
            iscsi_get_error (s->ctx) ? iscsi_get_error (s->ctx) : "");
  s->in_service = true;
  r = iscsi_service (s->ctx, revents);
  s->in_service = false;
  if (r < 0)
    return -1;
  /* What libiscsi wrote goes on now, not at the next wake-up.  The
   * target's answer is left for the poll that follows. */
  if (s->relay && lg_relay_pump (s->relay, LG_RELAY_FROM_LIB, &in) < 0)
    return -1;
  return 0;
}

/* Services the context once, waiting at most timeout_ms.  Returns -1 when
 * libiscsi reports the connection broken. */
int
lg_s_service_once (struct lg_session *s, int timeout_ms, int64_t *last_service)
{
  struct pollfd pfd[3];
  unsigned n;
  int64_t now;
  int r;

  lg_s_poll_set (s, pfd, &n);
  r = poll (pfd, n, timeout_ms);
  if (r < 0 && errno != EINTR) {
    lg_error ("%s: poll: %m", s->portal);
    return -1;
  }
  if (pfd[1].revents & POLLIN)
    lg_s_efd_drain (s->efd);
  now = lg_mono_ms ();
  if (pfd[0].revents == 0 && (n < 3 || pfd[2].revents == 0)
      && now - *last_service < SERVICE_INTERVAL_MS)
    return 0;
  *last_service = now;
  return lg_s_service (s, pfd[0].revents);
}

static void
libiscsi_log (int level, const char *msg)
{
  (void) level;
  lg_trace ("libiscsi: %s", msg);
}

/* A new context for this session, with the same initiator name and ISID
 * every time, so that logging in again reinstates the session: the target
 * drops the old connection and frees what it can of the old session's
 * tasks.  (Not a command already in tgt's backing store: see the top of
 * this file.) */
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
  /* No libiscsi timeouts: a timed-out command would be dropped from its
   * lists while the target may still execute it.  recovery.c times
   * commands out itself and aborts them on the target. */
  /* libiscsi's own messages go to our log, at debug level. */
  if (lg_log_get_level () >= LG_LOG_TRACE) {
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
  s->open_lost = false;
  if (iscsi_connect_async (s->ctx, s->portal, connect_cb, s) != 0) {
    set_open_error (s, "cannot connect", iscsi_get_error (s->ctx));
    return -1;
  }
  while (s->phase == PHASE_CONNECTING || s->phase == PHASE_LOGGING_IN) {
    int64_t left = deadline - lg_mono_ms ();

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
    if (lg_s_service_once (s, left < 200 ? (int) left : 200, &last) < 0
        && s->phase != PHASE_FAILED) {
      char why[256];

      set_open_error (s, "connection lost during login",
                      lg_s_why (s, why, sizeof why));
      s->open_lost = true;
    }
  }
  return s->phase == PHASE_READY ? 0 : s->phase == PHASE_REDIRECTED ? 1 : -1;
}

/* The host part of a portal ("host:port", "[v6]:port"). */
static void
portal_host (const char *portal, char *buf, size_t len)
{
  const char *end;

  if (portal[0] == '[') {
    end = strchr (portal, ']');
    snprintf (buf, len, "%.*s", end ? (int) (end - portal - 1) : 0, portal + 1);
    return;
  }
  end = strrchr (portal, ':');
  snprintf (buf, len, "%.*s",
            end ? (int) (end - portal) : (int) strlen (portal), portal);
}

static bool
loopback (const char *host)
{
  return strncmp (host, "127.", 4) == 0 || strcmp (host, "::1") == 0
      || strcmp (host, "localhost") == 0;
}

/* Whether a login redirect to s->redirect may be followed from portal:
 * only to an address the user could have typed, which a loopback portal
 * is not for another host. */
static bool
redirect_ok (struct lg_session *s, const char *portal)
{
  char from[300], to[300];

  portal_host (portal, from, sizeof from);
  portal_host (s->redirect, to, sizeof to);
  if (s->redirect[0] == '\0' || to[0] == '\0') {
    set_open_error (s, "login failed",
                    "redirected with no usable TargetAddress");
    return false;
  }
  if (loopback (from) && !loopback (to)) {
    snprintf (s->open_err, sizeof s->open_err,
              "%s: %s: the target redirects the login from a loopback portal "
              "to %s: refused (give that portal in the URL if it is meant)",
              portal, s->target[0] ? s->target : "discovery session",
              s->redirect);
    s->open_errno = EACCES;
    s->phase = PHASE_FAILED;
    return false;
  }
  if (strcmp (from, to) != 0)
    lg_warn ("%s: %s: login redirected to %s", portal, s->target, s->redirect);
  return true;
}

/* Connects to portal and logs in, following up to MAX_REDIRECTS login
 * redirects. */
static int
login_via (struct lg_session *s, const char *portal, int64_t t)
{
  char err[256];

  snprintf (s->portal, sizeof s->portal, "%s", portal);
  for (int hops = 0;; hops++) {
    int r;

    s->ctx = make_context (s, err, sizeof err);
    if (s->ctx == NULL) {
      s->phase = PHASE_FAILED;
      s->open_errno = ENOMEM;
      snprintf (s->open_err, sizeof s->open_err, "%s", err);
      return -1;
    }
    r = connect_and_login (s, lg_mono_ms () + t, (int) ((t + 999) / 1000));
    if (r <= 0)
      return r;
    lg_s_drop_ctx (s);
    if (hops == MAX_REDIRECTS) {
      snprintf (s->open_err, sizeof s->open_err,
                "%s: %s: the login was redirected %d times (last to %s): "
                "giving up",
                portal, s->target[0] ? s->target : "discovery session",
                MAX_REDIRECTS + 1, s->redirect);
      s->open_errno = ELOOP;
      s->phase = PHASE_FAILED;
      return -1;
    }
    if (!redirect_ok (s, s->portal))
      return -1;
    snprintf (s->portal, sizeof s->portal, "%s", s->redirect);
  }
}

/* Tries each portal in turn, from s->cur, once.  Loop thread; s->ctx is
 * its own (the session is down or not yet open).  On success s->ctx is the
 * logged-in context and s->portal its portal. */
int
lg_s_connect_any (struct lg_session *s, int64_t limit_ms)
{
  for (unsigned k = 0; k < s->nportals; k++) {
    unsigned i = (s->cur + k) % s->nportals;
    int64_t t = (int64_t) s->connect_timeout * 1000;

    if (limit_ms >= 0 && limit_ms < t)
      t = limit_ms < 1000 ? 1000 : limit_ms;
    if (login_via (s, s->portals[i], t) == 0) {
      s->cur = i;
      return 0;
    }
    lg_s_drop_ctx (s);
    if (atomic_load (&s->stopping))
      break;
  }
  return -1;
}
