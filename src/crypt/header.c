/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The on-disk header (man/lungate-format.5): serialisation, the checks
 * that make a hostile header harmless, key slots, the header MAC, and
 * reading and writing the two copies on a device.  Every length, count and
 * offset read from a disk is checked without overflow before use, and a
 * valid header has exactly one serialisation (reserved bytes and unused
 * fields must be zero), which the fuzz harness relies on.
 *
 * No shared state: any thread, one struct lg_header at a time.  Key
 * material lives in sodium_malloc'd memory or is wiped before returning.
 */
#include <config.h>

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <sodium.h>

#include "crypt/header.h"
#include "util/log.h"

/* Byte offsets in one copy. */
enum {
  OFF_MAGIC = 0,
  OFF_VERSION = 8,
  OFF_HDR_SIZE = 10,
  OFF_FLAGS = 12,
  OFF_UUID = 16,
  OFF_MODE = 32,
  OFF_UNIT_SIZE = 36,
  OFF_SEQ = 40,
  OFF_LUN_SIZE = 48,
  OFF_MD_OFFSET = 56,
  OFF_MD_SIZE = 64,
  OFF_DATA_OFFSET = 72,
  OFF_NUNITS = 80,
  OFF_UNITS_PER_MD = 88,
  OFF_SLOT_BYTES = 92,
  OFF_NKEYSLOTS = 96,
  OFF_RESERVED = 100,
  OFF_SLOTS = 104,
  SLOT_SIZE = 256,
  OFF_SLOTS_END = OFF_SLOTS + LG_KEYSLOTS * SLOT_SIZE,
  OFF_MAC = 4032,
  OFF_CHECKSUM = 4064,
};

/* Byte offsets in one key slot. */
enum {
  SL_KIND = 0,
  SL_RESERVED = 4,
  SL_OPSLIMIT = 8,
  SL_MEMLIMIT = 16,
  SL_SALT = 24,
  SL_NONCE = 40,
  SL_WRAPPED = 64,
  SL_END = 112,
};

#define MD_ALIGN (1024 * 1024) /* the metadata area is whole MiB */
#define AD_BYTES (LG_UUID_BYTES + 4 + 4)

/* A hostile header must not make us allocate more than this for Argon2id
 * (libsodium itself allows 4 TiB). */
#define PWHASH_MEMLIMIT_CAP (UINT64_C (4) << 30)
/* A hostile header must not make opening run Argon2id for hours either:
 * libsodium's "sensitive" level is 4 passes. */
#define PWHASH_OPSLIMIT_CAP 32

_Static_assert(OFF_SLOTS_END == 2152, "key slots end at 2152");
_Static_assert(OFF_SLOTS_END <= OFF_MAC, "key slots fit");
_Static_assert(OFF_CHECKSUM + 32 == LG_HDR_SIZE, "checksum ends the copy");
_Static_assert(SL_NONCE - SL_SALT == LG_SALT_BYTES, "salt");
_Static_assert(SL_WRAPPED - SL_NONCE
                   == crypto_aead_xchacha20poly1305_ietf_NPUBBYTES,
               "nonce");
_Static_assert(SL_END - SL_WRAPPED
                   == LG_KEY_BYTES + crypto_aead_xchacha20poly1305_ietf_ABYTES,
               "wrapped key");
_Static_assert(sizeof ((struct lg_keyslot *) 0)->wrapped
                   == (size_t) (SL_END - SL_WRAPPED),
               "struct lg_keyslot matches the format");
_Static_assert(LG_KEY_BYTES == crypto_aead_xchacha20poly1305_ietf_KEYBYTES,
               "wrapping key size");
_Static_assert(LG_KEY_BYTES == crypto_kdf_KEYBYTES, "master key size");
_Static_assert(LG_UNITS_PER_MD * 2 * LG_SLOT_BYTES <= LG_MD_BLOCK,
               "metadata block");
_Static_assert(LG_HDR_COPY1_OFFSET + LG_HDR_SIZE <= LG_HDR_AREA,
               "header copies fit the header area");

/* ---- little-endian fields ---- */

static void
put16 (uint8_t *p, uint16_t v)
{
  p[0] = (uint8_t) v;
  p[1] = (uint8_t) (v >> 8);
}

