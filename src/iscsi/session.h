/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* One iSCSI session: a libiscsi context and the event-loop thread that
 * services it.
 *
 * Callers on any thread fill a struct lg_cmd (a SCSI task built with
 * libiscsi's scsi_cdb_* helpers, the LUN, the caller's data buffer) and
 * submit it; the submitting thread issues it and writes it to the socket
 * under the session's lock, the loop thread reads the replies, and on
 * completion the status and sense are recorded in the command and its
 * waiter is signalled.  The lock is never held across a round trip.  A
 * lost connection, a command without an answer and the login after are
 * the session's to handle (recovery.c says what is promised); the caller
 * sees a delay, or an error once the outage budget is spent.
 */
#ifndef LG_SESSION_H
#define LG_SESSION_H

#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <iscsi/iscsi.h>
#include <iscsi/scsi-lowlevel.h>

#include "iscsi/targets.h"

/* How to log in.  Secrets are sodium_malloc'd (util/secret.h); the struct
 * owns them (lg_login_clear frees). */
struct lg_login {
  char *initiator_name;
  char *user;
  char *secret;
  char *target_user;
  char *target_secret;
  bool header_digest;  /* CRC32C header digest */
  int connect_timeout; /* seconds for connect + login */
  /* The outage budget, seconds: how long commands wait for a lost
   * connection to come back before they fail with EIO; 0 fails them at
   * once, < 0 waits for ever.  Either way the session keeps trying to log
   * in again and serves again when it can. */
  int io_timeout;
  /* Off: libiscsi reads the target's socket itself, nothing checked
   * (relay.h).  For benchmarks; LUNGATE_NO_RELAY=1 sets it. */
  bool no_relay;
  /* Set: sessions opened with this login use this ISID (random type:
   * 0x80, then rnd's 22 bits, then qual's 16) instead of one of their
   * own, and so reinstate the nexus that had it (dev/reserve.c takes a
   * LUN over from a dead gateway of this initiator name so). */
  bool isid_set;
  uint32_t isid_rnd, isid_qual;
};

#define LG_DEFAULT_CONNECT_TIMEOUT 10
#define LG_DEFAULT_IO_TIMEOUT 60

/* Defaults, with the initiator name iqn.2026-11.org.lungate:<hostname>. */
int lg_login_init (struct lg_login *l);
void lg_login_clear (struct lg_login *l);

/* A group of commands waited on together (one request split in chunks).
 * No mutex: the last completion posts a semaphore, so a completing loop
 * thread never holds a lock the woken caller must take (glibc's sem_post
 * is safe against the waiter destroying the semaphore at once, and
 * lg_waiter_wait always returns through sem_wait: see waiter.c). */
struct lg_waiter {
  atomic_uint pending;
  bool none; /* expects no completion: wait returns at once */
  sem_t sem;
  void (*fn) (void *opaque); /* instead of the semaphore, when set */
  void *opaque;
  /* A waiter of one command may poll that command's session itself while
   * it waits (selfpoll.c): set by lg_session_submit. */
  struct lg_session *home;
  atomic_bool polling; /* home's poller right now */
};

/* Expect n completions. */
void lg_waiter_init (struct lg_waiter *w, unsigned n);
/* Expect n completions; the last one calls fn (opaque) on the thread that
 * completes it and nobody waits.  That thread is whichever services the
 * session (its loop thread, a self-polling waiter that may hold locks of
 * the layers above, a submitter when the session is failing), holding
 * that session's lock; or the submitter, without it, when the fence
 * refuses the write.  fn may take only leaf locks (doc/locking.md), and
 * must not submit or wait. */
void lg_waiter_init_fn (struct lg_waiter *w, unsigned n, void (*fn) (void *),
                        void *opaque);
void lg_waiter_destroy (struct lg_waiter *w);
void lg_waiter_wait (struct lg_waiter *w);
/* One completion (for a command that was never submitted, say). */
void lg_waiter_done (struct lg_waiter *w);

enum lg_cmd_kind {
  LG_CMD_SCSI,
  LG_CMD_DISCOVERY, /* SendTargets=All on a discovery session */
};

