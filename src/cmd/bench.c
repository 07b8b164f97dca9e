/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* lungate bench: a matrix of workloads on one LUN (sequential and random,
 * read and write, at several queue depths), each for a fixed time, in
 * plain mode and through the crypt layer, side by side.
 *
 * Threads: a workload at queue depth N runs N worker threads, each doing
 * one synchronous request after another on the block device (so N are in
 * flight); the main thread sleeps, draws the progress line and stops
 * them.  Counters are atomics; each worker keeps its latencies in the
 * workload's histogram (relaxed atomic adds).
 *
 * Safety: reading never changes the LUN.  Writing (write workloads, and
 * the crypt modes, which write through a throw-away volume) needs
 * --write, and a LUN with no lungate header and no file-system or
 * partition signature unless --force; a refused run writes nothing.
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <sodium.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "cmd/bench.h"
#include "cmd/cmd.h"

enum {
  OPT_TIME = OPT_LOGIN_LAST + 1,
  OPT_SEQ_BS,
  OPT_RAND_BS,
  OPT_DEPTHS,
  OPT_WRITE,
  OPT_FORCE,
  OPT_CRYPT,
  OPT_SIZE,
  OPT_CONNECTIONS,
  OPT_SVG,
};

#include "dev/volume.h"
#include "util/fmt.h"
#include "util/hist.h"
#include "util/log.h"
#include "util/progress.h"

static const char usage[]
    = "Usage: lungate bench [OPTIONS] iscsi://HOST[:PORT]/TARGET-IQN/LUN\n"
      "\n"
      "Measure a LUN: sequential and random reads (and with --write, "
      "writes) at\n"
      "each queue depth, each for a fixed time, in plain mode and (with "
      "--crypt)\n"
      "through the crypt layer; MB/s, IOPS, latency p50/p99/p99.9 and the "
      "CPU\n"
      "time this process spent per GiB, with ratios to plain.\n"
      "\n"
      "Options:\n"
      "  --time SECONDS               per workload and mode (default 5)\n"
      "  --seq-bs SIZE                sequential block size (default 128K)\n"
      "  --rand-bs SIZE               random block size (default 4K)\n"
      "  --depths N[,N...]            queue depths (default 1,32)\n"
      "  --size SIZE                  the part of the LUN used, from its "
      "start\n"
      "                               (default 1G, or less on a smaller LUN)\n"
      "  --write                      also run write workloads (destroys "
      "data)\n"
      "  --crypt MODE[,MODE]          also through the crypt layer: aead, "
      "mac\n"
      "                               (a throw-away volume: needs --write)\n"
      "  --force                      write even over a lungate header or a\n"
      "                               file-system or partition signature\n"
      "  --connections N              iSCSI connections (default 4)\n"
      "  --json                       results as JSON on standard output\n"
      "  --svg FILE                   bar charts of throughput and latency\n"
      "  --takeover                   the gateway holding the LUN is gone:\n"
      "                               preempt its reservation\n"
      "  -h, --help                   this help\n"
      "\n";

/* One running workload. */
struct run {
  struct lg_dev *dev;
  const struct job *job;
  uint64_t region; /* bytes, a multiple of the job's bs */
  atomic_bool stop;
  atomic_uint_fast64_t ops, bytes, next;
  atomic_int err;
  struct lg_hist hist;
};

static double
now_s (void)
{
  struct timespec ts;

  clock_gettime (CLOCK_MONOTONIC, &ts);
  return (double) ts.tv_sec + (double) ts.tv_nsec / 1e9;
}

static double
cpu_s (void)
{
  struct rusage ru;

  getrusage (RUSAGE_SELF, &ru);
  return (double) ru.ru_utime.tv_sec + (double) ru.ru_utime.tv_usec / 1e6
      + (double) ru.ru_stime.tv_sec + (double) ru.ru_stime.tv_usec / 1e6;
}