static void
put32 (uint8_t *p, uint32_t v)
{
  for (int i = 0; i < 4; i++)
    p[i] = (uint8_t) (v >> (8 * i));
}

static void
put64 (uint8_t *p, uint64_t v)
{
  for (int i = 0; i < 8; i++)
    p[i] = (uint8_t) (v >> (8 * i));
}

static uint16_t
get16 (const uint8_t *p)
{
  return (uint16_t) (p[0] | (p[1] << 8));
}

static uint32_t
get32 (const uint8_t *p)
{
  uint32_t v = 0;

  for (int i = 3; i >= 0; i--)
    v = (v << 8) | p[i];
  return v;
}

static uint64_t
get64 (const uint8_t *p)
{
  uint64_t v = 0;

  for (int i = 7; i >= 0; i--)
    v = (v << 8) | p[i];
  return v;
}

static bool
all_zero (const uint8_t *p, size_t n)
{
  for (size_t i = 0; i < n; i++)
    if (p[i])
      return false;
  return true;
}

static int fail (char *err, size_t errlen, const char *fmt, ...)
    __attribute__ ((format (printf, 3, 4)));

static int
fail (char *err, size_t errlen, const char *fmt, ...)
{
  if (err && errlen) {
    va_list ap;

    va_start (ap, fmt);
    vsnprintf (err, errlen, fmt, ap);
    va_end (ap);
  }
  errno = EINVAL;
  return -1;
}

/* ---- geometry ---- */

/* The metadata area for n units: ceil (n / 42) blocks of 4096 bytes,
 * rounded up to whole MiB.  false if that overflows. */
static bool
md_size_for (uint64_t n, uint64_t *md_size)
{
  uint64_t blocks = n / LG_UNITS_PER_MD + (n % LG_UNITS_PER_MD != 0);
  uint64_t per_mib = MD_ALIGN / LG_MD_BLOCK;
  uint64_t mib = blocks / per_mib + (blocks % per_mib != 0);

  if (mib > UINT64_MAX / MD_ALIGN)
    return false;
  *md_size = mib * MD_ALIGN;
  return true;
}

/* Where the areas of n units go: false if they overflow or do not fit
 * lun_size. */
static bool
layout (uint64_t n, uint64_t lun_size, uint64_t *md_size, uint64_t *data_offset)
{
  uint64_t md, data;

  if (!md_size_for (n, &md) || md > UINT64_MAX - LG_HDR_AREA)
    return false;
  data = LG_HDR_AREA + md;
  if (n > (UINT64_MAX - data) / LG_UNIT_SIZE
      || data + n * LG_UNIT_SIZE > lun_size)
    return false;
  *md_size = md;
  *data_offset = data;
  return true;
}

int
lg_header_geometry (struct lg_header *h, uint64_t lun_size)
{
  /* With k MiB of metadata, at most min (k * 10752, (lun_size - 1 MiB -
   * k MiB) / 4096) units fit.  The first term grows with k, the second
   * shrinks: the best k is one of the two integers around the crossing,
   * (lun_size - 1 MiB) / 43 MiB. */
  const uint64_t units_per_mib = (MD_ALIGN / LG_MD_BLOCK) * LG_UNITS_PER_MD;
  uint64_t room, k0, best = 0, md_size, data_offset;

  if (lun_size < LG_HDR_AREA) {
    errno = EINVAL;
    return -1;
  }
  room = lun_size - LG_HDR_AREA;
  k0 = room / (MD_ALIGN + units_per_mib * LG_UNIT_SIZE);
  for (uint64_t k = k0; k <= k0 + 1; k++) {
    uint64_t n;

    if (k == 0 || k > room / MD_ALIGN)
      continue;
    n = (room - k * MD_ALIGN) / LG_UNIT_SIZE;
    if (n > k * units_per_mib)
      n = k * units_per_mib;
    if (n > best)
      best = n;
  }
  if (best == 0) {
    errno = EINVAL;
    return -1;
  }
  if (!layout (best, lun_size, &md_size, &data_offset)) {
    assert (!"the chosen number of units fits");
    errno = EINVAL;
    return -1;
  }
  h->unit_size = LG_UNIT_SIZE;
  h->nunits = best;
  h->md_offset = LG_HDR_AREA;
  h->md_size = md_size;
  h->data_offset = data_offset;
  h->lun_size = lun_size;
  return 0;
}

