/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* A header update that finds nothing to change must not count as done on
 * bytes that a write checked earlier is about to overwrite (the timed
 * scheme of lg_header_update: a LUN without COMPARE AND WRITE).  Found by
 * a hostile review: three machines run `lungate key add' at once, and two
 * of their header writes take a while to land, each within what
 * lungate-format(5) asks of a target (no more than 250 ms beyond a read's
 * round trip):
 *
 *   B reads seq 1, writes copy 1 (B2); the target answers it late
 *   A reads B2 as the newest, writes copy 0 (A3, B's key and A's): in flight
 *   B writes copy 0 (B2)
 *   C reads B2 in both copies, writes copy 1 (C3, B's key and C's in A's
 *     slot), then copy 0 (C3): in flight
 *   A's write lands: copy 0 A3, copy 1 C3
 *   A's check for copy 1 finds C3, so A starts over; it reads A3 as the
 *     newest (same seq, copy 0) and finds its key there: nothing to change
 *   C's write lands: both copies C3, without A's key
 *
 * Before the fix A's update returned success there, and the key it said
 * was added is in no copy: the test fails.  With the fix, a change with
 * nothing to do counts only if it still has nothing to do
 * LG_HDR_VERIFY_MS later, so A sees C3 and adds its key on top.
 *
 * The real lg_header_update and lg_key_change, one device per machine
 * over one shared disk.  So that the order above does not depend on the
 * scheduler, the scenario moves on events rather than at set times: A
 * starts once B's first write is there, C once B's second is; B's late
 * answer comes when A's write is sent; A's write lands when C sends its
 * write of copy 0, and that one when A finds nothing to change.  Each
 * delayed write still lands at the latest LAND_MS after the check before
 * it (made by the next read if its own thread is kept off the CPU), so
 * the device keeps the target's side of the bargain whatever happens.
 *
 * A test that cannot fail proves nothing: the device records whether A
 * found nothing to change while a write of another machine, sent before
 * A read the header, had still not landed.  On a machine too slow for
 * the events to beat the deadlines the scenario goes another way (and
 * must still lose nothing); it is run again, up to RUNS times, and the
 * test fails if the interleaving never happened.  A run takes about 1 s
 * before the fix and 3 s with it (4 s under valgrind). */
#include <config.h>

#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <sodium.h>

#include "crypt/header.h"
#include "crypt/keychange.h"
#include "dev/dev.h"
#include "util/log.h"

#define DEV_SIZE (4u << 20)

/* The latest a delayed write lands after its writer's check began: less
 * than the 250 ms beyond a round trip that lungate-format(5) allows. */
#define LAND_MS (LG_HDR_VERIFY_MS - LG_HDR_RMW_MS - 10)

/* The longest a machine waits for a step of another (its start, B's late
 * answer) before going on anyway. */
#define STEP_MS 5000

#define RUNS 5

enum { A, B, C, NW };
static const char wname[NW] = { 'A', 'B', 'C' };

enum event {
  EV_B_COPY1, /* B's first write is there: A starts */
  EV_A_SENT,  /* A's first write is sent: B's late answer comes */
  EV_B_COPY0, /* B's second write is there: C starts */
  EV_C_SENT,  /* C's write of copy 0 is sent: A's write lands */
  EV_A_NOOP,  /* A found nothing to change: C's write lands */
  EV_MAX
};

/* A write sent and not yet landed. */
struct pending {
  bool used;
  enum event gate;      /* lands when this happens */
  uint64_t deadline_us; /* or at the latest then */
  unsigned long tick;   /* when it was sent */
  uint64_t off;
  uint8_t data[LG_HDR_SIZE];
};

/* One machine's device. */
struct wdev {
  struct lg_dev dev; /* first: the ops get this */
  int who;           /* A, B, C; -1: setup and the final check */
  int writes;
  uint64_t check_us;       /* its last read of copy 0 began */
  unsigned long read_tick; /* the same, in disk.tick */
};

static struct {
  pthread_mutex_t lock;
  pthread_cond_t cond; /* a write landed or an event happened */
  uint8_t *buf;
  unsigned long tick; /* one per read or write */
  bool ev[EV_MAX];
  struct pending pend[NW];
  int late;         /* delayed writes that landed on their deadline */
  int slack_ms[NW]; /* how long before its deadline a write landed */
  int raced;        /* who had a write in flight when A found nothing to do */
  int noop_seq;     /* the seq A found nothing to change in */
} disk;

static uint64_t
now_us (void)
{
  return lg_dev_now_us ();
}

/* Under disk.lock: waits for a broadcast or until (CLOCK_MONOTONIC, as
 * the condition variable).  false: until has passed. */
static bool
wait_until (uint64_t until)
{
  struct timespec ts
      = { (time_t) (until / 1000000), (long) (until % 1000000) * 1000 };

  return pthread_cond_timedwait (&disk.cond, &disk.lock, &ts) != ETIMEDOUT;
}

/* Under disk.lock. */
static void
land (struct pending *p)
{
  memcpy (disk.buf + p->off, p->data, LG_HDR_SIZE);
  p->used = false;
  pthread_cond_broadcast (&disk.cond);
}

/* Under disk.lock: lands the writes whose deadline has passed, oldest
 * deadline first.  A read calls this first, so no read ever sees the
 * disk without a write past its deadline. */
static void
land_due (uint64_t now)
{
  for (;;) {
    struct pending *p = NULL;

    for (int i = 0; i < NW; i++)
      if (disk.pend[i].used && disk.pend[i].deadline_us <= now
          && (!p || disk.pend[i].deadline_us < p->deadline_us))
        p = &disk.pend[i];
    if (!p)
      return;
    land (p);
    disk.late++;
  }
}

/* Under disk.lock: e happened; the writes waiting for it land. */
static void
fire (enum event e)
{
  uint64_t now = now_us ();

  disk.ev[e] = true;
  for (int i = 0; i < NW; i++)
    if (disk.pend[i].used && disk.pend[i].gate == e) {
      disk.slack_ms[i] = (int) ((disk.pend[i].deadline_us - now) / 1000);
      land (&disk.pend[i]);
    }
  pthread_cond_broadcast (&disk.cond);
}

/* Under disk.lock: waits up to STEP_MS for e. */
static void
await (enum event e)
{
  uint64_t until = now_us () + STEP_MS * 1000ull;

  while (!disk.ev[e] && wait_until (until))
    ;
}

static int
m_pread (struct lg_dev *d, void *buf, size_t n, uint64_t off)
{
  struct wdev *w = (struct wdev *) d;
  uint64_t now;

  pthread_mutex_lock (&disk.lock);
  now = now_us ();
  disk.tick++;
  if (off == LG_HDR_COPY0_OFFSET) {
    /* The first read of a check (and of an attempt). */
    w->check_us = now;
    w->read_tick = disk.tick;
  }
  land_due (now);
  memcpy (buf, disk.buf + off, n);
  pthread_mutex_unlock (&disk.lock);
  return 0;
}

static int
m_pwrite (struct lg_dev *d, const void *buf, size_t n, uint64_t off,
          unsigned flags)
{
  struct wdev *w = (struct wdev *) d;
  struct pending *p;
  int k, gate = -1;
  uint64_t now;

  (void) flags;
  pthread_mutex_lock (&disk.lock);
  now = now_us ();
  disk.tick++;
  k = ++w->writes;
  land_due (now);
  if (n != LG_HDR_SIZE)
    ; /* not a header copy: at once */
  else if (w->who == A && k == 1) {
    fire (EV_A_SENT);
    gate = EV_C_SENT;
  }
  else if (w->who == C && k == 2 && off == LG_HDR_COPY0_OFFSET) {
    fire (EV_C_SENT); /* A's write lands first */
    gate = EV_A_NOOP;
  }
  if (gate < 0) {
    memcpy (disk.buf + off, buf, n);
    if (w->who == B && k == 1) {
      fire (EV_B_COPY1);
      await (EV_A_SENT); /* the late answer */
    }
    else if (w->who == B && k == 2)
      fire (EV_B_COPY0);
  }
  else {
    p = &disk.pend[w->who];
    p->used = true;
    p->gate = (enum event) gate;
    p->deadline_us = w->check_us + LAND_MS * 1000ull;
    p->tick = disk.tick;
    p->off = off;
    memcpy (p->data, buf, n);
    if (p->deadline_us <= now)
      land_due (now); /* this thread was off the CPU a long time */
    while (p->used)
      if (!wait_until (p->deadline_us))
        land_due (now_us ());
  }
  pthread_mutex_unlock (&disk.lock);
  return 0;
}

static int
m_flush (struct lg_dev *d)
{
  (void) d;
  return 0;
}

static void
m_close (struct lg_dev *d)
{
  (void) d;
}

static const struct lg_dev_ops ops = {
  .name = "noop",
  .pread = m_pread,
  .pwrite = m_pwrite,
  .flush = m_flush,
  .close = m_close, /* no compare_write: the timed scheme */
};

static void
dev_init (struct wdev *w, int who)
{
  memset (w, 0, sizeof *w);
  w->dev.ops = &ops;
  lg_dev_set_size (&w->dev, DEV_SIZE);
  w->dev.block_size = 512;
  w->dev.max_io = 1 << 20;
  w->who = who;
  if (who < 0)
    strcpy (w->dev.name, "setup");
  else
    snprintf (w->dev.name, sizeof w->dev.name, "machine%c", wname[who]);
}

static uint8_t *mk;
static uint8_t key0[LG_KEY_BYTES], keys[NW][LG_KEY_BYTES];

/* One `lungate key add'. */
struct job {
  struct wdev w;
  struct lg_key_change kc;
  int start; /* the event it starts on; -1: at once */
  int r;
  char err[256];
};

