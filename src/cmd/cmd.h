/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The `lungate' subcommands and what they share: the login options every
 * command that logs in accepts, and turning a URL plus options into a
 * session.  Main thread only.
 */
#ifndef LG_CMD_H
#define LG_CMD_H

#include <getopt.h>
#include <stdbool.h>
#include <stdint.h>

#include "iscsi/session.h"
#include "iscsi/url.h"

/* Exit statuses. */
#define LG_EXIT_OK 0
#define LG_EXIT_FAIL 1
#define LG_EXIT_USAGE 2

int lg_cmd_discover (int argc, char **argv);
int lg_cmd_info (int argc, char **argv);
int lg_cmd_format (int argc, char **argv);
int lg_cmd_verify (int argc, char **argv);
int lg_cmd_key (int argc, char **argv);
int lg_cmd_mount (int argc, char **argv);
int lg_cmd_bench (int argc, char **argv);
int lg_cmd_status (int argc, char **argv);
int lg_cmd_umount (int argc, char **argv);

/* -v (debug; twice: every SCSI command) or -q (errors only). */
void lg_cmd_verbosity (int c);

/* Long options shared by the commands that log in (their values are >=
 * 0x100, so they do not clash with short options). */
enum {
  OPT_USER = 0x100,
  OPT_PASSWORD_FILE,
  OPT_PASSWORD_FD,
  OPT_PASSWORD_PROMPT,
  OPT_TARGET_USER,
  OPT_TARGET_PASSWORD_FILE,
  OPT_TARGET_PASSWORD_FD,
  OPT_TARGET_PASSWORD_PROMPT,
  OPT_INITIATOR_NAME,
  OPT_HEADER_DIGEST,
  OPT_CONNECT_TIMEOUT,
  OPT_IO_TIMEOUT,
  OPT_JSON,
  OPT_KEY_FILE,
  OPT_PASSPHRASE_FILE,
  OPT_PASSPHRASE_FD,
  OPT_PASSPHRASE_PROMPT,
  OPT_TAKEOVER,
  OPT_SHARED,
  OPT_PROGRESS_JSON,
  OPT_LOGIN_LAST,
};

#define LG_LOGIN_OPTIONS                                                       \
  { "user", required_argument, NULL, OPT_USER },                               \
      { "password-file", required_argument, NULL, OPT_PASSWORD_FILE },         \
      { "password-fd", required_argument, NULL, OPT_PASSWORD_FD },             \
      { "password-prompt", no_argument, NULL, OPT_PASSWORD_PROMPT },           \
      { "target-user", required_argument, NULL, OPT_TARGET_USER },             \
      { "target-password-file", required_argument, NULL,                       \
        OPT_TARGET_PASSWORD_FILE },                                            \
      { "target-password-fd", required_argument, NULL,                         \
        OPT_TARGET_PASSWORD_FD },                                              \
      { "target-password-prompt", no_argument, NULL,                           \
        OPT_TARGET_PASSWORD_PROMPT },                                          \
      { "initiator-name", required_argument, NULL, OPT_INITIATOR_NAME },       \
      { "header-digest", required_argument, NULL, OPT_HEADER_DIGEST },         \
      { "connect-timeout", required_argument, NULL, OPT_CONNECT_TIMEOUT },     \
      { "io-timeout", required_argument, NULL, OPT_IO_TIMEOUT },               \
      { "progress-json", no_argument, NULL, OPT_PROGRESS_JSON },               \
      { "verbose", no_argument, NULL, 'v' },                                   \
  {                                                                            \
    "quiet", no_argument, NULL, 'q'                                            \
  }

/* The short options every command takes (-h, and -v, -q as
 * lg_cmd_option handles them), for getopt_long. */
#define LG_CMD_SHORTOPTS "hqv"

#define LG_KEY_OPTIONS                                                         \
  { "key-file", required_argument, NULL, OPT_KEY_FILE },                       \
      { "passphrase-file", required_argument, NULL, OPT_PASSPHRASE_FILE },     \
      { "passphrase-fd", required_argument, NULL, OPT_PASSPHRASE_FD },         \
  {                                                                            \
    "passphrase-prompt", no_argument, NULL, OPT_PASSPHRASE_PROMPT              \
  }

/* The commands that write: --takeover (lg_cmd_claim_flags). */
#define LG_CLAIM_OPTIONS                                                       \
  {                                                                            \
    "takeover", no_argument, NULL, OPT_TAKEOVER                                \
  }

/* LG_CLAIM_* (dev.h) for lg_cmd_open_lun's claim, set by lg_cmd_option. */
extern unsigned lg_cmd_claim_flags;

extern const char lg_login_help[];
extern const char lg_key_help[];

/* Keys given on the command line, in sodium memory. */
struct lg_keytab;
struct lg_cmd_keys {
  uint8_t *keyfile;
  char *passphrase;
  /* --passphrase-prompt, or --passphrase-file - on a terminal: ask
   * (lg_cmd_keys_ask) once the options are all read. */
  bool prompt;
  /* Where set (mount), --key-file lunN=FILE keys LUN N (dev/stack.h). */
  struct lg_keytab *tab;
};

/* Handles one key option: 1 if it was one, 0 if not, or (reported)
 * -LG_EXIT_USAGE for a malformed value, -LG_EXIT_FAIL for another failure
 * (a key file that cannot be read). */
int lg_key_option (struct lg_cmd_keys *k, int c, const char *arg);
void lg_cmd_keys_clear (struct lg_cmd_keys *k);

/* What the first bytes of a LUN (len of them, 128 KiB is enough) say it
 * holds: "a lungate volume", "an ext2/3/4 file system", ...; NULL if
 * nothing known. */
const char *lg_cmd_signature (const uint8_t *buf, size_t len);

/* Before destroying something: on a terminal (standard input and error),
 * prints question and asks to type YES.  1 yes, -1 anything else (or a
 * stop signal), 0 no terminal to ask on. */
int lg_cmd_confirm (const char *question);

/* A passphrase was given or is to be asked for. */
bool lg_cmd_keys_passphrase (const struct lg_cmd_keys *k);

/* Where a passphrase is to be asked for, asks on the terminal without
 * echo, naming what (the URL) it opens; twice where it creates a key
 * slot.  0, or LG_EXIT_FAIL (reported: no terminal, the two differ). */
int lg_cmd_keys_ask (struct lg_cmd_keys *k, const char *what, bool twice);

/* For a new passphrase: --new-passphrase-file ARG (ask if ARG is '-' on a
 * terminal: *prompt set, NULL returned, no error) or read it. */
char *lg_cmd_new_passphrase (const char *arg, bool *prompt);

/* A login option, -v or -q, --takeover or --shared, or (keys not NULL) a
 * key option: 1 handled, 0 not one of them, or (reported) minus the exit
 * status: -LG_EXIT_USAGE for a malformed value, -LG_EXIT_FAIL else. */
int lg_cmd_option (struct lg_login *l, struct lg_cmd_keys *keys, int c,
                   const char *arg);

struct lg_dev;
struct lg_pool;

/* Logs in and opens the raw LUN of a LUN URL (the device owns its pool
 * of `connections' sessions); unless read_only, takes write access to it
 * (lg_dev_claim with lg_cmd_claim_flags).  NULL with the reason
 * reported. */
