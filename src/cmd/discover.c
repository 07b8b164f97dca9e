/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* lungate discover: SendTargets on a discovery session, then a login to
 * each target for REPORT LUNS, INQUIRY and READ CAPACITY(16).  Main
 * thread (plus the sessions' loop threads). */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd/cmd.h"
#include "dev/open.h"
#include "util/fmt.h"
#include "util/log.h"

static const char usage[]
    = "Usage: lungate discover [OPTIONS] iscsi://HOST[:PORT][/TARGET-IQN]\n"
      "\n"
      "List the targets a portal offers (SendTargets discovery) and, for "
      "each,\n"
      "its LUNs with their type, size and block size.  A target URL lists "
      "that\n"
      "target only.\n"
      "\n"
      "Options:\n"
      "  --json                       one JSON object on standard output\n"
      "  -h, --help                   this help\n"
      "\n";

static void
print_lun_text (const struct lg_lun_info *li, const struct lg_pr_state *st)
{
  char line[1024];

  char hs[32];

  printf ("  lun %d  %s", li->lun, li->type_name);
  if (li->is_disk && li->no_medium)
    printf ("  (no medium)");
  else if (li->is_disk)
    printf ("  %s (%" PRIu64 " bytes, %" PRIu64 " x %u-byte blocks)",
            lg_human_size (li->size, hs, sizeof hs), li->size, li->nblocks,
            li->block_size);
  printf ("  %s %s\n", li->vendor, li->product);
  if (st->supported && (st->reserved || st->nkeys)) {
    lg_pr_describe (st, line, sizeof line);
    printf ("    reservation: %s\n", line);
  }
}

static void
print_lun_json (const struct lg_lun_info *li, const struct lg_pr_state *st,
                bool first)
{
  printf ("%s{\"lun\": %d, \"type\": ", first ? "" : ", ", li->lun);
  lg_json_string (stdout, li->type_name);
  printf (", \"vendor\": ");
  lg_json_string (stdout, li->vendor);
  printf (", \"product\": ");
  lg_json_string (stdout, li->product);
  if (li->is_disk && !li->no_medium)
    printf (", \"size\": %" PRIu64 ", \"blocks\": %" PRIu64
            ", \"block_size\": %u",
            li->size, li->nblocks, li->block_size);
  if (li->is_disk && !li->no_medium) {
    printf (", \"reservation\": ");
    lg_pr_print_json (stdout, st);
  }
  printf ("}");
}

/* Lists the LUNs of one target.  -1 when the login or REPORT LUNS
 * failed (already reported). */
static int
list_target (const struct lg_login *login, const char *portal,
             const struct lg_target *t, bool json)
{
  struct lg_tgt *p;
  char err[512];
  int *luns = NULL;
  size_t n = 0;
  int r = -1;
  bool first = true;

  if (json) {
    printf ("{\"name\": ");
    lg_json_string (stdout, t->name);
    printf (", \"portals\": [");
    for (size_t i = 0; i < t->nportals; i++) {
      printf ("%s", i ? ", " : "");
      lg_json_string (stdout, t->portals[i]);
    }
    printf ("], \"luns\": [");
  }
  else {
    printf ("%s\n", t->name);
    for (size_t i = 0; i < t->nportals; i++)
      printf ("  portal %s\n", t->portals[i]);
  }

  err[0] = '\0';
  p = lg_target_open (login, portal, t->name, 1, err, sizeof err);
  if (p == NULL) {
    lg_error ("%s", err);
    goto out;
  }
  if (lg_target_luns (p, NULL, &luns, &n, err, sizeof err) < 0) {
    lg_error ("%s", err);
    goto out;
  }
  err[0] = '\0';
  r = 0;
  for (size_t i = 0; i < n; i++) {
    struct lg_lun_info li;
    struct lg_pr_state st = { 0 };

    if (lg_target_probe (p, luns[i], &li, NULL, 0, err, sizeof err) < 0) {
      lg_error ("%s", err);
      r = -1;
      continue;
    }
    if (li.is_disk && !li.no_medium
        && lg_target_reservation (p, luns[i], &st, err, sizeof err) < 0)
      lg_warn ("%s", err);
    if (json)
      print_lun_json (&li, &st, first);
    else
      print_lun_text (&li, &st);
    first = false;
  }

out:
  if (json && r < 0 && err[0]) {
    /* A target that cannot be listed says why, in the object. */
    printf ("], \"error\": ");
    lg_json_string (stdout, err);
    printf ("}");
  }
  else if (json)
    printf ("]}");
  free (luns);
  lg_target_close (p);
  return r;
}

int
lg_cmd_discover (int argc, char **argv)
{
  static const struct option opts[] = {
    LG_LOGIN_OPTIONS,
    { "json", no_argument, NULL, OPT_JSON },
    { "help", no_argument, NULL, 'h' },
    { NULL, 0, NULL, 0 },
  };
  static const struct lg_cmd_spec spec = {
    "discover",    opts, NULL,           usage,
    LG_HELP_LOGIN, 1,    "a portal URL", lg_cmd_set_flag,
  };
  struct lg_login login;
  struct lg_url u = { 0 };
  struct lg_target_list *targets;
  char err[512];
  bool json = false;
  int status = LG_EXIT_FAIL, shown = 0;

  if (lg_login_init (&login) < 0)
    return LG_EXIT_FAIL;
  if ((status = lg_cmd_parse (&spec, argc, argv, &login, NULL, &json)) >= 0)
    goto out;
  if ((status = lg_cmd_prepare (argv[optind], &u, &login)) != 0)
    goto out;
  status = LG_EXIT_FAIL;
  if (u.kind == LG_URL_LUN) {
    lg_error ("discover takes a portal or target URL, not a LUN: use "
              "'lungate info %s'",
              argv[optind]);
    status = LG_EXIT_USAGE;
    goto out;
  }

  targets = lg_discover (&login, u.portal, err, sizeof err);
  if (targets == NULL) {
    lg_error ("%s", err);
    goto out;
  }

  status = LG_EXIT_OK;
  if (json) {
    printf ("{\"portal\": ");
    lg_json_string (stdout, u.portal);
    printf (", \"targets\": [");
  }
  for (size_t i = 0; i < targets->n; i++) {
    const struct lg_target *t = &targets->t[i];

    if (u.kind == LG_URL_TARGET && strcmp (t->name, u.target) != 0)
      continue;
    if (json && shown)
      printf (", ");
    if (list_target (&login, u.portal, t, json) < 0)
      status = LG_EXIT_FAIL;
    shown++;
  }
  if (json)
    printf ("]}\n");
  if (shown == 0) {
    if (u.kind == LG_URL_TARGET)
      lg_error ("%s: target %s: target not found by discovery", u.portal,
                u.target);
    else
      lg_error ("%s: the portal offers no targets to this initiator", u.portal);
    status = LG_EXIT_FAIL;
  }
  lg_target_list_free (targets);

out:
  lg_url_clear (&u);
  lg_login_clear (&login);
  return status;
}
