/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* A session's commands: the lists they wait on, issuing them to libiscsi,
 * and their completion (scsi_cb).
 *
 * Threads: a submitting thread or the loop thread, always with s->lock
 * held (libiscsi's callbacks run inside iscsi_service, which is called
 * only with the lock).  A command is on at most one list at a time
 * (cmd->state says which): held (waiting for a connection or for a
 * recovery), delayed (BUSY / TASK SET FULL) or inflight (libiscsi has it).
 * What happens when a command's outcome is unknown is recovery.c's.
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sodium.h>

#include "iscsi/sense.h"
#include "iscsi/session-int.h"
#include "util/log.h"

const char *
lg_s_name (const struct lg_session *s)
{
  return s->target[0] ? s->target : "discovery";
}

void
lg_s_efd_post (int fd)
{
  uint64_t one = 1;

  if (write (fd, &one, sizeof one) < 0 && errno != EAGAIN)
    lg_error ("eventfd write: %m");
}

void
lg_s_efd_drain (int fd)
{
  uint64_t v;

  if (read (fd, &v, sizeof v) < 0 && errno != EAGAIN)
    lg_debug ("eventfd read: %m");
}

void
lg_s_wake (struct lg_session *s)
{
  lg_s_efd_post (s->efd);
}

void
lg_s_set_ready (struct lg_session *s)
{
  atomic_store (&s->health, s->failing ? 0 : s->up && !s->recovering ? 2 : 1);
}

void
lg_s_push (struct lg_cmd **head, struct lg_cmd **tail, struct lg_cmd *cmd)
{
  cmd->next = NULL;
  if (*tail)
    (*tail)->next = cmd;
  else
    *head = cmd;
  *tail = cmd;
}

static void
inflight_add (struct lg_session *s, struct lg_cmd *cmd)
{
  cmd->prev = NULL;
  cmd->next = s->inflight;
  if (s->inflight)
    s->inflight->prev = cmd;
  s->inflight = cmd;
  cmd->state = CMD_ISSUED;
}

void
lg_s_inflight_del (struct lg_session *s, struct lg_cmd *cmd)
{
  if (cmd->state != CMD_ISSUED && cmd->state != CMD_ABORTING)
    return;
  if (cmd->prev)
    cmd->prev->next = cmd->next;
  else
    s->inflight = cmd->next;
  if (cmd->next)
    cmd->next->prev = cmd->prev;
  cmd->next = cmd->prev = NULL;
  cmd->state = CMD_IDLE;
}

/* Makes a task that was cancelled or answered BUSY new again: libiscsi
 * gives it a new ITT and CmdSN when it is issued; the data buffers are the
 * caller's and are sent (or filled) again from their start.  A write keeps
 * its exact bytes, so a crypt-layer unit goes out with its original nonce
 * and tag. */