/* lg_key_change, watched: A finding nothing to change is the instant the
 * test is about. */
static int
change (const struct lg_header *copies, unsigned n, struct lg_header *out,
        void *opaque)
{
  struct job *j = opaque;
  int r = lg_key_change (copies, n, out, &j->kc);

  if (r == 1 && j->w.who == A) {
    pthread_mutex_lock (&disk.lock);
    if (!disk.ev[EV_A_NOOP]) {
      /* A write of another sent before this attempt read the header and
       * not landed yet (landing is for good, so not then either): what A
       * decided on is about to change under it. */
      for (int i = 0; i < NW; i++)
        if (i != A && disk.pend[i].used && disk.pend[i].tick < j->w.read_tick) {
          disk.raced = i;
          disk.noop_seq = (int) copies[0].seq;
        }
      fire (EV_A_NOOP);
    }
    pthread_mutex_unlock (&disk.lock);
  }
  return r;
}

static void *
run_job (void *arg)
{
  struct job *j = arg;

  if (j->start >= 0) {
    pthread_mutex_lock (&disk.lock);
    await ((enum event) j->start);
    pthread_mutex_unlock (&disk.lock);
  }
  j->r = lg_header_update (&j->w.dev, change, j, NULL, j->err, sizeof j->err);
  return NULL;
}