/* ---- serialisation ---- */

static bool
pwhash_limits_ok (uint64_t opslimit, uint64_t memlimit)
{
  return opslimit >= crypto_pwhash_argon2id_OPSLIMIT_MIN
      && opslimit <= crypto_pwhash_argon2id_OPSLIMIT_MAX
      && opslimit <= PWHASH_OPSLIMIT_CAP
      && memlimit >= crypto_pwhash_argon2id_MEMLIMIT_MIN
      && memlimit <= PWHASH_MEMLIMIT_CAP
      && memlimit <= crypto_pwhash_argon2id_MEMLIMIT_MAX;
}

bool
lg_header_has_magic (const uint8_t buf[static LG_HDR_SIZE])
{
  return memcmp (buf + OFF_MAGIC, LG_HDR_MAGIC, 8) == 0;
}

void
lg_header_uuid_hex (const struct lg_header *h, char hex[LG_UUID_HEX])
{
  for (int i = 0; i < LG_UUID_BYTES; i++)
    snprintf (hex + 2 * i, 3, "%02x", h->uuid[i]);
}

#define FORMAT_MARK                                                            \
  "LUNGATE-FORMAT-UNDER-WAY\n"                                                 \
  "lungate format began here and did not finish: this LUN holds no\n"          \
  "volume; lungate format starts over.\n"

void
lg_header_format_mark (uint8_t buf[static LG_HDR_SIZE])
{
  memset (buf, 0, LG_HDR_SIZE);
  memcpy (buf, FORMAT_MARK, sizeof FORMAT_MARK - 1);
}

bool
lg_header_is_format_mark (const uint8_t buf[static LG_HDR_SIZE])
{
  uint8_t mark[LG_HDR_SIZE];

  lg_header_format_mark (mark);
  return memcmp (buf, mark, LG_HDR_SIZE) == 0;
}

void
lg_header_serialize (const struct lg_header *h, uint8_t buf[static LG_HDR_SIZE])
{
  memset (buf, 0, LG_HDR_SIZE);
  memcpy (buf + OFF_MAGIC, LG_HDR_MAGIC, 8);
  put16 (buf + OFF_VERSION, h->version);
  put16 (buf + OFF_HDR_SIZE, LG_HDR_SIZE);
  put32 (buf + OFF_FLAGS, h->flags);
  memcpy (buf + OFF_UUID, h->uuid, LG_UUID_BYTES);
  put32 (buf + OFF_MODE, h->mode);
  put32 (buf + OFF_UNIT_SIZE, h->unit_size);
  put64 (buf + OFF_SEQ, h->seq);
  put64 (buf + OFF_LUN_SIZE, h->lun_size);
  put64 (buf + OFF_MD_OFFSET, h->md_offset);
  put64 (buf + OFF_MD_SIZE, h->md_size);
  put64 (buf + OFF_DATA_OFFSET, h->data_offset);
  put64 (buf + OFF_NUNITS, h->nunits);
  put32 (buf + OFF_UNITS_PER_MD, LG_UNITS_PER_MD);
  put32 (buf + OFF_SLOT_BYTES, LG_SLOT_BYTES);
  put32 (buf + OFF_NKEYSLOTS, LG_KEYSLOTS);
  for (unsigned i = 0; i < LG_KEYSLOTS; i++) {
    const struct lg_keyslot *s = &h->slots[i];
    uint8_t *p = buf + OFF_SLOTS + i * SLOT_SIZE;

    put32 (p + SL_KIND, s->kind);
    put64 (p + SL_OPSLIMIT, s->opslimit);
    put64 (p + SL_MEMLIMIT, s->memlimit);
    memcpy (p + SL_SALT, s->salt, sizeof s->salt);
    memcpy (p + SL_NONCE, s->nonce, sizeof s->nonce);
    memcpy (p + SL_WRAPPED, s->wrapped, sizeof s->wrapped);
  }
  memcpy (buf + OFF_MAC, h->mac, sizeof h->mac);
  crypto_generichash (buf + OFF_CHECKSUM, 32, buf, OFF_CHECKSUM, NULL, 0);
}

