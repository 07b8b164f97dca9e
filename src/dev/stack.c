/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Opening a stack.  Called once per LUN at open time, on one thread. */
#include <config.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "dev/stack.h"
#include "util/log.h"

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
    snprintf (err, errlen,
              "%s: the LUN is formatted by lungate: give its "
              "key (--key-file or --passphrase-file; plugin: key-file= or "
              "passphrase=)",
              lower->name);
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
