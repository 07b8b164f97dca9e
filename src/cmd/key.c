/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* lungate key list|test|add|change|remove|backup|restore: the key slots
 * of a lungate volume, and a copy of its header.  Main thread. */
#include <config.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sodium.h>

#include "util/fmt.h"
#include "cmd/cmd.h"
#include "dev/dev.h"
#include "dev/volume.h"
#include "util/log.h"
#include "util/secret.h"

enum {
  OPT_NEW_KEY_FILE = OPT_LOGIN_LAST + 1,
  OPT_NEW_PASSPHRASE_FILE,
  OPT_NEW_PASSPHRASE_PROMPT,
  OPT_SLOT,
  OPT_FORCE,
  OPT_KEY_JSON,
  OPT_FILE,
};

static const char usage[]
    = "Usage: lungate key list [OPTIONS] [--key-file F | --passphrase-file F] "
      "URL\n"
      "       lungate key test [OPTIONS] (--key-file F | --passphrase-file F) "
      "URL\n"
      "       lungate key add [OPTIONS] (--key-file F | --passphrase-file F)\n"
      "                       (--new-key-file F | --new-passphrase-file F) "
      "[--slot N] URL\n"
      "       lungate key change [OPTIONS] (--key-file F | --passphrase-file "
      "F)\n"
      "                       (--new-key-file F | --new-passphrase-file F) "
      "URL\n"
      "       lungate key remove [OPTIONS] (--key-file F | --passphrase-file "
      "F)\n"
      "                       --slot N [--force] URL\n"
      "       lungate key backup [OPTIONS] --file FILE URL\n"
      "       lungate key restore [OPTIONS] (--key-file F | --passphrase-file "
      "F)\n"
      "                       --file FILE [--force] URL\n"
      "\n"
      "Manage the key slots of a lungate volume (up to 8, each wrapping the\n"
      "volume's master key).  list needs no key; given one, it marks the\n"
      "slot the key opens, and fails if it opens none.  test says which slot\n"
      "the key opens, and fails if none.  change puts the new key in the slot\n"
      "the key given opens, in one header update.  add, change and remove\n"
      "need a key that opens the volume.  Removing the last slot makes the "
      "volume\n"
      "unreadable forever and needs --force.  backup copies the header (its\n"
      "key slots with it) to a new file; restore puts it back, once the key\n"
      "given opens it, and marks the volume dirty; over another volume's\n"
      "header, or one it cannot read, it needs --force.  URL is a LUN URL\n"
      "or a file.\n"
      "\n"
      "Options:\n"
      "  --new-key-file FILE          add, change: the new 32-byte key file\n"
      "  --new-passphrase-file FILE   add, change: the new passphrase\n"
      "  --new-passphrase-prompt      add, change: ask for it on the "
      "terminal,\n"
      "                               twice (also with\n"
      "                               --new-passphrase-file - on one)\n"
      "  --slot N                     add: the slot to use (default: the "
      "first\n"
      "                               free one); remove: the slot to empty\n"
      "  --force                      remove: even the last slot;\n"
      "                               restore: over another volume\n"
      "  --file FILE                  backup: the file to create (not there\n"
      "                               yet); restore: the backup to put back\n"
      "  --json                       list: one JSON object (the UUID, each\n"
      "                               slot's kind, the slot the key opens)\n"
      "  --takeover                   the gateway holding the LUN is gone:\n"
      "                               preempt its reservation\n"
      "  -h, --help                   this help\n"
      "\n";

/* What the command line asks for. */
struct key_args {
  struct lg_login login;
  struct lg_cmd_keys keys;
  uint8_t *new_key;
  char *new_pass;
  bool new_prompt; /* ask for new_pass (twice) */
  struct lg_url u;
  const char *path; /* a file, not a LUN URL */
  const char *verb; /* list, test, add, change, remove, backup, restore */
  const char *file; /* backup, restore: --file */
  uint8_t backup[LG_HDR_SIZE]; /* restore: what the file holds */
  long slot;
  bool force;
  bool json; /* list: one JSON object */
};

