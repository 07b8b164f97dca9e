/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The crypt layer: a block device stacked on another, storing each 4 KiB
 * unit encrypted and authenticated (aead) or in plaintext with a tag
 * (mac), with two metadata slots per unit for crash consistency without a
 * journal.  The on-disk format is in header.h and man/lungate-format.5.
 */
#ifndef LG_CRYPT_H
#define LG_CRYPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "crypt/header.h"
#include "dev/dev.h"

/* Where the key comes from: exactly one of the two, both in sodium_malloc
 * memory (util/secret.h), owned by the caller. */
struct lg_keysrc {
  const uint8_t *keyfile; /* LG_KEY_BYTES */
  const char *passphrase;
};

/* Reads a key file (exactly LG_KEY_BYTES bytes) into sodium memory. */
uint8_t *lg_keyfile_read (const char *path);

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

/* Nothing writes now (the last writer of a shared device left): flush,
 * and mark the header clean if this device marked it dirty; the next
 * write marks it dirty again. */
void lg_crypt_quiesce (struct lg_dev *d);
/* Close without touching the header (its lower device is gone). */
void lg_crypt_keep_dirty (struct lg_dev *d);
/* The device seals the units of a volume whose header is not written yet
 * (lungate format): after a login, header copy 0 must hold was (what
 * format found there, LG_HDR_SIZE bytes), the format mark, or this
 * volume's header, else the LUN holds another disk now. */
void lg_crypt_formatting (struct lg_dev *d, const uint8_t *was);

/* Whether the volume was found dirty (see above) at open. */
bool lg_crypt_was_dirty (const struct lg_dev *d);

/* Units that failed authentication since open. */
uint64_t lg_crypt_auth_failures (const struct lg_dev *d);

/* Writes authenticated ZERO slots for units [first, first+n) directly
 * (format uses it for the whole volume).  progress, if not NULL, is called
 * now and then with the units done; when it returns non-zero, the call
 * stops there and fails with EINTR. */
int lg_crypt_init_units (struct lg_dev *d, uint64_t first, uint64_t n,
                         int (*progress) (uint64_t done, uint64_t total));

/* Scrubs units [first, first+n): calls bad for each maximal range of
 * units that fail authentication.  Returns the number of bad units, or -1
 * on an I/O error.  With repair (a writable device opened with
 * manage_dirty), a unit whose newer slot does not authenticate it (left
 * by a crash) gets that slot cleared; and when the whole volume was
 * checked and no unit is bad, the volume is marked clean at close.
 * progress as for lg_crypt_init_units (a stop: -1, EINTR, the ranges
 * found so far reported). */
int64_t lg_crypt_verify (
    struct lg_dev *d, uint64_t first, uint64_t n, bool repair,
    void (*bad) (void *opaque, uint64_t first_unit, uint64_t nunits),
    int (*progress) (uint64_t done, uint64_t total), void *opaque);

#endif
