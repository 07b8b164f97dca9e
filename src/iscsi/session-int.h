/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The inside of a session, shared by its files:
 *
 *   login.c     login parameters; a context; connect and log in
 *   cmds.c      the command lists, issuing, completion (scsi_cb)
 *   recovery.c  commands whose outcome is unknown: timeouts, ABORT TASK,
 *               a lost connection, LUN RESET after the next login, the
 *               outage budget
 *   session.c   the loop thread, open, close, submit
 *
 * Every function here expects s->lock held unless it says otherwise.
 */
#ifndef LG_SESSION_INT_H
#define LG_SESSION_INT_H

#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "iscsi/fence.h"
#include "iscsi/session.h"

/* A UNIT ATTENTION (power on, reset, parameters changed) is reported once
 * per I_T nexus and the command is not executed; reissue it.  Targets
 * queue one per event: tgt one REPORTED LUNS DATA HAS CHANGED per LUN
 * added or removed, per LUN, per session, so a reconfiguration of other
 * LUNs leaves many in a row (test-lun-events).  The bound only stops a
 * target that never stops sending them. */
#define UA_RETRIES 256

/* libiscsi advances its state only inside iscsi_service: call it at least
 * this often; the timeouts and the budget are checked as often. */
#define SERVICE_INTERVAL_MS 1000

/* A NOP-Out this often; this many unanswered and the connection is dead. */
#define KEEPALIVE_MS 2000
#define KEEPALIVE_MISSES 3

/* A command without an answer for this long, on a connection that still
 * answers NOP-Outs, is stuck in the target: it is aborted (recovery.c). */
#define CMD_TIMEOUT_MS 30000
#define ABANDON_ABORT_MS 1000 /* after lg_session_abandon */

/* Between two reconnection attempts (jittered, doubling). */
#define MIN_BACKOFF_MS 100
#define MAX_BACKOFF_MS 5000
#define MAX_REDIRECTS 5 /* login redirects followed in a row */
#define LASTED_MS (10 * 1000)
#define STORM_LOG_MS (60 * 1000)
#define STORM_AFTER 10 /* connections that did nothing, in a row */

enum phase {
  PHASE_CONNECTING,
  PHASE_LOGGING_IN,
  PHASE_READY,
  PHASE_FAILED,
  PHASE_REDIRECTED, /* login: the target names another portal */
  PHASE_LOGGED_OUT,
};

/* Where a command is (s->lock). */
enum cmd_state {
  CMD_IDLE,     /* being issued or completed */
  CMD_HELD,     /* s->held: waiting for a connection or for recovery */
  CMD_DELAYED,  /* s->delayed: BUSY / TASK SET FULL, retried later */
  CMD_ISSUED,   /* s->inflight: libiscsi has it */
  CMD_ABORTING, /* s->inflight, and an ABORT TASK for it is in flight */
};

/* Where lg_session_lun_reset waits for its answer (s->lock). */
struct tmf_wait {
  bool done;
  int status; /* SCSI_STATUS_GOOD when answered */
  int answer; /* ISCSI_TMR_* */
};

/* A task management function in flight (ABORT TASK or LUN RESET). */
struct tmf {
  struct tmf *next; /* s->tmfs */
  struct lg_session *s;
  bool reset;            /* LUN RESET of a recovery, else ABORT TASK */
  struct tmf_wait *wait; /* a LUN RESET lg_session_lun_reset waits for */
  int lun;
  struct lg_cmd *cmd;     /* ABORT TASK: the command, until it completes */
  struct lg_doubt *doubt; /* ABORT TASK: its doubt, until resolved */
};

struct lg_session {
  struct iscsi_context *ctx; /* see the lock */
  struct lg_relay *relay;    /* between ctx and the target (relay.h) */
  bool in_service;           /* inside iscsi_service: in a callback */
  char err_before[256];      /* libiscsi's error text before the service */
  pthread_t thread;
  int efd;  /* eventfd: wakes the loop */
  int pefd; /* eventfd: wakes a submitter that polls (selfpoll.c) */
  /* Who polls the socket now (selfpoll.c), and whether the loop thread
   * naps on its eventfd alone meanwhile. */
  enum { POLLER_NONE, POLLER_LOOP, POLLER_SUBMITTER } poller;
  bool loop_napping;
  unsigned ctx_gen;    /* counts the contexts dropped (selfpoll.c) */
  atomic_int npollers; /* submitters inside lg_s_wait_polling */
  int nap_ms; /* the longest nap: SERVICE_INTERVAL_MS (tests stretch it) */
  const struct lg_login *login; /* the caller's; outlives the session */
  char portals[LG_MAX_PORTALS][300];
  unsigned nportals;
  unsigned cur;       /* loop thread: the portal in use or tried next */
  char portal[300];   /* the portal in use (for messages) */
  char redirect[300]; /* login: where the target sent us */
  char target[256];
  char initiator[256];
  bool discovery;
  int connect_timeout;
  int budget_s; /* outage budget: > 0 seconds, 0 fail at once, < 0 never */
  uint32_t isid_rnd, isid_qual;
  struct lg_fence *fence; /* the pool's (or its own: own_fence) */
  bool own_fence;
  const struct lg_shared *shared; /* NULL: no identity check */

  /* The identity check after a login (session.c): its thread, and the
   * LUNs it checks (s->lock). */
  pthread_t validator;
  bool validator_started;
  bool validating;
  int *vluns;
  unsigned nvluns;

  /* Open handshake: the loop thread reports the login result. */
  struct lg_waiter opened;
  enum phase phase; /* loop thread; read by open after wait */
  int open_errno;
  /* The last login attempt failed because the connection closed during
   * it (a reset, not an answer): worth another attempt. */
  bool open_lost;
  char open_err[256];