/* The actions that take a new key. */
static bool
new_key_wanted (const char *verb)
{
  return strcmp (verb, "add") == 0 || strcmp (verb, "change") == 0;
}

/* add, change: the new passphrase, asked for twice. */
static int
ask_new (struct key_args *a, const char *name)
{
  char prompt[512];

  if (!new_key_wanted (a->verb) || !a->new_prompt || a->new_pass)
    return 0;
  snprintf (prompt, sizeof prompt, "New passphrase for %s: ", name);
  a->new_pass = lg_secret_prompt_twice (prompt, "Verify passphrase: ");
  return a->new_pass ? 0 : -1;
}

/* key's own options (lg_cmd_spec.option). */
static int
key_option (void *args, int c, const char *arg)
{
  struct key_args *a = args;

  switch (c) {
  case OPT_NEW_KEY_FILE:
    if (a->new_key)
      sodium_free (a->new_key);
    a->new_key = lg_keyfile_read (arg);
    if (a->new_key == NULL)
      return LG_EXIT_FAIL;
    return 0;
  case OPT_NEW_PASSPHRASE_FILE:
    lg_secret_free (a->new_pass);
    a->new_pass = lg_cmd_new_passphrase (arg, &a->new_prompt);
    if (a->new_pass == NULL && !a->new_prompt)
      return LG_EXIT_FAIL;
    return 0;
  case OPT_NEW_PASSPHRASE_PROMPT:
    lg_secret_free (a->new_pass);
    a->new_pass = NULL;
    a->new_prompt = true;
    return 0;
  case OPT_SLOT:
    if (lg_parse_long (arg, 10, 0, LG_KEYSLOTS - 1, &a->slot) < 0) {
      lg_error ("--slot: '%s': want 0 to %d", arg, LG_KEYSLOTS - 1);
      return LG_EXIT_USAGE;
    }
    return 0;
  case OPT_FORCE:
    a->force = true;
    return 0;
  case OPT_KEY_JSON:
    a->json = true;
    return 0;
  case OPT_FILE:
    if (arg[0] == '\0') {
      lg_error ("--file: give a file name");
      return LG_EXIT_USAGE;
    }
    a->file = arg;
    return 0;
  default:
    return -1;
  }
}

/* The options, the action and the LUN: -1 to go on, else the exit
 * status. */
