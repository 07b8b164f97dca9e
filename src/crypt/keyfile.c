/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Key files (32 bytes, read into sodium memory) and unlocking a volume's
 * header with a key file or a passphrase.  Any thread. */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <unistd.h>

#include <sodium.h>

#include "crypt/crypt-int.h"
#include "util/log.h"

uint8_t *
lg_keyfile_read (const char *path)
{
  uint8_t *k;
  uint8_t extra;
  size_t got = 0;
  int fd, saved;

  fd = open (path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    saved = errno;
    lg_error ("key file %s: %s", path, strerror (saved));
    errno = saved;
    return NULL;
  }
  k = sodium_malloc (LG_KEY_BYTES);
  if (k == NULL) {
    close (fd);
    return NULL;
  }
  while (got < LG_KEY_BYTES) {
    ssize_t r = read (fd, k + got, LG_KEY_BYTES - got);

    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      break;
    got += (size_t) r;
  }
  if (got != LG_KEY_BYTES || read (fd, &extra, 1) != 0) {
    lg_error ("key file %s: a key file holds exactly %d bytes (make one "
              "with: head -c 32 /dev/urandom > FILE)",
              path, LG_KEY_BYTES);
    close (fd);
    sodium_free (k);
    errno = EINVAL;
    return NULL;
  }
  close (fd);
  return k;
}

/* Opens copy h with ks into mk: the slot that opened it, or -1 with err
 * (EACCES wrong key, EINVAL a MAC mismatch). */
static int
unlock_copy (struct lg_dev *lower, const struct lg_keysrc *ks,
             const struct lg_header *h, uint8_t *mk, char *err, size_t errlen)
{
  int slot;

  if (ks->keyfile)
    slot = lg_keyslot_open_keyfile (h, ks->keyfile, mk);
  else
    slot = lg_keyslot_open_passphrase (h, ks->passphrase, mk);
  if (slot < 0) {
    char uuid[LG_UUID_HEX];

    lg_header_uuid_hex (h, uuid);
    snprintf (err, errlen,
              "%s: wrong %s: no key slot of volume %s opens with it",
              lower->name, ks->keyfile ? "key" : "passphrase", uuid);
    errno = EACCES;
    return -1;
  }
  if (lg_header_check_mac (h, mk) < 0) {
    sodium_memzero (mk, LG_KEY_BYTES);
    snprintf (err, errlen,
              "%s: the header was modified by someone without "
              "the key (MAC mismatch): refusing it",
              lower->name);
    errno = EINVAL;
    return -1;
  }
  lg_debug ("%s: unlocked with key slot %d", lower->name, slot);
  return slot;
}

int
lg_crypt_unlock (struct lg_dev *lower, const struct lg_keysrc *ks,
                 struct lg_header *h, uint8_t *mk, char *err, size_t errlen)
{
  struct lg_header hc[2];
  unsigned n;
  int r = -1, saved = 0;

  if (lg_header_read_all (lower, hc, &n, err, errlen) < 0) {
    saved = errno;
    if (saved == ENOENT)
      snprintf (err, errlen,
                "%s: no lungate header: not formatted (lungate "
                "format)",
                lower->name);
    errno = saved;
    return -1;
  }
  if (ks->keyfile == NULL && ks->passphrase == NULL) {
    snprintf (err, errlen,
              "%s: the LUN is encrypted: give a key file or a "
              "passphrase",
              lower->name);
    errno = EACCES;
    goto out;
  }
  /* The newest copy that authenticates with this key: a newer one that
   * does not was forged or damaged (its checksum proves nothing), and is
   * replaced by the next header write. */
  for (unsigned i = 0; i < n && r < 0; i++) {
    char e[256];

    r = unlock_copy (lower, ks, &hc[i], mk, e, sizeof e);
    if (r >= 0) {
      *h = hc[i];
      if (i > 0)
        lg_warn ("%s: the newest header copy does not open with this key "
                 "(forged or damaged): using the other one",
                 lower->name);
    }
    else if (i == 0) {
      snprintf (err, errlen, "%s", e);
      saved = errno;
    }
  }
  if (r < 0)
    errno = saved ? saved : EACCES;
out:
  sodium_memzero (hc, sizeof hc);
  return r;
}