static int
parse_slot (const uint8_t *p, unsigned i, struct lg_keyslot *s, char *err,
            size_t errlen)
{
  memset (s, 0, sizeof *s);
  s->kind = get32 (p + SL_KIND);
  s->opslimit = get64 (p + SL_OPSLIMIT);
  s->memlimit = get64 (p + SL_MEMLIMIT);
  memcpy (s->salt, p + SL_SALT, sizeof s->salt);
  memcpy (s->nonce, p + SL_NONCE, sizeof s->nonce);
  memcpy (s->wrapped, p + SL_WRAPPED, sizeof s->wrapped);

  switch (s->kind) {
  case LG_SLOT_EMPTY:
    if (!all_zero (p, SLOT_SIZE))
      return fail (err, errlen, "key slot %u: empty but not all zero", i);
    return 0;
  case LG_SLOT_PASSPHRASE:
    if (s->opslimit < crypto_pwhash_argon2id_OPSLIMIT_MIN
        || s->opslimit > crypto_pwhash_argon2id_OPSLIMIT_MAX)
      return fail (err, errlen,
                   "key slot %u: Argon2id opslimit %" PRIu64 " out of range", i,
                   s->opslimit);
    if (!pwhash_limits_ok (s->opslimit, s->memlimit))
      return fail (err, errlen,
                   "key slot %u: Argon2id memlimit %" PRIu64
                   " out of range (%u to %" PRIu64 " bytes)",
                   i, s->memlimit, crypto_pwhash_argon2id_MEMLIMIT_MIN,
                   (uint64_t) PWHASH_MEMLIMIT_CAP);
    break;
  case LG_SLOT_KEYFILE:
    if (s->opslimit || s->memlimit || !all_zero (s->salt, sizeof s->salt))
      return fail (err, errlen,
                   "key slot %u: key file slot with Argon2id parameters", i);
    break;
  default:
    return fail (err, errlen, "key slot %u: unknown kind %" PRIu32, i, s->kind);
  }
  if (!all_zero (p + SL_RESERVED, 4)
      || !all_zero (p + SL_END, SLOT_SIZE - SL_END))
    return fail (err, errlen, "key slot %u: reserved bytes not zero", i);
  return 0;
}

int
lg_header_parse (const uint8_t buf[static LG_HDR_SIZE], uint64_t lun_size,
                 struct lg_header *h, char *err, size_t errlen)
{
  struct lg_header t;
  uint8_t sum[32];
  uint32_t v;
  uint64_t md_size, data_offset, data_end;

  memset (h, 0, sizeof *h);
  memset (&t, 0, sizeof t);
  if (!lg_header_has_magic (buf))
    return fail (err, errlen, "bad magic: not a lungate header");
  t.version = get16 (buf + OFF_VERSION);
  if (t.version != LG_HDR_VERSION)
    return fail (err, errlen, "unsupported version %u (expected %u)", t.version,
                 LG_HDR_VERSION);
  if (get16 (buf + OFF_HDR_SIZE) != LG_HDR_SIZE)
    return fail (err, errlen, "bad header size %u (expected %u)",
                 get16 (buf + OFF_HDR_SIZE), LG_HDR_SIZE);
  crypto_generichash (sum, sizeof sum, buf, OFF_CHECKSUM, NULL, 0);
  if (memcmp (sum, buf + OFF_CHECKSUM, sizeof sum) != 0)
    return fail (err, errlen, "bad checksum");

