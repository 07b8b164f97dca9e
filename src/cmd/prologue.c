/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The commands' prologue from their table entries (cmd.h lg_cmd_parse).
 * Main thread only. */
#include <config.h>

#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "cmd/cmd.h"

int
lg_cmd_set_flag (void *args, int c, const char *arg)
{
  (void) c;
  (void) arg;
  *(bool *) args = true;
  return 0;
}

int
lg_cmd_parse (const struct lg_cmd_spec *spec, int argc, char **argv,
              struct lg_login *login, struct lg_cmd_keys *keys, void *args)
{
  char shortopts[32];
  int c;

  snprintf (shortopts, sizeof shortopts, "%s%s", LG_CMD_SHORTOPTS,
            spec->shortopts ? spec->shortopts : "");
  while ((c = getopt_long (argc, argv, shortopts, spec->opts, NULL)) != -1) {
    int r = 0;

    if (c == 'h') {
      printf ("%s%s%s", spec->usage,
              spec->helps & LG_HELP_KEYS ? lg_key_help : "",
              spec->helps & LG_HELP_LOGIN ? lg_login_help : "");
      return LG_EXIT_OK;
    }
    if (login)
      r = lg_cmd_option (login, keys, c, optarg);
    else if (c == 'v' || c == 'q') {
      lg_cmd_verbosity (c);
      r = 1;
    }
    if (r < 0)
      return -r;
    if (r > 0)
      continue;
    r = c == '?' || c == ':' || spec->option == NULL
        ? -1
        : spec->option (args, c, optarg);
    if (r < 0)
      return lg_usage_error (spec->name, "unknown option");
    if (r > 0)
      return r;
  }
  if (spec->npos < 0)
    return -1;
  if (argc - optind > spec->npos)
    return lg_usage_error (spec->name, "unexpected argument '%s'",
                           argv[optind + spec->npos]);
  if (argc - optind < spec->npos)
    return lg_usage_error (spec->name, "expected %s", spec->what);
  return -1;
}
