/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* lungate format: write a lungate header (and, unless --lazy, a sealed
 * ZERO slot for every unit) on a LUN.  Main thread. */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include <sodium.h>

#include "cmd/cmd.h"
#include "dev/dev.h"
#include "dev/volume.h"
#include "util/fmt.h"
#include "util/log.h"
#include "util/progress.h"

enum {
  OPT_MODE = OPT_LOGIN_LAST + 1,
  OPT_LAZY,
  OPT_FORCE,
  OPT_BATCH,
  OPT_ARGON2
};

static const char usage[]
    = "Usage: lungate format [OPTIONS] [--mode aead|mac] (--key-file F | "
      "--passphrase-file F)\n"
      "                      iscsi://HOST[:PORT]/TARGET-IQN/LUN | FILE\n"
      "\n"
      "Make the LUN an encrypted (aead) or integrity-protected (mac) volume:\n"
      "write the lungate header with one key slot and seal every unit.  All\n"
      "data on the LUN is lost.\n"
      "\n"
      "Options:\n"
      "  --mode aead|mac              aead: XChaCha20-Poly1305 (default);\n"
      "                               mac: plaintext with a Poly1305 tag\n"
      "  --lazy                       do not seal every unit (fast on huge\n"
      "                               LUNs): a unit whose metadata is wiped\n"
      "                               then reads as zeroes instead of failing\n"
      "  --argon2 interactive|moderate  passphrase hashing cost (default\n"
      "                               moderate)\n"
      "  --force                      format a LUN that holds a lungate "
      "header\n"
      "                               or looks in use, without asking\n"
      "  --batch                      never ask (on a terminal, format asks\n"
      "                               before it destroys what a LUN holds);\n"
      "                               refuse instead unless --force\n"
      "  --takeover                   the gateway holding the LUN is gone:\n"
      "                               preempt its reservation\n"
      "  -h, --help                   this help\n"
      "\n";

/* Progress, and the stop on Ctrl-C (stop.c): non-zero to stop. */
static int
progress (uint64_t done, uint64_t total)
{
  lg_progress (done, total);
  return lg_cmd_stopped ();
}

#define LAZY_HINT                                                              \
  "this takes a while: lungate format --lazy zeroes and seals nothing but "    \
  "the header area (seconds on any size; see lungate-format(1))"

/* Zeroes bytes [from, len) of d in pieces, with progress; a stop fails
 * with EINTR. */
static int
zero_lun (struct lg_dev *d, uint64_t from, uint64_t len)
{
  const uint64_t piece = 256ull << 20;

  for (uint64_t off = from; off < len;) {
    uint64_t n = len - off < piece ? len - off : piece;

    if (lg_dev_zero (d, n, off, LG_MAY_TRIM) < 0)
      return -1;
    off += n;
    if (progress (off, len) != 0) {
      errno = EINTR;
      return -1;
    }
  }
  return 0;
}

/* Non-zero bytes in the first MiB from byte from: a partition table or a
 * file system. */
static int
looks_used (struct lg_dev *d, size_t from, const char **what)
{
  static uint8_t buf[1 << 20];
  size_t n
      = lg_dev_size (d) < sizeof buf ? (size_t) lg_dev_size (d) : sizeof buf;

  if (lg_dev_pread (d, buf, n, 0) < 0)
    return -1;
  *what = NULL;
  for (size_t i = from; i < n; i++)
    if (buf[i]) {
      *what = lg_cmd_signature (buf, n);
      if (*what == NULL)
        *what = "data in its first MiB (not a signature lungate knows)";
      break;
    }
  return 0;
}

/* What the command line asks for. */
struct format_args {
  struct lg_login login;
  struct lg_cmd_keys keys;
  struct lg_url u;
  const char *path; /* a file, not a LUN URL */
  uint32_t mode;
  uint64_t ops, mem; /* Argon2 limits */
  bool lazy, force, batch;
};

