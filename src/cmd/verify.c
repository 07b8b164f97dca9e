/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* lungate verify: authenticate every unit of a lungate volume and name
 * the ranges that fail.  Main thread. */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd/cmd.h"

enum { OPT_REPAIR = OPT_LOGIN_LAST + 1 };

#include "dev/open.h"
#include "dev/volume.h"
#include "util/fmt.h"
#include "util/log.h"
#include "util/progress.h"

static const char usage[]
    = "Usage: lungate verify [OPTIONS] (--key-file F | --passphrase-file F)\n"
      "                      iscsi://HOST[:PORT]/TARGET-IQN/LUN | FILE\n"
      "\n"
      "Read and authenticate every unit of a lungate volume.  Prints each "
      "range\n"
      "of units that fails; exits 0 when all are authentic, 1 otherwise.\n"
      "\n"
      "Options:\n"
      "  --repair                     after an unclean stop: clear stale\n"
      "                               metadata slots, mark the volume clean\n"
      "  --json                       the result as one JSON object on\n"
      "                               stdout (the exit status is the same)\n"
      "  --takeover                   the gateway holding the LUN is gone:\n"
      "                               preempt its reservation\n"
      "  -h, --help                   this help\n"
      "\n";

struct verify_args {
  bool repair, json;
};

struct tally {
  uint64_t ranges, units;
  bool json;
  uint64_t (*range)[2]; /* --json: each bad range, first unit and count */
  size_t nrange, cap;
};

static int
verify_option (void *args, int c, const char *arg)
{
  struct verify_args *a = args;

  (void) arg;
  if (c == OPT_REPAIR)
    a->repair = true;
  else if (c == OPT_JSON)
    a->json = true;
  else
    return -1;
  return 0;
}

static void
bad (void *opaque, uint64_t first, uint64_t n)
{
  struct tally *t = opaque;

  t->ranges++;
  t->units += n;
  if (t->json) {
    if (t->nrange == t->cap) {
      size_t cap = t->cap ? 2 * t->cap : 16;
      void *p = realloc (t->range, cap * sizeof *t->range);

      if (p == NULL) /* the count stays right; the list is cut */
        return;
      t->range = p;
      t->cap = cap;
    }
    t->range[t->nrange][0] = first;
    t->range[t->nrange++][1] = n;
    return;
  }
  printf ("bad: units %" PRIu64 "-%" PRIu64 " (bytes %" PRIu64 "-%" PRIu64
          " of the volume)\n",
          first, first + n - 1, first * LG_UNIT_SIZE,
          (first + n) * LG_UNIT_SIZE - 1);
  fflush (stdout);
}

static uint64_t units_done;

/* --json: {"volume", "units", "units_checked", "complete", "repair",
 * "bad_units", "bad_ranges": [{"first_unit", "units", "first_byte",
 * "last_byte"}], "bad_ranges_total" (the list may be cut short when
 * memory runs out), "authentic"}. */
static void
print_json (struct lg_dev *d, const struct tally *t, bool repair, bool complete)
{
  uint64_t units = lg_dev_size (d) / LG_UNIT_SIZE;

  printf ("{\"volume\": ");
  lg_json_string (stdout, d->name);
  printf (", \"units\": %" PRIu64 ", \"units_checked\": %" PRIu64
          ", \"complete\": %s, \"repair\": %s, \"bad_units\": %" PRIu64
          ", \"bad_ranges\": [",
          units, complete ? units : units_done, complete ? "true" : "false",
          repair ? "true" : "false", t->units);
  for (size_t i = 0; i < t->nrange; i++) {
    uint64_t first = t->range[i][0], n = t->range[i][1];

    printf ("%s{\"first_unit\": %" PRIu64 ", \"units\": %" PRIu64
            ", \"first_byte\": %" PRIu64 ", \"last_byte\": %" PRIu64 "}",
            i ? ", " : "", first, n, first * LG_UNIT_SIZE,
            (first + n) * LG_UNIT_SIZE - 1);
  }
  printf ("], \"bad_ranges_total\": %" PRIu64 ", \"authentic\": %s}\n",
          t->ranges, complete && t->units == 0 ? "true" : "false");
  fflush (stdout);
}

/* Progress, and the stop on Ctrl-C (stop.c): non-zero to stop. */
static int
progress (uint64_t done, uint64_t total)
{
  units_done = done;
  lg_progress (done, total);
  return lg_cmd_stopped ();
}

/* What an interrupted verify leaves: nothing changed, or (--repair) the
 * volume clean as it was, or still dirty. */
