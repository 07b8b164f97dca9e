/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Persistent reservations: the key, the replies, the commands (pr.h).
 * Replies are parsed here, bounded by what arrived, not by libiscsi's
 * unmarshaller (which trusts the lengths the target sends). */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <sodium.h>

#include "iscsi/pr.h"
#include "util/fmt.h"
#include "util/hooks.h"
#include "util/bytes.h"

#define KEY_MAGIC 0x4cull
#define EPOCH_2024 1704067200ull /* 2024-01-01 UTC */
#define HOST_BITS 12
#define SEC_BITS 28 /* seconds since 2024: until 2032-07 */
#define RND_BITS 16

static pthread_once_t key_once = PTHREAD_ONCE_INIT;
static uint64_t my_key;
static char my_host[256];

static uint64_t
host_hash (const char *host)
{
  uint8_t h[crypto_generichash_BYTES_MIN];

  crypto_generichash (h, sizeof h, (const uint8_t *) host, strlen (host), NULL,
                      0);
  return ((uint64_t) h[0] << 8 | h[1]) & ((1u << HOST_BITS) - 1);
}

/* 'L', a hash of the host name, the seconds since 2024 at the process's
 * start, and random bits (two processes started in one second). */
static void
make_key (void)
{
  uint64_t now = (uint64_t) time (NULL), sec;
  const char *forced = lg_test_hook ("LUNGATE_TEST_PR_KEY");

  if (gethostname (my_host, sizeof my_host - 1) != 0 || my_host[0] == '\0')
    snprintf (my_host, sizeof my_host, "localhost");
  sec = now > EPOCH_2024 ? now - EPOCH_2024 : 0;
  my_key = KEY_MAGIC << 56 | host_hash (my_host) << (SEC_BITS + RND_BITS)
      | (sec & ((1ull << SEC_BITS) - 1)) << RND_BITS
      | (randombytes_random () & ((1u << RND_BITS) - 1));
  /* LUNGATE_TEST_PR_KEY: two processes with one key, as a collision
   * would make them (test-reserve); never for use. */
  if (forced && strtoull (forced, NULL, 16) != 0)
    my_key = strtoull (forced, NULL, 16);
}

uint64_t
lg_pr_my_key (void)
{
  pthread_once (&key_once, make_key);
  return my_key;
}

int
lg_pr_parse_reservation (const uint8_t *d, size_t n, struct lg_pr_state *st)
{
  uint32_t add;

  if (n < 8)
    return -1;
  st->generation = lg_be32 (d);
  add = lg_be32 (d + 4);
  st->reserved = false;
  st->holder = 0;
  st->type = 0;
  if (add == 0)
    return 0;
  if (add < 16 || n < 24)
    return -1;
  st->reserved = true;
  st->holder = lg_be64 (d + 8);
  st->type = d[21] & 0x0f;
  return 0;
}

int
lg_pr_parse_keys (const uint8_t *d, size_t n, struct lg_pr_state *st)
{
  uint32_t add;

  if (n < 8)
    return -1;
  add = lg_be32 (d + 4);
  if (add % 8)
    return -1;
  st->nkeys = 0;
  for (size_t off = 8; off + 8 <= n && off - 8 < add; off += 8)
    if (st->nkeys < LG_PR_MAX_KEYS)
      st->keys[st->nkeys++] = lg_be64 (d + off);
  return 0;
}

bool
lg_pr_key_here (uint64_t key)
{
  lg_pr_my_key ();
  return key >> 56 == KEY_MAGIC
      && ((key >> (SEC_BITS + RND_BITS)) & ((1u << HOST_BITS) - 1))
      == host_hash (my_host);
}

void
lg_pr_describe_key (uint64_t key, char *buf, size_t len)
{
  time_t t
      = (time_t) (((key >> RND_BITS) & ((1ull << SEC_BITS) - 1)) + EPOCH_2024);
  struct tm tm;
  char when[40] = "an unknown time";

  lg_pr_my_key ();
  if (key >> 56 != KEY_MAGIC) {
    snprintf (buf, len, "an initiator other than lungate");
    return;
  }
  if (gmtime_r (&t, &tm))
    strftime (when, sizeof when, "%Y-%m-%d %H:%M UTC", &tm);
  if (lg_pr_key_here (key))
    snprintf (buf, len, "a gateway on this host (%s) since %s", my_host, when);
  else
    snprintf (buf, len, "a gateway on another host since %s", when);
}

const char *
lg_pr_type_name (int type)
{
  switch (type) {
  case 1:
    return "Write Exclusive";
  case 3:
    return "Exclusive Access";
  case 5:
    return "Write Exclusive, Registrants Only";
  case 6:
    return "Exclusive Access, Registrants Only";
  case 7:
    return "Write Exclusive, All Registrants";
  case 8:
    return "Exclusive Access, All Registrants";
  default:
    return "unknown type";
  }
}

