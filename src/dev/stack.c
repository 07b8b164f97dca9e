/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Opening a stack.  Called once per LUN at open time, on one thread. */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <sodium.h>

#include "crypt/crypt.h"
#include "crypt/header.h"
#include "dev/stack.h"
#include "util/hooks.h"
#include "util/log.h"

/* The UUID of the volume on lower, from either header copy; -1 if none
 * parses (lg_stack_wrap then says what is wrong). */
static int
volume_uuid (struct lg_dev *lower, char hex[LG_UUID_HEX])
{
  static const uint64_t off[2] = { LG_HDR_COPY0_OFFSET, LG_HDR_COPY1_OFFSET };
  uint8_t buf[LG_HDR_SIZE];
  struct lg_header h;

  for (int c = 0; c < 2; c++)
    if (lg_dev_pread (lower, buf, sizeof buf, off[c]) == 0
        && lg_header_parse (buf, lg_dev_size (lower), &h, NULL, 0) == 0) {
      lg_header_uuid_hex (&h, hex);
      return 0;
    }
  return -1;
}

/* LUNGATE_TEST_OPEN_NAP_MS (tests only, util/hooks.h): a wait between
 * the header's read and the crypt layer's open, where a test makes the
 * LUN change under an opening gateway. */
static void
open_nap (const struct lg_dev *lower)
{
  const char *v = lg_test_hook ("LUNGATE_TEST_OPEN_NAP_MS");
  long ms = v ? strtol (v, NULL, 10) : 0;

  if (ms <= 0 || ms > 60000)
    return;
  lg_warn ("%s: test hook: %ld ms between the header's read and the crypt "
           "layer's open",
           lower->name, ms);
  nanosleep (&(struct timespec){ ms / 1000, (ms % 1000) * 1000000L }, NULL);
}

struct lg_dev *
lg_stack_wrap (struct lg_dev *lower, const struct lg_keysrc *ks,
               size_t md_cache_blocks, char *err, size_t errlen)
{
  uint8_t buf[LG_HDR_SIZE];
  bool has_key = ks && (ks->keyfile || ks->passphrase);
  struct lg_header h;
  struct lg_dev *d = NULL;
  uint8_t *mk = NULL;
  int saved;

  if (lg_dev_size (lower) < LG_VOLUME_MIN_SIZE) {
    /* Too small to hold the headers: never a volume. */
    if (!has_key)
      return lower;
    snprintf (err, errlen,
              "%s: a key was given but the LUN (%" PRIu64 " bytes) is too "
              "small to be a lungate volume",
              lower->name, lg_dev_size (lower));
    saved = EINVAL;
    goto fail;
  }
  if (lg_dev_pread (lower, buf, sizeof buf, LG_HDR_COPY0_OFFSET) < 0) {
    saved = errno;
    snprintf (err, errlen, "%s: cannot read the header: %s", lower->name,
              strerror (saved));
    goto fail;
  }
  if (!lg_header_has_magic (buf)) {
    /* Copy 0 may be the damaged one: look at copy 1 too. */
    if (lg_dev_pread (lower, buf, sizeof buf, LG_HDR_COPY1_OFFSET) < 0
        || !lg_header_has_magic (buf)) {
      if (!has_key)
        return lower;
      snprintf (err, errlen,
                "%s: a key was given but the LUN holds no "
                "lungate header (format it with lungate format)",
                lower->name);
      saved = EINVAL;
      goto fail;
    }
  }
  if (!has_key) {
    char uuid[LG_UUID_HEX] = "?";

    volume_uuid (lower, uuid);
    snprintf (err, errlen,
              "%s: the LUN is formatted by lungate (volume %s): give its "
              "key (--key-file or --passphrase-file, mount: --key-file "
              "lunN=FILE or --key-dir DIR with the key in DIR/%s; plugin: "
              "key-file=, key-file=lunN:FILE, key-dir= or passphrase=)",
              lower->name, uuid, uuid);
    saved = EACCES;
    goto fail;
  }
  mk = sodium_malloc (LG_KEY_BYTES);
  if (mk == NULL) {
    saved = ENOMEM;
    snprintf (err, errlen, "out of memory");
    goto fail;
  }
  if (lg_crypt_unlock (lower, ks, &h, mk, err, errlen) < 0) {
    saved = errno;
    goto fail;
  }
  open_nap (lower);
  d = lg_crypt_open (lower, true, &h, mk, md_cache_blocks, true, err, errlen);
  saved = errno;
  sodium_free (mk);
  if (d == NULL) {
    lg_dev_close (lower);
    errno = saved;
  }
  return d;

fail:
  sodium_free (mk);
  lg_dev_close (lower);
  errno = saved;
  return NULL;
}