  t.flags = get32 (buf + OFF_FLAGS);
  if (t.flags & ~(uint32_t) (LG_HDR_FLAG_LAZY | LG_HDR_FLAG_DIRTY))
    return fail (err, errlen, "unknown flags 0x%" PRIx32, t.flags);
  memcpy (t.uuid, buf + OFF_UUID, LG_UUID_BYTES);
  t.mode = get32 (buf + OFF_MODE);
  if (t.mode != LG_MODE_AEAD && t.mode != LG_MODE_MAC)
    return fail (err, errlen, "unknown mode %" PRIu32, t.mode);
  t.unit_size = get32 (buf + OFF_UNIT_SIZE);
  if (t.unit_size != LG_UNIT_SIZE)
    return fail (err, errlen, "unit size %" PRIu32 " is not %u", t.unit_size,
                 LG_UNIT_SIZE);
  if ((v = get32 (buf + OFF_UNITS_PER_MD)) != LG_UNITS_PER_MD)
    return fail (err, errlen,
                 "%" PRIu32 " units per metadata block (expected %u)", v,
                 LG_UNITS_PER_MD);
  if ((v = get32 (buf + OFF_SLOT_BYTES)) != LG_SLOT_BYTES)
    return fail (err, errlen, "metadata slot size %" PRIu32 " (expected %u)", v,
                 LG_SLOT_BYTES);
  if ((v = get32 (buf + OFF_NKEYSLOTS)) != LG_KEYSLOTS)
    return fail (err, errlen, "%" PRIu32 " key slots (expected %u)", v,
                 LG_KEYSLOTS);
  if (get32 (buf + OFF_RESERVED) != 0)
    return fail (err, errlen, "reserved field at offset %d not zero",
                 OFF_RESERVED);

  /* Geometry: exactly what lg_header_geometry's formula gives for the
   * stored number of units, inside the stored LUN size, itself no larger
   * than the LUN now. */
  t.seq = get64 (buf + OFF_SEQ);
  t.lun_size = get64 (buf + OFF_LUN_SIZE);
  t.md_offset = get64 (buf + OFF_MD_OFFSET);
  t.md_size = get64 (buf + OFF_MD_SIZE);
  t.data_offset = get64 (buf + OFF_DATA_OFFSET);
  t.nunits = get64 (buf + OFF_NUNITS);
  if (t.lun_size > lun_size)
    return fail (err, errlen,
                 "the LUN has %" PRIu64 " bytes, fewer than the %" PRIu64
                 " it was formatted with",
                 lun_size, t.lun_size);
  if (t.nunits == 0)
    return fail (err, errlen, "no data units");
  if (t.md_offset != LG_HDR_AREA)
    return fail (err, errlen, "metadata offset %" PRIu64 " (expected %u)",
                 t.md_offset, LG_HDR_AREA);
  if (!md_size_for (t.nunits, &md_size))
    return fail (err, errlen, "metadata area for %" PRIu64 " units overflows",
                 t.nunits);
  if (t.md_size != md_size)
    return fail (err, errlen,
                 "metadata size %" PRIu64 " does not match %" PRIu64
                 " units (expected %" PRIu64 ")",
                 t.md_size, t.nunits, md_size);
  if (t.lun_size < LG_HDR_AREA || md_size > t.lun_size - LG_HDR_AREA)
    return fail (err, errlen, "metadata area overflows the LUN");
  data_offset = t.md_offset + t.md_size;
  if (t.data_offset != data_offset)
    return fail (err, errlen, "data offset %" PRIu64 " (expected %" PRIu64 ")",
                 t.data_offset, data_offset);
  if (t.nunits > (t.lun_size - data_offset) / LG_UNIT_SIZE)
    return fail (err, errlen, "data area (%" PRIu64 " units) overflows the LUN",
                 t.nunits);
  data_end = data_offset + t.nunits * LG_UNIT_SIZE;
  assert (data_end <= t.lun_size);

  for (unsigned i = 0; i < LG_KEYSLOTS; i++)
    if (parse_slot (buf + OFF_SLOTS + i * SLOT_SIZE, i, &t.slots[i], err,
                    errlen)
        < 0)
      return -1;
  if (!all_zero (buf + OFF_SLOTS_END, OFF_MAC - OFF_SLOTS_END))
    return fail (err, errlen, "reserved bytes %d..%d not zero", OFF_SLOTS_END,
                 OFF_MAC - 1);
  memcpy (t.mac, buf + OFF_MAC, sizeof t.mac);
  *h = t;
  return 0;
}

/* ---- key slots ---- */

static int
init_sodium (void)
{
  if (sodium_init () < 0) {
    errno = ENOMEM;
    return -1;
  }
  return 0;
}