  /* Protects ctx while up, and every field below but the atomics. */
  pthread_mutex_t lock;
  atomic_bool stopping;
  bool abandoning; /* lg_session_abandon: nothing waits long any more */
  bool up;         /* logged in: commands go to ctx */
  bool failing;    /* down past the budget: commands fail at once */
  bool broken;     /* the connection is going: connection_lost follows */
  bool recovering; /* logged in again, confirming doubts before issuing */
  char dead_msg[320];
  struct lg_cmd *held, *held_tail;       /* waiting for a connection */
  struct lg_cmd *delayed, *delayed_tail; /* BUSY / TASK SET FULL */
  struct lg_cmd *inflight;               /* issued (doubly linked) */
  struct lg_doubt *doubts; /* this session's writes of unknown outcome */
  struct tmf *tmfs;
  unsigned resets_pending;
  unsigned nops_pending;
  int64_t last_keepalive, last_scan, up_since;
  int64_t heard_ms; /* the target last sent bytes (lg_s_service) */

  /* Loop thread only: the reconnection schedule. */
  int64_t down_since, next_attempt;
  /* A connection counts as one that worked only when a command was
   * answered on it or it lasted LASTED_MS; one that did not continues the
   * outage (its budget, its backoff); past STORM_AFTER of them in a row
   * they are counted, not logged, with a summary every STORM_LOG_MS. */
  bool answered;
  unsigned short_conns;
  int64_t short_log_ms;
  unsigned backoff_ms;
  char last_err[256];
  int64_t last_err_log;

  atomic_int health; /* lg_session_health */
  atomic_uint load;  /* submitted and not completed */
  atomic_uint reconnects, retries, lun_events, timeouts;
  /* Generations, never statistics: what revalidation keys on
   * (lg_session_generation).  Counted where reconnects and lun_events
   * are, but changing how those are counted must not change them. */
  atomic_uint login_gen, lun_gen;
};

/* login.c (loop thread, s->lock not needed: the context is its own) */
int lg_s_connect_any (struct lg_session *s, int64_t limit_ms);
int lg_s_service_once (struct lg_session *s, int timeout_ms,
                       int64_t *last_service);
const char *lg_s_why (struct lg_session *s, char *buf, size_t len);
/* The context and its relay: destroyed together. */
void lg_s_drop_ctx (struct lg_session *s);
/* The descriptors to poll for the context: libiscsi's, the eventfd and
 * (with a relay) the target's socket; *n of them. */
void lg_s_poll_set (struct lg_session *s, struct pollfd *pfd, unsigned *n);
/* Services the context (and moves the relay's bytes before and after):
 * -1 when the connection is broken (lg_s_why says why).  revents POLLOUT
 * alone only sends (a submitting thread). */
int lg_s_service (struct lg_session *s, short revents);

/* cmds.c */
void lg_s_push (struct lg_cmd **head, struct lg_cmd **tail, struct lg_cmd *c);
void lg_s_inflight_del (struct lg_session *s, struct lg_cmd *cmd);
void lg_s_reset_task (struct lg_cmd *cmd);
void lg_s_complete (struct lg_session *s, struct lg_cmd *cmd);
void lg_s_fail (struct lg_session *s, struct lg_cmd *cmd, const char *msg);
void lg_s_hold (struct lg_session *s, struct lg_cmd *cmd);
void lg_s_issue (struct lg_session *s, struct lg_cmd *cmd);
void lg_s_issue_held (struct lg_session *s);
int lg_s_cancel_task (struct lg_session *s, const struct scsi_task *task);
void lg_s_add_lun (int *luns, unsigned *n, int lun);
bool lg_s_flush_out (struct lg_session *s);
void lg_s_fail_waiting (struct lg_session *s);
void lg_s_set_ready (struct lg_session *s);
void lg_s_wake (struct lg_session *s);
/* An eventfd: count one (wakes whoever polls it) / empty it. */
void lg_s_efd_post (int fd);
void lg_s_efd_drain (int fd);
/* Nothing in flight and nothing to send: the loop thread may nap
 * (selfpoll.c; s->lock held, connection up). */
bool lg_s_idle (struct lg_session *s);
const char *lg_s_name (const struct lg_session *s);

/* Whether text, about to be logged by s about its link, is news: not
 * logged by another session of its pool in the last LG_SAID_MS (every
 * session sees the same outage).  Without a pool, always. */
#define LG_SAID_MS 10000
bool lg_s_first_say (struct lg_session *s, const char *text);

/* session.c */
void lg_s_after_login (struct lg_session *s);

/* recovery.c */
/* The writes held for lun fail as RESERVATION CONFLICT (one of unknown
 * outcome as such, its range fenced); the rest stays held. */
void lg_s_lun_refuse_writes (struct lg_session *s, int lun, const char *why);
void lg_s_lun_changed (struct lg_session *s, int lun, bool changed,
                       const char *why);
void lg_s_connection_lost (struct lg_session *s, const char *why);
void lg_s_cmd_lost (struct lg_session *s, struct lg_cmd *cmd);
void lg_s_cmd_known (struct lg_session *s, struct lg_cmd *cmd);
void lg_s_cmd_confirmed (struct lg_session *s, struct lg_cmd *cmd);
void lg_s_report_unknown (struct lg_session *s, struct lg_cmd *cmd,
                          const char *msg);
void lg_s_scan (struct lg_session *s, int64_t now);
void lg_s_recover (struct lg_session *s);
void lg_s_drop_doubts (struct lg_session *s);
void lg_s_cmd_range (const struct lg_cmd *cmd, char *buf, size_t len);

#endif
