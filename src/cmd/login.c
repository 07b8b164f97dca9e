/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Login options shared by the subcommands.  Main thread only. */
#include <config.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <sodium.h>

#include "util/fmt.h"
#include "cmd/cmd.h"
#include "dev/file.h"
#include "dev/open.h"
#include "dev/volume.h"
#include "util/log.h"
#include "util/progress.h"
#include "util/secret.h"

const char lg_login_help[]
    = "Output options (also before the command):\n"
      "  -v, --verbose                debug messages (twice: also every SCSI\n"
      "                               command)\n"
      "  -q, --quiet                  errors only\n"
      "  --progress-json              progress lines as JSON objects, one\n"
      "                               a line on stderr\n"
      "Login options:\n"
      "  --user USER                  CHAP user name\n"
      "  --password-file FILE         CHAP secret from the first line of FILE\n"
      "                               ('-' reads standard input)\n"
      "  --password-fd N              CHAP secret from file descriptor N\n"
      "  --password-prompt            prompt for the CHAP secret\n"
      "  --target-user USER           mutual CHAP: the target's user name\n"
      "  --target-password-file FILE  mutual CHAP: the target's secret\n"
      "  --target-password-fd N       ... from file descriptor N\n"
      "  --target-password-prompt     ... from a prompt\n"
      "  --initiator-name IQN         initiator name (default\n"
      "                               iqn.2026-11.org.lungate:HOSTNAME)\n"
      "  --header-digest none|crc32c  header digest (default none)\n"
      "  --connect-timeout SECONDS    give up connecting and logging in after\n"
      "                               SECONDS (default 10)\n"
      "  --io-timeout SECONDS         outage budget: after a lost connection,\n"
      "                               requests wait this long for the target\n"
      "                               to come back, then fail with EIO\n"
      "                               (default 60; 0: at once; -1: for ever)\n";

int
lg_usage_error (const char *cmd, const char *fmt, ...)
{
  va_list ap;

  fprintf (stderr, "lungate %s: ", cmd);
  va_start (ap, fmt);
  vfprintf (stderr, fmt, ap);
  va_end (ap);
  fprintf (stderr, "\nTry 'lungate %s --help'.\n", cmd);
  return LG_EXIT_USAGE;
}

static int
parse_int (const char *opt, const char *arg, long min, long max, long *out)
{
  if (lg_parse_long (arg, 10, min, max, out) < 0) {
    lg_error ("%s: '%s' is not a number from %ld to %ld", opt, arg, min, max);
    return -LG_EXIT_USAGE;
  }
  return 0;
}

static bool stdin_is_our_tty (const char *arg);

static int
set_secret (char **slot, char *s)
{
  if (s == NULL)
    return -1;
  lg_secret_free (*slot);
  *slot = s;
  return 1;
}

static int
set_string (char **slot, const char *arg)
{
  char *s = strdup (arg);

  if (s == NULL)
    return -1;
  free (*slot);
  *slot = s;
  return 1;
}

int
lg_login_option (struct lg_login *l, int c, const char *arg)
{
  long v;

  switch (c) {
  case OPT_USER:
    return set_string (&l->user, arg);
  case OPT_TARGET_USER:
    return set_string (&l->target_user, arg);
  case OPT_PASSWORD_FILE:
    return set_secret (&l->secret,
                       stdin_is_our_tty (arg)
                           ? lg_secret_prompt ("CHAP secret: ")
                           : lg_secret_from_file (arg));
  case OPT_TARGET_PASSWORD_FILE:
    return set_secret (&l->target_secret,
                       stdin_is_our_tty (arg)
                           ? lg_secret_prompt ("Target's CHAP secret: ")
                           : lg_secret_from_file (arg));
  case OPT_PASSWORD_FD:
  case OPT_TARGET_PASSWORD_FD:
    if (parse_int ("--password-fd", arg, 0, INT_MAX, &v) < 0)
      return -LG_EXIT_USAGE;
    return set_secret (c == OPT_PASSWORD_FD ? &l->secret : &l->target_secret,
                       lg_secret_from_fd ((int) v, "password fd"));
  case OPT_PASSWORD_PROMPT:
    return set_secret (&l->secret, lg_secret_prompt ("CHAP secret: "));
  case OPT_TARGET_PASSWORD_PROMPT:
    return set_secret (&l->target_secret,
                       lg_secret_prompt ("Target's CHAP secret: "));
  case OPT_INITIATOR_NAME:
    if (strncmp (arg, "iqn.", 4) != 0 && strncmp (arg, "eui.", 4) != 0
        && strncmp (arg, "naa.", 4) != 0) {
      lg_error ("--initiator-name: '%s' is not an iSCSI name (iqn., eui. "
                "or naa.)",
                arg);
      return -LG_EXIT_USAGE;
    }
    return set_string (&l->initiator_name, arg);
  case OPT_HEADER_DIGEST:
    if (strcmp (arg, "none") == 0)
      l->header_digest = false;
    else if (strcmp (arg, "crc32c") == 0)
      l->header_digest = true;
    else {
      lg_error ("--header-digest: '%s': want none or crc32c", arg);
      return -LG_EXIT_USAGE;
    }
    return 1;
  case OPT_CONNECT_TIMEOUT:
    if (parse_int ("--connect-timeout", arg, 1, 3600, &v) < 0)
      return -LG_EXIT_USAGE;
    l->connect_timeout = (int) v;
    return 1;
  case OPT_IO_TIMEOUT:
    if (parse_int ("--io-timeout", arg, -1, 86400, &v) < 0)
      return -LG_EXIT_USAGE;
    l->io_timeout = (int) v;
    return 1;
  default:
    return 0;
  }
}