static void *
worker (void *arg)
{
  struct run *r = arg;
  const struct job *j = r->job;
  uint64_t nblocks = r->region / j->bs;
  void *buf;

  if (posix_memalign (&buf, 4096, j->bs) != 0) {
    atomic_store (&r->err, ENOMEM);
    return NULL;
  }
  /* Incompressible, and different in every run. */
  randombytes_buf (buf, j->bs);
  while (!atomic_load_explicit (&r->stop, memory_order_relaxed)) {
    uint64_t blk = j->random ? (uint64_t) randombytes_uniform (
                       nblocks > UINT32_MAX ? UINT32_MAX : (uint32_t) nblocks)
                             : atomic_fetch_add (&r->next, 1) % nblocks;
    uint64_t off = blk * j->bs;
    double t0 = now_s ();
    int rc = j->write ? lg_dev_pwrite (r->dev, buf, j->bs, off, 0)
                      : lg_dev_pread (r->dev, buf, j->bs, off);

    if (rc < 0) {
      atomic_store (&r->err, errno ? errno : EIO);
      atomic_store (&r->stop, true);
      break;
    }
    lg_hist_add (&r->hist, (uint64_t) ((now_s () - t0) * 1e6));
    atomic_fetch_add_explicit (&r->ops, 1, memory_order_relaxed);
    atomic_fetch_add_explicit (&r->bytes, j->bs, memory_order_relaxed);
  }
  free (buf);
  return NULL;
}

static bool progress_on;

/* --progress-json: one object a line on stderr, at the pace of the
 * other commands' lines off a terminal (every 10%, at least every 5 s),
 * and one when the workload is done. */
static void
json_progress (const struct job *j, const char *mode, double el, double secs,
               double mb_s, int finished)
{
  fputs ("{\"operation\": \"bench\", \"job\": ", stderr);
  lg_json_string (stderr, j->label);
  fputs (", \"mode\": ", stderr);
  lg_json_string (stderr, mode);
  if (finished < 0) {
    /* It failed (the error is a text line of its own). */
    fprintf (stderr, ", \"finished\": false, \"elapsed_s\": %.1f}\n", el);
    fflush (stderr);
    return;
  }
  if (finished)
    fprintf (stderr, ", \"finished\": true, \"elapsed_s\": %.1f", el);
  else
    fprintf (stderr,
             ", \"elapsed_s\": %.1f, \"total_s\": %.1f, \"percent\": %.1f, "
             "\"eta_s\": %.1f",
             el, secs, el >= secs ? 100.0 : 100.0 * el / secs,
             el >= secs ? 0.0 : secs - el);
  fprintf (stderr, ", \"mb_per_s\": %.1f}\n", mb_s);
  fflush (stderr);
}

/* Runs job on dev for secs seconds; 0, or -1 with the error reported. */
static int
run_job (struct lg_dev *dev, const struct job *j, const char *mode,
         uint64_t region, double secs, struct result *res)
{
  pthread_t th[256];
  struct run *r = calloc (1, sizeof *r);
  unsigned n = 0;
  double t0, c0, last = 0, last_json = 0;
  bool json = lg_progress_json () && lg_log_get_level () >= LG_LOG_INFO;
  int err;

  if (r == NULL)
    return -1;
  r->dev = dev;
  r->job = j;
  r->region = region / j->bs * j->bs;
  atomic_init (&r->stop, false);
  atomic_init (&r->err, 0);
  t0 = now_s ();
  c0 = cpu_s ();
  for (; n < j->depth; n++)
    if (pthread_create (&th[n], NULL, worker, r) != 0) {
      atomic_store (&r->err, EAGAIN);
      atomic_store (&r->stop, true);
      break;
    }
  while (!atomic_load (&r->stop)) {
    double el = now_s () - t0;

    if (el >= secs)
      break;
    if (json && el > 0
        && (el - last_json >= secs / 10 || el - last_json >= 5)) {
      json_progress (j, mode, el, secs,
                     (double) atomic_load (&r->bytes) / el / 1e6, 0);
      last_json = el;
    }
    if (progress_on && el - last >= 0.5) {
      fprintf (stderr, "\rbench: %-22s %-5s %4.1f/%.0f s  %8.1f MB/s ",
               j->label, mode, el, secs,
               (double) atomic_load (&r->bytes) / el / 1e6);
      last = el;
    }
    usleep (50000);
  }
  atomic_store (&r->stop, true);
  for (unsigned i = 0; i < n; i++)
    pthread_join (th[i], NULL);
  res->secs = now_s () - t0;
  res->cpu = cpu_s () - c0;
  if (json)
    json_progress (j, mode, res->secs, secs,
                   (double) atomic_load (&r->bytes) / res->secs / 1e6,
                   atomic_load (&r->err) == 0 ? 1 : -1);
  if (progress_on)
    fprintf (stderr, "\r%78s\r", "");
  err = atomic_load (&r->err);
  if (err) {
    lg_error ("%s: %s (%s): %s", dev->name, j->label, mode, strerror (err));
    free (r);
    return -1;
  }
  res->ops = atomic_load (&r->ops);
  res->bytes = atomic_load (&r->bytes);
  res->p50 = lg_hist_quantile (&r->hist, 0.50);
  res->p99 = lg_hist_quantile (&r->hist, 0.99);
  res->p999 = lg_hist_quantile (&r->hist, 0.999);
  res->done = true;
  free (r);
  return 0;
}

