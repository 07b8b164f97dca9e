/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* lungate info: what a LUN is and what it supports.  Main thread (plus
 * the session's loop thread). */
#include <config.h>

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "cmd/cmd.h"
#include "iscsi/lun.h"
#include "iscsi/pool.h"
#include "util/fmt.h"
#include "util/log.h"

static const char usage[]
    = "Usage: lungate info [OPTIONS] iscsi://HOST[:PORT]/TARGET-IQN/LUN\n"
      "\n"
      "Show a LUN's identity (INQUIRY), geometry (READ CAPACITY 16, Block\n"
      "Limits VPD), thin provisioning, write protection and the commands\n"
      "lungate will use on it.\n"
      "\n"
      "Options:\n"
      "  --json                       one JSON object on standard output\n"
      "  -h, --help                   this help\n"
      "\n";

/* The commands lungate uses, and whether the LUN says it has them. */
static void
supports (const struct lg_lun_info *li, char *buf, size_t len)
{
  snprintf (buf, len, "read16 write16 sync-cache16%s%s%s",
            li->lbpu ? " unmap" : "", li->lbpws ? " write-same16-unmap" : "",
            li->lbpme ? " get-lba-status" : "");
}

static const char *
yesno (bool b)
{
  return b ? "yes" : "no";
}

static const char *
tf (bool b)
{
  return b ? "true" : "false";
}

static void
print_text (const char *url, const struct lg_lun_info *li)
{
  char hs[32], sup[128];

  printf ("url: %s\n", url);
  printf ("vendor: %s\nproduct: %s\nrevision: %s\n", li->vendor, li->product,
          li->revision);
  printf ("device-type: %s (0x%02x)\n", li->type_name, li->device_type);
  printf ("removable: %s\n", yesno (li->removable));
  if (!li->is_disk)
    return;
  if (li->no_medium) {
    printf ("medium: none\n");
    return;
  }
  printf ("size: %" PRIu64 " bytes (%s)\n", li->size,
          lg_human_size (li->size, hs, sizeof hs));
  printf ("blocks: %" PRIu64 "\n", li->nblocks);
  printf ("logical-block-size: %u\n", li->block_size);
  printf ("physical-block-size: %u\n", li->phys_block_size);
  if (li->max_xfer_blocks)
    printf ("max-transfer-length: %u blocks\n", li->max_xfer_blocks);
  else
    printf ("max-transfer-length: unlimited\n");
  printf ("optimal-transfer-length: %u blocks\n", li->opt_xfer_blocks);
  printf ("optimal-transfer-granularity: %u blocks\n", li->opt_gran_blocks);
  printf ("thin-provisioning: lbpme=%d lbprz=%d lbpu=%d lbpws=%d "
          "lbpws10=%d\n",
          li->lbpme, li->lbprz, li->lbpu, li->lbpws, li->lbpws10);
  if (li->lbpu)
    printf ("max-unmap: %u blocks, %u descriptors\n", li->max_unmap_blocks,
            li->max_unmap_desc);
  printf ("write-protected: %s\n", yesno (li->write_protected));
  supports (li, sup, sizeof sup);
  printf ("supports: %s\n", sup);
}

static void
print_json (const char *url, const struct lg_lun_info *li)
{
  char sup[128];

  printf ("{\"url\": ");
  lg_json_string (stdout, url);
  printf (", \"lun\": %d, \"vendor\": ", li->lun);
  lg_json_string (stdout, li->vendor);
  printf (", \"product\": ");
  lg_json_string (stdout, li->product);
  printf (", \"revision\": ");
  lg_json_string (stdout, li->revision);
  printf (", \"device_type\": ");
  lg_json_string (stdout, li->type_name);
  printf (", \"removable\": %s", tf (li->removable));
  if (li->is_disk && !li->no_medium) {
    supports (li, sup, sizeof sup);
    printf (", \"size\": %" PRIu64 ", \"blocks\": %" PRIu64
            ", \"logical_block_size\": %u, \"physical_block_size\": %u"
            ", \"max_transfer_blocks\": %u, \"optimal_transfer_blocks\": %u"
            ", \"lbpme\": %s, \"lbprz\": %s, \"lbpu\": %s, \"lbpws\": %s"
            ", \"write_protected\": %s, \"supports\": ",
            li->size, li->nblocks, li->block_size, li->phys_block_size,
            li->max_xfer_blocks, li->opt_xfer_blocks, tf (li->lbpme),
            tf (li->lbprz), tf (li->lbpu), tf (li->lbpws),
            tf (li->write_protected));
    lg_json_string (stdout, sup);
  }
  printf ("}\n");
}

int
lg_cmd_info (int argc, char **argv)
{
  static const struct option opts[] = {
    LG_LOGIN_OPTIONS,
    { "json", no_argument, NULL, OPT_JSON },
    { "help", no_argument, NULL, 'h' },
    { NULL, 0, NULL, 0 },
  };
  struct lg_login login;
  struct lg_url u = { 0 };
  struct lg_pool *p = NULL;
  struct lg_lun_info li;
  char err[512], url[512];
  bool json = false;
  int c, status = LG_EXIT_FAIL;

  if (lg_login_init (&login) < 0)
    return LG_EXIT_FAIL;
  while ((c = getopt_long (argc, argv, "+h", opts, NULL)) != -1) {
    int r = lg_login_option (&login, c, optarg);

    if (r < 0)
      goto out;
    if (r > 0)
      continue;
    switch (c) {
    case OPT_JSON:
      json = true;
      break;
    case 'h':
      printf ("%s%s", usage, lg_login_help);
      status = LG_EXIT_OK;
      goto out;
    default:
      status = lg_usage_error ("info", "unknown option");
      goto out;
    }
  }
  if (argc - optind != 1) {
    status = lg_usage_error ("info", "expected one LUN URL");
    goto out;
  }
  if (lg_cmd_prepare (argv[optind], &u, &login) < 0)
    goto out;
  if (u.kind != LG_URL_LUN) {
    lg_error ("invalid URL '%s': info needs a LUN URL "
              "(iscsi://HOST[:PORT]/TARGET-IQN/LUN)",
              argv[optind]);
    goto out;
  }
  lg_url_format (&u, url, sizeof url);

  p = lg_pool_open (&login, u.portal, u.target, 1, err, sizeof err);
  if (p == NULL) {
    lg_error ("%s", err);
    goto out;
  }
  if (lg_lun_probe (p, u.lun, &li, err, sizeof err) < 0) {
    lg_error ("%s", err);
    goto out;
  }
  if (json)
    print_json (url, &li);
  else
    print_text (url, &li);
  status = LG_EXIT_OK;

out:
  lg_pool_close (p);
  lg_url_clear (&u);
  lg_login_clear (&login);
  return status;
}