/* One run of the scenario: every key add that returned success is in
 * every copy.  true: the interleaving happened. */
static bool
scenario (int run)
{
  static const int start[NW] = { EV_B_COPY1, -1, EV_B_COPY0 };
  struct lg_header h, hc[2];
  struct wdev setup;
  struct job j[NW];
  pthread_t t[NW];
  unsigned n;
  char err[256];
  uint8_t *got = sodium_malloc (LG_KEY_BYTES);
  uint64_t t0 = now_us ();
  bool raced;

  cr_assert_not_null (got);
  memset (disk.ev, 0, sizeof disk.ev);
  memset (disk.pend, 0, sizeof disk.pend);
  memset (disk.slack_ms, 0, sizeof disk.slack_ms);
  disk.late = 0;
  disk.raced = -1;
  disk.noop_seq = 0;
  memset (disk.buf, 0, DEV_SIZE);

  dev_init (&setup, -1);
  memset (&h, 0, sizeof h);
  cr_assert_eq (lg_header_geometry (&h, DEV_SIZE), 0);
  h.version = LG_HDR_VERSION;
  h.mode = LG_MODE_AEAD;
  randombytes_buf (h.uuid, sizeof h.uuid);
  cr_assert_eq (lg_keyslot_set_keyfile (&h, 0, mk, key0), 0);
  lg_header_set_mac (&h, mk);
  cr_assert_eq (lg_header_write (&setup.dev, &h), 0);

  for (int i = 0; i < NW; i++) {
    dev_init (&j[i].w, i);
    memset (&j[i].kc, 0, sizeof j[i].kc);
    j[i].kc.add = true;
    j[i].kc.slot = -1;
    j[i].kc.done = -1;
    j[i].kc.mk = mk;
    j[i].kc.new_key = keys[i];
    j[i].kc.name = j[i].w.dev.name;
    j[i].start = start[i];
    j[i].r = -1;
    j[i].err[0] = '\0';
  }
  for (int i = 0; i < NW; i++)
    cr_assert_eq (pthread_create (&t[i], NULL, run_job, &j[i]), 0);
  for (int i = 0; i < NW; i++)
    pthread_join (t[i], NULL);

  pthread_mutex_lock (&disk.lock);
  raced = disk.raced >= 0;
  pthread_mutex_unlock (&disk.lock);
  if (raced)
    cr_log_info ("run %d (%.1f s): A found nothing to change in seq %d while "
                 "%c's write was in flight (A's write landed %d ms before "
                 "its deadline, C's %d ms)",
                 run, (double) (now_us () - t0) / 1e6, disk.noop_seq,
                 wname[disk.raced], disk.slack_ms[A], disk.slack_ms[C]);
  else
    cr_log_warn ("run %d (%.1f s): the interleaving did not happen (%d "
                 "writes landed on their deadline)",
                 run, (double) (now_us () - t0) / 1e6, disk.late);

  for (int i = 0; i < NW; i++)
    cr_assert_eq (j[i].r, 0, "run %d: %c's key add failed: %s", run, wname[i],
                  j[i].err);
  cr_assert_eq (lg_header_read_all (&setup.dev, hc, &n, err, sizeof err), 0,
                "run %d: %s", run, err);
  for (unsigned c = 0; c < n; c++) {
    cr_assert_eq (lg_keyslot_open_keyfile (&hc[c], key0, got), 0);
    for (int i = 0; i < NW; i++)
      cr_assert_geq (
          lg_keyslot_open_keyfile (&hc[c], keys[i], got), 0,
          "run %d: %c's key add returned success, but its key is not in the "
          "header (seq %llu)%s",
          run, wname[i], (unsigned long long) hc[c].seq,
          i == A && raced ? ": lost, A having found nothing to change in "
                            "bytes that a write in flight then overwrote"
                          : "");
  }
  sodium_free (got);
  return raced;
}