int
lg_keytab_add (struct lg_keytab *t, const char *arg, uint8_t **all)
{
  char *end;
  long lun = -1;

  if (strncmp (arg, "lun", 3) == 0 && arg[3] >= '0' && arg[3] <= '9') {
    lun = strtol (arg + 3, &end, 10);
    if ((*end == ':' || *end == '=') && lun <= 16383)
      arg = end + 1;
    else
      lun = -1;
  }
  if (lun < 0) {
    uint8_t *k = lg_keyfile_read (arg);

    if (k == NULL)
      return -1;
    if (*all)
      sodium_free (*all);
    *all = k;
    return 0;
  }
  for (size_t i = 0; i < t->n; i++)
    if (t->per[i].lun == (int) lun) {
      /* Given again: the last one counts, as for a key for every volume. */
      uint8_t *k = lg_keyfile_read (arg);

      if (k == NULL)
        return -1;
      sodium_free (t->per[i].keyfile);
      t->per[i].keyfile = k;
      return 0;
    }
  if (t->n == LG_KEYTAB_LUNS) {
    lg_error ("more than %d per-LUN keys", LG_KEYTAB_LUNS);
    return -1;
  }
  t->per[t->n].keyfile = lg_keyfile_read (arg);
  if (t->per[t->n].keyfile == NULL)
    return -1;
  t->per[t->n++].lun = (int) lun;
  return 0;
}

void
lg_keytab_clear (struct lg_keytab *t)
{
  for (size_t i = 0; i < t->n; i++)
    sodium_free (t->per[i].keyfile);
  t->n = 0;
}

static const uint8_t *
lun_key (const struct lg_keytab *t, int lun)
{
  for (size_t i = 0; i < t->n; i++)
    if (t->per[i].lun == lun)
      return t->per[i].keyfile;
  return NULL;
}

/* DIR/UUID, when it exists: read into *owned. */
static const uint8_t *
dir_key (const struct lg_keytab *t, struct lg_dev *lower, uint8_t **owned)
{
  char hex[LG_UUID_HEX], path[4200];

  if (t->dir == NULL || volume_uuid (lower, hex) < 0)
    return NULL;
  snprintf (path, sizeof path, "%s/%s", t->dir, hex);
  if (access (path, F_OK) < 0)
    return NULL;
  *owned = lg_keyfile_read (path);
  return *owned;
}

static bool
has_header (struct lg_dev *lower)
{
  uint8_t buf[LG_HDR_SIZE];

  if (lg_dev_size (lower) < LG_VOLUME_MIN_SIZE)
    return false;
  return (lg_dev_pread (lower, buf, sizeof buf, LG_HDR_COPY0_OFFSET) == 0
          && lg_header_has_magic (buf))
      || (lg_dev_pread (lower, buf, sizeof buf, LG_HDR_COPY1_OFFSET) == 0
          && lg_header_has_magic (buf));
}

struct lg_dev *
lg_stack_wrap_lun (struct lg_dev *lower, const struct lg_keytab *t, int lun,
                   bool named, size_t md_cache_blocks, char *err, size_t errlen)
{
  struct lg_keysrc ks = { lun_key (t, lun), NULL };
  uint8_t *owned = NULL;
  struct lg_dev *d;

  if (!has_header (lower)) {
    /* A plain LUN: plain, unless its own key says it should not be. */
    if (ks.keyfile || named)
      return lg_stack_wrap (lower, ks.keyfile ? &ks : &t->all, md_cache_blocks,
                            err, errlen);
    return lg_stack_wrap (lower, NULL, md_cache_blocks, err, errlen);
  }
  if (ks.keyfile == NULL)
    ks.keyfile = dir_key (t, lower, &owned);
  if (ks.keyfile == NULL)
    ks = t->all;
  d = lg_stack_wrap (lower, &ks, md_cache_blocks, err, errlen);
  if (owned)
    sodium_free (owned);
  return d;
}