void
lg_pr_describe (const struct lg_pr_state *st, char *buf, size_t len)
{
  char who[128];
  size_t o;

  if (!st->supported) {
    snprintf (buf, len, "no persistent reservations on this LUN");
    return;
  }
  if (!st->reserved)
    o = (size_t) snprintf (buf, len, "not reserved");
  else if (st->holder == 0)
    o = (size_t) snprintf (buf, len, "%s", lg_pr_type_name (st->type));
  else {
    lg_pr_describe_key (st->holder, who, sizeof who);
    o = (size_t) snprintf (buf, len,
                           "%s by %s (reservation key 0x%016" PRIx64 ")",
                           lg_pr_type_name (st->type), who, st->holder);
  }
  for (unsigned i = 0; i < st->nkeys && o < len; i++) {
    bool dup = false;

    for (unsigned j = 0; j < i; j++)
      dup |= st->keys[j] == st->keys[i];
    if (!dup)
      o += (size_t) snprintf (buf + o, len - o, "%s0x%016" PRIx64,
                              o && i == 0 ? "; registered: " : ", ",
                              st->keys[i]);
  }
}

/* One PERSISTENT RESERVE IN: the data that came, in buf (at most cap). */
static int
pr_in (const struct lg_lun_io *io, int lun, int sa, uint8_t *buf, size_t cap,
       size_t *got, char *msg, size_t len)
{
  struct scsi_task *task = scsi_cdb_persistent_reserve_in (sa, (uint16_t) cap);
  int r;

  if (task == NULL) {
    snprintf (msg, len, "out of memory");
    errno = ENOMEM;
    return -1;
  }
  r = io->task (io->opaque, lun, task, msg, len);
  if (r == 0) {
    size_t n = task->datain.size > 0 ? (size_t) task->datain.size : 0;

    *got = n < cap ? n : cap;
    memcpy (buf, task->datain.data, *got);
  }
  scsi_free_scsi_task (task);
  return r;
}

int
lg_pr_read (const struct lg_lun_io *io, int lun, struct lg_pr_state *st,
            char *msg, size_t len)
{
  uint8_t buf[8 + 8 * LG_PR_MAX_KEYS];
  size_t got = 0;

  memset (st, 0, sizeof *st);
  if (pr_in (io, lun, SCSI_PERSISTENT_RESERVE_READ_RESERVATION, buf, 24, &got,
             msg, len)
      < 0) {
    /* A LUN without persistent reservations refuses the command. */
    if (errno == ENOTSUP || errno == EINVAL)
      return 0;
    return -1;
  }
  if (lg_pr_parse_reservation (buf, got, st) < 0)
    goto malformed;
  if (pr_in (io, lun, SCSI_PERSISTENT_RESERVE_READ_KEYS, buf, sizeof buf, &got,
             msg, len)
      < 0)
    return -1;
  if (lg_pr_parse_keys (buf, got, st) < 0)
    goto malformed;
  st->supported = true;
  return 0;
malformed:
  snprintf (msg, len, "malformed PERSISTENT RESERVE IN reply");
  errno = EIO;
  return -1;
}

static int
hexval (int c)
{
  if (c >= '0' && c <= '9')
    return c - '0';
  if (c >= 'a' && c <= 'f')
    return c - 'a' + 10;
  if (c >= 'A' && c <= 'F')
    return c - 'A' + 10;
  return -1;
}

/* An iSCSI TransportID (SPC-4 7.6.4.6): format 00b "NAME", format 01b
 * "NAME,i,0xISID" (12 hex digits). */
static int
parse_iscsi_tid (const uint8_t *t, size_t n, char *name, size_t namelen,
                 uint8_t isid[6])
{
  size_t len, end;
  const char *sep;
  char buf[260];

  if (n < 4 || (t[0] & 0x0f) != 5)
    return -1;
  len = (size_t) t[2] << 8 | t[3];
  if (len > n - 4)
    len = n - 4;
  for (end = 0; end < len && t[4 + end] != '\0'; end++)
    ;
  if (end == 0 || end >= sizeof buf)
    return -1;
  memcpy (buf, t + 4, end);
  buf[end] = '\0';
  memset (isid, 0, 6);
  sep = strstr (buf, ",i,0x");
  if (sep == NULL)
    sep = strstr (buf, ",I,0X");
  if ((t[0] >> 6) == 1) {
    if (sep == NULL || strlen (sep + 5) != 12)
      return -1;
    for (int i = 0; i < 6; i++) {
      int hi = hexval (sep[5 + 2 * i]), lo = hexval (sep[6 + 2 * i]);

      if (hi < 0 || lo < 0)
        return -1;
      isid[i] = (uint8_t) (hi << 4 | lo);
    }
    end = (size_t) (sep - buf);
  }
  if (end >= namelen)
    return -1;
  memcpy (name, buf, end);
  name[end] = '\0';
  return 0;
}