/* Writes the region once, so that every unit read holds real data. */
static int
fill (struct lg_dev *d, uint64_t region, const char *mode)
{
  const size_t chunk = 1 << 20;
  uint8_t *buf = malloc (chunk);
  char what[64];

  if (buf == NULL)
    return -1;
  randombytes_buf (buf, chunk);
  snprintf (what, sizeof what, "bench: writing the %s volume", mode);
  if (progress_on)
    lg_progress_start (what);
  for (uint64_t off = 0; off < region; off += chunk) {
    size_t n = region - off < chunk ? (size_t) (region - off) : chunk;

    if (lg_dev_pwrite (d, buf, n, off, 0) < 0) {
      if (progress_on)
        lg_progress_end ();
      free (buf);
      return -1;
    }
    if (progress_on)
      lg_progress (off + n, region);
  }
  if (progress_on)
    lg_progress_end ();
  free (buf);
  return 0;
}

static int
parse_depths (const char *s, unsigned *d, unsigned *n)
{
  long v[MAX_DEPTHS];
  int k = lg_parse_long_list (s, 1, 256, v, MAX_DEPTHS);

  if (k < 0)
    return -1;
  for (int i = 0; i < k; i++)
    d[i] = (unsigned) v[i];
  *n = (unsigned) k;
  return 0;
}

static void
size_label (uint32_t bs, char *buf, size_t len)
{
  if (bs % (1u << 20) == 0)
    snprintf (buf, len, "%" PRIu32 "M", bs >> 20);
  else if (bs % 1024 == 0)
    snprintf (buf, len, "%" PRIu32 "K", bs >> 10);
  else
    snprintf (buf, len, "%" PRIu32, bs);
}

/* What the command line asks for. */
struct bench_args {
  struct lg_login login;
  struct lg_url u;
  const char *modes[MAX_MODES];
  int mode_ids[MAX_MODES];
  unsigned nmodes, depths[MAX_DEPTHS], ndepths;
  uint64_t seq_bs, rand_bs, size;
  double secs;
  bool write, force, json;
  const char *svg;
  unsigned connections;
};

/* --crypt MODE[,MODE]: 0, or -1 (said why). */
static int
parse_crypt (struct bench_args *a, const char *arg)
{
  char *list = strdup (arg), *save = NULL;
  int r = 0;

  if (list == NULL)
    return -1;
  for (char *t = strtok_r (list, ",", &save); t && r == 0;
       t = strtok_r (NULL, ",", &save)) {
    int id = strcmp (t, "aead") == 0 ? LG_MODE_AEAD
        : strcmp (t, "mac") == 0     ? LG_MODE_MAC
                                     : -1;
    bool dup = false;

    for (unsigned m = 1; m < a->nmodes; m++)
      dup |= a->mode_ids[m] == id;
    if (id < 0 || a->nmodes == MAX_MODES) {
      lg_error ("--crypt: '%s': want aead, mac or both", arg);
      r = -1;
    }
    else if (!dup) {
      a->mode_ids[a->nmodes] = id;
      a->modes[a->nmodes++] = id == LG_MODE_AEAD ? "aead" : "mac";
    }
  }
  free (list);
  return r;
}

/* An option with a value: 0, or -1 (said why). */
static int
bench_value (struct bench_args *a, int c, const char *arg)
{
  char *end;
  uint64_t v;
  long n;

  switch (c) {
  case OPT_TIME:
    a->secs = strtod (arg, &end);
    if (end == arg || *end || !(a->secs >= 0.5 && a->secs <= 3600)) {
      lg_error ("--time: '%s': want seconds from 0.5 to 3600", arg);
      return -1;
    }
    return 0;
  case OPT_SEQ_BS:
  case OPT_RAND_BS:
  case OPT_SIZE:
    if (lg_parse_size (arg, &v) < 0 || v == 0
        || (c != OPT_SIZE && (v > (16u << 20) || v % 512 != 0))) {
      lg_error ("%s: '%s' is not a valid size",
                c == OPT_SIZE         ? "--size"
                    : c == OPT_SEQ_BS ? "--seq-bs"
                                      : "--rand-bs",
                arg);
      return -1;
    }
    *(c == OPT_SIZE         ? &a->size
          : c == OPT_SEQ_BS ? &a->seq_bs
                            : &a->rand_bs)
        = v;
    return 0;
  case OPT_DEPTHS:
    if (parse_depths (arg, a->depths, &a->ndepths) < 0) {
      lg_error ("--depths: '%s': want up to %d numbers from 1 to 256, "
                "separated by commas",
                arg, MAX_DEPTHS);
      return -1;
    }
    return 0;
  case OPT_CRYPT:
    return parse_crypt (a, arg);
  case OPT_CONNECTIONS:
    if (lg_parse_long (arg, 10, 1, 64, &n) < 0) {
      lg_error ("--connections: '%s': want 1 to 64", arg);
      return -1;
    }
    a->connections = (unsigned) n;
    return 0;
  case OPT_SVG:
    a->svg = arg;
    return 0;
  }
  return -1;
}