void
lg_s_reset_task (struct lg_cmd *cmd)
{
  struct scsi_task *t = cmd->task;

  if (t == NULL)
    return;
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

void
lg_s_complete (struct lg_session *s, struct lg_cmd *cmd)
{
  cmd->state = CMD_IDLE;
  atomic_fetch_sub (&s->load, 1);
  lg_waiter_done (cmd->waiter);
}

void
lg_s_fail (struct lg_session *s, struct lg_cmd *cmd, const char *msg)
{
  cmd->status = SCSI_STATUS_ERROR;
  snprintf (cmd->msg, sizeof cmd->msg, "%s", msg);
  lg_s_complete (s, cmd);
}

/* Keeps a command until the session is back (or recovered); from now on
 * the outage budget runs for it. */
void
lg_s_hold (struct lg_session *s, struct lg_cmd *cmd)
{
  if (cmd->trouble_ms == 0)
    cmd->trouble_ms = lg_mono_ms ();
  cmd->state = CMD_HELD;
  lg_s_push (&s->held, &s->held_tail, cmd);
}

/* Fails every command waiting for the connection or for a retry; one
 * whose outcome is unknown stays fenced (recovery.c). */
void
lg_s_fail_waiting (struct lg_session *s)
{
  struct lg_cmd *lists[2] = { s->held, s->delayed };

  s->held = s->held_tail = NULL;
  s->delayed = s->delayed_tail = NULL;
  for (int i = 0; i < 2; i++)
    while (lists[i]) {
      struct lg_cmd *c = lists[i];

      lists[i] = c->next;
      lg_s_report_unknown (s, c, s->dead_msg);
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

static const char *
status_name (int status)
{
  switch (status) {
  case SCSI_STATUS_GOOD:
    return "GOOD";
  case SCSI_STATUS_CHECK_CONDITION:
    return "CHECK CONDITION ";
  case SCSI_STATUS_CANCELLED:
    return "cancelled";
  case SCSI_STATUS_TIMEOUT:
    return "timed out";
  case SCSI_STATUS_BUSY:
    return "BUSY";
  case SCSI_STATUS_TASK_SET_FULL:
    return "TASK SET FULL";
  case SCSI_STATUS_TASK_ABORTED:
    return "TASK ABORTED";
  default:
    return "failed";
  }
}

/* The command and its LBA range, for messages: "WRITE(16) LBA 8+8". */
void
lg_s_cmd_range (const struct lg_cmd *cmd, char *buf, size_t len)
{
  uint64_t lba, n;

  if (cmd->task == NULL) {
    snprintf (buf, len, "%s",
              cmd->kind == LG_CMD_DISCOVERY ? "SendTargets" : "command");
    return;
  }
  if (lg_cdb_write_range (cmd->task->cdb, &lba, &n) && n < UINT64_MAX - lba)
    snprintf (buf, len, "%s LBA %" PRIu64 "+%" PRIu64,
              lg_scsi_opname (cmd->task->cdb[0]), lba, n);
  else if (cmd->task->cdb[0] == 0x88) {
    const uint8_t *c = cmd->task->cdb;
    uint64_t l = 0;
    uint32_t k = 0;

    for (int i = 2; i < 10; i++)
      l = l << 8 | c[i];
    for (int i = 10; i < 14; i++)
      k = k << 8 | c[i];
    snprintf (buf, len, "READ(16) LBA %" PRIu64 "+%" PRIu32, l, k);
  }
  else
    snprintf (buf, len, "%s", lg_scsi_opname (cmd->task->cdb[0]));
}

/* -v -v (or nbdkit -D lungate.verbose=1): one line per completed
 * command, with the LUN, the LBA range and the status. */
static void
trace (const struct lg_session *s, const struct lg_cmd *cmd, int status)
{
  char what[96];

  if (lg_log_get_level () < LG_LOG_TRACE || cmd->task == NULL)
    return;
  lg_s_cmd_range (cmd, what, sizeof what);
  lg_trace ("%s/%d: %s: %s%s", s->target, cmd->lun, what, status_name (status),
            status == SCSI_STATUS_CHECK_CONDITION
                ? lg_ascq_name (cmd->task->sense.ascq)
                : "");
}

/* A CHECK CONDITION: a UNIT ATTENTION (reset, I_T nexus loss after a
 * reconnect, parameters or capacity changed, LUN inventory changed) is
 * reported once per nexus and the command was not executed: issue it
 * again.  A changed medium is not transient: the data may not be what the
 * client had, so that fails.  True when reissued. */
static bool
unit_attention (struct lg_session *s, struct lg_cmd *cmd)
{
  int asc = cmd->sense.ascq >> 8;
  uint64_t lba, n;

  /* RESERVATIONS PREEMPTED, RELEASED, REGISTRATIONS PREEMPTED: someone
   * took the LUN (dev/reserve.h).  A write is not sent again: once the
   * taker has released, nothing reserved would refuse it. */
  if (cmd->sense.key == SCSI_SENSE_UNIT_ATTENTION
      && (cmd->sense.ascq == 0x2a03 || cmd->sense.ascq == 0x2a04
          || cmd->sense.ascq == 0x2a05)) {
    if (s->shared && s->shared->pr_event)
      s->shared->pr_event (s->shared->opaque, cmd->lun);
    if (cmd->task && lg_cdb_write_range (cmd->task->cdb, &lba, &n)) {
      cmd->status = SCSI_STATUS_RESERVATION_CONFLICT;
      snprintf (cmd->msg, sizeof cmd->msg,
                "the reservation was taken (unit attention 0x%04x)",
                (unsigned) cmd->sense.ascq);
      return false;
    }
  }

  if (cmd->sense.key != SCSI_SENSE_UNIT_ATTENTION || asc == 0x28
      || cmd->retries++ >= UA_RETRIES)
    return false;
  /* Reset, capacity changed, LUN inventory changed: the LUN may not be
   * what it was (dev/iscsi.c checks it again). */
  if (asc == 0x29
      || cmd->sense.ascq == SCSI_SENSE_ASCQ_CAPACITY_DATA_HAS_CHANGED
      || cmd->sense.ascq == 0x3f0e) {
    atomic_fetch_add (&s->lun_events, 1);
    atomic_fetch_add (&s->lun_gen, 1);
  }
  lg_debug ("%s: LUN %d: unit attention (%s), reissuing", s->target, cmd->lun,
            lg_ascq_name (cmd->sense.ascq));
  lg_s_reset_task (cmd);
  lg_s_issue (s, cmd);
  return true;
}

/* BUSY or TASK SET FULL: a capped, jittered backoff of 1, 2, 4 ... 256 ms,
 * then 256-512 ms, within the budget.  True when delayed. */
static bool
busy (struct lg_session *s, struct lg_cmd *cmd)
{
  int64_t now = lg_mono_ms ();
  unsigned shift, base;

  if (!may_retry (s, cmd, now))
    return false;
  shift = cmd->retries < 8 ? cmd->retries : 8;
  base = 1u << shift;
  cmd->retries++;
  atomic_fetch_add (&s->retries, 1);
  lg_debug ("%s: LUN %d: %s, retrying in about %u ms", s->target, cmd->lun,
            status_name (cmd->status), base);
  lg_s_reset_task (cmd);
  cmd->due_ms = now + base + (int64_t) randombytes_uniform (base);
  cmd->state = CMD_DELAYED;
  lg_s_push (&s->delayed, &s->delayed_tail, cmd);
  lg_s_wake (s);
  return true;
}

/* A READ that the target answered without all its data: a declared
 * underflow (the U bit and a residual) under GOOD or RECOVERED ERROR, or a
 * RECOVERED ERROR at all (libiscsi cannot say whether every byte arrived;
 * the buffer may hold what it held before).  The read fails with EIO
 * rather than return those bytes as data. */
static bool
short_read (struct lg_cmd *cmd, int status)
{
  const struct scsi_task *t = cmd->task;
  bool recovered = status == SCSI_STATUS_CHECK_CONDITION
      && t->sense.key == SCSI_SENSE_RECOVERED_ERROR;

  if (t == NULL || (t->cdb[0] != 0x28 && t->cdb[0] != 0x88)
      || (status != SCSI_STATUS_GOOD && !recovered))
    return false;
  if (t->residual_status == SCSI_RESIDUAL_UNDERFLOW && t->residual > 0)
    snprintf (cmd->msg, sizeof cmd->msg,
              "the target sent %zu bytes less than the read asked for "
              "(underflow) and said %s",
              (size_t) t->residual, recovered ? "RECOVERED ERROR" : "GOOD");
  else if (recovered)
    snprintf (cmd->msg, sizeof cmd->msg,
              "RECOVERED ERROR on a read: its data is not trusted");
  else
    return false;
  cmd->status = SCSI_STATUS_ERROR;
  return true;
}

static void
scsi_cb (struct iscsi_context *ctx, int status, void *command_data,
         void *private_data)
{
  struct lg_cmd *cmd = private_data;
  struct lg_session *s = cmd->session;
  int64_t trouble;

  (void) command_data;
  lg_s_inflight_del (s, cmd);
  trace (s, cmd, status);
  if (cmd->confirmed || cmd->expired) {
    /* recovery.c cancelled it: the target confirmed it is gone, or it
     * waited past the outage budget. */
    if (cmd->confirmed)
      lg_s_cmd_confirmed (s, cmd);
    else
      lg_s_report_unknown (s, cmd, cmd->msg);
    return;
  }
  if (status == SCSI_STATUS_CANCELLED || status == SCSI_STATUS_TIMEOUT
      || (!s->up && status != SCSI_STATUS_GOOD
          && status != SCSI_STATUS_CHECK_CONDITION
          && status != SCSI_STATUS_CONDITION_MET)) {
    /* The connection went away under it (libiscsi cancels every task
     * when the socket fails; connection_lost follows). */
    if (s->up)
      s->broken = true;
    lg_s_cmd_lost (s, cmd);
    return;
  }
  /* An answer from the target: the outcome is known.  A command the
   * answer sends again (a unit attention, an abort by the target) keeps
   * its trouble: a target that answers each retry with a unit attention
   * and stalls the next must not restart the budget each time (the
   * hostile review of 35d5979: 8 times the budget). */
  trouble = cmd->trouble_ms;
  lg_s_cmd_known (s, cmd);
  cmd->status = status;
  if (short_read (cmd, status)) {
    lg_s_complete (s, cmd);
    return;
  }
  if (status == SCSI_STATUS_TASK_ABORTED && may_retry (s, cmd, lg_mono_ms ())) {
    /* Aborted by the target (an ABORT TASK, a LUN RESET from any
     * initiator): it will not execute any further; issue it again. */
    lg_s_reset_task (cmd);
    cmd->trouble_ms = trouble;
    lg_s_issue (s, cmd);
    return;
  }
  if (status == SCSI_STATUS_CHECK_CONDITION) {
    cmd->sense = cmd->task->sense;
    if (unit_attention (s, cmd)) {
      cmd->trouble_ms = trouble;
      return;
    }
  }
  else if ((status == SCSI_STATUS_BUSY || status == SCSI_STATUS_TASK_SET_FULL)
           && busy (s, cmd))
    return;
  else if (status != SCSI_STATUS_GOOD && status != SCSI_STATUS_CONDITION_MET)
    snprintf (cmd->msg, sizeof cmd->msg, "%s",
              s->up ? iscsi_get_error (ctx) : s->dead_msg);
  lg_s_complete (s, cmd);
}

static void
discovery_cb (struct iscsi_context *ctx, int status, void *command_data,
              void *private_data)
{
  struct lg_cmd *cmd = private_data;

  lg_s_inflight_del (cmd->session, cmd);
  cmd->status = status;
  if (status == SCSI_STATUS_GOOD) {
    cmd->targets = lg_targets_copy (command_data);
    if (cmd->targets == NULL) {
      cmd->status = SCSI_STATUS_ERROR;
      snprintf (cmd->msg, sizeof cmd->msg, "out of memory");
    }
  }
  else {
    const char *e = iscsi_get_error (ctx);

    /* A cancelled SendTargets (the connection went) has no text of its
     * own: the session's says what happened. */
    snprintf (cmd->msg, sizeof cmd->msg, "%s",
              e && *e ? e
                  : cmd->session->dead_msg[0]
                  ? cmd->session->dead_msg
                  : "the connection was closed (by the target or the network)");
  }
  lg_s_complete (cmd->session, cmd);
}

/* Gives cmd to libiscsi, or holds it while the session is down or
 * recovering, or fails it past the budget. */
void
lg_s_issue (struct lg_session *s, struct lg_cmd *cmd)
{
  int r;

  if (atomic_load (&s->stopping)) {
    /* The loop thread logs out on the context without the lock. */
    lg_s_report_unknown (s, cmd, "the session is closing");
    return;
  }

  if (!s->up || (s->recovering && !cmd->priority)) {
    if (s->failing || cmd->priority)
      lg_s_report_unknown (s, cmd, s->dead_msg);
    else
      lg_s_hold (s, cmd);
    return;
  }
  cmd->issued_ms = lg_mono_ms ();
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
    lg_s_report_unknown (s, cmd, iscsi_get_error (s->ctx));
  else
    inflight_add (s, cmd);
}

/* Takes every PDU of task out of libiscsi's queues: the command, whose
 * callback runs, and any Data-Out PDU queued for it, which would read the
 * caller's buffer when sent, after the command is reported.  libiscsi's
 * cancel stops at the first PDU it finds, so it is called until it finds
 * none, with a copy of the tag (the task may be gone after the first). */
int
lg_s_cancel_task (struct lg_session *s, const struct scsi_task *task)
{
  struct scsi_task tag;
  int found = -1;

  memset (&tag, 0, sizeof tag);
  tag.itt = task->itt;
  while (iscsi_scsi_cancel_task (s->ctx, &tag) == 0)
    found = 0;
  return found;
}

/* Adds lun to the set luns[0..*n) (room for it is the caller's). */
void
lg_s_add_lun (int *luns, unsigned *n, int lun)
{
  for (unsigned i = 0; i < *n; i++)
    if (luns[i] == lun)
      return;
  luns[(*n)++] = lun;
}

/* Issues what was held, in order (after a login, or a recovery). */
void
lg_s_issue_held (struct lg_session *s)
{
  struct lg_cmd *c = s->held;
  unsigned n = 0;

  s->held = s->held_tail = NULL;
  while (c) {
    struct lg_cmd *next = c->next;

    c->state = CMD_IDLE;
    if (c->doubt && c->doubt->permanent)
      lg_s_report_unknown (s, c,
                           "the target could not confirm that an earlier "
                           "attempt of this write will not execute");
    else if (c->doubt && c->doubt->lost)
      lg_s_hold (s, c); /* a later recovery settles it */
    else {
      lg_s_issue (s, c);
      n++;
    }
    c = next;
  }
  if (n)
    lg_debug ("%s: %u commands issued again", lg_s_name (s), n);
  lg_s_flush_out (s);
}

/* Sends what libiscsi has queued, on this thread (the socket is
 * non-blocking).  Returns true when some is left for the loop thread. */
bool
lg_s_flush_out (struct lg_session *s)
{
  char why[256];

  if (!s->up || atomic_load (&s->stopping)
      || !(iscsi_which_events (s->ctx) & POLLOUT))
    return false;
  /* Inside a libiscsi callback (a TMF answer that reissues what was
   * held): libiscsi is not reentrant, and a connection torn down here
   * would free the PDU it is handling.  lg_s_service sends it after. */
  if (s->in_service)
    return false;
  if (lg_s_service (s, POLLOUT) < 0 || s->broken) {
    lg_s_connection_lost (s, lg_s_why (s, why, sizeof why));
    return true;
  }
  return (iscsi_which_events (s->ctx) & POLLOUT) != 0;
}