int
lg_pr_parse_holder_port (const uint8_t *d, size_t n, char *name, size_t namelen,
                         uint8_t isid[6], uint64_t *key)
{
  size_t add, off;

  if (n < 8)
    return -1;
  add = lg_be32 (d + 4);
  if (add < n - 8)
    n = add + 8;
  for (off = 8; off + 24 <= n;) {
    size_t tlen = lg_be32 (d + off + 20);

    if (tlen > n - off - 24)
      return -1;
    if (d[off + 12] & 0x01) { /* R_HOLDER */
      *key = lg_be64 (d + off);
      return parse_iscsi_tid (d + off + 24, tlen, name, namelen, isid);
    }
    off += 24 + tlen;
  }
  return -1;
}

int
lg_pr_holder_port (const struct lg_lun_io *io, int lun, char *name,
                   size_t namelen, uint8_t isid[6], uint64_t *key, char *msg,
                   size_t len)
{
  uint8_t buf[4096];
  size_t got = 0;

  if (pr_in (io, lun, 0x03 /* READ FULL STATUS */, buf, sizeof buf, &got, msg,
             len)
      < 0)
    return -1;
  if (lg_pr_parse_holder_port (buf, got, name, namelen, isid, key) < 0) {
    snprintf (msg, len, "READ FULL STATUS names no iSCSI port holding it");
    errno = ENOENT;
    return -1;
  }
  return 0;
}

static int
pr_out (const struct lg_lun_io *io, int lun, int sa, int type, uint64_t key,
        uint64_t sa_key, char *msg, size_t len)
{
  struct scsi_persistent_reserve_out_basic b;
  struct scsi_task *task;
  int r, saved;

  memset (&b, 0, sizeof b);
  b.reservation_key = key;
  b.service_action_reservation_key = sa_key;
  task = scsi_cdb_persistent_reserve_out (sa, SCSI_PERSISTENT_RESERVE_SCOPE_LU,
                                          type, &b);
  if (task == NULL) {
    snprintf (msg, len, "out of memory");
    errno = ENOMEM;
    return -1;
  }
  r = io->task (io->opaque, lun, task, msg, len);
  /* Refused, not in conflict: the target cannot keep reservations (LIO
   * without a writable db_root/pr says NOT READY, LOGICAL UNIT
   * COMMUNICATION FAILURE, after applying the change in memory). */
  if (r < 0 && errno != EPERM
      && (task->sense.key == SCSI_SENSE_NOT_READY
          || task->sense.key == SCSI_SENSE_ILLEGAL_REQUEST))
    errno = ENOTSUP;
  saved = errno;
  scsi_free_scsi_task (task);
  errno = saved;
  return r;
}

int
lg_pr_register (const struct lg_lun_io *io, int lun, uint64_t key, char *msg,
                size_t len)
{
  return pr_out (io, lun,
                 SCSI_PERSISTENT_RESERVE_REGISTER_AND_IGNORE_EXISTING_KEY, 0, 0,
                 key, msg, len);
}

int
lg_pr_unregister (const struct lg_lun_io *io, int lun, uint64_t key, char *msg,
                  size_t len)
{
  return pr_out (io, lun, SCSI_PERSISTENT_RESERVE_REGISTER, 0, key, 0, msg,
                 len);
}

int
lg_pr_reserve (const struct lg_lun_io *io, int lun, uint64_t key, char *msg,
               size_t len)
{
  return pr_out (io, lun, SCSI_PERSISTENT_RESERVE_RESERVE, LG_PR_TYPE, key, 0,
                 msg, len);
}

int
lg_pr_preempt (const struct lg_lun_io *io, int lun, uint64_t key,
               uint64_t victim, char *msg, size_t len)
{
  return pr_out (io, lun, SCSI_PERSISTENT_RESERVE_PREEMPT, LG_PR_TYPE, key,
                 victim, msg, len);
}

int
lg_pr_release (const struct lg_lun_io *io, int lun, uint64_t key, char *msg,
               size_t len)
{
  return pr_out (io, lun, SCSI_PERSISTENT_RESERVE_RELEASE, LG_PR_TYPE, key, 0,
                 msg, len);
}

int
lg_pr_clear (const struct lg_lun_io *io, int lun, uint64_t key, char *msg,
             size_t len)
{
  return pr_out (io, lun, SCSI_PERSISTENT_RESERVE_CLEAR, 0, key, 0, msg, len);
}

void
lg_pr_print_json (FILE *f, const struct lg_pr_state *st)
{
  char who[160];

  if (!st->supported) {
    fprintf (f, "\"unsupported\"");
    return;
  }
  fprintf (f, "{\"type\": ");
  if (st->reserved)
    lg_json_string (f, lg_pr_type_name (st->type));
  else
    fprintf (f, "null");
  if (st->reserved && st->holder) {
    lg_pr_describe_key (st->holder, who, sizeof who);
    fprintf (f,
             ", \"holder\": \"0x%016" PRIx64 "\", \"holder_is\": ", st->holder);
    lg_json_string (f, who);
  }
  else
    fprintf (f, ", \"holder\": null");
  fprintf (f, ", \"keys\": [");
  for (unsigned i = 0; i < st->nkeys; i++)
    fprintf (f, "%s\"0x%016" PRIx64 "\"", i ? ", " : "", st->keys[i]);
  fprintf (f, "]}");
}