static int
parse_args (int argc, char **argv, struct key_args *a)
{
  static const struct option opts[] = {
    LG_LOGIN_OPTIONS,
    LG_CLAIM_OPTIONS,
    LG_KEY_OPTIONS,
    { "new-key-file", required_argument, NULL, OPT_NEW_KEY_FILE },
    { "new-passphrase-file", required_argument, NULL, OPT_NEW_PASSPHRASE_FILE },
    { "new-passphrase-prompt", no_argument, NULL, OPT_NEW_PASSPHRASE_PROMPT },
    { "slot", required_argument, NULL, OPT_SLOT },
    { "force", no_argument, NULL, OPT_FORCE },
    { "json", no_argument, NULL, OPT_KEY_JSON },
    { "file", required_argument, NULL, OPT_FILE },
    { "help", no_argument, NULL, 'h' },
    { NULL, 0, NULL, 0 },
  };
  static const struct lg_cmd_spec spec = {
    "key", opts, NULL,       usage, LG_HELP_KEYS | LG_HELP_LOGIN,
    -1,    NULL, key_option,
  };
  int status = lg_cmd_parse (&spec, argc, argv, &a->login, &a->keys, a);

  if (status >= 0)
    return status;
  if (optind >= argc)
    return lg_usage_error (
        "key", "expected list, test, add, change, remove, backup or restore");
  a->verb = argv[optind++];
  if (strcmp (a->verb, "list") && strcmp (a->verb, "test")
      && strcmp (a->verb, "add") && strcmp (a->verb, "change")
      && strcmp (a->verb, "remove") && strcmp (a->verb, "backup")
      && strcmp (a->verb, "restore"))
    return lg_usage_error ("key",
                           "unknown action '%s': want list, test, add, "
                           "change, remove, backup or restore",
                           a->verb);
  if ((status
       = lg_cmd_positionals ("key", argc, argv, 1, "a LUN URL or a file"))
      != 0)
    return status;
  if ((strcmp (a->verb, "backup") == 0 || strcmp (a->verb, "restore") == 0)
      && a->file == NULL)
    return lg_usage_error ("key", "%s: give --file FILE", a->verb);
  if (strcmp (a->verb, "list") != 0 && strcmp (a->verb, "backup") != 0
      && a->keys.keyfile == NULL && !lg_cmd_keys_passphrase (&a->keys))
    return lg_usage_error ("key",
                           "give a key that opens the volume "
                           "(--key-file, --passphrase-file or "
                           "--passphrase-prompt)");
  if (new_key_wanted (a->verb)
      && (a->new_key == NULL) == (a->new_pass == NULL && !a->new_prompt))
    return lg_usage_error ("key",
                           "%s: give one of --new-key-file, "
                           "--new-passphrase-file and "
                           "--new-passphrase-prompt",
                           a->verb);
  if (strcmp (a->verb, "remove") == 0 && a->slot < 0)
    return lg_usage_error ("key", "remove: give --slot N");
  if (strcmp (a->verb, "change") == 0 && a->slot >= 0)
    return lg_usage_error ("key",
                           "change: no --slot: it changes the slot "
                           "the key given opens");
  if ((status
       = lg_cmd_prepare_lun ("key", argv[optind], &a->u, &a->login, &a->path))
      != 0)
    return status;
  return -1;
}

/* The slot the key given opens, or -1 (err says why: a wrong key is
 * EACCES). */
static int
key_slot (struct lg_dev *raw, const struct key_args *a, char *err,
          size_t errlen)
{
  struct lg_keysrc ks
      = { .keyfile = a->keys.keyfile, .passphrase = a->keys.passphrase };

  return lg_volume_key_slot (raw, &ks, err, errlen);
}

/* key list: the slots and their kinds; with a key, the slot it opens. */
static int
list_slots (struct lg_dev *raw, const struct key_args *a)
{
  struct lg_volume_info h;
  char err[512];
  int opens = -1;

  if (lg_volume_describe (raw, &h, err, sizeof err) < 0) {
    lg_error ("%s", errno == ENOENT ? "no lungate header on this LUN" : err);
    return LG_EXIT_FAIL;
  }
  if (a->keys.keyfile || a->keys.passphrase)
    opens = key_slot (raw, a, err, sizeof err);
  if (a->json) {
    printf ("{\"uuid\": \"%s\", \"slots\": [", h.uuid);
    for (int i = 0; i < LG_KEYSLOTS; i++) {
      printf ("%s{\"slot\": %d, \"kind\": \"%s\"", i ? ", " : "", i,
              lg_volume_slot_kind_name (h.slots[i].kind));
      if (h.slots[i].kind == LG_SLOT_PASSPHRASE)
        printf (", \"opslimit\": %" PRIu64 ", \"memlimit\": %" PRIu64,
                h.slots[i].opslimit, h.slots[i].memlimit);
      printf ("}");
    }
    printf ("], \"opens\": ");
    if (opens >= 0)
      printf ("%d}\n", opens);
    else
      printf ("null}\n");
  }
  for (int i = 0; i < LG_KEYSLOTS && !a->json; i++) {
    if (h.slots[i].kind == LG_SLOT_PASSPHRASE)
      printf ("slot %d: passphrase (Argon2id, opslimit %" PRIu64
              ", memlimit %" PRIu64 " MiB)%s\n",
              i, h.slots[i].opslimit, h.slots[i].memlimit >> 20,
              i == opens ? " (opens with the key given)" : "");
    else
      printf ("slot %d: %s%s\n", i, lg_volume_slot_kind_name (h.slots[i].kind),
              i == opens ? " (opens with the key given)" : "");
  }
  if (opens < 0 && (a->keys.keyfile || a->keys.passphrase)) {
    lg_error ("%s", err);
    return LG_EXIT_FAIL;
  }
  return LG_EXIT_OK;
}