struct lg_target_list;
struct lg_doubt;
struct lg_fence;
struct tmf;

struct lg_cmd {
  /* Set by the caller. */
  enum lg_cmd_kind kind;
  struct scsi_task *task; /* owned by the caller, freed after the wait */
  int lun;
  struct scsi_iovec iov; /* data buffer, when iov.iov_base != NULL */
  struct lg_waiter *waiter;

  /* Set when the command completes. */
  int status; /* SCSI_STATUS_*; transport failures too */
  struct scsi_sense sense;
  char msg[320];                  /* libiscsi's text for transport failures */
  struct lg_target_list *targets; /* LG_CMD_DISCOVERY result */

  /* Private to the session (its lock). */
  struct lg_cmd *next, *prev;
  struct lg_session *session;
  struct lg_doubt *doubt; /* while its outcome is unknown (fence.h) */
  struct tmf *tmf;        /* the ABORT TASK sent for it */
  int state;              /* session-int.h */
  bool confirmed;         /* cancelled: the target said it is gone */
  bool expired;           /* cancelled: past the outage budget */
  bool priority;          /* lg_session_exec_now */
  unsigned retries;
  int64_t first_ms, due_ms, issued_ms;
  int64_t trouble_ms; /* since when it waits for an outcome, or 0 */
};

struct lg_session;

#define LG_MAX_PORTALS 8

/* The last lines about the link that sessions of the pool logged, so
 * that the others, seeing the same outage, do not log them again
 * (lg_s_first_say). */
#define LG_SAID_LINES 8
struct lg_said {
  pthread_mutex_t lock;
  uint64_t hash[LG_SAID_LINES];   /* of the whole line */
  const void *who[LG_SAID_LINES]; /* the session that logged it */
  int64_t ms[LG_SAID_LINES];
  unsigned next; /* the slot to reuse */
};

/* What the sessions of one pool share. */
struct lg_shared {
  struct lg_fence *fence; /* writes of unknown outcome (fence.h) */
  struct lg_said *said;   /* may be NULL */
  /* After every login but the first, before anything held for lun is
   * issued again: is lun still the LUN that was opened?  Called on a
   * thread of the session's own (one at a time), which may send commands
   * on s with lg_session_exec_now.  0: it is, or nobody knows it; -1: it
   * changed (what was held for it fails, and its doubts stay fenced);
   * -2: could not tell (what was held for it fails); -3: it is, but
   * writes to it are refused from now on (the reservation was lost: the
   * writes held for it fail with RESERVATION CONFLICT, reads go out). */
  int (*validate) (void *opaque, struct lg_session *s, int lun);
  /* The LUNs that validate checks after every login, whether or not
   * anything was held for them: returns how many there are, and puts the
   * first cap of them in luns (the caller asks again with room for all);
   * may be NULL. */
  unsigned (*always) (void *opaque, int *luns, unsigned cap);
  /* A unit attention said the LUN's reservation was preempted or
   * released (whichever thread services the session, s->lock held: it
   * must not block, and may take only leaf locks, doc/locking.md); may
   * be NULL. */
  void (*pr_event) (void *opaque, int lun);
  void *opaque;
};

/* Connects and logs in to target (NULL: a discovery session) at portal
 * ("host:port", or several separated by spaces: paths to the same target,
 * tried in turn), within login->connect_timeout.  login must outlive the
 * session: after a lost connection it logs in again with it, with the same
 * initiator name and ISID.  shared is what the pool's sessions share (see
 * struct lg_shared; it must outlive the session); NULL gives the session
 * a fence of its own and no identity check.
 * What happens to commands whose outcome a fault leaves unknown is said
 * at the top of recovery.c.  On failure returns NULL with errno set
 * (ECONNREFUSED, ETIMEDOUT, EACCES for a failed authentication, EPERM when
 * not authorized, ENOENT when the target does not exist, EIO otherwise)
 * and a sentence in err. */
struct lg_session *lg_session_open (const struct lg_login *login,
                                    const char *portal, const char *target,
                                    const struct lg_shared *shared, char *err,
                                    size_t errlen);

