/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* lungate info: what a LUN is and what it supports.  Main thread (plus
 * the session's loop thread). */
#include <config.h>

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <errno.h>

#include "cmd/cmd.h"
#include "dev/file.h"
#include "dev/open.h"
#include "dev/volume.h"
#include "util/fmt.h"
#include "util/log.h"

static const char usage[]
    = "Usage: lungate info [OPTIONS] iscsi://HOST[:PORT]/TARGET-IQN/LUN | "
      "FILE\n"
      "\n"
      "Show a LUN's identity (INQUIRY), geometry (READ CAPACITY 16, Block\n"
      "Limits VPD), thin provisioning, write protection and the commands\n"
      "lungate will use on it.\n"
      "\n"
      "Options:\n"
      "  --json                       one JSON object on standard output\n"
      "  -h, --help                   this help\n"
      "\n";

/* The commands lungate uses, and whether the LUN says it has them: fills
 * names (room for LG_MAX_SUPPORTS) and returns how many. */
#define LG_MAX_SUPPORTS 6
static char lbas_refused[200];
static size_t
supports (const struct lg_lun_info *li, const char *names[LG_MAX_SUPPORTS])
{
  size_t n = 0;

  names[n++] = "read16";
  names[n++] = "write16";
  names[n++] = "sync-cache16";
  if (li->lbpu)
    names[n++] = "unmap";
  if (li->lbpws)
    names[n++] = "write-same16-unmap";
  if (li->lbpme && lbas_refused[0] == '\0')
    names[n++] = "get-lba-status";
  return n;
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
  const char *sup[LG_MAX_SUPPORTS], *strength;
  char hs[32], why[160];
  size_t n;

  printf ("url: %s\n", url);
  printf ("vendor: %s\nproduct: %s\nrevision: %s\n", li->vendor, li->product,
          li->revision);
  printf ("device-type: %s (0x%02x)\n", li->type_name, li->device_type);
  printf ("removable: %s\n", yesno (li->removable));
  strength = lg_lun_ident_strength (li, why, sizeof why);
  printf ("identity: %s (%s)%s\n", strength, why,
          strcmp (strength, "unique") == 0
              ? ""
              : "; a writer also reads back blocks it wrote after every "
                "login");
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
    printf ("max-transfer-length: not reported (lungate sends at most %u "
            "blocks a command)\n",
            lg_target_max_blocks (li));
  printf ("optimal-transfer-length: %u blocks\n", li->opt_xfer_blocks);
  printf ("optimal-transfer-granularity: %u blocks\n", li->opt_gran_blocks);
  printf ("thin-provisioning: lbpme=%d lbprz=%d lbpu=%d lbpws=%d "
          "lbpws10=%d\n",
          li->lbpme, li->lbprz, li->lbpu, li->lbpws, li->lbpws10);
  if (li->lbpu)
    printf ("max-unmap: %u blocks, %u descriptors\n", li->max_unmap_blocks,
            li->max_unmap_desc);
  printf ("write-protected: %s\n", yesno (li->write_protected));
  printf ("volatile-write-cache: %s\n", yesno (li->volatile_cache));
  n = supports (li, sup);
  printf ("supports:");
  for (size_t i = 0; i < n; i++)
    printf (" %s", sup[i]);
  printf ("\n");
  if (lbas_refused[0])
    printf ("refused: get-lba-status (advertised by LBPME: %s; maps show "
            "no holes)\n",
            lbas_refused);
}

static void
print_json (const char *url, const struct lg_lun_info *li)
{
  char why[160];
  const char *sup[LG_MAX_SUPPORTS];
  size_t n;

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
  printf (", \"device_type_code\": %d, \"removable\": %s", li->device_type,
          tf (li->removable));
  printf (", \"identity\": ");
  lg_json_string (stdout, lg_lun_ident_strength (li, why, sizeof why));
  if (!li->is_disk)
    return;
  printf (", \"medium\": %s", tf (!li->no_medium));
  if (li->no_medium)
    return;
  printf (", \"size\": %" PRIu64 ", \"blocks\": %" PRIu64
          ", \"logical_block_size\": %u, \"physical_block_size\": %u"
          ", \"max_transfer_blocks\": %u, \"optimal_transfer_blocks\": %u"
          ", \"optimal_transfer_granularity_blocks\": %u"
          ", \"lbpme\": %s, \"lbprz\": %s, \"lbpu\": %s, \"lbpws\": %s"
          ", \"lbpws10\": %s",
          li->size, li->nblocks, li->block_size, li->phys_block_size,
          li->max_xfer_blocks, li->opt_xfer_blocks, li->opt_gran_blocks,
          tf (li->lbpme), tf (li->lbprz), tf (li->lbpu), tf (li->lbpws),
          tf (li->lbpws10));
  if (li->lbpu)
    printf (", \"max_unmap_blocks\": %u, \"max_unmap_descriptors\": %u",
            li->max_unmap_blocks, li->max_unmap_desc);
  else
    printf (", \"max_unmap_blocks\": null, \"max_unmap_descriptors\": null");
  printf (", \"write_protected\": %s, \"volatile_write_cache\": %s"
          ", \"supports\": [",
          tf (li->write_protected), tf (li->volatile_cache));
  n = supports (li, sup);
  for (size_t i = 0; i < n; i++) {
    printf ("%s", i ? ", " : "");
    lg_json_string (stdout, sup[i]);
  }
  printf ("], \"refused\": {");
  if (lbas_refused[0]) {
    printf ("\"get-lba-status\": ");
    lg_json_string (stdout, lbas_refused);
  }
  printf ("}");
  /* The caller adds the volume fields and closes the object. */
}

/* Who holds the LUN: its persistent reservation and registered keys. */
static void
print_reservation (struct lg_tgt *t, int lun, bool json)
{
  struct lg_pr_state st;
  char err[512], line[1024];

  if (lg_target_reservation (t, lun, &st, err, sizeof err) < 0) {
    lg_warn ("%s", err);
    return;
  }
  if (!json) {
    lg_pr_describe (&st, line, sizeof line);
    printf ("reservation: %s\n", line);
    return;
  }
  printf (", \"reservation\": ");
  lg_pr_print_json (stdout, &st);
}

/* The owner record (dev/volume.h): who serves the volume where the LUN
 * has no persistent reservations. */
static void
print_owner (struct lg_dev *d, bool json)
{
  struct lg_owner_rec r;
  char who[200];

  if (lg_owner_read (d, &r) < 0)
    return;
  if (r.valid)
    lg_owner_describe (&r, who, sizeof who);
  if (!json) {
    printf ("volume-owner: %s\n", r.valid ? who : "none");
    return;
  }
  printf (", \"volume_owner\": ");
  if (!r.valid) {
    printf ("null");
    return;
  }
  printf ("{\"host\": ");
  lg_json_string (stdout, r.host);
  printf (", \"pid\": %" PRIu32 ", \"since\": %" PRIu64
          ", \"heartbeat\": %" PRIu64 ", \"key\": \"0x%016" PRIx64 "\"}",
          r.pid, r.since, r.heartbeat, r.key);
}

/* The lungate header, if the LUN holds one: never a secret, only what
 * anyone with the LUN can read. */
static void
print_volume (struct lg_dev *d, bool json)
{
  struct lg_volume_info h;
  char err[512];
  int r;

  r = lg_dev_size (d) < LG_VOLUME_MIN_SIZE
      ? (errno = ENOENT, -1)
      : lg_volume_describe (d, &h, err, sizeof err);
  if (r < 0 && errno == ENOENT) {
    uint8_t b0[LG_HDR_SIZE];
    bool mark = lg_dev_size (d) >= sizeof b0
        && lg_dev_pread (d, b0, sizeof b0, 0) == 0
        && lg_header_is_format_mark (b0);

    if (json)
      printf (", \"lungate_volume\": false%s",
              mark ? ", \"format_interrupted\": true" : "");
    else
      printf ("lungate-volume: no%s\n",
              mark ? " (a format was interrupted: lungate format starts over)"
                   : "");
    return;
  }
  if (r < 0) {
    /* A header that does not parse is damage; one that could not be read
     * (the target failed the read) says nothing of the volume. */
    const char *what = errno == EINVAL ? "damaged" : "unknown";

    if (json) {
      printf (", \"lungate_volume\": \"%s\", \"volume_error\": ", what);
      lg_json_string (stdout, err);
    }
    else
      printf ("lungate-volume: %s: %s\n", what, err);
    return;
  }
  if (json) {
    printf (", \"lungate_volume\": true, \"volume_mode\": \"%s\", "
            "\"volume_uuid\": \"%s\", \"volume_lazy\": %s, "
            "\"volume_dirty\": %s, "
            "\"volume_units\": %" PRIu64 ", \"volume_unit_size\": %d"
            ", \"volume_size\": %" PRIu64
            ", \"volume_metadata_offset\": %" PRIu64
            ", \"volume_metadata_size\": %" PRIu64
            ", \"volume_data_offset\": %" PRIu64
            ", \"volume_header_seq\": %" PRIu64 ", \"volume_key_slots\": [",
            h.mode == LG_MODE_AEAD ? "aead" : "mac", h.uuid,
            tf (h.flags & LG_HDR_FLAG_LAZY), tf (h.flags & LG_HDR_FLAG_DIRTY),
            h.nunits, LG_UNIT_SIZE, h.nunits * LG_UNIT_SIZE, h.md_offset,
            h.md_size, h.data_offset, h.seq);
    for (int i = 0, n = 0; i < LG_KEYSLOTS; i++)
      if (h.slots[i].kind != LG_SLOT_EMPTY)
        printf ("%s{\"slot\": %d, \"kind\": \"%s\"}", n++ ? ", " : "", i,
                h.slots[i].kind == LG_SLOT_PASSPHRASE ? "passphrase"
                                                      : "key-file");
    printf ("]");
    print_owner (d, true);
  }
  else {
    printf ("lungate-volume: yes\n");
    printf ("volume-mode: %s%s\n", h.mode == LG_MODE_AEAD ? "aead" : "mac",
            (h.flags & LG_HDR_FLAG_LAZY) ? " (lazy)" : "");
    printf ("volume-uuid: %s\n", h.uuid);
    printf ("volume-size: %" PRIu64 " bytes (%" PRIu64 " units of %d)\n",
            h.nunits * LG_UNIT_SIZE, h.nunits, LG_UNIT_SIZE);
    printf ("volume-metadata: %" PRIu64 "+%" PRIu64 "\n", h.md_offset,
            h.md_size);
    printf ("volume-data-offset: %" PRIu64 "\n", h.data_offset);
    printf ("volume-header-seq: %" PRIu64 "\n", h.seq);
    printf ("volume-state: %s\n",
            (h.flags & LG_HDR_FLAG_DIRTY)
                ? "dirty (open, or not closed cleanly)"
                : "clean");
    printf ("volume-key-slots:");
    for (int i = 0; i < LG_KEYSLOTS; i++)
      if (h.slots[i].kind != LG_SLOT_EMPTY)
        printf (" %d:%s", i,
                h.slots[i].kind == LG_SLOT_PASSPHRASE ? "passphrase"
                                                      : "key-file");
    printf ("\n");
    print_owner (d, false);
  }
}

static void
print_lun_volume (struct lg_tgt *t, int lun, bool json)
{
  char err[512];
  struct lg_dev *d = lg_target_open_lun (t, lun, LG_OPEN_READ_ONLY, NULL, 0,
                                         NULL, NULL, err, sizeof err);

  if (d == NULL)
    return;
  print_volume (d, json);
  lg_dev_close (d);
}

/* A file or a block device: its size, and the volume it holds. */
static int
info_file (const char *path, bool json)
{
  char err[512], hs[32];
  struct lg_dev *d = lg_file_dev_open (path, true, err, sizeof err);

  if (d == NULL) {
    lg_error ("%s", err);
    return LG_EXIT_FAIL;
  }
  if (json) {
    printf ("{\"file\": ");
    lg_json_string (stdout, path);
    printf (", \"size\": %" PRIu64, lg_dev_size (d));
  }
  else
    printf ("file: %s\nsize: %" PRIu64 " bytes (%s)\n", path, lg_dev_size (d),
            lg_human_size (lg_dev_size (d), hs, sizeof hs));
  print_volume (d, json);
  if (json)
    printf ("}\n");
  lg_dev_close (d);
  return LG_EXIT_OK;
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
  static const struct lg_cmd_spec spec = {
    "info",          opts, NULL, usage, LG_HELP_LOGIN, 1, "a LUN URL or a file",
    lg_cmd_set_flag,
  };
  struct lg_login login;
  struct lg_url u = { 0 };
  const char *path = NULL; /* a file, not a LUN URL */
  struct lg_tgt *t = NULL;
  struct lg_lun_info li;
  char err[512], url[512];
  bool json = false;
  int status = LG_EXIT_FAIL;

  if (lg_login_init (&login) < 0)
    return LG_EXIT_FAIL;
  if ((status = lg_cmd_parse (&spec, argc, argv, &login, NULL, &json)) >= 0)
    goto out;
  if ((status = lg_cmd_prepare_lun ("info", argv[optind], &u, &login, &path))
      != 0)
    goto out;
  status = LG_EXIT_FAIL;
  if (path) {
    status = info_file (path, json);
    goto out;
  }
  lg_url_format (&u, url, sizeof url);

  t = lg_target_open (&login, u.portal, u.target, 1, err, sizeof err);
  if (t == NULL) {
    lg_error ("%s", err);
    goto out;
  }
  if (lg_target_probe (t, u.lun, &li, lbas_refused, sizeof lbas_refused, err,
                       sizeof err)
      < 0) {
    lg_error ("%s", err);
    goto out;
  }
  if (json)
    print_json (url, &li);
  else
    print_text (url, &li);
  if (li.is_disk && !li.no_medium) {
    print_reservation (t, u.lun, json);
    print_lun_volume (t, u.lun, json);
  }
  if (json)
    printf ("}\n");
  status = LG_EXIT_OK;

out:
  lg_target_close (t);
  lg_url_clear (&u);
  lg_login_clear (&login);
  return status;
}
