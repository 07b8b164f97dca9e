/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Key slot changes for lg_header_update: see keychange.h. */
#include <config.h>

#include <errno.h>

#include <sodium.h>

#include "crypt/keychange.h"
#include "util/log.h"

static int
key_refuse (struct lg_key_change *kc, int err)
{
  kc->said = true;
  errno = err;
  return -1;
}

static int seal_new (struct lg_key_change *kc, struct lg_header *h, long s);

static int
change_add (struct lg_key_change *kc, struct lg_header *h)
{
  long s = kc->slot;

  if (kc->sealed
      && sodium_memcmp (&h->slots[kc->done], &kc->written, sizeof kc->written)
          == 0)
    return 1; /* an earlier attempt of ours is there */
  if (s < 0)
    s = lg_keyslot_free (h);
  if (s < 0) {
    lg_error ("%s: all %d key slots are in use: remove one first", kc->name,
              LG_KEYSLOTS);
    return key_refuse (kc, ENOSPC);
  }
  if (h->slots[s].kind != LG_SLOT_EMPTY) {
    lg_error ("%s: key slot %ld is in use: remove it first", kc->name, s);
    return key_refuse (kc, EEXIST);
  }
  return seal_new (kc, h, s);
}

/* Seals the new key in slot s (once: a later attempt reuses it). */
static int
seal_new (struct lg_key_change *kc, struct lg_header *h, long s)
{
  if (kc->new_key == NULL && kc->new_pass == NULL)
    return key_refuse (kc, EINVAL);
  if (kc->sealed && s == kc->done)
    h->slots[s] = kc->written; /* sealed already: no second Argon2id */
  else if ((kc->new_key
                ? lg_keyslot_set_keyfile (h, (unsigned) s, kc->mk, kc->new_key)
                : lg_keyslot_set_passphrase (h, (unsigned) s, kc->mk,
                                             kc->new_pass,
                                             crypto_pwhash_OPSLIMIT_MODERATE,
                                             crypto_pwhash_MEMLIMIT_MODERATE))
           < 0) {
    lg_error ("cannot set key slot %ld: %m", s);
    return key_refuse (kc, errno);
  }
  kc->done = s;
  kc->written = h->slots[s];
  kc->sealed = true;
  return 0;
}

static int
change_replace (struct lg_key_change *kc, struct lg_header *h)
{
  if (kc->sealed
      && sodium_memcmp (&h->slots[kc->slot], &kc->written, sizeof kc->written)
          == 0)
    return 1; /* an earlier attempt of ours is there */
  if (sodium_memcmp (&h->slots[kc->slot], &kc->old, sizeof kc->old) != 0) {
    lg_error ("%s: key slot %ld changed since this command read it (another "
              "key change?): nothing changed; run it again",
              kc->name, kc->slot);
    return key_refuse (kc, ESTALE);
  }
  return seal_new (kc, h, kc->slot);
}

static int
change_remove (struct lg_key_change *kc, struct lg_header *h)
{
  int n = 0;

  if (kc->sealed
      && sodium_memcmp (&h->slots[kc->slot], &kc->written, sizeof kc->written)
          != 0)
    /* An earlier attempt of ours emptied it, and whatever is there now
     * (empty, or a key another machine added since) is not ours to
     * remove. */
    return 1;
  if (h->slots[kc->slot].kind == LG_SLOT_EMPTY) {
    lg_error ("%s: key slot %ld is already empty", kc->name, kc->slot);
    return key_refuse (kc, ENOENT);
  }
  for (int i = 0; i < LG_KEYSLOTS; i++)
    n += h->slots[i].kind != LG_SLOT_EMPTY;
  if (n == 1 && !kc->force) {
    lg_error ("%s: slot %ld is the last key slot: without it nobody can "
              "ever read the volume again (use --force if that is the "
              "point)",
              kc->name, kc->slot);
    return key_refuse (kc, EPERM);
  }
  kc->written = h->slots[kc->slot];
  kc->sealed = true;
  sodium_memzero (&h->slots[kc->slot], sizeof h->slots[kc->slot]);
  kc->done = kc->slot;
  return 0;
}

/* lg_header_change_fn: on the newest copy that opens with our key. */
int
lg_key_change (const struct lg_header *copies, unsigned n,
               struct lg_header *out, void *opaque)
{
  struct lg_key_change *kc = opaque;
  unsigned i = 0;
  int r;

  while (i < n && lg_header_check_mac (&copies[i], kc->mk) != 0)
    i++;
  if (i == n) {
    lg_error ("%s: the header changed and no longer opens with this key",
              kc->name);
    return key_refuse (kc, EACCES);
  }
  *out = copies[i];
  r = kc->replace ? change_replace (kc, out)
      : kc->add   ? change_add (kc, out)
                  : change_remove (kc, out);
  if (r == 0)
    lg_header_set_mac (out, kc->mk);
  return r;
}