/* A slot's wrapped key is bound to the volume, the slot and its kind. */
static void
slot_ad (uint8_t ad[AD_BYTES], const struct lg_header *h, unsigned slot,
         uint32_t kind)
{
  memcpy (ad, h->uuid, LG_UUID_BYTES);
  put32 (ad + LG_UUID_BYTES, slot);
  put32 (ad + LG_UUID_BYTES + 4, kind);
}

static void
wrap (struct lg_header *h, unsigned slot, struct lg_keyslot *s,
      const uint8_t *mk, const uint8_t *key)
{
  uint8_t ad[AD_BYTES];

  slot_ad (ad, h, slot, s->kind);
  randombytes_buf (s->nonce, sizeof s->nonce);
  crypto_aead_xchacha20poly1305_ietf_encrypt (
      s->wrapped, NULL, mk, LG_KEY_BYTES, ad, sizeof ad, NULL, s->nonce, key);
  h->slots[slot] = *s;
}

/* 0 and the master key in mk if slot i opens with key; -1 otherwise (mk
 * is then zeroed by libsodium). */
static int
unwrap (const struct lg_header *h, unsigned i, const uint8_t *key, uint8_t *mk)
{
  const struct lg_keyslot *s = &h->slots[i];
  uint8_t ad[AD_BYTES];

  slot_ad (ad, h, i, s->kind);
  return crypto_aead_xchacha20poly1305_ietf_decrypt (mk, NULL, NULL, s->wrapped,
                                                     sizeof s->wrapped, ad,
                                                     sizeof ad, s->nonce, key);
}

/* Argon2id of the passphrase with the slot's salt and limits into key. */
static int
passphrase_key (uint8_t *key, const char *passphrase,
                const struct lg_keyslot *s)
{
  if (crypto_pwhash (key, LG_KEY_BYTES, passphrase, strlen (passphrase),
                     s->salt, s->opslimit, (size_t) s->memlimit,
                     crypto_pwhash_ALG_ARGON2ID13)
      != 0) {
    errno = ENOMEM;
    return -1;
  }
  return 0;
}

int
lg_keyslot_set_passphrase (struct lg_header *h, unsigned slot,
                           const uint8_t *mk, const char *passphrase,
                           uint64_t opslimit, uint64_t memlimit)
{
  struct lg_keyslot s;
  uint8_t *key;

  if (slot >= LG_KEYSLOTS || !pwhash_limits_ok (opslimit, memlimit)) {
    errno = EINVAL;
    return -1;
  }
  if (init_sodium () < 0)
    return -1;
  key = sodium_malloc (LG_KEY_BYTES);
  if (key == NULL)
    return -1;
  memset (&s, 0, sizeof s);
  s.kind = LG_SLOT_PASSPHRASE;
  s.opslimit = opslimit;
  s.memlimit = memlimit;
  randombytes_buf (s.salt, sizeof s.salt);
  if (passphrase_key (key, passphrase, &s) < 0) {
    sodium_free (key);
    return -1;
  }
  wrap (h, slot, &s, mk, key);
  sodium_free (key); /* wipes */
  return 0;
}

int
lg_keyslot_set_keyfile (struct lg_header *h, unsigned slot, const uint8_t *mk,
                        const uint8_t key[static LG_KEY_BYTES])
{
  struct lg_keyslot s;

  if (slot >= LG_KEYSLOTS) {
    errno = EINVAL;
    return -1;
  }
  if (init_sodium () < 0)
    return -1;
  memset (&s, 0, sizeof s);
  s.kind = LG_SLOT_KEYFILE;
  wrap (h, slot, &s, mk, key);
  return 0;
}

int
lg_keyslot_open_passphrase (const struct lg_header *h, const char *passphrase,
                            uint8_t *mk)
{
  uint8_t *key;

  if (init_sodium () < 0)
    return -1;
  key = sodium_malloc (LG_KEY_BYTES);
  if (key == NULL)
    return -1;
  for (unsigned i = 0; i < LG_KEYSLOTS; i++) {
    const struct lg_keyslot *s = &h->slots[i];

    /* h may not come from lg_header_parse: check the limits again. */
    if (s->kind != LG_SLOT_PASSPHRASE
        || !pwhash_limits_ok (s->opslimit, s->memlimit))
      continue;
    if (passphrase_key (key, passphrase, s) < 0) {
      lg_warn ("key slot %u: Argon2id failed (%" PRIu64
               " bytes of memory): slot skipped",
               i, s->memlimit);
      continue;
    }
    if (unwrap (h, i, key, mk) == 0) {
      sodium_free (key);
      return (int) i;
    }
  }
  sodium_free (key);
  sodium_memzero (mk, LG_KEY_BYTES);
  errno = EACCES;
  return -1;
}