struct lg_dev *lg_cmd_open_lun (const struct lg_url *u,
                                const struct lg_login *l, unsigned connections,
                                bool read_only);

/* As lg_cmd_open_lun, or where path is not NULL (lg_cmd_prepare_lun), the
 * file or block device there (dev/file.h). */
struct lg_dev *lg_cmd_open (const struct lg_url *u, const char *path,
                            const struct lg_login *l, unsigned connections,
                            bool read_only);

/* Handles one login option: 1 if it was one, 0 if not, or (reported)
 * -LG_EXIT_USAGE for a malformed value, -LG_EXIT_FAIL for another
 * failure. */
int lg_login_option (struct lg_login *l, int c, const char *arg);

/* Parses url and completes the login with what the URL carries; checks
 * the options make sense together.  0, or LG_EXIT_USAGE (a malformed URL,
 * options that do not go together) or LG_EXIT_FAIL, with the problem
 * reported. */
int lg_cmd_prepare (const char *url, struct lg_url *u, struct lg_login *l);

/* As lg_cmd_prepare, for commands that work on one LUN: arg must be a LUN
 * URL; or, where path is not NULL, a name without "://" is a file or a
 * block device, and *path is set to it (else to NULL). */
int lg_cmd_prepare_lun (const char *cmd, const char *arg, struct lg_url *u,
                        struct lg_login *l, const char **path);

#define LG_HELP_KEYS 1  /* lg_key_help */
#define LG_HELP_LOGIN 2 /* lg_login_help */

/* A command's prologue, the wireguard-tools way: each command describes
 * its options in a table entry and lg_cmd_parse does the rest. */
struct lg_cmd_spec {
  const char *name;          /* for messages: "format" */
  const struct option *opts; /* for getopt_long, ending in a zero entry */
  const char *shortopts;     /* besides LG_CMD_SHORTOPTS, or NULL */
  const char *usage;         /* printed for -h, then what helps says */
  unsigned helps;            /* LG_HELP_KEYS, LG_HELP_LOGIN */
  int npos;                  /* arguments wanted after the options; -1: the
                                command counts them itself */
  const char *what;          /* "a LUN URL": what they are, for messages */
  /* The command's own option c (optarg arg): 0, -1 when c is none of its
   * own, or the exit status with the problem reported.  NULL: the command
   * has none. */
  int (*option) (void *args, int c, const char *arg);
};

/* getopt_long over spec's options (anywhere, up to "--"); the shared
 * ones (lg_cmd_option: login, -v and -q, --takeover, and the key options
 * where keys is not NULL; only -v and -q where login is NULL); -h prints
 * the usage and the help; any other goes to spec->option (args, c, arg),
 * and one that nobody knows is a usage error.  Then, where spec->npos is
 * not negative, exactly that many arguments.  -1 to go on (optind is the
 * first argument), else the exit status. */
int lg_cmd_parse (const struct lg_cmd_spec *spec, int argc, char **argv,
                  struct lg_login *login, struct lg_cmd_keys *keys, void *args);

/* lg_cmd_spec.option for a command whose own options are one flag:
 * args is a bool *, which any of them sets. */
int lg_cmd_set_flag (void *args, int c, const char *arg);

/* After getopt (which takes options anywhere, up to "--"): exactly want
 * arguments remain, else "unexpected argument 'X'" or "expected WHAT" and
 * LG_EXIT_USAGE.  0 when they do. */
int lg_cmd_positionals (const char *cmd, int argc, char **argv, int want,
                        const char *what);

/* A long command's stop on SIGINT, SIGTERM or SIGHUP (stop.c): after
 * lg_cmd_catch_stop, lg_cmd_stopped is the signal that came (0: none) and
 * the command stops at its next piece and cleans up; main then calls
 * lg_cmd_die_if_stopped, which dies of that signal (unless the command
 * finished and succeeded all the same). */
void lg_cmd_catch_stop (void);
int lg_cmd_stopped (void);
void lg_cmd_die_if_stopped (void);

/* Prints "Usage: ..." for a bad invocation and returns LG_EXIT_USAGE. */
int lg_usage_error (const char *cmd, const char *fmt, ...)
    __attribute__ ((format (printf, 2, 3)));

#endif