int
lg_cmd_prepare (const char *url, struct lg_url *u, struct lg_login *l)
{
  char err[256];

  if (lg_url_parse (url, u, err, sizeof err) < 0) {
    lg_error ("invalid URL '%s': %s", url, err);
    return LG_EXIT_USAGE;
  }
  if (u->user && l->user == NULL) {
    l->user = strdup (u->user);
    if (l->user == NULL)
      return LG_EXIT_FAIL;
  }
  if (u->password) {
    lg_warn ("a password in the URL is visible to other users in the "
             "process list: prefer --password-file");
    if (l->secret == NULL) {
      l->secret = u->password;
      u->password = NULL;
    }
  }
  if ((l->user == NULL) != (l->secret == NULL)) {
    lg_error ("CHAP needs both a user (--user) and a secret "
              "(--password-file, --password-fd or --password-prompt)");
    return LG_EXIT_USAGE;
  }
  if ((l->target_user == NULL) != (l->target_secret == NULL)) {
    lg_error ("mutual CHAP needs both --target-user and a target secret "
              "(--target-password-file, -fd or -prompt)");
    return LG_EXIT_USAGE;
  }
  if (l->target_user && l->user == NULL) {
    lg_error ("mutual CHAP (--target-user) needs one-way CHAP (--user) too");
    return LG_EXIT_USAGE;
  }
  return 0;
}

int
lg_cmd_prepare_lun (const char *cmd, const char *arg, struct lg_url *u,
                    struct lg_login *l, const char **path)
{
  int r;

  if (path) {
    *path = NULL;
    if (strstr (arg, "://") == NULL) {
      *path = arg; /* a file or a block device */
      return 0;
    }
  }
  if ((r = lg_cmd_prepare (arg, u, l)) != 0)
    return r;
  if (u->kind != LG_URL_LUN) {
    lg_error ("invalid URL '%s': %s needs a LUN URL "
              "(iscsi://HOST[:PORT]/TARGET-IQN/LUN)%s",
              arg, cmd, path ? " or a file" : "");
    return LG_EXIT_USAGE;
  }
  return 0;
}

const char lg_key_help[]
    = "Key options (encrypted and integrity-protected LUNs):\n"
      "  --key-file FILE              a 32-byte key file\n"
      "  --passphrase-file FILE       the passphrase: first line of FILE\n"
      "                               ('-' reads standard input)\n"
      "  --passphrase-fd N            the passphrase from file descriptor N\n"
      "  --passphrase-prompt          ask for the passphrase on the terminal\n"
      "                               (twice where it makes a key slot;\n"
      "                               also --passphrase-file - on one)\n";

int
lg_key_option (struct lg_cmd_keys *k, int c, const char *arg)
{
  long v;

  switch (c) {
  case OPT_KEY_FILE:
    if (k->tab)
      return lg_keytab_add (k->tab, arg, &k->keyfile) < 0 ? -1 : 1;
    if (k->keyfile)
      sodium_free (k->keyfile);
    k->keyfile = lg_keyfile_read (arg);
    return k->keyfile ? 1 : -1;
  case OPT_PASSPHRASE_PROMPT:
    lg_secret_free (k->passphrase);
    k->passphrase = NULL;
    k->prompt = true;
    return 1;
  case OPT_PASSPHRASE_FILE: {
    char *p = lg_cmd_new_passphrase (arg, &k->prompt);

    if (p == NULL && !k->prompt)
      return -LG_EXIT_FAIL;
    lg_secret_free (k->passphrase);
    k->passphrase = p;
    return 1;
  }
  case OPT_PASSPHRASE_FD:
    k->prompt = false;
    if (parse_int ("--passphrase-fd", arg, 0, INT_MAX, &v) < 0)
      return -LG_EXIT_USAGE;
    return set_secret (&k->passphrase,
                       lg_secret_from_fd ((int) v, "passphrase fd"));
  default:
    return 0;
  }
}

