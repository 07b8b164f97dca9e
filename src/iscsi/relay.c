/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The relay: see relay.h.  Each direction is a buffer parsed PDU by PDU
 * as it fills; bytes move on once the header of their PDU was checked
 * (and, for the small PDUs whose data segment matters, once the whole PDU
 * was).  The rest of a large data segment whose header was checked (a
 * Data-In, a Data-Out, a command's immediate data) is not copied through
 * the buffer: it is spliced from one socket into a pipe and from the pipe
 * into the other socket, so that its pages are never copied into this
 * process.  The buffer and the pipe are never filled at once in a way
 * that could reorder bytes: the pipe is filled only when the buffer is
 * empty, and the buffer's bytes go on only once the pipe is.  Task tags
 * live in an open-addressing table, as libiscsi issued them. */
#include <config.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "iscsi/relay.h"
#include "iscsi/sense.h"
#include "util/bytes.h"
#include "util/hooks.h"

#define BUF_CAP (1u << 20) /* each way: a PDU held whole must fit */
#define TASKS 8192         /* a power of 2 */
#define LOGIN_MRDSL 65536  /* a bound before anything is negotiated */
#define DEFAULT_MRDSL 8192 /* RFC 7143's default */
#define NOP_FLOOD 200      /* unsolicited NOP-Ins in one second */
#define WINDOW_SHUT_S 4    /* a command window closed this long */
#define BHS 48
#define PIPE_CAP (1u << 20)    /* asked of each way's pipe (may get less) */
#define SPLICE_MIN (16u << 10) /* a data segment's rest worth a splice */
/* A pipe the system gives smaller than this is not used: one that holds
 * less than libiscsi's socket would take many wake-ups to move what the
 * buffer moves in one (8 KiB pipes, a user over its pipe pages: 16 MiB
 * of writes took 20 s; helper-41). */
#define PIPE_MIN (256u << 10)
#define MOVE_ROUNDS 16 /* pipes or buffers moved one way in a pump */

enum kind { K_FREE, K_SCSI, K_NOP, K_TMF, K_LOGIN, K_TEXT, K_LOGOUT };

struct task {
  uint32_t itt;
  uint8_t kind;
  bool r, w;
  uint8_t op; /* SCSI: the CDB's operation code */
  uint16_t lun;
  uint32_t blocks; /* a READ or WRITE: from lba, this many */
  uint64_t lba;
  uint32_t edtl, got; /* expected data transfer length, Data-In so far */
  /* A write: where the next R2T may start (the end of the immediate and
   * unsolicited data seen, and of the last R2T): R2Ts come in increasing
   * order (DataSequenceInOrder), each byte asked for once. */
  uint32_t r2t_next;
  uint32_t rtt; /* ABORT TASK: the task it aborts */
};

/* One direction: bytes [off, len) are in buf; [off, ok) are checked and
 * go on; scan is where parsing stands.  piped bytes wait in the pipe
 * (pipe[0] to read, pipe[1] to write; -1: no pipe, everything through
 * buf); they came before anything in buf. */
struct side {
  unsigned char *buf;
  size_t len, off, ok, scan;
  uint64_t data_left; /* of the PDU being passed through */
  int pipe[2];
  size_t piped, pipe_cap;
  bool big; /* the last PDU had a data segment worth splicing */
};

struct lg_relay {
  int net, lib; /* the TCP socket; our end of the socketpair */
  struct side in, out;
  struct task *tasks;
  unsigned ntasks;
  bool ff;         /* full feature phase (digests apply) */
  unsigned hd, dd; /* digest bytes: header, data */
  unsigned hd_next, dd_next;
  uint32_t my_mrdsl;  /* what libiscsi declared */
  uint32_t max_burst; /* the negotiated MaxBurstLength */
  time_t nop_sec;
  unsigned nop_count;
  time_t shut_since; /* the command window closed since (0: open) */
  int64_t heard_ms;  /* the last PDU header from the target (monotonic) */
  uint32_t exp_cmdsn, max_cmdsn;
  bool broke;
  bool eof, shut;           /* the target's side ended; libiscsi's told so */
  uint64_t copied, spliced; /* bytes passed on, both ways */
  char err[256];
  char tname[128]; /* task_name's */
};

static int
fail (struct lg_relay *r, bool broke, const char *fmt, ...)
{
  va_list ap;

  va_start (ap, fmt);
  vsnprintf (r->err, sizeof r->err, fmt, ap);
  va_end (ap);
  r->broke = broke;
  return -1;
}

/* ---- the task table ---- */

static struct task *
find (struct lg_relay *r, uint32_t itt)
{
  for (unsigned i = 0, h = itt & (TASKS - 1); i < TASKS;
       i++, h = (h + 1) & (TASKS - 1)) {
    if (r->tasks[h].kind == K_FREE)
      return NULL;
    if (r->tasks[h].itt == itt)
      return &r->tasks[h];
  }
  return NULL;
}

static struct task *
insert (struct lg_relay *r, uint32_t itt, enum kind k)
{
  struct task *t = find (r, itt);
  unsigned h = itt & (TASKS - 1);

  if (t == NULL) {
    if (r->ntasks >= TASKS / 2)
      return NULL;
    while (r->tasks[h].kind != K_FREE)
      h = (h + 1) & (TASKS - 1);
    t = &r->tasks[h];
    r->ntasks++;
  }
  memset (t, 0, sizeof *t);
  t->itt = itt;
  t->kind = (uint8_t) k;
  return t;
}

/* Backward-shift deletion: later entries of the run move up. */
static void
drop (struct lg_relay *r, struct task *t)
{
  unsigned i = (unsigned) (t - r->tasks);

  r->tasks[i].kind = K_FREE;
  r->ntasks--;
  for (unsigned j = (i + 1) & (TASKS - 1); r->tasks[j].kind != K_FREE;
       j = (j + 1) & (TASKS - 1)) {
    unsigned home = r->tasks[j].itt & (TASKS - 1);

    /* Move j into the hole at i unless its home lies in (i, j]. */
    if ((j > i && (home <= i || home > j))
        || (j < i && home <= i && home > j)) {
      r->tasks[i] = r->tasks[j];
      r->tasks[j].kind = K_FREE;
      i = j;
    }
  }
}

/* ---- text keys (login) ---- */

static bool
key_value (const unsigned char *d, size_t n, const char *key, char *val,
           size_t vlen)
{
  size_t klen = strlen (key);

  for (size_t p = 0; p < n;) {
    size_t e = p;

    while (e < n && d[e] != '\0')
      e++;
    if (e - p > klen && memcmp (d + p, key, klen) == 0 && d[p + klen] == '=') {
      size_t l = e - p - klen - 1;

      if (l >= vlen)
        l = vlen - 1;
      memcpy (val, d + p + klen + 1, l);
      val[l] = '\0';
      return true;
    }
    p = e + 1;
  }
  return false;
}

static bool
key_number (const unsigned char *d, size_t n, const char *key, uint32_t *v)
{
  char val[32], *end;
  unsigned long x;

  if (!key_value (d, n, key, val, sizeof val))
    return false;
  errno = 0;
  x = strtoul (val, &end, 10);
  if (errno || end == val || *end || x > UINT32_MAX)
    return false;
  *v = (uint32_t) x;
  return true;
}

/* ---- what libiscsi sends ---- */

/* What a SCSI Command is about, for the messages: its LUN (libiscsi puts
 * the number in bytes 8-9, which reads the same as flat addressing up to
 * LUN 16383) and, for the reads and writes of 10 and 16 bytes, its
 * blocks. */
static void
note_cdb (struct task *t, const unsigned char *h)
{
  const unsigned char *cdb = h + 32;

  t->lun = (uint16_t) ((h[8] & 0x3f) << 8 | h[9]);
  t->op = cdb[0];
  switch (cdb[0]) {
  case 0x28: /* READ(10) */
  case 0x2a: /* WRITE(10) */
    t->lba = lg_be32 (cdb + 2);
    t->blocks = (uint32_t) cdb[7] << 8 | cdb[8];
    break;
  case 0x88: /* READ(16) */
  case 0x8a: /* WRITE(16) */
  case 0x89: /* COMPARE AND WRITE */
    t->lba = lg_be64 (cdb + 2);
    t->blocks = cdb[0] == 0x89 ? cdb[13] : lg_be32 (cdb + 10);
    break;
  default:
    break;
  }
}

/* "task 0x... (a read of LUN 1, blocks 2048-2055)" or "task 0x...
 * (INQUIRY to LUN 0)", in r->tname. */
static const char *
task_name (struct lg_relay *r, const struct task *t)
{
  if (t->blocks)
    snprintf (r->tname, sizeof r->tname,
              "task 0x%08x (a %s of LUN %u, blocks %" PRIu64 "-%" PRIu64 ")",
              t->itt, t->w ? "write" : "read", t->lun, t->lba,
              t->lba + t->blocks - 1);
  else
    snprintf (r->tname, sizeof r->tname, "task 0x%08x (%s to LUN %u)", t->itt,
              lg_scsi_opname (t->op), t->lun);
  return r->tname;
}

static void
note_login (struct lg_relay *r, const unsigned char *d, size_t n)
{
  uint32_t v;

  if (key_number (d, n, "MaxRecvDataSegmentLength", &v) && v >= 512)
    r->my_mrdsl = v;
}

static void
note_out (struct lg_relay *r, const unsigned char *h, const unsigned char *d,
          size_t n)
{
  uint32_t itt = lg_be32 (h + 16);
  struct task *t;

  switch (h[0] & 0x3f) {
  case 0x01: /* SCSI Command */
    if ((t = insert (r, itt, K_SCSI)) != NULL) {
      t->r = (h[1] & 0x40) != 0;
      t->w = (h[1] & 0x20) != 0;
      t->edtl = lg_be32 (h + 20);
      t->r2t_next = (uint32_t) h[5] << 16 | (uint32_t) h[6] << 8 | h[7];
      note_cdb (t, h);
    }
    break;
  case 0x05: /* SCSI Data-Out, unsolicited (no target transfer tag) */
    if (lg_be32 (h + 20) == 0xffffffff && (t = find (r, itt)) != NULL
        && t->kind == K_SCSI) {
      uint64_t end = (uint64_t) lg_be32 (h + 40)
          + ((uint32_t) h[5] << 16 | (uint32_t) h[6] << 8 | h[7]);

      if (end > t->r2t_next && end <= UINT32_MAX)
        t->r2t_next = (uint32_t) end;
    }
    break;
  case 0x00: /* NOP-Out */
    if (itt != 0xffffffff)
      insert (r, itt, K_NOP);
    break;
  case 0x02: /* Task Management Function */
    if ((t = insert (r, itt, K_TMF)) != NULL && (h[1] & 0x7f) == 1)
      t->rtt = lg_be32 (h + 20);
    break;
  case 0x03:
    insert (r, itt, K_LOGIN);
    note_login (r, d, n);
    break;
  case 0x04:
    insert (r, itt, K_TEXT);
    break;
  case 0x06:
    insert (r, itt, K_LOGOUT);
    break;
  default:
    break;
  }
}

/* ---- what the target sends ---- */

/* The status of a read, against the data it got. */
static int
check_coverage (struct lg_relay *r, const struct task *t,
                const unsigned char *h, bool in_datain)
{
  bool under = (h[1] & 0x02) != 0;
  uint32_t resid = lg_be32 (h + 44), missing = t->edtl - t->got;

  if (!t->r || h[3] != 0 || (!in_datain && h[2] != 0))
    return 0;
  if (under && resid != missing)
    return fail (r, true,
                 "%s got %" PRIu32 " of %" PRIu32
                 " bytes but the target declared a residual of %" PRIu32,
                 task_name (r, t), t->got, t->edtl, resid);
  if (!under && missing)
    return fail (r, true,
                 "the target sent %" PRIu32 " of the %" PRIu32
                 " bytes of %s and said GOOD without an underflow",
                 t->got, t->edtl, task_name (r, t));
  return 0;
}

static int
check_datain (struct lg_relay *r, const unsigned char *h, uint32_t dsl)
{
  uint32_t itt = lg_be32 (h + 16), off = lg_be32 (h + 40);
  struct task *t = find (r, itt);
  int rc = 0;

  if (t == NULL || t->kind != K_SCSI || !t->r)
    return fail (r, true, "a Data-In for task 0x%08x, which is %s", itt,
                 t ? "not a read of ours" : "no command of ours");
  if (off != t->got)
    return fail (r, true,
                 "a Data-In at offset %" PRIu32 " where %" PRIu32
                 " was next (%s: a gap or an overlap)",
                 off, t->got, task_name (r, t));
  if ((uint64_t) off + dsl > t->edtl)
    return fail (r, true,
                 "a Data-In of %" PRIu32 " bytes at %" PRIu32
                 " beyond the %" PRIu32 " the command asked for (%s)",
                 dsl, off, t->edtl, task_name (r, t));
  t->got += dsl;
  if (h[1] & 0x01) {
    if (!(h[1] & 0x80))
      return fail (r, true, "a status in a Data-In without the final bit (%s)",
                   task_name (r, t));
    rc = check_coverage (r, t, h, true);
    drop (r, t);
  }
  return rc;
}

/* Sense data as libiscsi will parse it: SenseLength within the segment,
 * and long enough for the fields it reads. */
static int
check_sense (struct lg_relay *r, const struct task *t, const unsigned char *d,
             uint32_t dsl)
{
  uint32_t sl;
  unsigned code, key;

  if (dsl < 2)
    return fail (r, true, "a CHECK CONDITION without sense data (%s)",
                 task_name (r, t));
  sl = (uint32_t) d[0] << 8 | d[1];
  if (sl + 2 > dsl)
    return fail (r, true,
                 "a SenseLength of %" PRIu32 " in a segment of %" PRIu32
                 " bytes (%s)",
                 sl, dsl, task_name (r, t));
  code = sl ? d[2] & 0x7f : 0;
  if (sl < 4 || ((code == 0x70 || code == 0x71) && sl < 14))
    return fail (r, true, "sense data of %" PRIu32 " bytes (code 0x%02x, %s)",
                 sl, code, task_name (r, t));
  key = (code == 0x72 || code == 0x73) ? d[3] & 0x0f : d[4] & 0x0f;
  if (key == 0x01 && t->r && t->got < t->edtl)
    return fail (r, true,
                 "RECOVERED ERROR on a read that got %" PRIu32 " of %" PRIu32
                 " bytes (%s)",
                 t->got, t->edtl, task_name (r, t));
  return 0;
}

static int
check_response (struct lg_relay *r, const unsigned char *h,
                const unsigned char *d, uint32_t dsl)
{
  uint32_t itt = lg_be32 (h + 16);
  struct task *t = find (r, itt);
  int rc;

  if (t == NULL || t->kind != K_SCSI)
    return fail (r, true, "a SCSI Response for task 0x%08x, %s", itt,
                 t ? "which is not a command" : "which is no command of ours");
  rc = (h[2] == 0 && h[3] == 0x02) ? check_sense (r, t, d, dsl)
                                   : check_coverage (r, t, h, false);
  drop (r, t);
  return rc;
}

static int
check_r2t (struct lg_relay *r, const unsigned char *h)
{
  uint32_t itt = lg_be32 (h + 16), off = lg_be32 (h + 40),
           len = lg_be32 (h + 44);
  struct task *t = find (r, itt);

  if (t == NULL || t->kind != K_SCSI || !t->w)
    return fail (r, true, "an R2T for task 0x%08x, which is no write of ours",
                 itt);
  if (len == 0 || (uint64_t) off + len > t->edtl || len > r->max_burst)
    return fail (r, true,
                 "an R2T for %" PRIu32 " bytes at %" PRIu32 " (%s has %" PRIu32
                 ", MaxBurstLength %" PRIu32 ")",
                 len, off, task_name (r, t), t->edtl, r->max_burst);
  /* Bytes asked for twice (or sent already): a target that counts them
   * as the next ones would store other bytes than were written. */
  if (off < t->r2t_next)
    return fail (r, true,
                 "an R2T for %" PRIu32 " bytes at %" PRIu32 ", which asks "
                 "again for bytes before %" PRIu32 " (%s)",
                 len, off, t->r2t_next, task_name (r, t));
  t->r2t_next = off + len;
  return 0;
}

static int
check_nopin (struct lg_relay *r, const unsigned char *h)
{
  uint32_t itt = lg_be32 (h + 16);
  struct task *t;
  struct timespec ts;

  if (itt == 0xffffffff) {
    clock_gettime (CLOCK_MONOTONIC, &ts);
    if (ts.tv_sec != r->nop_sec) {
      r->nop_sec = ts.tv_sec;
      r->nop_count = 0;
    }
    if (++r->nop_count > NOP_FLOOD)
      return fail (r, true, "a flood of NOP-Ins (over %d in a second)",
                   NOP_FLOOD);
    return 0;
  }
  t = find (r, itt);
  if (t == NULL || t->kind != K_NOP)
    return fail (r, true,
                 "a NOP-In for task 0x%08x, which is no NOP-Out of ours", itt);
  drop (r, t);
  return 0;
}

static int
check_login (struct lg_relay *r, const unsigned char *h, const unsigned char *d,
             uint32_t dsl)
{
  struct task *t = find (r, lg_be32 (h + 16));
  uint32_t v;
  char val[32];

  if (r->ff || t == NULL || t->kind != K_LOGIN)
    return fail (r, true, "a Login Response out of the login");
  drop (r, t);
  if (key_number (d, dsl, "MaxRecvDataSegmentLength", &v) && v < 512)
    return fail (r, true,
                 "the target declares MaxRecvDataSegmentLength=%" PRIu32, v);
  if (key_number (d, dsl, "MaxBurstLength", &v) && v >= 512)
    r->max_burst = v;
  if (key_value (d, dsl, "HeaderDigest", val, sizeof val))
    r->hd_next = strcmp (val, "CRC32C") == 0 ? 4 : 0;
  if (key_value (d, dsl, "DataDigest", val, sizeof val))
    r->dd_next = strcmp (val, "CRC32C") == 0 ? 4 : 0;
  return 0;
}

/* After a Login Response that moves to full feature phase. */
static void
maybe_full_feature (struct lg_relay *r, const unsigned char *h)
{
  if ((h[0] & 0x3f) == 0x23 && h[36] == 0 && (h[1] & 0x80)
      && (h[1] & 0x03) == 3) {
    r->ff = true;
    r->hd = r->hd_next;
    r->dd = r->dd_next;
  }
}

static int
check_simple (struct lg_relay *r, const unsigned char *h, enum kind k,
              const char *what)
{
  uint32_t itt = lg_be32 (h + 16);
  struct task *t = find (r, itt);

  if (t == NULL || t->kind != k)
    return fail (r, true, "a %s for task 0x%08x, which is none of ours", what,
                 itt);
  if (k == K_TMF && t->rtt) {
    struct task *a = find (r, t->rtt);

    if (a && a->kind == K_SCSI)
      drop (r, a); /* aborted: no answer will come */
    t = find (r, itt);
  }
  if (t && (k != K_TEXT || (h[1] & 0x80)))
    drop (r, t);
  return 0;
}

static const char *const async_what[] = {
  [1] = "log out",
  [2] = "drop the connection",
  [3] = "drop every connection",
  [4] = "negotiate again",
};

static time_t
now_s (void)
{
  struct timespec ts;

  clock_gettime (CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + 1; /* never 0 */
}

/* ExpCmdSN and MaxCmdSN, which every PDU of the full feature phase but a
 * Reject carries: a window held closed (MaxCmdSN = ExpCmdSN - 1) stalls
 * every command, and libiscsi's keepalive behind them. */
static void
note_window (struct lg_relay *r, const unsigned char *h)
{
  unsigned op = h[0] & 0x3f;

  if (!r->ff || op == 0x3f || op == 0x23)
    return;
  r->exp_cmdsn = lg_be32 (h + 28);
  r->max_cmdsn = lg_be32 (h + 32);
  if ((int32_t) (r->max_cmdsn - r->exp_cmdsn) < 0) {
    if (r->shut_since == 0)
      r->shut_since = now_s ();
  }
  else
    r->shut_since = 0;
}

int64_t
lg_relay_heard_ms (const struct lg_relay *r)
{
  return r->heard_ms;
}

void
lg_relay_window_note (const struct lg_relay *r, char *buf, size_t len)
{
  buf[0] = '\0';
  if (r && r->shut_since)
    snprintf (buf, len,
              "; the target has kept its command window closed for %ld s "
              "(MaxCmdSN 0x%08" PRIx32 ", ExpCmdSN 0x%08" PRIx32 ")",
              (long) (now_s () - r->shut_since), r->max_cmdsn, r->exp_cmdsn);
}

static int
check_window (struct lg_relay *r)
{
  if (r->shut_since && now_s () - r->shut_since >= WINDOW_SHUT_S)
    return fail (r, true,
                 "the target has kept its command window closed for %d s "
                 "(MaxCmdSN 0x%08" PRIx32 ", ExpCmdSN 0x%08" PRIx32 ")",
                 WINDOW_SHUT_S, r->max_cmdsn, r->exp_cmdsn);
  return 0;
}

int
lg_relay_check_in (struct lg_relay *r, const unsigned char *h, size_t len)
{
  uint32_t dsl = lg_be24 (h + 5), limit = r->ff ? r->my_mrdsl : LOGIN_MRDSL;
  const unsigned char *d = h + BHS + r->hd;
  uint32_t have = len >= BHS + r->hd ? (uint32_t) (len - BHS - r->hd) : 0;
  struct timespec ts;

  clock_gettime (CLOCK_MONOTONIC, &ts);
  r->heard_ms = (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
  if (have > dsl)
    have = dsl;
  note_window (r, h);
  if (h[4])
    return fail (r, true, "a PDU with an additional header (TotalAHSLength %u)",
                 h[4]);
  if (dsl > limit)
    return fail (r, true,
                 "a DataSegmentLength of %" PRIu32 " beyond the %" PRIu32
                 " negotiated",
                 dsl, limit);
  switch (h[0] & 0x3f) {
  case 0x25:
    return check_datain (r, h, dsl);
  case 0x21:
    return check_response (r, h, d, have);
  case 0x31:
    return check_r2t (r, h);
  case 0x20:
    return check_nopin (r, h);
  case 0x23:
    return check_login (r, h, d, have);
  case 0x22:
    return check_simple (r, h, K_TMF, "Task Management Response");
  case 0x24:
    return check_simple (r, h, K_TEXT, "Text Response");
  case 0x26:
    return check_simple (r, h, K_LOGOUT, "Logout Response");
  case 0x32:
    if (h[36] >= 1 && h[36] <= 4)
      return fail (r, false, "the target asks to %s (AsyncEvent %u)",
                   async_what[h[36]], h[36]);
    return 0;
  case 0x3f:
    return fail (r, false, "the target rejected a PDU (reason 0x%02x)", h[2]);
  default:
    return fail (r, true, "a PDU of opcode 0x%02x, which targets do not send",
                 h[0] & 0x3f);
  }
}

/* ---- moving bytes ---- */

/* The PDUs whose data segment is checked: held until whole. */
static bool
held_whole (bool inbound, const unsigned char *h)
{
  unsigned op = h[0] & 0x3f;

  if (!inbound)
    return op == 0x03;
  return op == 0x21 || op == 0x23;
}

static size_t
pdu_size (const struct lg_relay *r, const unsigned char *h)
{
  uint32_t dsl = lg_be24 (h + 5);
  size_t data = dsl ? ((size_t) dsl + 3) / 4 * 4 + r->dd : 0;

  return BHS + (size_t) h[4] * 4 + r->hd + data;
}

/* A Login Response's padding, zeroed before libiscsi sees it: LIO pads
 * with stale bytes, and libiscsi 1.19 parses the padding as text keys
 * (doc/libiscsi-bugs.md), failing the login when no NUL happens to be
 * among them.  Logins carry no digests. */
static void
zero_login_padding (const struct lg_relay *r, unsigned char *h)
{
  uint32_t dsl = lg_be24 (h + 5);
  size_t at = BHS + (size_t) h[4] * 4 + r->hd + dsl;

  if ((h[0] & 0x3f) == 0x23 && !r->ff && dsl % 4)
    memset (h + at, 0, 4 - dsl % 4);
}

/* Parses what arrived on one side; moves ok forward. */
static int
parse (struct lg_relay *r, struct side *s, bool inbound)
{
  while (s->scan < s->len) {
    const unsigned char *h = s->buf + s->scan;
    size_t avail = s->len - s->scan, size;

    if (s->data_left) {
      size_t n = avail < s->data_left ? avail : (size_t) s->data_left;

      s->scan += n;
      s->data_left -= n;
      s->ok = s->scan;
      continue;
    }
    if (avail < BHS)
      break;
    size = pdu_size (r, h);
    if (held_whole (inbound, h)) {
      if (size > BUF_CAP / 2)
        return fail (r, true, "a PDU of %zu bytes", size);
      if (avail < size)
        break;
      if (inbound ? lg_relay_check_in (r, h, size) < 0
                  : (note_out (r, h, h + BHS + r->hd, lg_be24 (h + 5)), 0))
        return -1;
      if (inbound) {
        zero_login_padding (r, s->buf + s->scan);
        maybe_full_feature (r, h);
      }
      s->scan += size;
      s->ok = s->scan;
      continue;
    }
    if (inbound && lg_relay_check_in (r, h, BHS) < 0)
      return -1;
    if (!inbound)
      note_out (r, h, NULL, 0);
    s->data_left = size;
    s->big = size >= SPLICE_MIN;
  }
  return 0;
}

/* Whether the next bytes of s's socket go into its pipe: the buffer is
 * empty and the PDU passing has a large rest. */
static bool
splicing (const struct side *s)
{
  return s->pipe[0] >= 0 && s->len == 0 && s->data_left >= SPLICE_MIN;
}

/* Whether s can take bytes from its socket now. */
static bool
has_room (const struct side *s)
{
  return splicing (s) ? s->piped < s->pipe_cap : s->len < BUF_CAP;
}

/* Moves the rest of a large data segment from fd into s's pipe, without
 * copying it here, until it is all in, the pipe is full or fd is empty.
 * *eof is set when fd was closed or (inbound) reset, as for a read: what
 * came before still goes on.  1 when fd was found empty, 0, or -1. */
static int
fill_pipe (struct lg_relay *r, struct side *s, int fd, bool inbound, bool *eof)
{
  while (splicing (s) && s->piped < s->pipe_cap) {
    size_t want = s->pipe_cap - s->piped;
    ssize_t n;

    if (want > s->data_left)
      want = (size_t) s->data_left;
    n = splice (fd, NULL, s->pipe[1], NULL, want,
                SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      return 1;
    if (n == 0 || (n < 0 && inbound)) {
      *eof = true;
      break;
    }
    if (n < 0)
      return fail (r, false, "%s", strerror (errno));
    s->data_left -= (uint64_t) n;
    s->piped += (size_t) n;
  }
  return 0;
}

/* What a send or a splice into a socket returned: W_MOVED bytes, W_AGAIN
 * (interrupted), W_FULL (the socket is full), or -1: the connection is
 * over (said why). */
enum { W_FULL = 0, W_MOVED = 1, W_AGAIN = 2 };
static int
wrote (struct lg_relay *r, ssize_t n)
{
  if (n > 0)
    return W_MOVED;
  if (n < 0 && errno == EINTR)
    return W_AGAIN;
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
    return W_FULL;
  return fail (r, false, "%s", n < 0 ? strerror (errno) : "closed");
}

/* Writes what waits in s's pipe to fd.  0 (with s->piped left when fd is
 * full), or -1. */
static int
drain_pipe (struct lg_relay *r, struct side *s, int fd, bool *moved)
{
  while (s->piped > 0) {
    ssize_t n = splice (s->pipe[0], NULL, fd, NULL, s->piped,
                        SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
    int w = wrote (r, n);

    if (w <= 0)
      return w;
    if (w == W_MOVED) {
      s->piped -= (size_t) n;
      r->spliced += (uint64_t) n;
      *moved = true;
    }
  }
  return 0;
}

/* Writes the checked bytes of s to fd, what waits in its pipe first;
 * compacts s. */
static int
deliver (struct lg_relay *r, struct side *s, int fd, bool *moved)
{
  if (drain_pipe (r, s, fd, moved) < 0)
    return -1;
  if (s->piped > 0)
    return 0;
  while (s->off < s->ok) {
    /* No SIGPIPE when the peer is gone: the error says it. */
    ssize_t n = send (fd, s->buf + s->off, s->ok - s->off, MSG_NOSIGNAL);
    int w = wrote (r, n);

    if (w < 0)
      return -1;
    if (w == W_FULL)
      break;
    if (w == W_MOVED) {
      s->off += (size_t) n;
      r->copied += (uint64_t) n;
      *moved = true;
    }
  }
  if (s->off == s->len) {
    s->off = s->ok = s->scan = s->len = 0;
  }
  else if (s->off > 0 && (s->off > BUF_CAP / 2 || s->len == BUF_CAP)) {
    memmove (s->buf, s->buf + s->off, s->len - s->off);
    s->len -= s->off;
    s->ok -= s->off;
    s->scan -= s->off;
    s->off = 0;
  }
  return 0;
}

/* When large PDUs pass, the next one's header is looked at where it
 * waits (MSG_PEEK) and checked, so that the whole PDU can be spliced:
 * 1 when it was, 0 when it is to be read into the buffer (too small, held
 * whole, not all there, or the socket closed), 2 when fd is empty. */
static int
peek_header (struct lg_relay *r, struct side *s, int fd, bool inbound)
{
  unsigned char h[BHS];
  ssize_t n = recv (fd, h, sizeof h, MSG_PEEK | MSG_DONTWAIT);
  size_t size;

  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
    return 2;
  if (n < BHS)
    return 0;
  size = pdu_size (r, h);
  s->big = size >= SPLICE_MIN && !held_whole (inbound, h);
  if (!s->big)
    return 0;
  if (inbound && lg_relay_check_in (r, h, BHS) < 0)
    return -1;
  if (!inbound)
    note_out (r, h, NULL, 0);
  s->data_left = size;
  return 1;
}

/* Reads what fd has into s and parses it; the rest of a large data
 * segment, and whole large PDUs while they come, into its pipe.  *empty
 * is set when fd was found empty (or ended), rather than the pipe or the
 * buffer full. */
static int
fill (struct lg_relay *r, struct side *s, int fd, bool inbound, bool *empty)
{
  *empty = true;
  for (;;) {
    bool closed = false;
    int p = fill_pipe (r, s, fd, inbound, &closed);

    if (p < 0)
      return -1;
    if (closed && inbound) {
      r->eof = true;
      return 0;
    }
    if (closed)
      return fail (r, false, "closed");
    if (splicing (s)) {
      *empty = p == 1;
      return 0;
    }
    if (s->pipe[0] < 0 || s->len > 0 || s->data_left > 0 || !s->big)
      break;
    p = peek_header (r, s, fd, inbound);
    if (p < 0)
      return -1;
    if (p == 2)
      return 0;
    if (p == 0)
      break;
  }
  while (s->len < BUF_CAP) {
    ssize_t n = read (fd, s->buf + s->len, BUF_CAP - s->len);

    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
      return 0;
    if (n <= 0 && inbound) {
      /* Closed or reset: libiscsi gets what came before, then the end,
       * and says what it makes of it (a login refusal, say). */
      r->eof = true;
      return 0;
    }
    if (n <= 0)
      return fail (r, false, "%s", n < 0 ? strerror (errno) : "closed");
    s->len += (size_t) n;
    if (parse (r, s, inbound) < 0)
      return -1;
    /* A short read emptied the socket: no read just to hear EAGAIN. */
    if (s->len < BUF_CAP)
      return 0;
  }
  *empty = false;
  return 0;
}

/* Moves one way: from fd_from (when take) into s, and from s to fd_to,
 * until fd_from is empty or fd_to full (libiscsi writes into its socket
 * only inside a call followed by a pump, and nothing else would wake the
 * relay for what a full pipe or buffer left there).  A bound on the
 * rounds lets the other way have its turn. */
static int
move (struct lg_relay *r, struct side *s, int fd_from, int fd_to, bool inbound,
      bool take, bool *moved)
{
  for (int round = 0; round < MOVE_ROUNDS; round++) {
    bool empty = true;

    if (take && !(inbound && r->eof)
        && fill (r, s, fd_from, inbound, &empty) < 0)
      return -1;
    if (deliver (r, s, fd_to, moved) < 0)
      return -1;
    if (empty || s->piped > 0 || s->off < s->ok)
      break;
  }
  return 0;
}

int
lg_relay_pump (struct lg_relay *r, unsigned from, bool *delivered)
{
  bool sent = false;

  *delivered = false;
  if (r->err[0] || check_window (r) < 0)
    return -1;
  if (move (r, &r->out, r->lib, r->net, false, from & LG_RELAY_FROM_LIB, &sent)
          < 0
      || move (r, &r->in, r->net, r->lib, true, from & LG_RELAY_FROM_NET,
               delivered)
          < 0)
    return -1;
  if (r->eof && !r->shut && r->in.off == r->in.len && r->in.piped == 0) {
    shutdown (r->lib, SHUT_WR);
    r->shut = true;
    *delivered = true;
  }
  return 0;
}

short
lg_relay_net_events (const struct lg_relay *r)
{
  return (short) ((has_room (&r->in) && !r->eof ? POLLIN : 0)
                  | (r->out.off < r->out.ok || r->out.piped > 0 ? POLLOUT : 0));
}

int
lg_relay_net_fd (const struct lg_relay *r)
{
  return r->net;
}

void
lg_relay_bytes (const struct lg_relay *r, uint64_t *copied, uint64_t *spliced)
{
  *copied = r->copied;
  *spliced = r->spliced;
}

const char *
lg_relay_error (const struct lg_relay *r)
{
  return r->err;
}

bool
lg_relay_broke_protocol (const struct lg_relay *r)
{
  return r->broke;
}

/* ---- set-up ---- */

struct lg_relay *
lg_relay_new_detached (void)
{
  struct lg_relay *r = calloc (1, sizeof *r);

  if (r == NULL)
    return NULL;
  r->net = r->lib = -1;
  r->in.pipe[0] = r->in.pipe[1] = r->out.pipe[0] = r->out.pipe[1] = -1;
  r->tasks = calloc (TASKS, sizeof *r->tasks);
  r->in.buf = malloc (BUF_CAP);
  r->out.buf = malloc (BUF_CAP);
  if (r->tasks == NULL || r->in.buf == NULL || r->out.buf == NULL) {
    lg_relay_free (r);
    return NULL;
  }
  r->my_mrdsl = DEFAULT_MRDSL;
  r->max_burst = 262144;
  return r;
}

void
lg_relay_note_out (struct lg_relay *r, const unsigned char *hdr, size_t len)
{
  uint32_t dsl = lg_be24 (hdr + 5);

  if (len < BHS)
    return;
  note_out (r, hdr, hdr + BHS, len - BHS < dsl ? len - BHS : dsl);
}

static int
nonblocking (int fd)
{
  int fl = fcntl (fd, F_GETFL);

  return fl < 0 ? -1 : fcntl (fd, F_SETFL, fl | O_NONBLOCK);
}

static void
close_pipe (struct side *s)
{
  if (s->pipe[0] >= 0) {
    close (s->pipe[0]);
    close (s->pipe[1]);
  }
  s->pipe[0] = s->pipe[1] = -1;
}

/* s's pipe, as large as the system lets; none (everything through the
 * buffer) when it cannot be made or is smaller than PIPE_MIN. */
static void
open_pipe (struct side *s)
{
  int cap;

  if (pipe2 (s->pipe, O_CLOEXEC | O_NONBLOCK) < 0) {
    s->pipe[0] = s->pipe[1] = -1;
    return;
  }
  (void) fcntl (s->pipe[1], F_SETPIPE_SZ, (int) PIPE_CAP);
  cap = fcntl (s->pipe[1], F_GETPIPE_SZ);
  if (cap < (int) PIPE_MIN) {
    close_pipe (s);
    return;
  }
  s->pipe_cap = (size_t) cap;
}

struct lg_relay *
lg_relay_attach (int lib_fd, char *err, size_t errlen)
{
  struct lg_relay *r = lg_relay_new_detached ();
  int sp[2] = { -1, -1 };

  if (r == NULL) {
    snprintf (err, errlen, "out of memory");
    return NULL;
  }
  r->net = fcntl (lib_fd, F_DUPFD_CLOEXEC, 3);
  if (r->net < 0 || socketpair (AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) < 0
      || nonblocking (sp[0]) < 0 || nonblocking (sp[1]) < 0
      || nonblocking (r->net) < 0 || dup2 (sp[0], lib_fd) < 0) {
    snprintf (err, errlen, "cannot set up the relay: %s", strerror (errno));
    if (sp[0] >= 0) {
      close (sp[0]);
      close (sp[1]);
    }
    lg_relay_free (r);
    return NULL;
  }
  close (sp[0]); /* lib_fd is that end now */
  r->lib = sp[1];
  if (lg_test_hook ("LUNGATE_TEST_RELAY_COPY") == NULL) {
    open_pipe (&r->in);
    open_pipe (&r->out);
  }
  return r;
}

void
lg_relay_free (struct lg_relay *r)
{
  if (r == NULL)
    return;
  if (r->net >= 0)
    close (r->net);
  if (r->lib >= 0)
    close (r->lib);
  close_pipe (&r->in);
  close_pipe (&r->out);
  free (r->tasks);
  free (r->in.buf);
  free (r->out.buf);
  free (r);
}
