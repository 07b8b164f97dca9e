/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The `lungate' command: global options, then a subcommand from the
 * table.  Main thread. */
#include <config.h>

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>

#include <sodium.h>

#include "cmd/cmd.h"
#include "util/log.h"
#include "util/progress.h"

static const struct {
  const char *name;
  int (*fn) (int argc, char **argv);
  const char *summary;
} commands[] = {
  { "discover", lg_cmd_discover, "list a portal's targets and their LUNs" },
  { "info", lg_cmd_info, "show what a LUN is and what it supports" },
  { "format", lg_cmd_format, "make a LUN an encrypted or MAC'd volume" },
  { "verify", lg_cmd_verify, "authenticate every unit of a volume" },
  { "key", lg_cmd_key,
    "list, test, add, change or remove the key slots; back up or restore "
    "the header" },
  { "mount", lg_cmd_mount, "mount LUNs as files (FUSE)" },
  { "bench", lg_cmd_bench, "measure a LUN, plain and through the crypt layer" },
  { "status", lg_cmd_status, "what this host mounts and serves" },
  { "umount", lg_cmd_umount, "unmount a mount and wait for its daemon" },
};

static void
usage (FILE *f)
{
  fprintf (f,
           "Usage: lungate [-v|-q] [--progress-json] COMMAND [OPTIONS] URL\n"
           "       lungate --help | --version\n"
           "\n"
           "lungate logs in to iSCSI targets from userspace and serves their\n"
           "LUNs.  URLs are iscsi://[USER@]HOST[:PORT][/TARGET-IQN[/LUN]].\n"
           "\n"
           "Commands:\n");
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
    fprintf (f, "  %-10s %s\n", commands[i].name, commands[i].summary);
  fprintf (f,
           "\n"
           "Options:\n"
           "  -v, --verbose   debug messages (twice: also every SCSI command)\n"
           "  -q, --quiet     errors only\n"
           "  --progress-json progress lines as JSON objects on stderr\n"
           "  -h, --help      this help\n"
           "  -V, --version   versions of lungate and its libraries\n"
           "\n"
           "'lungate COMMAND --help' describes a command; man lungate.\n");
}

static void
version (void)
{
  printf ("lungate %s\n", PACKAGE_VERSION);
  printf ("libiscsi %s\n", LG_LIBISCSI_VERSION);
  printf ("nbdkit %s\n", LG_NBDKIT_VERSION);
  printf ("libfuse %s\n", LG_FUSE_VERSION);
  printf ("libsodium %s\n", sodium_version_string ());
#ifdef LG_TEST_HOOKS
  printf ("test hooks: on (LUNGATE_TEST_*, LUNGATE_BENCH_NO_BARRIERS and "
          "LUNGATE_NO_RELAY are honoured: a test build, not for "
          "production)\n");
#endif
}

int
main (int argc, char **argv)
{
  static const struct option opts[] = {
    { "verbose", no_argument, NULL, 'v' },
    { "quiet", no_argument, NULL, 'q' },
    { "progress-json", no_argument, NULL, OPT_PROGRESS_JSON },
    { "help", no_argument, NULL, 'h' },
    { "version", no_argument, NULL, 'V' },
    { NULL, 0, NULL, 0 },
  };
  int c, verbose = 0, status;

  /* Secrets pass through this process: keep them out of core dumps and
   * away from ptrace by other users. */
  prctl (PR_SET_DUMPABLE, 0, 0, 0, 0);
  if (sodium_init () < 0) {
    fprintf (stderr, "lungate: cannot initialise libsodium\n");
    return LG_EXIT_FAIL;
  }

  while ((c = getopt_long (argc, argv, "+vqhV", opts, NULL)) != -1) {
    switch (c) {
    case 'v':
      verbose++;
      break;
    case 'q':
      verbose = -1;
      break;
    case OPT_PROGRESS_JSON:
      lg_progress_set_json (true);
      break;
    case 'h':
      usage (stdout);
      return LG_EXIT_OK;
    case 'V':
      version ();
      return LG_EXIT_OK;
    default:
      usage (stderr);
      return LG_EXIT_USAGE;
    }
  }
  lg_log_set_level (verbose < 0        ? LG_LOG_ERROR
                        : verbose == 0 ? LG_LOG_INFO
                        : verbose == 1 ? LG_LOG_DEBUG
                                       : LG_LOG_TRACE);
  if (optind >= argc) {
    usage (stderr);
    return LG_EXIT_USAGE;
  }
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
    if (strcmp (argv[optind], commands[i].name) == 0) {
      argv += optind;
      argc -= optind;
      optind = 0; /* glibc: reinitialise getopt for the subcommand */
      status = commands[i].fn (argc, argv);
      if (status != LG_EXIT_OK)
        lg_cmd_die_if_stopped (); /* a stop it cleaned up after */
      return status;
    }
  fprintf (stderr, "lungate: unknown command '%s'\nTry 'lungate --help'.\n",
           argv[optind]);
  return LG_EXIT_USAGE;
}