/* bench's own options (lg_cmd_spec.option). */
static int
bench_option (void *args, int c, const char *arg)
{
  struct bench_args *a = args;

  switch (c) {
  case OPT_TIME:
  case OPT_SEQ_BS:
  case OPT_RAND_BS:
  case OPT_SIZE:
  case OPT_DEPTHS:
  case OPT_CRYPT:
  case OPT_CONNECTIONS:
  case OPT_SVG:
    if (bench_value (a, c, arg) < 0)
      return LG_EXIT_USAGE; /* a malformed value */
    return 0;
  case OPT_WRITE:
    a->write = true;
    return 0;
  case OPT_FORCE:
    a->force = true;
    return 0;
  case OPT_JSON:
    a->json = true;
    return 0;
  default:
    return -1;
  }
}

/* The options and the LUN: -1 to go on, else the exit status. */
static int
parse_args (int argc, char **argv, struct bench_args *a)
{
  static const struct option opts[] = {
    LG_LOGIN_OPTIONS,
    LG_CLAIM_OPTIONS,
    { "time", required_argument, NULL, OPT_TIME },
    { "seq-bs", required_argument, NULL, OPT_SEQ_BS },
    { "rand-bs", required_argument, NULL, OPT_RAND_BS },
    { "depths", required_argument, NULL, OPT_DEPTHS },
    { "size", required_argument, NULL, OPT_SIZE },
    { "write", no_argument, NULL, OPT_WRITE },
    { "crypt", required_argument, NULL, OPT_CRYPT },
    { "force", no_argument, NULL, OPT_FORCE },
    { "connections", required_argument, NULL, OPT_CONNECTIONS },
    { "json", no_argument, NULL, OPT_JSON },
    { "svg", required_argument, NULL, OPT_SVG },
    { "help", no_argument, NULL, 'h' },
    { NULL, 0, NULL, 0 },
  };
  static const struct lg_cmd_spec spec = {
    "bench", opts, NULL, usage, LG_HELP_LOGIN, 1, "a LUN URL", bench_option,
  };
  int status = lg_cmd_parse (&spec, argc, argv, &a->login, NULL, a);

  if (status >= 0)
    return status;
  if (a->nmodes > 1 && !a->write)
    return lg_usage_error ("bench",
                           "--crypt writes a throw-away volume "
                           "over the LUN: add --write");
  if ((status
       = lg_cmd_prepare_lun ("bench", argv[optind], &a->u, &a->login, NULL))
      != 0)
    return status;
  return -1;
}

/* With --write: the LUN may be written (not read-only; no signature of
 * data unless --force).  0, or -1 (said why). */
static int
check_writable (struct lg_dev *raw, const struct bench_args *a)
{
  static uint8_t head[128 * 1024];
  size_t n = lg_dev_size (raw) < sizeof head ? (size_t) lg_dev_size (raw)
                                             : sizeof head;
  const char *what;

  if (!a->write)
    return 0;
  if (raw->read_only) {
    lg_error ("%s: the LUN is read-only: cannot run write workloads",
              raw->name);
    return -1;
  }
  if (a->force)
    return 0;
  if (lg_dev_pread (raw, head, n, 0) < 0)
    return -1;
  if ((what = lg_cmd_signature (head, n)) != NULL) {
    lg_error ("%s: the LUN holds %s: --write would destroy it; use "
              "--force to run anyway",
              raw->name, what);
    return -1;
  }
  return 0;
}

/* The matrix of workloads: its size, or -1 (said why). */
static int
make_jobs (const struct lg_dev *raw, const struct bench_args *a,
           struct job jobs[MAX_JOBS])
{
  unsigned njobs = 0;

