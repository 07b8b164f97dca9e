/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The slot codec: a unit sealed under a slot (nonce, tag, seq and flags)
 * and opened against what is stored.  Pure computation on the caller's
 * buffers; the nonce counter is atomic.  Any thread. */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "crypt/crypt-int.h"
#include "util/log.h"

void
lgc_slot_get (const uint8_t *md, unsigned j, unsigned k, struct slot *s)
{
  const uint8_t *p = md + j * 2 * LG_SLOT_BYTES + k * LG_SLOT_BYTES;

  memcpy (s->nonce, p, 24);
  memcpy (s->tag, p + 24, 16);
  s->seqflags = 0;
  for (int i = 7; i >= 0; i--)
    s->seqflags = (s->seqflags << 8) | p[40 + i];
}

void
lgc_slot_put (uint8_t *md, unsigned j, unsigned k, const struct slot *s)
{
  uint8_t *p = md + j * 2 * LG_SLOT_BYTES + k * LG_SLOT_BYTES;

  memcpy (p, s->nonce, 24);
  memcpy (p + 24, s->tag, 16);
  for (int i = 0; i < 8; i++)
    p[40 + i] = (uint8_t) (s->seqflags >> (8 * i));
}

bool
lgc_slot_empty (const struct slot *s)
{
  static const uint8_t zero[24];

  return s->seqflags == 0 && sodium_memcmp (s->nonce, zero, 24) == 0
      && sodium_memcmp (s->tag, zero, 16) == 0;
}

static void
make_ad (const struct cdev *x, uint64_t unit, uint64_t seqflags, uint8_t ad[32])
{
  memcpy (ad, x->h.uuid, 16);
  for (int i = 0; i < 8; i++) {
    ad[16 + i] = (uint8_t) (unit >> (8 * i));
    ad[24 + i] = (uint8_t) (seqflags >> (8 * i));
  }
}

static void
new_nonce (struct cdev *x, uint8_t nonce[24])
{
  uint64_t c = atomic_fetch_add (&x->counter, 1);

  memcpy (nonce, x->prefix, 16);
  for (int i = 0; i < 8; i++)
    nonce[16 + i] = (uint8_t) (c >> (8 * i));
}

/* MAC mode: Poly1305 with a one-time key from XChaCha20(nonce), over the
 * additional data and the data (len may be 0 for a ZERO slot). */
static void
mac_tag (const struct cdev *x, const uint8_t nonce[24], const uint8_t ad[32],
         const uint8_t *data, size_t len, uint8_t tag[16])
{
  crypto_onetimeauth_poly1305_state st;
  uint8_t otk[32];

  crypto_stream_xchacha20 (otk, sizeof otk, nonce, x->key);
  crypto_onetimeauth_poly1305_init (&st, otk);
  crypto_onetimeauth_poly1305_update (&st, ad, 32);
  if (len)
    crypto_onetimeauth_poly1305_update (&st, data, len);
  crypto_onetimeauth_poly1305_final (&st, tag);
  sodium_memzero (otk, sizeof otk);
  sodium_memzero (&st, sizeof st);
}

/* Seals one unit: fills s (nonce, tag, seqflags) and, in aead mode, out
 * with the ciphertext of in.  in == NULL seals a ZERO slot. */
void
lgc_seal (struct cdev *x, uint64_t unit, uint64_t seqflags, const uint8_t *in,
          uint8_t *out, struct slot *s)
{
  uint8_t ad[32], dummy[1] = { 0 };
  unsigned long long tl;

  s->seqflags = seqflags;
  new_nonce (x, s->nonce);
  make_ad (x, unit, seqflags, ad);
  if (x->h.mode == LG_MODE_AEAD)
    /* A ZERO slot seals the empty message (libsodium wants non-NULL
     * buffers even for zero bytes). */
    crypto_aead_xchacha20poly1305_ietf_encrypt_detached (
        in ? out : dummy, s->tag, &tl, in ? in : dummy, in ? LG_UNIT_SIZE : 0,
        ad, sizeof ad, NULL, s->nonce, x->key);
  else
    mac_tag (x, s->nonce, ad, in, in ? LG_UNIT_SIZE : 0, s->tag);
}

