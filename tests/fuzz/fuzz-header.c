/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* libFuzzer harness for the header parser: any 4096 bytes (the input
 * padded with zeroes or truncated), against a few LUN sizes, never a
 * crash; a header that parses serialises back to the same bytes and
 * parses again to the same fields.  Half the runs fix the checksum first,
 * so that the fuzzer reaches the field checks behind it. */
#include <config.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "crypt/header.h"
#include "crypt/owner.h"

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size);

static bool
same (const struct lg_header *a, const struct lg_header *b)
{
  if (a->version != b->version || a->flags != b->flags || a->mode != b->mode
      || a->unit_size != b->unit_size || a->seq != b->seq
      || a->lun_size != b->lun_size || a->md_offset != b->md_offset
      || a->md_size != b->md_size || a->data_offset != b->data_offset
      || a->nunits != b->nunits
      || memcmp (a->uuid, b->uuid, sizeof a->uuid) != 0
      || memcmp (a->mac, b->mac, sizeof a->mac) != 0)
    return false;
  for (int i = 0; i < LG_KEYSLOTS; i++) {
    const struct lg_keyslot *s = &a->slots[i], *t = &b->slots[i];

    if (s->kind != t->kind || s->opslimit != t->opslimit
        || s->memlimit != t->memlimit
        || memcmp (s->salt, t->salt, sizeof s->salt) != 0
        || memcmp (s->nonce, t->nonce, sizeof s->nonce) != 0
        || memcmp (s->wrapped, t->wrapped, sizeof s->wrapped) != 0)
      return false;
  }
  return true;
}

static void
check (const uint8_t *buf, uint64_t lun_size)
{
  static uint8_t again[LG_HDR_SIZE];
  struct lg_header h, g;
  char err[256];

  if (lg_header_parse (buf, lun_size, &h, err, sizeof err) != 0) {
    if (memchr (err, '\0', sizeof err) == NULL || err[0] == '\0')
      abort (); /* a refusal always says why */
    return;
  }
  if (h.lun_size > lun_size
      || h.data_offset + h.nunits * LG_UNIT_SIZE > h.lun_size
      || h.data_offset < h.md_offset + h.md_size || h.nunits == 0)
    abort ();
  lg_header_serialize (&h, again);
  if (memcmp (buf, again, LG_HDR_SIZE) != 0)
    abort ();
  if (lg_header_parse (again, lun_size, &g, err, sizeof err) != 0)
    abort ();
  if (!same (&h, &g))
    abort ();
}

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
  static uint8_t buf[LG_HDR_SIZE];
  static const uint64_t sizes[] = {
    0,
    2 * 1024 * 1024 + 4096, /* the smallest volume */
    UINT64_C (1) << 30,
    UINT64_C (16) << 40,
    UINT64_MAX,
  };
  size_t n = size < LG_HDR_SIZE ? size : LG_HDR_SIZE;
  uint64_t stored = 0;

  memset (buf, 0, sizeof buf);
  memcpy (buf, data, n);
  /* Odd inputs get a correct checksum. */
  if (size & 1)
    crypto_generichash (buf + LG_HDR_SIZE - 32, 32, buf, LG_HDR_SIZE - 32, NULL,
                        0);
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
    check (buf, sizes[i]);
  /* The same block as an owner record (the checksum sits at the same
   * place): a valid one has a key and a printable host, and builds back
   * to the same block. */
  {
    struct lg_owner_rec r;
    uint8_t again[LG_OWNER_SIZE];

    lg_owner_parse (buf, &r);
    for (const char *p = r.host; *p; p++)
      if (*p < 0x20 || *p > 0x7e)
        abort ();
    if (r.valid) {
      if (r.key == 0)
        abort ();
      lg_owner_build (&r, again);
      lg_owner_parse (again, &r);
      if (!r.valid)
        abort ();
    }
  }
  /* The edges: the LUN exactly as large as the header says, and a byte
   * less. */
  for (int i = 7; i >= 0; i--)
    stored = (stored << 8) | buf[48 + i];
  check (buf, stored);
  check (buf, stored - 1);
  (void) lg_header_has_magic (buf);
  return 0;
}
