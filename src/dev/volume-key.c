/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The volume interface (dev/volume.h) over the crypt layer: key slots
 * (which one a key opens, adding, changing and removing them: lungate
 * key), and a copy of the header (key backup, key restore).  Errors are
 * logged here, as the command said them.  The command's main thread. */
#include <config.h>

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <sodium.h>

#include "crypt/crypt.h"
#include "crypt/header.h"
#include "crypt/keychange.h"
#include "dev/volume.h"
#include "util/log.h"

int
lg_volume_key_slot (struct lg_dev *d, const struct lg_keysrc *ks, char *err,
                    size_t errlen)
{
  struct lg_header h;
  uint8_t *mk = sodium_malloc (LG_KEY_BYTES);
  int slot;

  if (mk == NULL) {
    snprintf (err, errlen, "%s", strerror (ENOMEM));
    return -1;
  }
  slot = lg_crypt_unlock (d, ks, &h, mk, err, errlen);
  sodium_memzero (&h, sizeof h);
  sodium_free (mk);
  return slot;
}

int
lg_volume_change_keys (struct lg_dev *d, const struct lg_keysrc *ks,
                       enum lg_volume_key_op op, long slot, bool force,
                       const uint8_t *new_key, const char *new_pass, long *done)
{
  struct lg_key_change kc = { 0 };
  struct lg_header h;
  uint8_t *mk = sodium_malloc (LG_KEY_BYTES);
  char err[512];
  int r = -1, opens;

  if (mk == NULL)
    return -1;
  if ((opens = lg_crypt_unlock (d, ks, &h, mk, err, sizeof err)) < 0) {
    lg_error ("%s", err);
    goto out;
  }
  kc.add = op == LG_VOLUME_KEY_ADD;
  kc.replace = op == LG_VOLUME_KEY_CHANGE;
  kc.slot = kc.replace ? opens : slot;
  if (kc.replace)
    kc.old = h.slots[opens];
  kc.force = force;
  kc.mk = mk;
  kc.new_key = new_key;
  kc.new_pass = new_pass;
  kc.name = d->name;
  if (lg_header_update (d, lg_key_change, &kc, NULL, err, sizeof err) < 0) {
    if (!kc.said)
      lg_error ("%s: updating the header: %s", d->name, err);
    goto out;
  }
  *done = kc.done;
  r = 0;

out:
  sodium_memzero (&kc, sizeof kc);
  sodium_memzero (&h, sizeof h);
  sodium_free (mk);
  return r;
}

/* backup: the copy the key opens (and whose MAC checks), not merely the
 * newest that parses: a forged or half-written one would make a backup
 * that never restores.  0, or -1 (said why, h wiped). */
static int
backup_opened (struct lg_dev *d, const struct lg_keysrc *ks,
               struct lg_header *h)
{
  char err[512];
  uint8_t *mk = sodium_malloc (LG_KEY_BYTES);
  int slot = mk ? lg_crypt_unlock (d, ks, h, mk, err, sizeof err) : -1;

  if (mk)
    sodium_free (mk);
  if (slot < 0) {
    lg_error ("%s", mk ? err : "out of memory");
    sodium_memzero (h, sizeof *h);
    return -1;
  }
  return 0;
}

int
lg_volume_backup (struct lg_dev *d, const struct lg_keysrc *ks,
                  uint8_t buf[static LG_HDR_SIZE], char uuid[LG_UUID_HEX],
                  int *nslots)
{
  struct lg_header h, hc[2];
  char err[512];
  unsigned copies = 0;

  if (lg_header_read_all (d, hc, &copies, err, sizeof err) < 0) {
    lg_error ("%s: %s", d->name, err);
    return -1;
  }
  h = hc[0];
  sodium_memzero (hc, sizeof hc);
  if (ks && (ks->keyfile || ks->passphrase)) {
    if (backup_opened (d, ks, &h) < 0)
      return -1;
  }
  else if (copies == 2) {
    lg_error ("%s: the two header copies differ (an update under way, or "
              "one damaged or forged): give the key (--key-file, "
              "--passphrase-file), and the copy it opens is backed up",
              d->name);
    sodium_memzero (&h, sizeof h);
    return -1;
  }
  lg_header_serialize (&h, buf);
  lg_header_uuid_hex (&h, uuid);
  *nslots = 0;
  for (int i = 0; i < LG_KEYSLOTS; i++)
    *nslots += h.slots[i].kind != LG_SLOT_EMPTY;
  sodium_memzero (&h, sizeof h);
  return 0;
}

int
lg_volume_backup_check (const uint8_t buf[static LG_HDR_SIZE], char *err,
                        size_t errlen)
{
  struct lg_header h;
  int r = lg_header_parse (buf, UINT64_MAX, &h, err, errlen);

  sodium_memzero (&h, sizeof h);
  return r;
}

/* key restore: the header to put back, its MAC checked with the master
 * key, and whether --force was needed (lg_header_change_fn). */
struct restore {
  struct lg_header h; /* from the file, marked dirty, MAC set */
  const char *name;
  bool force;
  bool said;
  bool told; /* the slots that change were said */
};

/* Says which key slots a restore over cur brings back or empties: a key
 * removed since the backup opens the volume again. */
