/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Commands whose outcome a fault leaves unknown.
 *
 * The rule: once a write's outcome is unknown (no answer for
 * CMD_TIMEOUT_MS, or its connection lost), no later write to an
 * overlapping range is issued, and the write is neither reported failed
 * nor issued again, until the target has confirmed that it can no longer
 * execute.  A write past the outage budget is reported failed (EIO) but
 * its range stays fenced (fence.h) until the confirmation comes; a write
 * the target cannot confirm stays fenced for good, and so does its range.
 *
 * What confirms, established against tgt (usr/target.c, abort_task_set
 * and abort_cmd; tests/test-fault-*.sh):
 *  - a SCSI response for the command (its outcome is then known);
 *  - the answer to an ABORT TASK sent on the same connection: tgt answers
 *    a task that is in its backing store only when that I/O has finished
 *    ("task does not exist"), and one not yet started at once (TASK
 *    ABORTED for the task, then "function complete");
 *  - after a lost connection, the answer to a LUN RESET sent on the new
 *    connection before anything else: tgt aborts the tasks of every I_T
 *    nexus on that LUN, including the old session's that reinstatement
 *    left running in its backing store, and answers only when they have
 *    finished.
 * Not a confirmation: logging in again with the same ISID (session
 * reinstatement).  tgt closes the old connection but lets a command that
 * is in its backing store run to the end, and it may then land after
 * newer writes.  Any other answer to the TMF ("rejected", "not
 * supported", a LUN that is gone) is no confirmation either: the write
 * then stays fenced.
 *
 * XXX istgt (read in its source, src/istgt_iscsi.c, not yet tested)
 * answers ABORT TASK "function complete" at once whatever the task's
 * state: with a queue depth above 0, a command already running in its LU
 * thread is not waited for.  Its LUN RESET drops the initiator's other
 * connections first.  So against istgt the confirmation above is only as
 * good as istgt's own ordering.
 *
 * The I_T nexus scheme: each session of a pool has its own ISID, kept for
 * its life (so its logins reinstate only itself), and all of them share
 * the pool's fence.  A session's recovery covers the other sessions: the
 * fence keeps their later writes off a doubtful range, and the LUN RESET
 * also aborts the other sessions' commands on that LUN, which come back
 * TASK ABORTED (or time out and are aborted in turn) and are issued again.
 *
 * Threads: the loop thread, or a submitter that found the connection
 * dead, with s->lock held.
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <sodium.h>

#include "iscsi/relay.h"
#include "iscsi/session-int.h"
#include "util/log.h"

static const char *
tmf_answer (int r)
{
  switch (r) {
  case ISCSI_TMR_FUNC_COMPLETE:
    return "function complete";
  case ISCSI_TMR_TASK_DOES_NOT_EXIST:
    return "task does not exist";
  case ISCSI_TMR_LUN_DOES_NOT_EXIST:
    return "LUN does not exist";
  case ISCSI_TMR_TMF_NOT_SUPPORTED:
    return "not supported";
  case ISCSI_TMR_FUNC_REJECTED:
    return "rejected";
  default:
    return "refused";
  }
}

/* ---- doubts ---- */

/* cmd's outcome is unknown: fence its range when it writes. */
static void
doubt (struct lg_session *s, struct lg_cmd *cmd)
{
  uint64_t lba, n;
  struct lg_doubt *d;

  if (cmd->doubt || cmd->kind != LG_CMD_SCSI || cmd->task == NULL
      || !lg_cdb_write_range (cmd->task->cdb, &lba, &n))
    return;
  d = lg_fence_add (s->fence, cmd->lun, lba, n);
  if (d == NULL) {
    /* The fence is broken now: no later write goes out (fence.h). */
    lg_error ("%s/%d: LBA %" PRIu64 "+%" PRIu64 ": out of memory: cannot "
              "fence a write of unknown outcome: every later write fails",
              s->target, cmd->lun, lba, n);
    return;
  }
  d->cmd = cmd;
  d->snext = s->doubts;
  s->doubts = d;
  cmd->doubt = d;
}

static void
unlink_doubt (struct lg_session *s, struct lg_doubt *d)
{
  for (struct lg_doubt **p = &s->doubts; *p; p = &(*p)->snext)
    if (*p == d) {
      *p = d->snext;
      return;
    }
}

/* The target confirmed it: the range is free. */
static void
resolve (struct lg_session *s, struct lg_doubt *d)
{
  if (d->cmd)
    d->cmd->doubt = NULL;
  unlink_doubt (s, d);
  lg_fence_remove (s->fence, d);
}

/* The target cannot confirm it: fenced for good. */
static void
fence_for_good (struct lg_session *s, struct lg_doubt *d, const char *why)
{
  lg_error ("%s/%d: LBA %" PRIu64 "+%" PRIu64 " fenced for good: a write "
            "there may still execute and the target cannot confirm that it "
            "will not (%s); writes to that range fail until the gateway is "
            "restarted",
            s->target, d->lun, d->lba, d->nblocks, why);
  unlink_doubt (s, d);
  lg_fence_make_permanent (s->fence, d);
}

/* Closing: the fence outlives the session (the pool frees it), but
 * nothing may point back at the session. */
void
lg_s_drop_doubts (struct lg_session *s)
{
  while (s->doubts) {
    struct lg_doubt *d = s->doubts;

    s->doubts = d->snext;
    d->cmd = NULL;
    lg_fence_make_permanent (s->fence, d);
  }
  while (s->tmfs) {
    struct tmf *t = s->tmfs;

    s->tmfs = t->next;
    free (t);
  }
}

/* ---- what happens to a command ---- */

/* An answer came for cmd: whatever was in doubt is settled. */
void
lg_s_cmd_known (struct lg_session *s, struct lg_cmd *cmd)
{
  if (cmd->tmf) {
    cmd->tmf->cmd = NULL;
    cmd->tmf->doubt = NULL;
    cmd->tmf = NULL;
  }
  if (cmd->doubt)
    resolve (s, cmd->doubt);
  cmd->trouble_ms = 0;
  /* An ordinary command answered: the connection works (the checks and
   * resets a login sends are immediate and pass a closed window). */
  if (!cmd->priority)
    s->answered = true;
}

/* cmd->msg for a command unanswered past the budget; a window the target
 * holds closed (the commands wait in libiscsi's queue) is named. */
static void
budget_msg (struct lg_session *s, struct lg_cmd *cmd)
{
  char what[96], window[128];

  lg_s_cmd_range (cmd, what, sizeof what);
  lg_relay_window_note (s->relay, window, sizeof window);
  snprintf (cmd->msg, sizeof cmd->msg,
            "%s: LUN %d: %s: no answer within the outage budget (%d s)%s",
            lg_s_name (s), cmd->lun, what, s->budget_s, window);
}

/* The target confirmed that cmd is gone: issue it again, or fail it when
 * past the budget (it can no longer land, so either is safe). */
void
lg_s_cmd_confirmed (struct lg_session *s, struct lg_cmd *cmd)
{
  int64_t trouble = cmd->trouble_ms;

  cmd->confirmed = false;
  lg_s_cmd_known (s, cmd);
  lg_s_reset_task (cmd);
  if (s->budget_s >= 0
      && lg_mono_ms () - trouble >= (int64_t) s->budget_s * 1000) {
    budget_msg (s, cmd);
    lg_s_fail (s, cmd, cmd->msg);
    return;
  }
  cmd->trouble_ms = trouble;
  lg_s_issue (s, cmd);
}

/* Reports cmd failed; if its outcome is unknown its range stays fenced. */
void
lg_s_report_unknown (struct lg_session *s, struct lg_cmd *cmd, const char *msg)
{
  char m[sizeof cmd->msg];

  snprintf (m, sizeof m, "%s", msg && *msg ? msg : "failed");
  if (cmd->tmf) {
    cmd->tmf->cmd = NULL;
    cmd->tmf = NULL;
  }
  if (cmd->doubt) {
    struct lg_doubt *d = cmd->doubt;

    lg_warn ("%s/%d: LBA %" PRIu64 "+%" PRIu64 ": reporting a write of "
             "unknown outcome failed; the range stays fenced until the target "
             "confirms it can no longer execute",
             s->target, d->lun, d->lba, d->nblocks);
    d->cmd = NULL;
    cmd->doubt = NULL;
  }
  cmd->trouble_ms = 0;
  lg_s_fail (s, cmd, m);
}

/* cmd's connection went away under it (libiscsi cancelled it): a write
 * may still execute; it waits for the next login and a LUN RESET. */
void
lg_s_cmd_lost (struct lg_session *s, struct lg_cmd *cmd)
{
  /* The budget runs from the last time the target was heard from, or
   * from the command's issue if later: a target that stalls a read
   * until the keepalive gives up does not get the keepalive's time on
   * top of the budget, and a command that was merely slow on a target
   * that kept answering is not charged for the time before the outage
   * (the hostile review of 255a49b: a 2.5 s blip after 7.5 s of a slow
   * write failed it with a 10 s budget). */
  if (cmd->trouble_ms == 0) {
    int64_t since = cmd->issued_ms > s->heard_ms ? cmd->issued_ms : s->heard_ms;

    cmd->trouble_ms = since ? since : lg_mono_ms ();
  }
  if (cmd->tmf) {
    cmd->tmf->cmd = NULL;
    cmd->tmf = NULL;
  }
  doubt (s, cmd);
  if (cmd->doubt)
    cmd->doubt->lost = true;
  lg_s_reset_task (cmd);
  if (s->failing || s->discovery || cmd->priority)
    lg_s_report_unknown (s, cmd, s->dead_msg);
  else
    lg_s_hold (s, cmd);
}

/* After a login, lun is not the LUN that was opened (changed), or could
 * not be checked: what was held for it fails.  When it changed, its lost
 * doubts stay fenced for good (a write to the old disk may still land
 * there, and no answer from this one says otherwise); else the recovery's
 * LUN RESET still settles them. */
void
lg_s_lun_changed (struct lg_session *s, int lun, bool changed, const char *why)
{
  struct lg_cmd *c = s->held, *keep = NULL, *keep_tail = NULL;
  struct lg_doubt *d, *next;
  char msg[160];

  snprintf (msg, sizeof msg, "%s/%d: %s", s->target, lun, why);
  s->held = s->held_tail = NULL;
  while (c) {
    struct lg_cmd *n = c->next;

    if (c->lun == lun)
      lg_s_report_unknown (s, c, msg);
    else
      lg_s_push (&keep, &keep_tail, c);
    c = n;
  }
  s->held = keep;
  s->held_tail = keep_tail;
  for (d = s->doubts; d && changed; d = next) {
    next = d->snext;
    if (d->lun == lun && d->lost)
      fence_for_good (s, d, why);
  }
}

void
lg_s_lun_refuse_writes (struct lg_session *s, int lun, const char *why)
{
  struct lg_cmd *c = s->held, *keep = NULL, *keep_tail = NULL;
  char msg[160];
  uint64_t lba, n;

  snprintf (msg, sizeof msg, "%s/%d: %s", s->target, lun, why);
  s->held = s->held_tail = NULL;
  while (c) {
    struct lg_cmd *next = c->next;

    if (c->lun != lun || c->task == NULL
        || !lg_cdb_write_range (c->task->cdb, &lba, &n))
      lg_s_push (&keep, &keep_tail, c);
    else if (c->doubt || c->tmf)
      lg_s_report_unknown (s, c, msg);
    else {
      c->trouble_ms = 0;
      c->status = SCSI_STATUS_RESERVATION_CONFLICT;
      snprintf (c->msg, sizeof c->msg, "%s", msg);
      lg_s_complete (s, c);
    }
    c = next;
  }
  s->held = keep;
  s->held_tail = keep_tail;
}

/* ---- task management ---- */

static void tmf_cb (struct iscsi_context *ctx, int status, void *command_data,
                    void *private_data);

static struct tmf *
send_tmf (struct lg_session *s, enum iscsi_task_mgmt_funcs fn, int lun,
          const struct scsi_task *task)
{
  struct tmf *t = calloc (1, sizeof *t);

  if (t == NULL)
    return NULL;
  t->s = s;
  t->lun = lun;
  t->reset = fn == ISCSI_TM_LUN_RESET;
  /* Not libiscsi's abort and reset helpers: they cancel tasks locally
   * (the reset every task of the context) before the target answers. */
  if (iscsi_task_mgmt_async (s->ctx, lun, fn, task ? task->itt : 0xffffffff,
                             task ? task->cmdsn : 0, tmf_cb, t)
      != 0) {
    free (t);
    return NULL;
  }
  t->next = s->tmfs;
  s->tmfs = t;
  return t;
}

/* No answer to cmd for CMD_TIMEOUT_MS on a live connection: ask the target
 * to abort it, and wait for its answer. */
static void
start_abort (struct lg_session *s, struct lg_cmd *cmd, int64_t now)
{
  char what[96];

  atomic_fetch_add (&s->timeouts, 1);
  lg_s_cmd_range (cmd, what, sizeof what);
  if (s->discovery) {
    lg_s_connection_lost (s, "no answer to SendTargets");
    return;
  }
  /* The budget counts from the first trouble, and a command never
   * answered was in trouble since it was issued: the request fails
   * within the budget, not one abort later (issue 27, item 4). */
  if (cmd->trouble_ms == 0)
    cmd->trouble_ms = cmd->issued_ms ? cmd->issued_ms : now;
  doubt (s, cmd);
  cmd->tmf = send_tmf (s, ISCSI_TM_ABORT_TASK, cmd->lun, cmd->task);
  if (cmd->tmf == NULL) {
    s->broken = true;
    return;
  }
  cmd->tmf->cmd = cmd;
  cmd->tmf->doubt = cmd->doubt;
  cmd->state = CMD_ABORTING;
  lg_warn ("%s/%d: %s: no answer for %.0f s; asking the target to abort it "
           "(ABORT TASK)%s",
           s->target, cmd->lun, what, (double) (now - cmd->issued_ms) / 1000,
           cmd->doubt ? "; later writes to that range wait for its answer"
                      : "");
}

/* The answer to an ABORT TASK. */
static void
abort_done (struct lg_session *s, struct tmf *t, int status, int r)
{
  if (status != SCSI_STATUS_GOOD) {
    /* Cancelled with the connection: a LUN RESET after the next login
     * settles it. */
    if (t->doubt)
      t->doubt->lost = true;
    if (t->cmd)
      t->cmd->tmf = NULL;
    return;
  }
  if (r == ISCSI_TMR_FUNC_COMPLETE || r == ISCSI_TMR_TASK_DOES_NOT_EXIST) {
    lg_info ("%s/%d: the target answered ABORT TASK (%s): the command can "
             "no longer execute",
             s->target, t->lun, tmf_answer (r));
    if (t->cmd) {
      struct lg_cmd *c = t->cmd;

      c->tmf = NULL;
      c->confirmed = true;
      /* scsi_cb then issues it again (lg_s_cmd_confirmed); if libiscsi
       * no longer had it, that is done here. */
      if (lg_s_cancel_task (s, c->task) != 0) {
        lg_s_inflight_del (s, c);
        lg_s_cmd_confirmed (s, c);
      }
    }
    else if (t->doubt)
      resolve (s, t->doubt);
    return;
  }
  /* No confirmation here: log in again and ask with a LUN RESET. */
  lg_warn ("%s/%d: the target answered ABORT TASK with \"%s\": logging in "
           "again to confirm with a LUN RESET",
           s->target, t->lun, tmf_answer (r));
  if (t->cmd)
    t->cmd->tmf = NULL;
  s->broken = true;
}

/* The answer to a recovery's LUN RESET: every doubt lost on that LUN is
 * settled, one way or the other. */
static void
reset_done (struct lg_session *s, struct tmf *t, int status, int r)
{
  struct lg_doubt *d, *next;

  if (status != SCSI_STATUS_GOOD)
    return; /* the connection went again; recovery starts over */
  if (s->resets_pending > 0)
    s->resets_pending--;
  for (d = s->doubts; d; d = next) {
    next = d->snext;
    if (d->lun != t->lun || !d->lost)
      continue;
    if (r == ISCSI_TMR_FUNC_COMPLETE)
      resolve (s, d);
    else {
      char why[80];

      snprintf (why, sizeof why, "LUN RESET: %s", tmf_answer (r));
      fence_for_good (s, d, why);
    }
  }
  if (r == ISCSI_TMR_FUNC_COMPLETE)
    lg_info ("%s/%d: LUN RESET complete: the commands of the lost "
             "connection can no longer execute",
             s->target, t->lun);
  if (s->resets_pending == 0) {
    s->recovering = false;
    lg_s_set_ready (s);
    lg_s_issue_held (s);
  }
}

static void
tmf_cb (struct iscsi_context *ctx, int status, void *command_data,
        void *private_data)
{
  struct tmf *t = private_data;
  struct lg_session *s = t->s;
  int r = -1;

  (void) ctx;
  for (struct tmf **p = &s->tmfs; *p; p = &(*p)->next)
    if (*p == t) {
      *p = t->next;
      break;
    }
  if (status == SCSI_STATUS_GOOD && command_data)
    r = (int) *(uint32_t *) command_data;
  if (t->wait) {
    t->wait->status = status;
    t->wait->answer = r;
    t->wait->done = true;
  }
  else if (t->reset)
    reset_done (s, t, status, r);
  else
    abort_done (s, t, status, r);
  free (t);
}

/* ---- the loop's checks, once a second ---- */

/* Commands unanswered for CMD_TIMEOUT_MS, or for the outage budget where
 * it is shorter, are aborted, and so are commands issued again that have
 * been in trouble for the budget; commands in trouble past the budget are
 * reported failed (their ranges stay fenced).  A command never answered
 * is in trouble from its issue, so the budget bounds every wait, plus up
 * to a second of this scan's period. */
void
lg_s_scan (struct lg_session *s, int64_t now)
{
  int64_t budget = (int64_t) s->budget_s * 1000;
  int64_t abort_after = s->abandoning         ? ABANDON_ABORT_MS
      : budget > 0 && budget < CMD_TIMEOUT_MS ? budget
                                              : CMD_TIMEOUT_MS;
  struct lg_cmd *c, *keep = NULL, *keep_tail = NULL;

  for (c = s->inflight; c && s->up; c = c->next)
    if (c->state == CMD_ISSUED
        && (now - c->issued_ms >= abort_after
            || (budget > 0 && c->trouble_ms
                && now - c->trouble_ms >= budget))) {
      start_abort (s, c, now);
      if (!s->up)
        return;
    }
  if (budget < 0)
    return;
restart:
  for (c = s->inflight; c; c = c->next)
    if (c->state == CMD_ABORTING && now - c->trouble_ms >= budget) {
      budget_msg (s, c);
      c->expired = true;
      if (lg_s_cancel_task (s, c->task) != 0) {
        lg_s_inflight_del (s, c);
        lg_s_report_unknown (s, c, c->msg);
      }
      goto restart;
    }
  c = s->held;
  s->held = s->held_tail = NULL;
  while (c) {
    struct lg_cmd *next = c->next;

    if (c->trouble_ms && now - c->trouble_ms >= budget) {
      snprintf (c->msg, sizeof c->msg,
                "%s: LUN %d: waited past the outage budget (%d s)%s%s",
                lg_s_name (s), c->lun, s->budget_s, s->dead_msg[0] ? ": " : "",
                s->dead_msg);
      lg_s_report_unknown (s, c, c->msg);
    }
    else
      lg_s_push (&keep, &keep_tail, c);
    c = next;
  }
  s->held = keep;
  s->held_tail = keep_tail;
}

/* ---- a lost connection, and the login after it ---- */

/* FNV-1a: a line's identity for lg_s_first_say (not a secret). */
static uint64_t
line_hash (const char *text)
{
  uint64_t h = 0xcbf29ce484222325ull;

  for (const unsigned char *p = (const unsigned char *) text; *p; p++)
    h = (h ^ *p) * 0x100000001b3ull;
  return h;
}

/* Only another session's line counts: the same session's line again is
 * another event (a second outage). */
bool
lg_s_first_say (struct lg_session *s, const char *text)
{
  struct lg_said *said = s->shared ? s->shared->said : NULL;
  int64_t now = lg_mono_ms ();
  uint64_t h = line_hash (text);
  bool news = true;

  if (said == NULL)
    return true;
  pthread_mutex_lock (&said->lock);
  for (unsigned i = 0; i < LG_SAID_LINES && news; i++)
    if (said->ms[i] && now - said->ms[i] < LG_SAID_MS && said->hash[i] == h
        && said->who[i] != s)
      news = false;
  if (news) {
    said->hash[said->next] = h;
    said->who[said->next] = s;
    said->ms[said->next] = now;
    said->next = (said->next + 1) % LG_SAID_LINES;
  }
  pthread_mutex_unlock (&said->lock);
  return news;
}

/* The connection is gone (any thread): every command on it is held for the
 * next one (failed at once with a budget of 0); writes among them are in
 * doubt until the next login's LUN RESET. */
void
lg_s_connection_lost (struct lg_session *s, const char *why)
{
  int64_t now = lg_mono_ms ();
  bool lasted = now - s->up_since >= LASTED_MS;
  bool worked = s->answered || lasted;

  if (!s->up)
    return;
  snprintf (s->dead_msg, sizeof s->dead_msg, "%s: connection lost: %s",
            s->portal, why);
  s->up = false;
  s->broken = false;
  s->recovering = false;
  s->resets_pending = 0;
  /* The outage budget starts again only after a connection that worked
   * (answered an ordinary command, or lasted): a target that accepts
   * logins and drops them at once, or breaks the protocol at the first
   * command, has what waits fail when the budget is spent.  The backoff
   * starts again only after one that lasted, so logins stay spaced even
   * where each gets some work done (a target asking to log out after
   * every few commands). */
  if (worked || s->down_since == 0)
    s->down_since = now;
  if (lasted)
    s->backoff_ms = 0;
  else {
    s->backoff_ms = s->backoff_ms ? s->backoff_ms * 2 : MIN_BACKOFF_MS;
    if (s->backoff_ms > MAX_BACKOFF_MS)
      s->backoff_ms = MAX_BACKOFF_MS;
  }
  /* Connections that did nothing are counted, and said once a minute. */
  s->short_conns = worked ? 0 : s->short_conns + 1;
  s->next_attempt = now;
  if (s->backoff_ms)
    s->next_attempt += s->backoff_ms / 2
        + (int64_t) randombytes_uniform (s->backoff_ms / 2 + 1);
  if (s->discovery || s->budget_s == 0)
    s->failing = true;
  lg_s_set_ready (s);
  if (s->short_conns <= STORM_AFTER) {
    char line[sizeof s->dead_msg + 160];

    snprintf (line, sizeof line, "%s: %s%s", lg_s_name (s), s->dead_msg,
              s->failing ? "" : "; reconnecting");
    /* Once for the pool: the other sessions see the same outage. */
    if (lg_s_first_say (s, line))
      lg_warn ("%s", line);
    else
      lg_debug ("%s", line);
  }
  else if (now - s->short_log_ms >= STORM_LOG_MS) {
    lg_warn ("%s: the target closes the connection soon after login "
             "(%s): %u attempts in %.0f s",
             lg_s_name (s), why, s->short_conns,
             (double) (now - s->down_since) / 1000.0);
    s->short_log_ms = now;
  }
  iscsi_scsi_cancel_all_tasks (s->ctx);
  /* What libiscsi dropped without calling back (it does, when it logs out
   * by itself): ours to hold all the same. */
  while (s->inflight) {
    struct lg_cmd *c = s->inflight;

    lg_s_inflight_del (s, c);
    lg_s_cmd_lost (s, c);
  }
  while (s->tmfs) {
    struct tmf *t = s->tmfs;

    s->tmfs = t->next;
    if (t->wait) {
      t->wait->status = SCSI_STATUS_CANCELLED;
      t->wait->done = true;
    }
    else if (!t->reset)
      abort_done (s, t, SCSI_STATUS_CANCELLED, -1);
    free (t);
  }
  for (struct lg_doubt *d = s->doubts; d; d = d->snext)
    d->lost = true;
  if (s->failing)
    lg_s_fail_waiting (s);
  /* The loop thread, which polls this context's socket, destroys it. */
  lg_s_wake (s);
}

/* Logged in again: before anything is issued, a LUN RESET for each LUN
 * with a write in doubt; the held commands go when all are answered. */
void
lg_s_recover (struct lg_session *s)
{
  for (struct lg_doubt *d = s->doubts; d; d = d->snext) {
    struct lg_doubt *e;

    if (!d->lost)
      continue;
    /* One reset a LUN: the first lost doubt on it sends it. */
    for (e = s->doubts; e != d && !(e->lost && e->lun == d->lun); e = e->snext)
      ;
    if (e != d)
      continue;
    if (send_tmf (s, ISCSI_TM_LUN_RESET, d->lun, NULL) == NULL) {
      s->broken = true;
      break;
    }
    s->resets_pending++;
    lg_warn ("%s/%d: writes of the lost connection may still execute: "
             "LUN RESET, and nothing is issued until the target answers",
             s->target, d->lun);
  }
  s->recovering = s->resets_pending > 0;
  lg_s_set_ready (s);
  if (!s->recovering)
    lg_s_issue_held (s);
  else
    lg_s_flush_out (s);
  /* On the identity check's thread: a napping loop must poll for what was
   * just issued (nobody else does). */
  if (s->loop_napping && s->poller == POLLER_NONE)
    lg_s_wake (s);
}

/* ---- a LUN RESET a caller waits for (session.h) ---- */

#define RESET_NOTE_MS 10000

int
lg_session_lun_reset (struct lg_session *s, int lun, int wait_s, char *msg,
                      size_t len)
{
  struct tmf_wait w = { false, SCSI_STATUS_CANCELLED, -1 };
  struct tmf *t = NULL;
  int64_t start = lg_mono_ms (), noted = start, now;

  pthread_mutex_lock (&s->lock);
  for (;;) {
    now = lg_mono_ms ();
    if (t == NULL && s->up && !s->recovering && !s->broken) {
      if ((t = send_tmf (s, ISCSI_TM_LUN_RESET, lun, NULL)) == NULL) {
        pthread_mutex_unlock (&s->lock);
        snprintf (msg, len, "LUN RESET: cannot send it");
        errno = EIO;
        return -1;
      }
      t->wait = &w;
      lg_s_flush_out (s);
      lg_s_wake (s);
    }
    if (w.done || s->failing)
      break;
    if (wait_s >= 0 && now - start >= (int64_t) wait_s * 1000)
      break;
    if (now - noted >= RESET_NOTE_MS) {
      noted = now;
      lg_info ("%s/%d: still waiting for the target's answer to LUN RESET "
               "(%.0f s): a command of the previous holder may still be "
               "running there",
               s->target, lun, (double) (now - start) / 1000);
    }
    pthread_mutex_unlock (&s->lock);
    nanosleep (&(struct timespec){ .tv_nsec = 50 * 1000 * 1000 }, NULL);
    pthread_mutex_lock (&s->lock);
  }
  /* Not answered: the answer, if it comes, goes nowhere. */
  for (struct tmf *e = s->tmfs; t && !w.done && e; e = e->next)
    if (e == t)
      e->wait = NULL;
  pthread_mutex_unlock (&s->lock);
  if (w.done && w.status == SCSI_STATUS_GOOD
      && w.answer == ISCSI_TMR_FUNC_COMPLETE)
    return 0;
  if (w.done && w.status == SCSI_STATUS_GOOD) {
    snprintf (msg, len, "LUN RESET: the target answered \"%s\"",
              tmf_answer (w.answer));
    errno = EPROTO;
  }
  else if (w.done || s->failing) {
    snprintf (msg, len,
              "LUN RESET: the connection was lost before the "
              "answer");
    errno = EIO;
  }
  else {
    snprintf (msg, len, "LUN RESET: no answer within %d s", wait_s);
    errno = ETIMEDOUT;
  }
  return -1;
}