int
lg_keyslot_open_keyfile (const struct lg_header *h,
                         const uint8_t key[static LG_KEY_BYTES], uint8_t *mk)
{
  if (init_sodium () < 0)
    return -1;
  for (unsigned i = 0; i < LG_KEYSLOTS; i++)
    if (h->slots[i].kind == LG_SLOT_KEYFILE && unwrap (h, i, key, mk) == 0)
      return (int) i;
  sodium_memzero (mk, LG_KEY_BYTES);
  errno = EACCES;
  return -1;
}

int
lg_keyslot_free (const struct lg_header *h)
{
  for (unsigned i = 0; i < LG_KEYSLOTS; i++)
    if (h->slots[i].kind == LG_SLOT_EMPTY)
      return (int) i;
  return -1;
}

/* ---- subkeys and the header MAC ---- */

void
lg_derive_subkey (uint8_t out[static 32], const uint8_t *mk, enum lg_subkey id)
{
  crypto_kdf_derive_from_key (out, 32, (uint64_t) id, "lungate1", mk);
}

/* The MAC covers the serialisation up to the MAC with seq zeroed: the two
 * copies, which differ only in seq while an update is under way, share
 * it. */
static void
header_mac (uint8_t mac[32], const struct lg_header *h, const uint8_t *mk)
{
  uint8_t buf[LG_HDR_SIZE], key[32];

  lg_header_serialize (h, buf);
  memset (buf + OFF_SEQ, 0, 8);
  lg_derive_subkey (key, mk, LG_SUBKEY_HEADER_MAC);
  crypto_generichash (mac, 32, buf, OFF_MAC, key, sizeof key);
  sodium_memzero (key, sizeof key);
}

void
lg_header_set_mac (struct lg_header *h, const uint8_t *mk)
{
  header_mac (h->mac, h, mk);
}

int
lg_header_check_mac (const struct lg_header *h, const uint8_t *mk)
{
  uint8_t mac[32];
  int r;

  header_mac (mac, h, mk);
  r = crypto_verify_32 (mac, h->mac);
  sodium_memzero (mac, sizeof mac);
  if (r != 0) {
    errno = EILSEQ;
    return -1;
  }
  return 0;
}

/* ---- the two copies on a device ---- */

static const uint64_t copy_offset[2]
    = { LG_HDR_COPY0_OFFSET, LG_HDR_COPY1_OFFSET };

/* Reads both copies into buf.  -1 (errno from the device, or EINVAL with
 * err set when the device cannot hold them) on failure. */
int
lg_header_read_copies (struct lg_dev *dev, uint8_t buf[2][LG_HDR_SIZE],
                       char *err, size_t errlen)
{
  for (int c = 0; c < 2; c++) {
    if (lg_dev_size (dev) < copy_offset[c] + LG_HDR_SIZE) {
      /* Too small for a volume; a lone magic at 0 still says what it is. */
      if (c == 1 && lg_header_has_magic (buf[0]))
        return fail (err, errlen,
                     "the device (%" PRIu64 " bytes) is too small for a "
                     "lungate volume",
                     lg_dev_size (dev));
      if (err && errlen)
        snprintf (err, errlen,
                  "no lungate header (the device has %" PRIu64 " bytes)",
                  lg_dev_size (dev));
      errno = ENOENT;
      return -1;
    }
    if (lg_dev_pread (dev, buf[c], LG_HDR_SIZE, copy_offset[c]) < 0) {
      int saved = errno;

      if (err && errlen)
        snprintf (err, errlen, "reading header copy %d: %s", c,
                  strerror (saved));
      errno = saved;
      return -1;
    }
  }
  return 0;
}