/* Checks one slot against the stored unit: 1 authentic data (plaintext
 * in out: decrypted in aead mode, copied in mac mode), 2 authentic ZERO
 * (out zeroed), 0 not authentic (out unspecified). */
int
lgc_open_slot (const struct cdev *x, uint64_t unit, const struct slot *s,
               const uint8_t *stored, uint8_t *out)
{
  uint8_t ad[32], tag[16], dummy[1] = { 0 };

  if (lgc_slot_empty (s))
    return 0;
  make_ad (x, unit, s->seqflags, ad);
  if (s->seqflags & SLOT_FLAG_ZERO) {
    /* A ZERO slot stands for a unit whose stored bytes are zeroes: were
     * it valid whatever the data, flipping a bit of a unit written after
     * it would silently read back zeroes. */
    if (stored == NULL || !sodium_is_zero (stored, LG_UNIT_SIZE))
      return 0;
    if (x->h.mode == LG_MODE_AEAD) {
      if (crypto_aead_xchacha20poly1305_ietf_decrypt_detached (
              NULL, NULL, dummy, 0, s->tag, ad, sizeof ad, s->nonce, x->key)
          != 0)
        return 0;
    }
    else {
      mac_tag (x, s->nonce, ad, NULL, 0, tag);
      if (crypto_verify_16 (tag, s->tag) != 0)
        return 0;
    }
    if (out)
      memset (out, 0, LG_UNIT_SIZE);
    return 2;
  }
  if (x->h.mode == LG_MODE_AEAD)
    return crypto_aead_xchacha20poly1305_ietf_decrypt_detached (
               out, NULL, stored, LG_UNIT_SIZE, s->tag, ad, sizeof ad, s->nonce,
               x->key)
        == 0;
  mac_tag (x, s->nonce, ad, stored, LG_UNIT_SIZE, tag);
  if (crypto_verify_16 (tag, s->tag) != 0)
    return 0;
  if (out && out != stored)
    memcpy (out, stored, LG_UNIT_SIZE);
  return 1;
}

/* Which slot authenticates unit (data in stored): 0 or 1, -1 if none.
 * The newer slot is tried first.  out receives the plaintext. */
int
lgc_current_slot (const struct cdev *x, uint64_t unit, const uint8_t *md,
                  unsigned j, const uint8_t *stored, uint8_t *out)
{
  struct slot s[2];
  int first;

  lgc_slot_get (md, j, 0, &s[0]);
  lgc_slot_get (md, j, 1, &s[1]);
  first = (s[1].seqflags >> 8) > (s[0].seqflags >> 8) ? 1 : 0;
  if (lgc_open_slot (x, unit, &s[first], stored, out))
    return first;
  if (lgc_open_slot (x, unit, &s[1 - first], stored, out))
    return 1 - first;
  return -1;
}

/* Either slot of unit j empty. */
bool
lgc_any_empty (const uint8_t *md, unsigned j)
{
  struct slot s0, s1;

  lgc_slot_get (md, j, 0, &s0);
  lgc_slot_get (md, j, 1, &s1);
  return lgc_slot_empty (&s0) || lgc_slot_empty (&s1);
}

/* On a lazy volume, a unit with one slot that does not authenticate and
 * one empty slot is a never-written unit whose first write failed or
 * crashed between its metadata and its data, but only where that can have
 * happened: the volume was left dirty, or a write failed in this session.
 * On a clean volume it is damage, and fails. */
bool
lgc_first_write_failed (const struct cdev *x, const uint8_t *md, unsigned j)
{
  return (x->h.flags & LG_HDR_FLAG_LAZY) && lgc_any_empty (md, j)
      && (x->was_dirty || atomic_load (&x->write_failed));
}

bool
lgc_both_empty (const uint8_t *md, unsigned j)
{
  struct slot s0, s1;

  lgc_slot_get (md, j, 0, &s0);
  lgc_slot_get (md, j, 1, &s1);
  return lgc_slot_empty (&s0) && lgc_slot_empty (&s1);
}