static void
quiet (enum lg_log_level level, const char *msg)
{
  (void) level, (void) msg;
}

TestSuite (hdrupdate_noop, .timeout = 300);

Test (hdrupdate_noop, nothing_to_change_while_a_write_is_in_flight)
{
  pthread_condattr_t ca;
  bool raced = false;
  int run;

  lg_log_set_sink (quiet);
  cr_assert_geq (sodium_init (), 0);
  pthread_mutex_init (&disk.lock, NULL);
  pthread_condattr_init (&ca);
  pthread_condattr_setclock (&ca, CLOCK_MONOTONIC);
  pthread_cond_init (&disk.cond, &ca);
  disk.buf = malloc (DEV_SIZE);
  cr_assert_not_null (disk.buf);
  mk = sodium_malloc (LG_KEY_BYTES);
  cr_assert_not_null (mk);
  crypto_kdf_keygen (mk);
  randombytes_buf (key0, sizeof key0);
  randombytes_buf (keys, sizeof keys);

  for (run = 1; run <= RUNS && !raced; run++)
    raced = scenario (run);
  cr_assert (raced,
             "in %d runs A never found nothing to change while another "
             "machine's write was in flight (the writes kept landing on "
             "their %d ms deadline before the next step): this machine is "
             "too slow for the test, which proved nothing",
             RUNS, LAND_MS);
  sodium_free (mk);
  free (disk.buf);
}