int
lg_header_read_all (struct lg_dev *dev, struct lg_header hc[2], unsigned *n,
                    char *err, size_t errlen)
{
  uint8_t buf[2][LG_HDR_SIZE];
  struct lg_header p[2];
  char why[2][200];
  int r[2], c, o;

  memset (buf, 0, sizeof buf);
  if (lg_header_read_copies (dev, buf, err, errlen) < 0)
    return -1;
  if (!lg_header_has_magic (buf[0]) && !lg_header_has_magic (buf[1])) {
    if (err && errlen)
      snprintf (err, errlen, "no lungate header");
    errno = ENOENT;
    return -1;
  }
  for (c = 0; c < 2; c++)
    r[c] = lg_header_parse (buf[c], lg_dev_size (dev), &p[c], why[c],
                            sizeof why[c]);
  if (r[0] < 0 && r[1] < 0)
    return fail (err, errlen, "header copy 0: %s; header copy 1: %s", why[0],
                 why[1]);

  /* The newest valid copy; copy 0 when both are valid with one seq. */
  c = r[0] == 0 && (r[1] < 0 || p[0].seq >= p[1].seq) ? 0 : 1;
  o = 1 - c;
  hc[0] = p[c];
  *n = 1;
  if (r[o] < 0)
    lg_warn ("%s: header copy %d is damaged (%s); the next header update "
             "rewrites it",
             dev->name, o, why[o]);
  else if (memcmp (buf[c], buf[o], LG_HDR_SIZE) != 0) {
    lg_debug ("%s: header copy %d is older (seq %" PRIu64
              ", copy %d has %" PRIu64 ")",
              dev->name, o, p[o].seq, c, p[c].seq);
    hc[(*n)++] = p[o];
  }
  sodium_memzero (p, sizeof p);
  return 0;
}

int
lg_header_read (struct lg_dev *dev, struct lg_header *h, char *err,
                size_t errlen)
{
  struct lg_header hc[2];
  unsigned n;

  if (lg_header_read_all (dev, hc, &n, err, errlen) < 0)
    return -1;
  *h = hc[0];
  sodium_memzero (hc, sizeof hc);
  return 0;
}

int
lg_header_write (struct lg_dev *dev, struct lg_header *h)
{
  uint8_t buf[2][LG_HDR_SIZE], out[LG_HDR_SIZE];
  struct lg_header hc[2];
  char err[256];
  int r[2], first;
  uint64_t seq = h->seq;

  memset (buf, 0, sizeof buf);
  if (lg_header_read_copies (dev, buf, err, sizeof err) < 0) {
    int saved = errno;

    lg_error ("%s: writing the header: %s", dev->name, err);
    errno = saved == ENOENT ? EINVAL : saved;
    return -1;
  }
  for (int c = 0; c < 2; c++) {
    r[c] = lg_header_parse (buf[c], lg_dev_size (dev), &hc[c], NULL, 0);
    /* The new copies must win over anything on the disk, even if h was
     * not read from it. */
    if (r[c] == 0 && hc[c].seq > seq)
      seq = hc[c].seq;
  }
  if (seq == UINT64_MAX) {
    lg_error ("%s: header sequence number exhausted", dev->name);
    errno = EINVAL;
    return -1;
  }
  /* The older copy first: a damaged one is the oldest. */
  if (r[0] < 0)
    first = 0;
  else if (r[1] < 0)
    first = 1;
  else
    first = hc[0].seq <= hc[1].seq ? 0 : 1;

  hc[0] = *h;
  hc[0].seq = seq + 1;
  lg_header_serialize (&hc[0], out);
  /* Never replace a volume's header with one that would not open. */
  if (lg_header_parse (out, lg_dev_size (dev), &hc[1], err, sizeof err) < 0) {
    lg_error ("%s: refusing to write an invalid header: %s", dev->name, err);
    errno = EINVAL;
    return -1;
  }
  h->seq = seq + 1;
  for (int i = 0; i < 2; i++) {
    int c = i == 0 ? first : 1 - first;

    if (lg_dev_pwrite (dev, out, LG_HDR_SIZE, copy_offset[c], 0) < 0
        || lg_dev_flush (dev) < 0)
      return -1;
  }
  return 0;
}
