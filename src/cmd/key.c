/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* lungate key list|add|remove: the key slots of a lungate volume.  Main
 * thread. */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "util/fmt.h"
#include "cmd/cmd.h"
#include "crypt/crypt.h"
#include "crypt/header.h"
#include "crypt/keychange.h"
#include "dev/dev.h"
#include "util/log.h"
#include "util/secret.h"

enum {
  OPT_NEW_KEY_FILE = OPT_LOGIN_LAST + 1,
  OPT_NEW_PASSPHRASE_FILE,
  OPT_SLOT,
  OPT_FORCE,
};

static const char usage[]
    = "Usage: lungate key list [OPTIONS] URL\n"
      "       lungate key add [OPTIONS] (--key-file F | --passphrase-file F)\n"
      "                       (--new-key-file F | --new-passphrase-file F) "
      "[--slot N] URL\n"
      "       lungate key remove [OPTIONS] (--key-file F | --passphrase-file "
      "F)\n"
      "                       --slot N [--force] URL\n"
      "\n"
      "Manage the key slots of a lungate volume (up to 8, each wrapping the\n"
      "volume's master key).  list needs no key.  add and remove need a key\n"
      "that opens the volume.  Removing the last slot makes the volume\n"
      "unreadable forever and needs --force.  URL is a LUN URL or a file.\n"
      "\n"
      "Options:\n"
      "  --new-key-file FILE          add: the new 32-byte key file\n"
      "  --new-passphrase-file FILE   add: the new passphrase\n"
      "  --slot N                     add: the slot to use (default: the "
      "first\n"
      "                               free one); remove: the slot to empty\n"
      "  --force                      remove: even the last slot\n"
      "  --takeover                   the gateway holding the LUN is gone:\n"
      "                               preempt its reservation\n"
      "  -h, --help                   this help\n"
      "\n";

static const char *
kind_name (uint32_t k)
{
  return k == LG_SLOT_PASSPHRASE ? "passphrase"
      : k == LG_SLOT_KEYFILE     ? "key-file"
                                 : "empty";
}