/* format's own options (lg_cmd_spec.option). */
static int
format_option (void *args, int c, const char *arg)
{
  struct format_args *a = args;

  switch (c) {
  case OPT_MODE:
    if (strcmp (arg, "aead") == 0)
      a->mode = LG_MODE_AEAD;
    else if (strcmp (arg, "mac") == 0)
      a->mode = LG_MODE_MAC;
    else {
      lg_error ("--mode: '%s': want aead or mac", arg);
      return LG_EXIT_USAGE;
    }
    return 0;
  case OPT_ARGON2:
    if (strcmp (arg, "interactive") == 0) {
      a->ops = crypto_pwhash_OPSLIMIT_INTERACTIVE;
      a->mem = crypto_pwhash_MEMLIMIT_INTERACTIVE;
    }
    else if (strcmp (arg, "moderate") != 0) {
      lg_error ("--argon2: '%s': want interactive or moderate", arg);
      return LG_EXIT_USAGE;
    }
    return 0;
  case OPT_LAZY:
    a->lazy = true;
    return 0;
  case OPT_FORCE:
    a->force = true;
    return 0;
  case OPT_BATCH:
    a->batch = true;
    return 0;
  default:
    return -1;
  }
}

/* The options and the LUN: -1 to go on, else the exit status. */
static int
parse_args (int argc, char **argv, struct format_args *a)
{
  static const struct option opts[] = {
    LG_LOGIN_OPTIONS,
    LG_CLAIM_OPTIONS,
    LG_KEY_OPTIONS,
    { "mode", required_argument, NULL, OPT_MODE },
    { "lazy", no_argument, NULL, OPT_LAZY },
    { "force", no_argument, NULL, OPT_FORCE },
    { "batch", no_argument, NULL, OPT_BATCH },
    { "argon2", required_argument, NULL, OPT_ARGON2 },
    { "help", no_argument, NULL, 'h' },
    { NULL, 0, NULL, 0 },
  };
  static const struct lg_cmd_spec spec = {
    "format",
    opts,
    NULL,
    usage,
    LG_HELP_KEYS | LG_HELP_LOGIN,
    1,
    "a LUN URL or a file",
    format_option,
  };
  int status = lg_cmd_parse (&spec, argc, argv, &a->login, &a->keys, a);

  if (status >= 0)
    return status;
  if ((a->keys.keyfile == NULL) == !lg_cmd_keys_passphrase (&a->keys))
    return lg_usage_error ("format",
                           "give one of --key-file, "
                           "--passphrase-file and "
                           "--passphrase-prompt");
  if ((status = lg_cmd_prepare_lun ("format", argv[optind], &a->u, &a->login,
                                    &a->path))
      != 0)
    return status;
  return -1;
}

/* The LUN holds what: go on with --force; else on a terminal ask (and
 * a yes is --force from here on); else refuse.  0 to go on, or -1 (said
 * why). */
static int
may_destroy (const struct lg_dev *raw, struct format_args *a, const char *what)
{
  char question[512];
  int r = 0;

  if (a->force)
    return 0;
  if (!a->batch) {
    snprintf (question, sizeof question,
              "%s holds %s: lungate format destroys it.", raw->name, what);
    r = lg_cmd_confirm (question);
  }
  if (r > 0) {
    a->force = true;
    return 0;
  }
  if (r < 0)
    lg_error ("%s: not formatted: the LUN is as it was", raw->name);
  else
    lg_error ("%s: the LUN already holds %s: use --force to format it "
              "anyway (its data is lost)",
              raw->name, what);
  return -1;
}

/* Past the first MiB: a file system or partition table that starts at
 * 1, 2, 4, 8 MiB ... (a partition), a backup GPT at the end, or any other
 * data in those places (the first MiB is looks_used's).  Below md_end is
 * where an interrupted format of an older lungate left metadata:
 * non-zero bytes there without a signature set *md_data (check_lun asks
 * about them), and the search goes on.  Samples, not a scan: 128 KiB at
 * each place.  0, or -1 (a read failed); *what as looks_used, into buf. */
static int
look_further (struct lg_dev *raw, uint64_t md_end, char *buf, size_t len,
              const char **what, bool *md_data)
{
  static uint8_t b[128 * 1024];
  uint64_t size = lg_dev_size (raw);

  *what = NULL;
  *md_data = false;
  for (uint64_t off = LG_HDR_AREA; off < size; off *= 2) {
    size_t n = size - off < sizeof b ? (size_t) (size - off) : sizeof b;
    const char *sig;

    if (lg_dev_pread (raw, b, n, off) < 0)
      return -1;
    if ((sig = lg_cmd_signature (b, n)) == NULL && !sodium_is_zero (b, n)) {
      if (off < md_end) {
        *md_data = true; /* metadata, maybe: check_lun */
        continue;
      }
      sig = "data";
    }
    if (sig) {
      snprintf (buf, len, "%s at %" PRIu64 " MiB (a partition?)", sig,
                off >> 20);
      *what = buf;
      return 0;
    }
  }
  if (size >= LG_HDR_AREA + 4096) {
    if (lg_dev_pread (raw, b, 4096, size - 4096) < 0)
      return -1;
    if (memcmp (b + 4096 - 512, "EFI PART", 8) == 0)
      *what = "a backup GPT partition table at the end";
    else if (!sodium_is_zero (b, 4096))
      *what = "data at the end of the LUN";
  }
  return 0;
}

