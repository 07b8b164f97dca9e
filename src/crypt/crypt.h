/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The crypt layer: a block device stacked on another, storing each 4 KiB
 * unit encrypted and authenticated (aead) or in plaintext with a tag
 * (mac), with two metadata slots per unit for crash consistency without a
 * journal.  The on-disk format is in header.h and man/lungate-format.5.
 * What front ends call of it (the key source, quiesce, verify ...) is
 * declared in dev/volume.h.
 */
#ifndef LG_CRYPT_H
#define LG_CRYPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "crypt/header.h"
#include "dev/dev.h"
#include "dev/volume.h"

/* Reads the header of lower and unlocks it: the master key goes to mk
 * (LG_KEY_BYTES of caller's sodium memory).  The key slot that opened
 * it, or -1 with errno and err: ENOENT no header, EINVAL damaged header,
 * EACCES wrong key. */
int lg_crypt_unlock (struct lg_dev *lower, const struct lg_keysrc *ks,
                     struct lg_header *h, uint8_t *mk, char *err,
                     size_t errlen);

/* Opens the crypt device over lower with an unlocked header.  The master
 * key is copied (and the copy wiped on close).  With owns_lower, closing
 * the crypt device closes lower.  md_cache_blocks bounds the metadata
 * cache (4 KiB each; 0 = default 4096).
 *
 * With manage_dirty (and a writable lower), the header is marked dirty on
 * disk before anything is written and clean again by a clean close of a
 * session that found it clean: while it is clean, a unit's newer slot is
 * known to be current and a write needs no read of the old data.
 * Without, every first write to a unit in the session checks. */
struct lg_dev *lg_crypt_open (struct lg_dev *lower, bool owns_lower,
                              const struct lg_header *h, const uint8_t *mk,
                              size_t md_cache_blocks, bool manage_dirty,
                              char *err, size_t errlen);

/* The device seals the units of a volume whose header is not written yet
 * (lungate format): after a login, header copy 0 must hold was (what
 * format found there, LG_HDR_SIZE bytes), the format mark, or this
 * volume's header, else the LUN holds another disk now. */
void lg_crypt_formatting (struct lg_dev *d, const uint8_t *was);

/* Units that failed authentication since open. */
uint64_t lg_crypt_auth_failures (const struct lg_dev *d);

#endif