int
lg_cmd_key (int argc, char **argv)
{
  static const struct option opts[] = {
    LG_LOGIN_OPTIONS,
    LG_CLAIM_OPTIONS,
    LG_KEY_OPTIONS,
    { "new-key-file", required_argument, NULL, OPT_NEW_KEY_FILE },
    { "new-passphrase-file", required_argument, NULL, OPT_NEW_PASSPHRASE_FILE },
    { "slot", required_argument, NULL, OPT_SLOT },
    { "force", no_argument, NULL, OPT_FORCE },
    { "help", no_argument, NULL, 'h' },
    { NULL, 0, NULL, 0 },
  };
  struct lg_login login;
  struct lg_cmd_keys keys = { 0 };
  uint8_t *new_key = NULL;
  char *new_pass = NULL;
  struct lg_url u = { 0 };
  const char *path = NULL; /* a file, not a LUN URL */
  struct lg_dev *raw = NULL;
  struct lg_header h;
  struct lg_keysrc ks;
  uint8_t *mk = NULL;
  char err[512];
  const char *verb;
  long slot = -1;
  bool force = false;
  struct lg_key_change kc = { 0 };
  int c, status = LG_EXIT_FAIL;

  if (lg_login_init (&login) < 0)
    return LG_EXIT_FAIL;
  while ((c = getopt_long (argc, argv, "h", opts, NULL)) != -1) {
    int r = lg_cmd_option (&login, &keys, c, optarg);

    if (r < 0)
      goto out;
    if (r > 0)
      continue;
    switch (c) {
    case OPT_NEW_KEY_FILE:
      if (new_key)
        sodium_free (new_key);
      new_key = lg_keyfile_read (optarg);
      if (new_key == NULL)
        goto out;
      break;
    case OPT_NEW_PASSPHRASE_FILE:
      lg_secret_free (new_pass);
      new_pass = lg_secret_from_file (optarg);
      if (new_pass == NULL)
        goto out;
      break;
    case OPT_SLOT:
      if (lg_parse_long (optarg, 10, 0, LG_KEYSLOTS - 1, &slot) < 0) {
        lg_error ("--slot: '%s': want 0 to %d", optarg, LG_KEYSLOTS - 1);
        goto out;
      }
      break;
    case OPT_FORCE:
      force = true;
      break;
    case 'h':
      printf ("%s%s%s", usage, lg_key_help, lg_login_help);
      status = LG_EXIT_OK;
      goto out;
    default:
      status = lg_usage_error ("key", "unknown option");
      goto out;
    }
  }
  if (optind >= argc) {
    status = lg_usage_error ("key", "expected list, add or remove");
    goto out;
  }
  verb = argv[optind++];
  if (strcmp (verb, "list") && strcmp (verb, "add")
      && strcmp (verb, "remove")) {
    status = lg_usage_error ("key",
                             "unknown action '%s': want list, add or "
                             "remove",
                             verb);
    goto out;
  }
  if ((status
       = lg_cmd_positionals ("key", argc, argv, 1, "a LUN URL or a file"))
      != 0)
    goto out;
  if ((status = lg_cmd_prepare_lun ("key", argv[optind], &u, &login, &path))
      != 0)
    goto out;
  status = LG_EXIT_FAIL;
  raw = lg_cmd_open (&u, path, &login, 1, strcmp (verb, "list") == 0);
  if (raw == NULL)
    goto out;

  if (strcmp (verb, "list") == 0) {
    if (lg_header_read (raw, &h, err, sizeof err) < 0) {
      lg_error ("%s", errno == ENOENT ? "no lungate header on this LUN" : err);
      goto out;
    }
    for (int i = 0; i < LG_KEYSLOTS; i++) {
      if (h.slots[i].kind == LG_SLOT_PASSPHRASE)
        printf ("slot %d: passphrase (Argon2id, opslimit %" PRIu64
                ", memlimit %" PRIu64 " MiB)\n",
                i, h.slots[i].opslimit, h.slots[i].memlimit >> 20);
      else
        printf ("slot %d: %s\n", i, kind_name (h.slots[i].kind));
    }
    status = LG_EXIT_OK;
    goto out;
  }

  if (keys.keyfile == NULL && keys.passphrase == NULL) {
    status = lg_usage_error ("key",
                             "give a key that opens the volume "
                             "(--key-file or --passphrase-file)");
    goto out;
  }
  ks.keyfile = keys.keyfile;
  ks.passphrase = keys.passphrase;
  mk = sodium_malloc (LG_KEY_BYTES);
  if (mk == NULL)
    goto out;
  if (lg_crypt_unlock (raw, &ks, &h, mk, err, sizeof err) < 0) {
    lg_error ("%s", err);
    goto out;
  }

  if (strcmp (verb, "add") == 0 && (new_key == NULL) == (new_pass == NULL)) {
    status = lg_usage_error ("key",
                             "add: give one of --new-key-file and "
                             "--new-passphrase-file");
    goto out;
  }
  if (strcmp (verb, "remove") == 0 && slot < 0) {
    status = lg_usage_error ("key", "remove: give --slot N");
    goto out;
  }
  kc.add = strcmp (verb, "add") == 0;
  kc.slot = slot;
  kc.force = force;
  kc.mk = mk;
  kc.new_key = new_key;
  kc.new_pass = new_pass;
  kc.name = raw->name;
  if (lg_header_update (raw, lg_key_change, &kc, NULL, err, sizeof err) < 0) {
    if (!kc.said)
      lg_error ("%s: updating the header: %s", raw->name, err);
    goto out;
  }
  slot = kc.done;
  printf ("%s: key slot %ld %s\n", raw->name, slot,
          strcmp (verb, "add") == 0 ? "added" : "removed");
  status = LG_EXIT_OK;

out:
  sodium_memzero (&kc, sizeof kc);
  if (mk)
    sodium_free (mk);
  if (new_key)
    sodium_free (new_key);
  lg_secret_free (new_pass);
  lg_dev_close (raw);
  lg_cmd_keys_clear (&keys);
  lg_url_clear (&u);
  lg_login_clear (&login);
  return status;
}