/* Refuses to destroy what looks like data unless --force or a yes, and
 * finds the geometry and whether an earlier format was interrupted.  0 or
 * -1 (said why). */
static int
check_lun (struct lg_dev *raw, struct format_args *a,
           struct lg_volume_geometry *g, bool *interrupted)
{
  uint8_t hb[LG_HDR_SIZE];
  char further[160];
  const char *what;
  bool mark, md_data = false;

  if (raw->read_only) {
    lg_error ("%s: the LUN is read-only", raw->name);
    return -1;
  }
  /* Before any question: a yes would destroy nothing and then fail. */
  if (lg_volume_geometry (lg_dev_size (raw), g) < 0) {
    lg_error ("%s: the LUN (%" PRIu64 " bytes) is too small for a lungate "
              "volume",
              raw->name, lg_dev_size (raw));
    return -1;
  }
  if (lg_dev_pread (raw, hb, sizeof hb, 0) < 0)
    return -1;
  /* An earlier format that did not finish: ours to start over, so far
   * as nothing but zeroes follows the mark in the first MiB (format
   * zeroes it before it writes the mark). */
  mark = lg_header_is_format_mark (hb);
  if (!lg_header_has_magic (hb)
      && lg_dev_size (raw) >= LG_HDR_COPY1_OFFSET + sizeof hb
      && lg_dev_pread (raw, hb, sizeof hb, LG_HDR_COPY1_OFFSET) < 0)
    return -1;
  if (lg_header_has_magic (hb)
      && may_destroy (raw, a, "a lungate header (a volume)") < 0)
    return -1;
  if (!a->force) {
    if (looks_used (raw, mark ? sizeof hb : 0, &what) < 0)
      return -1;
    if (what && may_destroy (raw, a, what) < 0)
      return -1;
  }
  /* After a format mark, whatever the interrupted format had not yet
   * zeroed was given up already. */
  if (!a->force && !mark) {
    if (look_further (raw, g->data_offset, further, sizeof further, &what,
                      &md_data)
        < 0)
      return -1;
    if (what && may_destroy (raw, a, what) < 0)
      return -1;
  }
  /* A format that was interrupted wiped the header area first and sealed
   * units from the first on: metadata where the header says nothing. */
  if (lg_dev_pread (raw, hb, sizeof hb, g->md_offset) < 0)
    return -1;
  *interrupted = mark || md_data || !sodium_is_zero (hb, sizeof hb);
  if (!mark && *interrupted
      && may_destroy (raw, a,
                      "data from 1 MiB on (the metadata of an interrupted "
                      "lungate format, or other data)")
          < 0)
    return -1;
  return 0;
}

/* Says why format stopped while doing what: a stop on a signal, or an
 * error (errno). */
static void
stopped (const struct lg_dev *raw, const char *what)
{
  int saved = errno;

  if (saved == EINTR && lg_cmd_stopped ())
    lg_error ("%s: format interrupted (SIG%s) while %s: the LUN holds no "
              "volume; lungate format starts over",
              raw->name, sigabbrev_np (lg_cmd_stopped ()), what);
  else
    lg_error ("%s: %s failed: %s", raw->name, what, strerror (saved));
}

/* Wipes and seals the units of the new volume v (geometry g), then
 * writes its header.  0 or -1 (said why). */