/* key test: which slot the key opens. */
static int
test_key (struct lg_dev *raw, const struct key_args *a)
{
  char err[512];
  int slot = key_slot (raw, a, err, sizeof err);

  if (slot < 0) {
    lg_error ("%s", err);
    return LG_EXIT_FAIL;
  }
  printf ("%s: the %s opens key slot %d\n", raw->name,
          a->keys.keyfile ? "key" : "passphrase", slot);
  return LG_EXIT_OK;
}

/* key add, key remove: unlocks the volume with the key given, and
 * changes its slots in one header update. */
static int
change_slots (struct lg_dev *raw, const struct key_args *a)
{
  struct lg_keysrc ks
      = { .keyfile = a->keys.keyfile, .passphrase = a->keys.passphrase };
  bool add = strcmp (a->verb, "add") == 0;
  bool replace = strcmp (a->verb, "change") == 0;
  char err[512];
  long done;
  int still;

  if (lg_volume_change_keys (raw, &ks,
                             add           ? LG_VOLUME_KEY_ADD
                                 : replace ? LG_VOLUME_KEY_CHANGE
                                           : LG_VOLUME_KEY_REMOVE,
                             a->slot, a->force, a->new_key, a->new_pass, &done)
      < 0)
    return LG_EXIT_FAIL;
  /* A key that opened two slots (added twice) still opens the other:
   * a user who rotates a key believes it revoked (the second hostile
   * review). */
  if (replace && (still = key_slot (raw, a, err, sizeof err)) >= 0) {
    printf ("%s: key slot %ld changed, but the old key still opens slot %d\n",
            raw->name, done, still);
    lg_warn ("%s: the old key also opens key slot %d: it still opens the "
             "volume (lungate key remove --slot %d)",
             raw->name, still, still);
  }
  else
    printf ("%s: key slot %ld %s\n", raw->name, done,
            replace   ? "changed: the old key no longer opens it"
                : add ? "added"
                      : "removed");
  return LG_EXIT_OK;
}

/* key backup: the newest valid header copy, as it is on the LUN, into a
 * new file (mode 0600: its key slots let whoever has an old key or
 * passphrase open the volume).  No key needed. */
static int
backup_header (struct lg_dev *raw, const struct key_args *a)
{
  struct lg_keysrc ks
      = { .keyfile = a->keys.keyfile, .passphrase = a->keys.passphrase };
  uint8_t buf[LG_HDR_SIZE];
  char uuid[LG_UUID_HEX];
  int fd, n = 0;

  if (lg_volume_backup (raw, &ks, buf, uuid, &n) < 0)
    return LG_EXIT_FAIL;
  fd = open (a->file, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW,
             0600);
  if (fd < 0) {
    lg_error ("%s: the backup file: %m%s", a->file,
              errno == EEXIST ? " (a backup is never written over)" : "");
    return LG_EXIT_FAIL;
  }
  if (write (fd, buf, sizeof buf) != (ssize_t) sizeof buf || fsync (fd) < 0) {
    lg_error ("%s: writing the backup: %m", a->file);
    close (fd);
    unlink (a->file);
    return LG_EXIT_FAIL;
  }
  if (close (fd) < 0) {
    lg_error ("%s: writing the backup: %m", a->file);
    unlink (a->file);
    return LG_EXIT_FAIL;
  }
  printf ("%s: header of volume %s (%d key slot%s) backed up to %s\n",
          raw->name, uuid, n, n == 1 ? "" : "s", a->file);
  return LG_EXIT_OK;
}