  for (int w = 0; w < (a->write ? 2 : 1); w++)
    for (int rnd = 0; rnd < 2; rnd++)
      for (unsigned k = 0; k < a->ndepths; k++) {
        struct job *j = &jobs[njobs++];
        char bs[16];

        j->write = w;
        j->random = rnd;
        j->bs = (uint32_t) (rnd ? a->rand_bs : a->seq_bs);
        j->depth = a->depths[k];
        size_label (j->bs, bs, sizeof bs);
        snprintf (j->name, sizeof j->name, "%s%s-%s-qd%u", rnd ? "rand" : "seq",
                  w ? "write" : "read", bs, j->depth);
        snprintf (j->label, sizeof j->label, "%s %s %s QD%u",
                  rnd ? "rand" : "seq", w ? "write" : "read", bs, j->depth);
        if (j->bs % raw->block_size != 0) {
          lg_error ("%s: block size %" PRIu32 " is not a multiple of the "
                    "LUN's %" PRIu32 " bytes",
                    raw->name, j->bs, raw->block_size);
          return -1;
        }
      }
  return (int) njobs;
}

/* Every job in mode m (0: plain; else through a throw-away volume of
 * that mode): 0, or -1 (said why). */
static int
run_mode (struct lg_dev *raw, const struct bench_args *a, unsigned m,
          const struct job *jobs, unsigned njobs,
          struct result res[][MAX_MODES])
{
  const char *name = a->modes[m];
  int id = a->mode_ids[m];
  struct lg_dev *d = raw;
  uint64_t region;
  char err[512];
  int r = -1;

  if (m > 0) {
    d = lg_volume_scratch (raw, id, err, sizeof err);
    if (d == NULL) {
      lg_error ("%s: %s", raw->name, err);
      return -1;
    }
  }
  region = a->size < lg_dev_size (d) ? a->size : lg_dev_size (d);
  region -= region % a->seq_bs;
  if (region < a->seq_bs || region < a->rand_bs) {
    lg_error ("%s: the LUN is smaller than one request", d->name);
    goto out;
  }
  if (m > 0 && fill (d, region, name) < 0) {
    lg_error ("%s: writing the %s volume: %m", raw->name, name);
    goto out;
  }
  for (unsigned i = 0; i < njobs; i++)
    if (run_job (d, &jobs[i], name, region, a->secs, &res[i][m]) < 0)
      goto out;
  r = 0;

out:
  if (d != raw)
    lg_dev_close (d);
  return r;
}

int
lg_cmd_bench (int argc, char **argv)
{
  static struct result res[MAX_JOBS][MAX_MODES];
  struct bench_args a = {
    .modes = { "plain" },
    .nmodes = 1,
    .depths = { 1, 32 },
    .ndepths = 2,
    .seq_bs = 128 * 1024,
    .rand_bs = 4096,
    .size = UINT64_C (1) << 30,
    .secs = 5,
    .connections = 4,
  };
  struct lg_dev *raw = NULL;
  struct job jobs[MAX_JOBS];
  int njobs, status;

  if (lg_login_init (&a.login) < 0)
    return LG_EXIT_FAIL;
  if ((status = parse_args (argc, argv, &a)) >= 0)
    goto out;
  status = LG_EXIT_FAIL;
  raw = lg_cmd_open_lun (&a.u, &a.login, a.connections, !a.write);
  if (raw == NULL || check_writable (raw, &a) < 0
      || (njobs = make_jobs (raw, &a, jobs)) < 0)
    goto out;
  progress_on = !a.json && !lg_progress_json () && isatty (STDERR_FILENO)
      && lg_log_get_level () >= LG_LOG_WARN;
  for (unsigned m = 0; m < a.nmodes; m++) {
    if (run_mode (raw, &a, m, jobs, (unsigned) njobs, res) < 0)
      goto out;
    if (m == 0 && !a.json)
      lg_debug ("bench: plain done");
  }
  if (a.json)
    lg_bench_json (raw->name, a.size, a.secs, jobs, (unsigned) njobs, a.modes,
                   a.nmodes, res);
  else
    lg_bench_table (jobs, (unsigned) njobs, a.modes, a.nmodes, res);
  if (a.svg
      && lg_bench_svg (a.svg, raw->name, jobs, (unsigned) njobs, a.modes,
                       a.nmodes, res)
          < 0)
    goto out;
  status = LG_EXIT_OK;

out:
  lg_dev_close (raw);
  lg_url_clear (&a.u);
  lg_login_clear (&a.login);
  return status;
}