/* '-' names standard input, and it is the terminal this process can
 * prompt on. */
static bool
stdin_is_our_tty (const char *arg)
{
  int fd;

  if (strcmp (arg, "-") != 0 || !isatty (STDIN_FILENO))
    return false;
  fd = open ("/dev/tty", O_RDWR | O_CLOEXEC | O_NOCTTY);
  if (fd < 0)
    return false; /* no controlling terminal: read standard input */
  close (fd);
  return true;
}

char *
lg_cmd_new_passphrase (const char *arg, bool *prompt)
{
  /* On a terminal a passphrase is asked for without echo (and twice
   * where it makes a key slot), whichever way it was asked for. */
  *prompt = stdin_is_our_tty (arg);
  return *prompt ? NULL : lg_secret_from_file (arg);
}

bool
lg_cmd_keys_passphrase (const struct lg_cmd_keys *k)
{
  return k->passphrase != NULL || k->prompt;
}

int
lg_cmd_keys_ask (struct lg_cmd_keys *k, const char *what, bool twice)
{
  char prompt[512];

  if (!k->prompt || k->passphrase || k->keyfile)
    return LG_EXIT_OK;
  snprintf (prompt, sizeof prompt,
            "%s for %s: ", twice ? "New passphrase" : "Passphrase", what);
  k->passphrase = twice ? lg_secret_prompt_twice (prompt, "Verify passphrase: ")
                        : lg_secret_prompt (prompt);
  return k->passphrase ? LG_EXIT_OK : LG_EXIT_FAIL;
}

void
lg_cmd_verbosity (int c)
{
  /* As before the command (lungate.c): -v debug, twice every SCSI
   * command; -q errors only. */
  enum lg_log_level now = lg_log_get_level ();

  lg_log_set_level (c == 'q'                 ? LG_LOG_ERROR
                        : now < LG_LOG_DEBUG ? LG_LOG_DEBUG
                                             : LG_LOG_TRACE);
}

unsigned lg_cmd_claim_flags;

int
lg_cmd_option (struct lg_login *l, struct lg_cmd_keys *keys, int c,
               const char *arg)
{
  int r = lg_login_option (l, c, arg);

  if (c == 'v' || c == 'q') {
    lg_cmd_verbosity (c);
    return 1;
  }
  if (c == OPT_PROGRESS_JSON) {
    lg_progress_set_json (true);
    return 1;
  }
  if (c == OPT_TAKEOVER || c == OPT_SHARED) {
    lg_cmd_claim_flags
        |= c == OPT_TAKEOVER ? LG_CLAIM_TAKEOVER : LG_CLAIM_SHARED;
    return 1;
  }
  if (r == 0 && keys)
    r = lg_key_option (keys, c, arg);
  return r;
}

void
lg_cmd_keys_clear (struct lg_cmd_keys *k)
{
  if (k->keyfile)
    sodium_free (k->keyfile);
  lg_secret_free (k->passphrase);
  k->keyfile = NULL;
  k->passphrase = NULL;
  k->prompt = false;
}

struct lg_dev *
lg_cmd_open_lun (const struct lg_url *u, const struct lg_login *l,
                 unsigned connections, bool read_only)
{
  char err[512];
  /* The commands that open through here to write have no read-only
   * mode to offer in a refusal. */
  struct lg_dev *d = lg_lun_open_raw (
      l, u, connections, read_only,
      lg_cmd_claim_flags | (read_only ? 0 : LG_CLAIM_NO_RO), err, sizeof err);

  if (d == NULL)
    lg_error ("%s", err);
  return d;
}

struct lg_dev *
lg_cmd_open (const struct lg_url *u, const char *path, const struct lg_login *l,
             unsigned connections, bool read_only)
{
  char err[512];
  struct lg_dev *d;

  if (path == NULL)
    return lg_cmd_open_lun (u, l, connections, read_only);
  d = lg_file_dev_open (path, read_only, err, sizeof err);
  if (d == NULL) {
    lg_error ("%s", err);
    return NULL;
  }
  if (lg_dev_claim (d, lg_cmd_claim_flags | LG_CLAIM_NO_RO, err, sizeof err)
      < 0) {
    lg_error ("%s", err);
    lg_dev_close (d);
    return NULL;
  }
  return d;
}

int
lg_cmd_positionals (const char *cmd, int argc, char **argv, int want,
                    const char *what)
{
  if (argc - optind > want)
    return lg_usage_error (cmd, "unexpected argument '%s'",
                           argv[optind + want]);
  if (argc - optind < want)
    return lg_usage_error (cmd, "expected %s", what);
  return 0;
}