/* The ISID s logs in with (the same for its whole life). */
void lg_session_isid (const struct lg_session *s, uint8_t isid[6]);

/* The login s was opened with (the caller's, which outlives s). */
const struct lg_login *lg_session_login (const struct lg_session *s);

/* Closes: logs out, stops the thread, frees.  No command should be
 * pending; one that is fails (a write among them stays fenced in the
 * pool's fence, which outlives the session). */
void lg_session_close (struct lg_session *s);

/* The process is stopping (SIGTERM, an unmount): nothing waits long any
 * more.  What waits for a lost connection fails now (with why); the
 * outage budget becomes 0; a command the target does not answer is
 * aborted after 1 s, and fails when the abort is not answered either.
 * A target that answers goes on serving (the last flush, the release of
 * the reservation).  The session stays open for lg_session_close.  Any
 * thread. */
void lg_session_abandon (struct lg_session *s, const char *why);

/* The process is stopping in order (a signalled mount writing back what
 * it caches): the outage budget becomes at most secs (also where it was
 * -1, for ever), so that a slow target is still waited for and a lost
 * one is not waited for long.  Any thread. */
void lg_session_hurry (struct lg_session *s, int secs);

/* Queues cmd; it completes through cmd->waiter, whose pending count the
 * caller has already raised.  Never blocks on the network. */
void lg_session_submit (struct lg_session *s, struct lg_cmd *cmd);

/* Submits one command and waits for it. */
void lg_session_exec (struct lg_session *s, struct lg_cmd *cmd);
/* The same for lg_shared.validate: the command goes out while the session
 * holds everything else, and fails at once when the connection goes. */
void lg_session_exec_now (struct lg_session *s, struct lg_cmd *cmd);
/* Sends a LUN RESET for lun on s (once it is logged in) and waits up to
 * wait_s seconds (< 0: for ever) for the target's answer, saying every
 * 10 s that it still waits: 0 when the target answered "function
 * complete" (recovery.c says what that confirms), else -1 with errno
 * (ETIMEDOUT, EIO when the connection was lost, EPROTO for another
 * answer) and msg. */
int lg_session_lun_reset (struct lg_session *s, int lun, int wait_s, char *msg,
                          size_t len);
/* One SCSI task so, with buf (buflen bytes, or NULL) as its data buffer:
 * 0, or -1 with errno set and a sentence in msg. */
int lg_session_task_now (struct lg_session *s, int lun, struct scsi_task *task,
                         void *buf, size_t buflen, char *msg, size_t len);

/* Logs in to portal for discovery, asks for SendTargets=All and logs
 * out.  The list holds only what passed lg_targets_copy (a warning says
 * what was left out); NULL with err set on failure. */
struct lg_target_list *lg_discover (const struct lg_login *login,
                                    const char *portal, char *err,
                                    size_t errlen);

/* Commands in flight or queued on this session (for load balancing). */
unsigned lg_session_load (const struct lg_session *s);
/* For the pool's choice (a hint, read without the lock): 2 logged in and
 * issuing; 1 logged in but confirming what a fault left unknown, or down
 * within its outage budget (it holds what it gets); 0 failing what it
 * gets. */
int lg_session_health (const struct lg_session *s);

/* Counters: logins after a lost connection; commands retried after BUSY
 * or TASK SET FULL; commands aborted after CMD_TIMEOUT_MS; unit attentions that say the LUN may have changed
 * (reset, CAPACITY DATA HAS CHANGED, REPORTED LUNS DATA HAS CHANGED). */
unsigned lg_session_reconnects (const struct lg_session *s);
unsigned lg_session_retries (const struct lg_session *s);
unsigned lg_session_lun_events (const struct lg_session *s);
unsigned lg_session_timeouts (const struct lg_session *s);

/* Generations: a number that changes at each login after a lost
 * connection (logins) or at each unit attention that says a LUN may have
 * changed (!logins).  What a layer keys a check on; the counters above
 * are statistics and may be counted otherwise one day. */
unsigned lg_session_generation (const struct lg_session *s, bool logins);

#endif