/* key restore, before the LUN is opened (a file that is no backup costs
 * no login and no reservation): FILE is a regular file of one header
 * that parses, for a LUN of any size.  0, or -1 (said why). */
static int
read_backup (struct key_args *a)
{
  struct stat st;
  char err[512];
  ssize_t got;
  int fd = open (a->file, O_RDONLY | O_NONBLOCK | O_CLOEXEC), r = -1;

  if (fd < 0) {
    lg_error ("%s: the backup file: %m", a->file);
    return -1;
  }
  if (fstat (fd, &st) < 0) {
    lg_error ("%s: the backup file: %m", a->file);
    goto out;
  }
  if (!S_ISREG (st.st_mode)) {
    lg_error ("%s: the backup file: not a regular file", a->file);
    goto out;
  }
  got = read (fd, a->backup, sizeof a->backup);
  if (got < 0)
    lg_error ("%s: reading the backup: %m", a->file);
  else if (got != LG_HDR_SIZE || st.st_size != LG_HDR_SIZE)
    lg_error ("%s: not a header backup (%lld bytes, want %d)", a->file,
              (long long) st.st_size, LG_HDR_SIZE);
  else if (lg_volume_backup_check (a->backup, err, sizeof err) < 0)
    lg_error ("%s: not a lungate header backup: %s", a->file, err);
  else
    r = 0;
out:
  close (fd);
  return r;
}

/* key restore: the backup read (read_backup) back on the LUN. */
static int
restore_header (struct lg_dev *raw, const struct key_args *a)
{
  struct lg_keysrc ks
      = { .keyfile = a->keys.keyfile, .passphrase = a->keys.passphrase };
  char uuid[LG_UUID_HEX];
  int slot = lg_volume_restore (raw, a->backup, a->file, &ks, a->force, uuid);

  if (slot < 0)
    return LG_EXIT_FAIL;
  printf ("%s: header of volume %s restored from %s (the key given opens "
          "slot %d); the volume is marked dirty until lungate verify "
          "--repair\n",
          raw->name, uuid, a->file, slot);
  return LG_EXIT_OK;
}

int
lg_cmd_key (int argc, char **argv)
{
  struct key_args a = { .slot = -1 };
  struct lg_dev *raw = NULL;
  int status;

  if (lg_login_init (&a.login) < 0)
    return LG_EXIT_FAIL;
  if ((status = parse_args (argc, argv, &a)) >= 0)
    goto out;
  status = LG_EXIT_FAIL;
  if (strcmp (a.verb, "restore") == 0 && read_backup (&a) < 0)
    goto out;
  raw = lg_cmd_open (&a.u, a.path, &a.login, 1,
                     strcmp (a.verb, "list") == 0
                         || strcmp (a.verb, "test") == 0
                         || strcmp (a.verb, "backup") == 0);
  /* The passphrases once the LUN is open: named by it (never by a URL
   * with a CHAP secret in it), and not typed for a LUN that fails. */
  if (raw != NULL
      && (lg_cmd_keys_ask (&a.keys, raw->name, false) != 0
          || ask_new (&a, raw->name) != 0))
    status = LG_EXIT_FAIL;
  else if (raw != NULL)
    status = strcmp (a.verb, "list") == 0 ? list_slots (raw, &a)
        : strcmp (a.verb, "test") == 0    ? test_key (raw, &a)
        : strcmp (a.verb, "backup") == 0  ? backup_header (raw, &a)
        : strcmp (a.verb, "restore") == 0 ? restore_header (raw, &a)
                                          : change_slots (raw, &a);
  lg_dev_close (raw);

out:
  if (a.new_key)
    sodium_free (a.new_key);
  lg_secret_free (a.new_pass);
  lg_cmd_keys_clear (&a.keys);
  lg_url_clear (&a.u);
  lg_login_clear (&a.login);
  return status;
}