static int
write_volume (struct lg_dev *raw, const struct format_args *a,
              struct lg_volume_new *v, const struct lg_volume_geometry *g,
              bool interrupted)
{
  struct lg_dev *cd;
  char err[512];
  int r = -1;

  /* The metadata first, the header last: a LUN is a lungate volume only
   * once everything under the header is in place.  Until then, the mark
   * over header copy 0 says a format is under way. */
  cd = lg_volume_new_open (v, raw, err, sizeof err);
  if (cd == NULL) {
    lg_error ("%s", err);
    return -1;
  }
  /* What copy 0 holds now: after an outage, the LUN must still hold it
   * (or the mark, or the header), else it is another disk. */
  if (lg_volume_formatting (cd, raw) < 0) {
    lg_error ("%s: reading the first block again: %m", raw->name);
    goto out;
  }
  /* The rest of the first MiB (header copy 1 among it) is zeroes before
   * the mark says a format began: a mark never stands beside a valid
   * copy or foreign data (check_lun). */
  /* The last moment a stop leaves the LUN as it was (a Ctrl-C during a
   * passphrase's key derivation, say). */
  if (lg_cmd_stopped ()) {
    lg_error ("%s: format interrupted (SIG%s) before it wrote anything",
              raw->name, sigabbrev_np (lg_cmd_stopped ()));
    goto out;
  }
  if (lg_volume_write_format_mark (raw) < 0) {
    lg_error ("%s: writing the first MiB of the LUN failed: %m", raw->name);
    goto out;
  }
  /* Wipe any old header copies and metadata, and (unless lazy) the data:
   * a sealed ZERO unit is authentic only over zeroed bytes.  On a
   * thin-provisioned LUN this deallocates and is quick. */
  lg_progress_start_bytes ("format: zeroing", 1);
  if (!a->lazy)
    lg_progress_hint (LAZY_HINT, 180);
  /* Lazy: the metadata area of a huge LUN is huge too (1/43 of it), and
   * is left alone.  Old bytes there fail authentication (the UUID is in
   * every tag), so such a unit reads EIO until it is written, never as
   * someone else's data. */
  /* Except after an interrupted format (or with --force): its sealed
   * slots would read as errors, so the metadata area is wiped too. */
  if (zero_lun (raw, LG_HDR_AREA,
                !a->lazy                      ? lg_dev_size (raw)
                    : interrupted || a->force ? g->data_offset
                                              : LG_HDR_AREA)
      < 0) {
    lg_progress_abandon ();
    stopped (raw, "zeroing");
    goto out;
  }
  lg_progress_end ();
  if (!a->lazy) {
    lg_progress_start_bytes ("format: sealing units", LG_UNIT_SIZE);
    lg_progress_hint (LAZY_HINT, 180);
    if (lg_crypt_init_units (cd, 0, g->nunits, progress) < 0) {
      lg_progress_abandon ();
      stopped (raw, "writing the metadata");
      goto out;
    }
    lg_progress_end ();
  }
  if (lg_volume_new_write (v, raw) < 0) {
    lg_error ("%s: writing the header failed: %m", raw->name);
    goto out;
  }
  r = 0;

out:
  lg_dev_close (cd);
  return r;
}

int
lg_cmd_format (int argc, char **argv)
{
  struct format_args a = { .mode = LG_MODE_AEAD,
                           .ops = crypto_pwhash_OPSLIMIT_MODERATE,
                           .mem = crypto_pwhash_MEMLIMIT_MODERATE };
  struct lg_dev *raw = NULL;
  struct lg_volume_geometry g;
  struct lg_volume_new *v = NULL;
  struct lg_keysrc ks;
  char hs[32];
  bool interrupted;
  int status = LG_EXIT_FAIL;

  if (lg_login_init (&a.login) < 0)
    return LG_EXIT_FAIL;
  if ((status = parse_args (argc, argv, &a)) >= 0)
    goto out;
  status = LG_EXIT_FAIL;
  lg_cmd_catch_stop ();
  raw = lg_cmd_open (&a.u, a.path, &a.login, 4, false);
  if (raw == NULL || check_lun (raw, &a, &g, &interrupted) < 0
      || lg_cmd_keys_ask (&a.keys, raw->name, true) != 0)
    goto out;
  v = lg_volume_new (lg_dev_size (raw), a.mode, a.lazy ? LG_HDR_FLAG_LAZY : 0);
  if (v == NULL)
    goto out;
  ks.keyfile = a.keys.keyfile;
  ks.passphrase = a.keys.passphrase;
  if (lg_volume_new_key (v, &ks, a.ops, a.mem) < 0) {
    lg_error ("cannot set up the key slot: %m");
    goto out;
  }
  if (write_volume (raw, &a, v, &g, interrupted) < 0)
    goto out;
  printf ("formatted %s: mode %s%s, %" PRIu64 " units, %s usable\n", raw->name,
          a.mode == LG_MODE_AEAD ? "aead" : "mac", a.lazy ? " (lazy)" : "",
          g.nunits, lg_human_size (g.nunits * LG_UNIT_SIZE, hs, sizeof hs));
  status = LG_EXIT_OK;

out:
  lg_dev_close (raw);
  lg_volume_new_free (v);
  lg_cmd_keys_clear (&a.keys);
  lg_url_clear (&a.u);
  lg_login_clear (&a.login);
  return status;
}