static void
tell_slots (struct restore *rs, const struct lg_header *cur)
{
  if (rs->told)
    return;
  rs->told = true;
  for (int i = 0; i < LG_KEYSLOTS; i++) {
    const struct lg_keyslot *b = &rs->h.slots[i], *c = &cur->slots[i];

    if (sodium_memcmp (b, c, sizeof *b) == 0)
      continue;
    if (b->kind == LG_SLOT_EMPTY)
      lg_warn ("%s: key slot %d (%s) is emptied: the backup did not have it",
               rs->name, i, lg_volume_slot_kind_name (c->kind));
    else
      lg_warn ("%s: key slot %d (%s) is put back as in the backup: a key "
               "removed or changed since then opens the volume again",
               rs->name, i, lg_volume_slot_kind_name (b->kind));
  }
}

static int
restore_change (const struct lg_header *copies, unsigned n,
                struct lg_header *out, void *opaque)
{
  struct restore *rs = opaque;

  for (unsigned i = 0; i < n && !rs->force; i++)
    if (sodium_memcmp (copies[i].uuid, rs->h.uuid, LG_UUID_BYTES) != 0) {
      char uuid[LG_UUID_HEX];

      lg_header_uuid_hex (&copies[i], uuid);
      lg_error ("%s: the LUN holds another volume (%s): --force to put the "
                "backup over it",
                rs->name, uuid);
      rs->said = true;
      errno = EEXIST;
      return -1;
    }
  if (n > 0)
    tell_slots (rs, &copies[0]);
  *out = rs->h;
  return 0;
}

/* Whether d holds no valid header copy (destroyed, damaged).  Unless
 * force, a copy that still carries the magic (a damaged header, or one
 * of a newer lungate, maybe of another volume) refuses: said. */
static bool
no_header (struct lg_dev *d, bool force, bool *refused)
{
  uint8_t buf[2][LG_HDR_SIZE];
  struct lg_header h;
  char err[256];
  int r = lg_header_read (d, &h, err, sizeof err);
  bool none = r < 0 && (errno == ENOENT || errno == EINVAL);

  sodium_memzero (&h, sizeof h);
  *refused = false;
  if (!none || force)
    return none;
  if (lg_header_read_copies (d, buf, err, sizeof err) < 0) {
    lg_error ("%s: %s", d->name, err);
    *refused = true;
    return false;
  }
  if (lg_header_has_magic (buf[0]) || lg_header_has_magic (buf[1])) {
    lg_error ("%s: the LUN holds a lungate header this lungate cannot read "
              "(damaged, or made by a newer lungate; maybe another "
              "volume's): --force to put the backup over it",
              d->name);
    *refused = true;
  }
  sodium_memzero (buf, sizeof buf);
  return !*refused;
}

/* Writes rs's header over d: an update of what is there, or where no
 * valid copy is left to update, as format writes it.  0, or -1 (said
 * why). */
static int
restore_write (struct lg_dev *d, struct restore *rs)
{
  char err[512];
  bool refused = false;

  if (lg_header_update (d, restore_change, rs, NULL, err, sizeof err) == 0)
    return 0;
  if (rs->said)
    return -1;
  if (errno == EINVAL && no_header (d, rs->force, &refused)) {
    if (lg_header_write (d, &rs->h) < 0) {
      lg_error ("%s: writing the header: %m", d->name);
      return -1;
    }
    return 0;
  }
  if (!refused)
    lg_error ("%s: writing the header: %s", d->name, err);
  return -1;
}

int
lg_volume_restore (struct lg_dev *d, const uint8_t backup[static LG_HDR_SIZE],
                   const char *file, const struct lg_keysrc *ks, bool force,
                   char uuid[LG_UUID_HEX])
{
  struct restore *rs = sodium_malloc (sizeof *rs);
  uint8_t *mk = sodium_malloc (LG_KEY_BYTES);
  char err[512];
  int r = -1, slot;

  if (rs == NULL || mk == NULL)
    goto out;
  memset (rs, 0, sizeof *rs);
  rs->name = d->name;
  rs->force = force;
  if (lg_header_parse (backup, lg_dev_size (d), &rs->h, err, sizeof err) < 0) {
    lg_error ("%s: not a header this LUN can take: %s", file, err);
    goto out;
  }
  slot = ks->keyfile ? lg_keyslot_open_keyfile (&rs->h, ks->keyfile, mk)
                     : lg_keyslot_open_passphrase (&rs->h, ks->passphrase, mk);
  lg_header_uuid_hex (&rs->h, uuid);
  if (slot < 0 || lg_header_check_mac (&rs->h, mk) < 0) {
    lg_error ("%s: the %s given does not open the backup (volume %s)%s", file,
              ks->keyfile ? "key" : "passphrase", uuid,
              slot < 0 ? "" : ": its header MAC is wrong (altered)");
    goto out;
  }
  /* The data may be newer than the header: every unit's first write
   * checks which slot is current until verify --repair. */
  rs->h.flags |= LG_HDR_FLAG_DIRTY;
  lg_header_set_mac (&rs->h, mk);
  if (restore_write (d, rs) == 0)
    r = slot;

out:
  if (rs)
    sodium_free (rs);
  if (mk)
    sodium_free (mk);
  return r;
}