static void
interrupted (struct lg_dev *d, bool repair, const struct tally *t)
{
  lg_error ("%s: verify interrupted (SIG%s) after %" PRIu64 " of %" PRIu64
            " units, %" PRIu64 " bad ranges among them%s",
            d->name, sigabbrev_np (lg_cmd_stopped ()), units_done,
            lg_dev_size (d) / LG_UNIT_SIZE, t->ranges,
            !repair                      ? ""
                : lg_crypt_was_dirty (d) ? "; the volume stays dirty: run "
                                           "verify --repair to the end"
                                         : "; the volume stays clean");
}

int
lg_cmd_verify (int argc, char **argv)
{
  static const struct option opts[] = {
    LG_LOGIN_OPTIONS,
    LG_CLAIM_OPTIONS,
    LG_KEY_OPTIONS,
    { "repair", no_argument, NULL, OPT_REPAIR },
    { "json", no_argument, NULL, OPT_JSON },
    { "help", no_argument, NULL, 'h' },
    { NULL, 0, NULL, 0 },
  };
  static const struct lg_cmd_spec spec = {
    "verify",
    opts,
    NULL,
    usage,
    LG_HELP_KEYS | LG_HELP_LOGIN,
    1,
    "a LUN URL or a file",
    verify_option,
  };
  struct lg_login login;
  struct lg_cmd_keys keys = { 0 };
  struct lg_url u = { 0 };
  const char *path = NULL; /* a file, not a LUN URL */
  struct lg_dev *raw, *d = NULL;
  struct lg_keysrc ks;
  struct tally t = { 0 };
  char err[512];
  int64_t nbad;
  struct verify_args va = { 0 };
  int status = LG_EXIT_FAIL;

  if (lg_login_init (&login) < 0)
    return LG_EXIT_FAIL;
  if ((status = lg_cmd_parse (&spec, argc, argv, &login, &keys, &va)) >= 0)
    goto out;
  status = LG_EXIT_FAIL;
  if (keys.keyfile == NULL && !lg_cmd_keys_passphrase (&keys)) {
    status = lg_usage_error ("verify",
                             "give --key-file, --passphrase-file "
                             "or --passphrase-prompt");
    goto out;
  }
  if ((status = lg_cmd_prepare_lun ("verify", argv[optind], &u, &login, &path))
      != 0)
    goto out;
  status = LG_EXIT_FAIL;
  lg_cmd_catch_stop ();
  /* Read-only unless repairing: a scrub changes nothing, not even a
   * header copy. */
  t.json = va.json;
  raw = lg_cmd_open (&u, path, &login, 4, !va.repair);
  if (raw == NULL || lg_cmd_keys_ask (&keys, raw->name, false) != 0)
    goto out;
  ks.keyfile = keys.keyfile;
  ks.passphrase = keys.passphrase;
  d = lg_stack_wrap (raw, &ks, 0, err, sizeof err);
  if (d == NULL) {
    lg_error ("%s", err);
    goto out;
  }
  if (d == raw) {
    lg_error ("%s: not a lungate volume", raw->name);
    goto out;
  }
  if (lg_cmd_stopped ()) { /* during the login or the key derivation */
    lg_error ("%s: verify interrupted (SIG%s) before it read a unit", d->name,
              sigabbrev_np (lg_cmd_stopped ()));
    goto out;
  }
  lg_progress_start_bytes ("verify", LG_UNIT_SIZE);
  nbad = lg_crypt_verify (d, 0, lg_dev_size (d) / LG_UNIT_SIZE, va.repair, bad,
                          progress, &t);
  if (nbad < 0)
    lg_progress_abandon ();
  else
    lg_progress_end ();
  if (nbad < 0 && errno == EINTR && lg_cmd_stopped ()) {
    interrupted (d, va.repair, &t);
    if (va.json)
      print_json (d, &t, va.repair, false);
    goto out;
  }
  if (nbad < 0) {
    lg_error ("%s: verify stopped by an I/O error: %m", d->name);
    if (va.json)
      print_json (d, &t, va.repair, false);
    goto out;
  }
  if (va.json) {
    print_json (d, &t, va.repair, true);
    status = nbad == 0 ? LG_EXIT_OK : LG_EXIT_FAIL;
  }
  else if (nbad == 0) {
    printf ("verify: all %" PRIu64 " units are authentic\n",
            lg_dev_size (d) / LG_UNIT_SIZE);
    status = LG_EXIT_OK;
  }
  else
    printf ("verify: %" PRId64 " of %" PRIu64 " units failed "
            "authentication, in %" PRIu64 " ranges\n",
            nbad, lg_dev_size (d) / LG_UNIT_SIZE, t.ranges);

out:
  free (t.range);
  lg_dev_close (d);
  lg_cmd_keys_clear (&keys);
  lg_url_clear (&u);
  lg_login_clear (&login);
  return status;
}
