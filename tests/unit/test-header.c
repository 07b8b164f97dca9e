/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The on-disk header: round trips, geometry, every hostile field refused
 * with a message naming it, key slots, the header MAC, and the two copies
 * on an in-memory device that can be made to fail or tear a write. */
#include <config.h>

#include <criterion/criterion.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "crypt/header.h"
#include "util/log.h"

#define MiB (UINT64_C (1) << 20)
#define GiB (UINT64_C (1) << 30)
#define TiB (UINT64_C (1) << 40)
#define DEV_SIZE (8 * MiB)

static char err[256];
static uint8_t *mk;
static char last_warning[1024];
static unsigned nwarnings;

static void
capture (enum lg_log_level level, const char *msg)
{
  if (level == LG_LOG_WARN) {
    nwarnings++;
    snprintf (last_warning, sizeof last_warning, "%s", msg);
  }
}

static void
setup (void)
{
  cr_assert_geq (sodium_init (), 0);
  mk = sodium_malloc (LG_KEY_BYTES);
  cr_assert_not_null (mk);
  for (int i = 0; i < LG_KEY_BYTES; i++)
    mk[i] = (uint8_t) (0x40 + i);
  lg_log_set_sink (capture);
  last_warning[0] = '\0';
  nwarnings = 0;
}

static void
teardown (void)
{
  sodium_free (mk);
  lg_log_set_sink (NULL);
}

TestSuite (header, .init = setup, .fini = teardown);

/* A valid header: aead, a passphrase slot 0 (built by hand: no Argon2id
 * needed to parse it) and a key file slot 3. */
static void
make_header (struct lg_header *h, uint64_t lun_size)
{
  memset (h, 0, sizeof *h);
  h->version = LG_HDR_VERSION;
  h->mode = LG_MODE_AEAD;
  h->seq = 7;
  for (int i = 0; i < LG_UUID_BYTES; i++)
    h->uuid[i] = (uint8_t) (0xa0 + i);
  cr_assert_eq (lg_header_geometry (h, lun_size), 0);
  h->slots[0].kind = LG_SLOT_PASSPHRASE;
  h->slots[0].opslimit = 2;
  h->slots[0].memlimit = 65536;
  memset (h->slots[0].salt, 0x11, sizeof h->slots[0].salt);
  memset (h->slots[0].nonce, 0x22, sizeof h->slots[0].nonce);
  memset (h->slots[0].wrapped, 0x33, sizeof h->slots[0].wrapped);
  h->slots[3].kind = LG_SLOT_KEYFILE;
  memset (h->slots[3].nonce, 0x44, sizeof h->slots[3].nonce);
  memset (h->slots[3].wrapped, 0x55, sizeof h->slots[3].wrapped);
  memset (h->mac, 0x66, sizeof h->mac);
}

static void
fix_checksum (uint8_t *buf)
{
  crypto_generichash (buf + 4064, 32, buf, 4064, NULL, 0);
}

static void
put_le (uint8_t *p, unsigned width, uint64_t v)
{
  for (unsigned i = 0; i < width; i++)
    p[i] = (uint8_t) (v >> (8 * i));
}

static void
assert_same (const struct lg_header *a, const struct lg_header *b)
{
  cr_assert_eq (a->version, b->version);
  cr_assert_eq (a->flags, b->flags);
  cr_assert_arr_eq (a->uuid, b->uuid, LG_UUID_BYTES);
  cr_assert_eq (a->mode, b->mode);
  cr_assert_eq (a->unit_size, b->unit_size);
  cr_assert_eq (a->seq, b->seq);
  cr_assert_eq (a->lun_size, b->lun_size);
  cr_assert_eq (a->md_offset, b->md_offset);
  cr_assert_eq (a->md_size, b->md_size);
  cr_assert_eq (a->data_offset, b->data_offset);
  cr_assert_eq (a->nunits, b->nunits);
  for (int i = 0; i < LG_KEYSLOTS; i++) {
    cr_assert_eq (a->slots[i].kind, b->slots[i].kind);
    cr_assert_eq (a->slots[i].opslimit, b->slots[i].opslimit);
    cr_assert_eq (a->slots[i].memlimit, b->slots[i].memlimit);
    cr_assert_arr_eq (a->slots[i].salt, b->slots[i].salt, LG_SALT_BYTES);
    cr_assert_arr_eq (a->slots[i].nonce, b->slots[i].nonce, 24);
    cr_assert_arr_eq (a->slots[i].wrapped, b->slots[i].wrapped,
                      sizeof a->slots[i].wrapped);
  }
  cr_assert_arr_eq (a->mac, b->mac, 32);
}

/* ---- serialisation ---- */

Test (header, round_trip)
{
  struct lg_header h, p;
  uint8_t buf[LG_HDR_SIZE], again[LG_HDR_SIZE];

  make_header (&h, 1 * GiB);
  h.flags = LG_HDR_FLAG_LAZY;
  h.mode = LG_MODE_MAC;
  lg_header_serialize (&h, buf);
  cr_assert (lg_header_has_magic (buf));
  cr_assert_eq (memcmp (buf, "LUNGATE\0", 8), 0);
  cr_assert_eq (lg_header_parse (buf, 1 * GiB, &p, err, sizeof err), 0, "%s",
                err);
  assert_same (&h, &p);
  lg_header_serialize (&p, again);
  cr_assert_arr_eq (buf, again, LG_HDR_SIZE);
  /* The LUN may have grown since. */
  cr_assert_eq (lg_header_parse (buf, 2 * GiB, &p, err, sizeof err), 0, "%s",
                err);
  cr_assert_eq (p.lun_size, 1 * GiB);
}

Test (header, layout_of_fields)
{
  struct lg_header h;
  uint8_t buf[LG_HDR_SIZE];

  make_header (&h, 1 * GiB);
  h.seq = 0x0102030405060708;
  lg_header_serialize (&h, buf);
  cr_assert_eq (buf[8], 1);                    /* version */
  cr_assert_eq (buf[10] | buf[11] << 8, 4096); /* header size */
  cr_assert_eq (buf[16], 0xa0);                /* uuid */
  cr_assert_eq (buf[32], LG_MODE_AEAD);        /* mode */
  cr_assert_eq (buf[36] | buf[37] << 8, 4096); /* unit size */
  cr_assert_eq (buf[40], 0x08);                /* seq, LE */
  cr_assert_eq (buf[47], 0x01);
  cr_assert_eq (buf[88], 42);                         /* units per md */
  cr_assert_eq (buf[92], 48);                         /* slot bytes */
  cr_assert_eq (buf[96], 8);                          /* key slots */
  cr_assert_eq (buf[104], LG_SLOT_PASSPHRASE);        /* slot 0 kind */
  cr_assert_eq (buf[104 + 8], 2);                     /* opslimit */
  cr_assert_eq (buf[104 + 24], 0x11);                 /* salt */
  cr_assert_eq (buf[104 + 40], 0x22);                 /* nonce */
  cr_assert_eq (buf[104 + 64], 0x33);                 /* wrapped */
  cr_assert_eq (buf[104 + 3 * 256], LG_SLOT_KEYFILE); /* slot 3 kind */
  cr_assert_eq (buf[4032], 0x66);                     /* mac */
}

/* ---- geometry ---- */

/* The format's rule, computed independently in 128 bits. */
static bool
fits (uint64_t n, uint64_t lun_size)
{
  unsigned __int128 blocks = (n + (unsigned __int128) 41) / 42;
  unsigned __int128 md = (blocks * 4096 + MiB - 1) / MiB * MiB;

  return n >= 1 && MiB + md + (unsigned __int128) n * 4096 <= lun_size;
}

static void
check_geometry (uint64_t lun_size)
{
  struct lg_header h, p;
  uint8_t buf[LG_HDR_SIZE];

  make_header (&h, lun_size);
  cr_assert_eq (h.unit_size, 4096);
  cr_assert_eq (h.lun_size, lun_size);
  cr_assert_eq (h.md_offset, MiB);
  cr_assert_eq (h.md_size % MiB, 0);
  cr_assert_geq (h.md_size / 4096 * 42, h.nunits);
  cr_assert_eq (h.data_offset, h.md_offset + h.md_size);
  cr_assert (fits (h.nunits, lun_size), "%llu units in %llu",
             (unsigned long long) h.nunits, (unsigned long long) lun_size);
  cr_assert (!fits (h.nunits + 1, lun_size), "%llu units is not the most",
             (unsigned long long) h.nunits);
  lg_header_serialize (&h, buf);
  cr_assert_eq (lg_header_parse (buf, lun_size, &p, err, sizeof err), 0,
                "%llu: %s", (unsigned long long) lun_size, err);
  cr_assert_eq (p.nunits, h.nunits);
}

Test (header, geometry)
{
  struct lg_header h;
  const uint64_t sizes[] = {
    2 * MiB + 4096,
    2 * MiB + 8191,
    3 * MiB,
    1 * GiB,
    1 * GiB + 512,
    43 * MiB + MiB,
    43 * MiB + MiB - 1,
    43 * MiB + MiB + 1,
    43 * MiB + MiB + 4096,
    86 * MiB + MiB,
    16 * TiB,
    UINT64_MAX,
    UINT64_MAX - 4095,
    UINT64_MAX / 2,
  };

  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
    check_geometry (sizes[i]);

  /* Around every boundary of the metadata area for a few hundred MiB. */
  for (uint64_t k = 1; k < 12; k++)
    for (int64_t d = -8192; d <= 8192; d += 512)
      check_geometry ((uint64_t) ((int64_t) (k * 43 * MiB + MiB) + d));

  make_header (&h, 1 * GiB);
  /* 1 GiB: 1 MiB header, 24 MiB of metadata, 999 MiB of data. */
  cr_assert_eq (h.nunits, 255744);
  cr_assert_eq (h.md_size, 24 * MiB);
  cr_assert_eq (h.data_offset, 25 * MiB);
  make_header (&h, 16 * TiB);
  cr_assert_eq (h.data_offset + h.nunits * 4096 <= 16 * TiB, true);
  cr_assert_gt (h.nunits, 16 * TiB / 4096 * 42 / 43 - 10752);
  make_header (&h, UINT64_MAX);
  cr_assert_gt (h.nunits, UINT64_MAX / 4096 * 42 / 43 - 10752);
}

Test (header, geometry_too_small)
{
  struct lg_header h;
  const uint64_t sizes[] = { 0, 1, 4096, MiB, 2 * MiB, 2 * MiB + 4095 };

  memset (&h, 0, sizeof h);
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    errno = 0;
    cr_assert_eq (lg_header_geometry (&h, sizes[i]), -1);
    cr_assert_eq (errno, EINVAL);
  }
}

Test (header, geometry_leaves_other_fields)
{
  struct lg_header h;

  memset (&h, 0x5a, sizeof h);
  cr_assert_eq (lg_header_geometry (&h, 1 * GiB), 0);
  cr_assert_eq (h.mode, 0x5a5a5a5a);
  cr_assert_eq (h.seq, 0x5a5a5a5a5a5a5a5a);
  cr_assert_eq (h.uuid[0], 0x5a);
}

/* ---- hostile input ---- */

Test (header, every_byte_is_checked)
{
  struct lg_header h, p;
  uint8_t buf[LG_HDR_SIZE];

  make_header (&h, 1 * GiB);
  for (size_t off = 0; off < LG_HDR_SIZE; off++) {
    lg_header_serialize (&h, buf);
    buf[off] ^= 0x01;
    cr_assert_eq (lg_header_parse (buf, 1 * GiB, &p, err, sizeof err), -1,
                  "flipped byte %zu accepted", off);
    cr_assert_eq (errno, EINVAL);
    if (off >= 12)
      cr_assert_str_eq (err, "bad checksum", "byte %zu: %s", off, err);
  }
}

Test (header, rejects_no_magic)
{
  struct lg_header p;
  uint8_t buf[LG_HDR_SIZE];

  memset (buf, 0, sizeof buf);
  cr_assert (!lg_header_has_magic (buf));
  cr_assert_eq (lg_header_parse (buf, 1 * GiB, &p, err, sizeof err), -1);
  cr_assert_not_null (strstr (err, "magic"), "%s", err);
}

struct field {
  unsigned off, width;
  uint64_t v;
};

struct mutation {
  const char *name;
  struct field f[4]; /* width 0 ends */
  const char *want;
  uint64_t lun_size; /* the argument to parse; 0: 1 GiB */
};

#define S0 (104)           /* slot 0: passphrase */
#define S3 (104 + 3 * 256) /* slot 3: key file */
#define S5 (104 + 5 * 256) /* slot 5: empty */

#define MUT(name, want, ...)                                                   \
  {                                                                            \
    name, { __VA_ARGS__ }, want, 0                                             \
  }

static const struct mutation mutations[] = {
  MUT ("version 0", "unsupported version 0", { 8, 2, 0 }),
  MUT ("version 2", "unsupported version 2", { 8, 2, 2 }),
  MUT ("header size", "bad header size 512", { 10, 2, 512 }),
  MUT ("flags bit 2", "unknown flags 0x4", { 12, 4, 4 }),
  MUT ("flags high", "unknown flags", { 12, 4, 0x80000001 }),
  MUT ("mode 0", "unknown mode 0", { 32, 4, 0 }),
  MUT ("mode 7", "unknown mode 7", { 32, 4, 7 }),
  MUT ("mode huge", "unknown mode", { 32, 4, 0xffffffff }),
  MUT ("unit size 512", "unit size 512", { 36, 4, 512 }),
  MUT ("unit size 0", "unit size 0", { 36, 4, 0 }),
  MUT ("units per md", "units per metadata block", { 88, 4, 43 }),
  MUT ("slot bytes", "metadata slot size", { 92, 4, 0 }),
  MUT ("nkeyslots 9", "key slots", { 96, 4, 9 }),
  MUT ("nkeyslots huge", "key slots", { 96, 4, 0xffffffff }),
  MUT ("reserved 100", "reserved field", { 100, 4, 1 }),
  { "LUN shrank", { { 0, 0, 0 } }, "fewer than", GiB - 4096 },
  MUT ("lun_size huge", "fewer than", { 48, 8, UINT64_MAX }),
  MUT ("lun_size tiny", "metadata area overflows the LUN", { 48, 8, 4096 }),
  MUT ("lun_size 0", "overflows the LUN", { 48, 8, 0 }),
  MUT ("lun_size short by 1", "data area", { 48, 8, GiB - 1 }),
  MUT ("nunits 0", "no data units", { 80, 8, 0 }),
  MUT ("nunits max", "overflows", { 80, 8, UINT64_MAX }),
  MUT ("nunits +1", "data area", { 80, 8, 255745 }),
  MUT ("nunits half", "metadata size", { 80, 8, 255744 / 2 }),
  MUT ("md_offset 0", "metadata offset 0", { 56, 8, 0 }),
  MUT ("md_offset huge", "metadata offset", { 56, 8, UINT64_MAX - 4095 }),
  MUT ("md_size 0", "metadata size 0", { 64, 8, 0 }),
  MUT ("md_size huge", "metadata size", { 64, 8, UINT64_MAX }),
  MUT ("md_size +4096", "metadata size", { 64, 8, 24 * MiB + 4096 }),
  MUT ("md_size -1 MiB", "metadata size", { 64, 8, 23 * MiB }),
  MUT ("data_offset 0", "data offset 0", { 72, 8, 0 }),
  MUT ("data_offset huge", "data offset", { 72, 8, UINT64_MAX }),
  MUT ("data_offset in md", "data offset", { 72, 8, 2 * MiB }),
  MUT ("slot kind 3", "key slot 0: unknown kind 3", { S0, 4, 3 }),
  MUT ("slot kind huge", "key slot 3: unknown kind", { S3, 4, 0xffffffff }),
  MUT ("empty slot dirty", "key slot 5: empty", { S5 + 100, 1, 1 }),
  MUT ("empty slot last byte", "key slot 5: empty", { S5 + 255, 1, 1 }),
  MUT ("opslimit 0", "key slot 0: Argon2id opslimit 0", { S0 + 8, 8, 0 }),
  MUT ("opslimit 2^32", "opslimit", { S0 + 8, 8, UINT64_C (1) << 32 }),
  MUT ("opslimit max", "opslimit", { S0 + 8, 8, UINT64_MAX }),
  MUT ("memlimit 0", "key slot 0: Argon2id memlimit 0", { S0 + 16, 8, 0 }),
  MUT ("memlimit 8191", "memlimit", { S0 + 16, 8, 8191 }),
  MUT ("memlimit 1 TiB", "memlimit", { S0 + 16, 8, TiB }),
  MUT ("memlimit 4 GiB + 1", "memlimit", { S0 + 16, 8, 4 * GiB + 1 }),
  MUT ("memlimit max", "memlimit", { S0 + 16, 8, UINT64_MAX }),
  MUT ("keyfile opslimit", "key slot 3: key file slot", { S3 + 8, 8, 1 }),
  MUT ("keyfile memlimit", "key file slot", { S3 + 16, 8, 8192 }),
  MUT ("keyfile salt", "key file slot", { S3 + 24, 1, 1 }),
  MUT ("slot reserved", "key slot 0: reserved", { S0 + 4, 4, 1 }),
  MUT ("slot tail", "key slot 3: reserved", { S3 + 112, 1, 1 }),
  MUT ("slot tail end", "key slot 0: reserved", { S0 + 255, 1, 1 }),
  MUT ("reserved 2152", "reserved bytes", { 2152, 1, 1 }),
  MUT ("reserved 3000", "reserved bytes", { 3000, 8, UINT64_MAX }),
  MUT ("reserved 4031", "reserved bytes", { 4031, 1, 0x80 }),
};

Test (header, hostile_fields)
{
  struct lg_header h, p;
  uint8_t buf[LG_HDR_SIZE];

  /* The expected sizes above are those of 1 GiB. */
  make_header (&h, 1 * GiB);
  cr_assert_eq (h.nunits, 255744);
  cr_assert_eq (h.md_size, 24 * MiB);
  cr_assert_eq (h.data_offset, 25 * MiB);
  for (size_t i = 0; i < sizeof mutations / sizeof mutations[0]; i++) {
    const struct mutation *m = &mutations[i];
    uint64_t lun_size = m->lun_size ? m->lun_size : 1 * GiB;

    lg_header_serialize (&h, buf);
    for (int j = 0; j < 4 && m->f[j].width; j++)
      put_le (buf + m->f[j].off, m->f[j].width, m->f[j].v);
    fix_checksum (buf);
    err[0] = '\0';
    errno = 0;
    cr_assert_eq (lg_header_parse (buf, lun_size, &p, err, sizeof err), -1,
                  "%s: accepted", m->name);
    cr_assert_eq (errno, EINVAL, "%s", m->name);
    cr_assert_not_null (strstr (err, m->want), "%s: got '%s', want '%s'",
                        m->name, err, m->want);
  }
}

/* Sets a geometry consistent with the formula for n units (md_size and
 * data_offset as the format computes them, wrapping like a hostile writer
 * would) and the stored LUN size. */
static void
set_geometry (struct lg_header *h, uint64_t n, uint64_t lun_size)
{
  unsigned __int128 blocks = (n + (unsigned __int128) 41) / 42;
  unsigned __int128 md = (blocks * 4096 + MiB - 1) / MiB * MiB;

  h->nunits = n;
  h->md_size = (uint64_t) md;
  h->data_offset = (uint64_t) (MiB + md);
  h->lun_size = lun_size;
}

static void
expect_geometry_refused (uint64_t n, uint64_t lun_size, const char *want)
{
  struct lg_header h, p;
  uint8_t buf[LG_HDR_SIZE];

  make_header (&h, 1 * GiB);
  set_geometry (&h, n, lun_size);
  lg_header_serialize (&h, buf);
  cr_assert_eq (lg_header_parse (buf, UINT64_MAX, &p, err, sizeof err), -1,
                "%llu units in %llu bytes accepted", (unsigned long long) n,
                (unsigned long long) lun_size);
  cr_assert_not_null (strstr (err, want), "%llu units: got '%s', want '%s'",
                      (unsigned long long) n, err, want);
}

Test (header, hostile_consistent_geometry)
{
  struct lg_header h, p;
  uint8_t buf[LG_HDR_SIZE];

  /* The largest geometry is accepted, one more unit is not. */
  make_header (&h, UINT64_MAX);
  lg_header_serialize (&h, buf);
  cr_assert_eq (lg_header_parse (buf, UINT64_MAX, &p, err, sizeof err), 0, "%s",
                err);
  expect_geometry_refused (h.nunits + 1, UINT64_MAX, "overflows the LUN");

  /* Areas that end past 2^64, or whose size does. */
  expect_geometry_refused (UINT64_C (1) << 52, UINT64_MAX, "overflows");
  expect_geometry_refused ((UINT64_C (1) << 52) - 1, UINT64_MAX, "overflows");
  expect_geometry_refused (UINT64_MAX / 4096, UINT64_MAX, "overflows");
  expect_geometry_refused (UINT64_MAX / 4096 + 1, UINT64_MAX, "overflows");
  expect_geometry_refused (UINT64_MAX / 42 * 42, UINT64_MAX, "overflows");
  expect_geometry_refused (UINT64_MAX, UINT64_MAX, "overflows");

  /* The metadata area alone past the stored LUN size. */
  expect_geometry_refused (UINT64_C (1) << 40, 1 * GiB,
                           "metadata area overflows the LUN");
  expect_geometry_refused (UINT64_C (1) << 40, 0, "overflows the LUN");
}

/* ---- key slots ---- */

static const uint8_t keyfile[LG_KEY_BYTES] = {
  0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef, 0x01, 0x23, 0x45,
  0x67, 0x89, 0xab, 0xcd, 0xef, 0x01, 0x23, 0x45, 0x67, 0x89, 0xab,
  0xcd, 0xef, 0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef,
};

Test (header, keyfile_slot)
{
  struct lg_header h, p;
  uint8_t buf[LG_HDR_SIZE], wrong[LG_KEY_BYTES];
  uint8_t *out = sodium_malloc (LG_KEY_BYTES);

  make_header (&h, 1 * GiB);
  memset (&h.slots, 0, sizeof h.slots);
  cr_assert_eq (lg_keyslot_free (&h), 0);
  cr_assert_eq (lg_keyslot_set_keyfile (&h, 4, mk, keyfile), 0);
  cr_assert_eq (h.slots[4].kind, LG_SLOT_KEYFILE);
  cr_assert_eq (lg_keyslot_free (&h), 0);

  /* Survives the disk. */
  lg_header_serialize (&h, buf);
  cr_assert_eq (lg_header_parse (buf, 1 * GiB, &p, err, sizeof err), 0, "%s",
                err);
  memset (out, 0, LG_KEY_BYTES);
  cr_assert_eq (lg_keyslot_open_keyfile (&p, keyfile, out), 4);
  cr_assert_arr_eq (out, mk, LG_KEY_BYTES);

  memcpy (wrong, keyfile, sizeof wrong);
  wrong[31] ^= 1;
  errno = 0;
  cr_assert_eq (lg_keyslot_open_keyfile (&p, wrong, out), -1);
  cr_assert_eq (errno, EACCES);
  cr_assert (sodium_is_zero (out, LG_KEY_BYTES), "mk left after failure");

  /* A passphrase does not open a key file slot. */
  errno = 0;
  cr_assert_eq (lg_keyslot_open_passphrase (&p, "0123456789abcdef", out), -1);
  cr_assert_eq (errno, EACCES);

  /* The slot is bound to the volume and to its place. */
  p.uuid[0] ^= 1;
  cr_assert_eq (lg_keyslot_open_keyfile (&p, keyfile, out), -1);
  cr_assert_eq (errno, EACCES);
  p.uuid[0] ^= 1;
  p.slots[5] = p.slots[4];
  memset (&p.slots[4], 0, sizeof p.slots[4]);
  cr_assert_eq (lg_keyslot_open_keyfile (&p, keyfile, out), -1);
  cr_assert_eq (errno, EACCES);
  sodium_free (out);
}

Test (header, passphrase_slots)
{
  struct lg_header h, p;
  uint8_t buf[LG_HDR_SIZE];
  uint8_t *out = sodium_malloc (LG_KEY_BYTES);
  const uint64_t ops = crypto_pwhash_OPSLIMIT_MIN,
                 mem = crypto_pwhash_MEMLIMIT_MIN;

  make_header (&h, 1 * GiB);
  memset (&h.slots, 0, sizeof h.slots);
  cr_assert_eq (lg_keyslot_set_passphrase (&h, 2, mk, "alpha", ops, mem), 0);
  cr_assert_eq (lg_keyslot_set_passphrase (&h, 5, mk, "beta", ops + 1, mem * 2),
                0);
  cr_assert_eq (lg_keyslot_set_keyfile (&h, 0, mk, keyfile), 0);
  cr_assert_eq (lg_keyslot_free (&h), 1);
  cr_assert_eq (h.slots[5].opslimit, ops + 1);
  cr_assert_eq (h.slots[5].memlimit, mem * 2);
  cr_assert_arr_neq (h.slots[2].salt, h.slots[5].salt, LG_SALT_BYTES);

  lg_header_serialize (&h, buf);
  cr_assert_eq (lg_header_parse (buf, 1 * GiB, &p, err, sizeof err), 0, "%s",
                err);
  cr_assert_eq (lg_keyslot_open_passphrase (&p, "alpha", out), 2);
  cr_assert_arr_eq (out, mk, LG_KEY_BYTES);
  memset (out, 0, LG_KEY_BYTES);
  cr_assert_eq (lg_keyslot_open_passphrase (&p, "beta", out), 5);
  cr_assert_arr_eq (out, mk, LG_KEY_BYTES);
  cr_assert_eq (lg_keyslot_open_keyfile (&p, keyfile, out), 0);

  errno = 0;
  cr_assert_eq (lg_keyslot_open_passphrase (&p, "gamma", out), -1);
  cr_assert_eq (errno, EACCES);
  cr_assert (sodium_is_zero (out, LG_KEY_BYTES));
  cr_assert_eq (lg_keyslot_open_passphrase (&p, "", out), -1);
  cr_assert_eq (errno, EACCES);

  /* Another volume's UUID: the slot does not open. */
  p.uuid[15] ^= 0x80;
  cr_assert_eq (lg_keyslot_open_passphrase (&p, "alpha", out), -1);
  cr_assert_eq (errno, EACCES);

  /* Replacing a slot. */
  cr_assert_eq (lg_keyslot_set_passphrase (&h, 2, mk, "delta", ops, mem), 0);
  cr_assert_eq (lg_keyslot_open_passphrase (&h, "alpha", out), -1);
  cr_assert_eq (lg_keyslot_open_passphrase (&h, "delta", out), 2);
  sodium_free (out);
}

Test (header, slot_arguments_checked)
{
  struct lg_header h;
  const uint64_t ops = crypto_pwhash_OPSLIMIT_MIN,
                 mem = crypto_pwhash_MEMLIMIT_MIN;
  uint8_t *out = sodium_malloc (LG_KEY_BYTES);

  make_header (&h, 1 * GiB);
  errno = 0;
  cr_assert_eq (lg_keyslot_set_keyfile (&h, LG_KEYSLOTS, mk, keyfile), -1);
  cr_assert_eq (errno, EINVAL);
  errno = 0;
  cr_assert_eq (lg_keyslot_set_passphrase (&h, 8, mk, "x", ops, mem), -1);
  cr_assert_eq (errno, EINVAL);
  errno = 0;
  cr_assert_eq (lg_keyslot_set_passphrase (&h, 1, mk, "x", 0, mem), -1);
  cr_assert_eq (errno, EINVAL);
  errno = 0;
  cr_assert_eq (lg_keyslot_set_passphrase (&h, 1, mk, "x", ops, 1024), -1);
  cr_assert_eq (errno, EINVAL);
  errno = 0;
  cr_assert_eq (lg_keyslot_set_passphrase (&h, 1, mk, "x", ops, TiB), -1);
  cr_assert_eq (errno, EINVAL);
  cr_assert_eq (h.slots[1].kind, LG_SLOT_EMPTY);

  /* A slot with absurd limits in memory (not from parse) is skipped, not
   * run. */
  h.slots[1].kind = LG_SLOT_PASSPHRASE;
  h.slots[1].opslimit = 1;
  h.slots[1].memlimit = TiB;
  h.slots[0].kind = LG_SLOT_EMPTY;
  cr_assert_eq (lg_keyslot_open_passphrase (&h, "x", out), -1);
  cr_assert_eq (errno, EACCES);
  sodium_free (out);

  for (int i = 0; i < LG_KEYSLOTS; i++)
    h.slots[i].kind = LG_SLOT_KEYFILE;
  cr_assert_eq (lg_keyslot_free (&h), -1);
}

/* ---- subkeys and the MAC ---- */

Test (header, subkeys)
{
  uint8_t a[32], b[32], c[32];

  lg_derive_subkey (a, mk, LG_SUBKEY_DATA);
  lg_derive_subkey (b, mk, LG_SUBKEY_HEADER_MAC);
  lg_derive_subkey (c, mk, LG_SUBKEY_DATA);
  cr_assert_arr_eq (a, c, 32);
  cr_assert_arr_neq (a, b, 32);
  cr_assert_arr_neq (a, mk, 32);
}

Test (header, mac)
{
  struct lg_header h, p;
  uint8_t buf[LG_HDR_SIZE];
  uint8_t *other = sodium_malloc (LG_KEY_BYTES);

  make_header (&h, 1 * GiB);
  lg_header_set_mac (&h, mk);
  cr_assert_eq (lg_header_check_mac (&h, mk), 0);

  /* Through the disk. */
  lg_header_serialize (&h, buf);
  cr_assert_eq (lg_header_parse (buf, 1 * GiB, &p, err, sizeof err), 0);
  cr_assert_eq (lg_header_check_mac (&p, mk), 0);

  /* seq is not covered: the two copies share one MAC. */
  p.seq += 12345;
  cr_assert_eq (lg_header_check_mac (&p, mk), 0);

  /* Any other field is. */
  p = h;
  p.nunits--;
  errno = 0;
  cr_assert_eq (lg_header_check_mac (&p, mk), -1);
  cr_assert_eq (errno, EILSEQ);
  p = h;
  p.mode = LG_MODE_MAC;
  cr_assert_eq (lg_header_check_mac (&p, mk), -1);
  p = h;
  p.uuid[3] ^= 1;
  cr_assert_eq (lg_header_check_mac (&p, mk), -1);
  p = h;
  p.flags = LG_HDR_FLAG_LAZY;
  cr_assert_eq (lg_header_check_mac (&p, mk), -1);
  p = h;
  p.slots[6].kind = LG_SLOT_KEYFILE;
  cr_assert_eq (lg_header_check_mac (&p, mk), -1);
  p = h;
  p.mac[31] ^= 1;
  cr_assert_eq (lg_header_check_mac (&p, mk), -1);

  /* Another key. */
  memcpy (other, mk, LG_KEY_BYTES);
  other[0] ^= 1;
  cr_assert_eq (lg_header_check_mac (&h, other), -1);
  sodium_free (other);
}

/* ---- the two copies on a device ---- */

struct memdev {
  struct lg_dev dev;
  uint8_t *data;
  int writes_left; /* < 0: no limit; 0: the next write fails */
  size_t tear;     /* bytes of a failing write that still land */
  unsigned nwrites, nflushes;
};

static int
mem_pread (struct lg_dev *d, void *buf, size_t count, uint64_t off)
{
  memcpy (buf, ((struct memdev *) d)->data + off, count);
  return 0;
}

static int
mem_pwrite (struct lg_dev *d, const void *buf, size_t count, uint64_t off,
            unsigned flags)
{
  struct memdev *m = (struct memdev *) d;

  (void) flags;
  if (m->writes_left == 0) {
    memcpy (m->data + off, buf, m->tear < count ? m->tear : count);
    errno = EIO;
    return -1;
  }
  if (m->writes_left > 0)
    m->writes_left--;
  memcpy (m->data + off, buf, count);
  m->nwrites++;
  return 0;
}

static int
mem_flush (struct lg_dev *d)
{
  ((struct memdev *) d)->nflushes++;
  return 0;
}

static void
mem_close (struct lg_dev *d)
{
  free (((struct memdev *) d)->data);
  free (d);
}

static const struct lg_dev_ops mem_ops = {
  .name = "mem",
  .pread = mem_pread,
  .pwrite = mem_pwrite,
  .flush = mem_flush,
  .close = mem_close,
};

static struct memdev *
mem_open (uint64_t size)
{
  struct memdev *m = calloc (1, sizeof *m);

  cr_assert_not_null (m);
  m->data = calloc (1, size);
  cr_assert_not_null (m->data);
  m->dev.ops = &mem_ops;
  snprintf (m->dev.name, sizeof m->dev.name, "mem");
  lg_dev_set_size (&m->dev, size);
  m->dev.block_size = 512;
  m->writes_left = -1;
  return m;
}

static uint8_t *
copy (struct memdev *m, int c)
{
  return m->data + (c ? LG_HDR_COPY1_OFFSET : LG_HDR_COPY0_OFFSET);
}

/* The seq of a copy as stored, without trusting it. */
static uint64_t
stored_seq (struct memdev *m, int c)
{
  uint64_t v = 0;

  for (int i = 7; i >= 0; i--)
    v = (v << 8) | copy (m, c)[40 + i];
  return v;
}

/* A formatted device: both copies with seq 1. */
static struct memdev *
formatted (struct lg_header *h)
{
  struct memdev *m = mem_open (DEV_SIZE);

  make_header (h, DEV_SIZE);
  h->seq = 0;
  lg_header_set_mac (h, mk);
  cr_assert_eq (lg_header_write (&m->dev, h), 0);
  cr_assert_eq (h->seq, 1);
  cr_assert_eq (stored_seq (m, 0), 1);
  cr_assert_eq (stored_seq (m, 1), 1);
  cr_assert_arr_eq (copy (m, 0), copy (m, 1), LG_HDR_SIZE);
  cr_assert_eq (m->nflushes, 2);
  return m;
}

Test (header, dev_format_and_read)
{
  struct lg_header h, r;
  struct memdev *m = formatted (&h);
  unsigned nw = m->nwrites;

  cr_assert_eq (lg_header_read (&m->dev, &r, err, sizeof err), 0, "%s", err);
  assert_same (&h, &r);
  cr_assert_eq (m->nwrites, nw, "nothing to repair");
  cr_assert_eq (nwarnings, 0);
  cr_assert_eq (lg_header_check_mac (&r, mk), 0);
  lg_dev_close (&m->dev);
}

/* lg_header_read never writes: a copy is repaired only by the next header
 * write, made by someone who opened it with the key (issue 13, case 7:
 * it rewrote the other copy before any key or MAC check, so a forged
 * newer copy replaced the good one). */
Test (header, dev_newest_wins_and_nothing_is_written)
{
  struct lg_header h, r;
  struct memdev *m = formatted (&h);
  unsigned nw = m->nwrites;

  h.seq = 5;
  lg_header_serialize (&h, copy (m, 1));
  cr_assert_eq (lg_header_read (&m->dev, &r, err, sizeof err), 0, "%s", err);
  cr_assert_eq (r.seq, 5);
  cr_assert_eq (stored_seq (m, 0), 1, "copy 0 rewritten before any key check");
  cr_assert_eq (m->nwrites, nw);

  /* And the other way round. */
  h.seq = 9;
  lg_header_serialize (&h, copy (m, 0));
  cr_assert_eq (lg_header_read (&m->dev, &r, err, sizeof err), 0, "%s", err);
  cr_assert_eq (r.seq, 9);
  cr_assert_eq (stored_seq (m, 1), 5);
  cr_assert_eq (m->nwrites, nw);
  lg_dev_close (&m->dev);
}

static void
damaged_copy_is_left (int bad, size_t off)
{
  struct lg_header h, r;
  struct memdev *m = formatted (&h);
  unsigned nw = m->nwrites;
  char want[64];

  copy (m, bad)[off] ^= 0xff;
  cr_assert_eq (lg_header_read (&m->dev, &r, err, sizeof err), 0, "%s", err);
  assert_same (&h, &r);
  cr_assert_eq (m->nwrites, nw, "copy %d rewritten before any key check", bad);
  snprintf (want, sizeof want, "copy %d is damaged", bad);
  cr_assert_not_null (strstr (last_warning, want), "%s", last_warning);
  /* The next header write (with the key) rewrites both. */
  cr_assert_eq (lg_header_write (&m->dev, &r), 0);
  cr_assert_arr_eq (copy (m, 0), copy (m, 1), LG_HDR_SIZE);
  lg_dev_close (&m->dev);
}

Test (header, dev_copy0_damaged)
{
  damaged_copy_is_left (0, 100);
  damaged_copy_is_left (0, 0);
  damaged_copy_is_left (0, 4095);
}

Test (header, dev_copy1_damaged)
{
  damaged_copy_is_left (1, 100);
  damaged_copy_is_left (1, 0);
  damaged_copy_is_left (1, 4095);
}

Test (header, dev_copy_wiped)
{
  struct lg_header h, r;
  struct memdev *m = formatted (&h);
  unsigned nw = m->nwrites;

  memset (copy (m, 0), 0, LG_HDR_SIZE);
  cr_assert_eq (lg_header_read (&m->dev, &r, err, sizeof err), 0, "%s", err);
  assert_same (&h, &r);
  cr_assert_eq (m->nwrites, nw);
  lg_dev_close (&m->dev);
}

Test (header, dev_read_only_is_not_repaired)
{
  struct lg_header h, r;
  struct memdev *m = formatted (&h);
  unsigned nw = m->nwrites;

  copy (m, 0)[200] ^= 1;
  m->dev.read_only = true;
  cr_assert_eq (lg_header_read (&m->dev, &r, err, sizeof err), 0, "%s", err);
  assert_same (&h, &r);
  cr_assert_eq (m->nwrites, nw);
  cr_assert_neq (memcmp (copy (m, 0), copy (m, 1), LG_HDR_SIZE), 0);
  lg_dev_close (&m->dev);
}

Test (header, dev_both_damaged)
{
  struct lg_header h, r;
  struct memdev *m = formatted (&h);
  unsigned nw = m->nwrites;

  copy (m, 0)[300] ^= 1;
  copy (m, 1)[32] = 7; /* mode */
  fix_checksum (copy (m, 1));
  errno = 0;
  cr_assert_eq (lg_header_read (&m->dev, &r, err, sizeof err), -1);
  cr_assert_eq (errno, EINVAL);
  cr_assert_not_null (strstr (err, "copy 0: bad checksum"), "%s", err);
  cr_assert_not_null (strstr (err, "copy 1: unknown mode 7"), "%s", err);
  cr_assert_eq (m->nwrites, nw, "nothing written");
  lg_dev_close (&m->dev);
}

Test (header, dev_no_header)
{
  struct lg_header r;
  struct memdev *m = mem_open (DEV_SIZE);

  errno = 0;
  cr_assert_eq (lg_header_read (&m->dev, &r, err, sizeof err), -1);
  cr_assert_eq (errno, ENOENT);
  cr_assert_not_null (strstr (err, "no lungate header"), "%s", err);
  /* Other data, no magic: still "no header". */
  memset (m->data, 0xe5, LG_HDR_AREA);
  cr_assert_eq (lg_header_read (&m->dev, &r, err, sizeof err), -1);
  cr_assert_eq (errno, ENOENT);
  lg_dev_close (&m->dev);
}

Test (header, dev_too_small)
{
  struct lg_header r;
  struct memdev *m = mem_open (64 * 1024);

  cr_assert_eq (lg_header_read (&m->dev, &r, err, sizeof err), -1);
  cr_assert_eq (errno, ENOENT);
  memcpy (m->data, LG_HDR_MAGIC, 8);
  cr_assert_eq (lg_header_read (&m->dev, &r, err, sizeof err), -1);
  cr_assert_eq (errno, EINVAL);
  cr_assert_not_null (strstr (err, "too small"), "%s", err);
  lg_dev_close (&m->dev);

  m = mem_open (100);
  cr_assert_eq (lg_header_read (&m->dev, &r, err, sizeof err), -1);
  cr_assert_eq (errno, ENOENT);
  lg_dev_close (&m->dev);
}

Test (header, dev_write_older_copy_first)
{
  struct lg_header h, r;
  struct memdev *m = formatted (&h);

  /* Copy 0 is older: the next write must go there first. */
  h.seq = 1;
  lg_header_serialize (&h, copy (m, 0));
  h.seq = 2;
  lg_header_serialize (&h, copy (m, 1));
  m->writes_left = 1;
  cr_assert_eq (lg_header_write (&m->dev, &h), -1);
  cr_assert_eq (h.seq, 3);
  cr_assert_eq (stored_seq (m, 0), 3);
  cr_assert_eq (stored_seq (m, 1), 2);

  /* Now copy 1 is older. */
  m->writes_left = 1;
  cr_assert_eq (lg_header_write (&m->dev, &h), -1);
  cr_assert_eq (h.seq, 4);
  cr_assert_eq (stored_seq (m, 0), 3);
  cr_assert_eq (stored_seq (m, 1), 4);

  /* A damaged copy is the oldest. */
  copy (m, 0)[1000] ^= 1;
  h.seq = 0; /* stale: the write still goes past what is on the disk */
  m->writes_left = 1;
  cr_assert_eq (lg_header_write (&m->dev, &h), -1);
  cr_assert_eq (h.seq, 5);
  cr_assert_eq (stored_seq (m, 0), 5);
  cr_assert_eq (stored_seq (m, 1), 4);

  m->writes_left = -1;
  cr_assert_eq (lg_header_read (&m->dev, &r, err, sizeof err), 0, "%s", err);
  cr_assert_eq (r.seq, 5);
  cr_assert_eq (stored_seq (m, 1), 4, "a read wrote the older copy");
  cr_assert_eq (lg_header_write (&m->dev, &r), 0);
  cr_assert_arr_eq (copy (m, 0), copy (m, 1), LG_HDR_SIZE);
  lg_dev_close (&m->dev);
}

Test (header, dev_write_then_read)
{
  struct lg_header h, r;
  struct memdev *m = formatted (&h);

  cr_assert_eq (lg_header_read (&m->dev, &r, err, sizeof err), 0, "%s", err);
  r.flags = LG_HDR_FLAG_LAZY;
  lg_header_set_mac (&r, mk);
  cr_assert_eq (lg_header_write (&m->dev, &r), 0);
  cr_assert_eq (r.seq, 2);
  cr_assert_eq (stored_seq (m, 0), 2);
  cr_assert_eq (stored_seq (m, 1), 2);
  cr_assert_eq (lg_header_read (&m->dev, &h, err, sizeof err), 0, "%s", err);
  assert_same (&h, &r);
  cr_assert_eq (lg_header_check_mac (&h, mk), 0);

  m->dev.read_only = true;
  errno = 0;
  cr_assert_eq (lg_header_write (&m->dev, &r), -1);
  cr_assert_eq (errno, EPERM);
  lg_dev_close (&m->dev);
}

Test (header, dev_write_refuses_invalid_header)
{
  struct lg_header h;
  struct memdev *m = formatted (&h);
  uint8_t *before = malloc (LG_HDR_AREA);
  unsigned nw = m->nwrites;

  cr_assert_not_null (before);
  memcpy (before, m->data, LG_HDR_AREA);
  h.mode = 7;
  errno = 0;
  cr_assert_eq (lg_header_write (&m->dev, &h), -1);
  cr_assert_eq (errno, EINVAL);
  cr_assert_eq (h.seq, 1, "seq unchanged");
  h.mode = LG_MODE_AEAD;
  h.nunits++;
  cr_assert_eq (lg_header_write (&m->dev, &h), -1);
  cr_assert_eq (errno, EINVAL);
  cr_assert_eq (m->nwrites, nw);
  cr_assert_arr_eq (m->data, before, LG_HDR_AREA);
  free (before);
  lg_dev_close (&m->dev);
}

/* A crash at any write of an update: the header read back is the old one
 * or the new one, never an error. */
Test (header, dev_crash_during_write)
{
  const size_t tears[] = { 0, 1, 40, 2048, 4064, 4095 };

  for (int when = 0; when < 2; when++)
    for (size_t t = 0; t < sizeof tears / sizeof tears[0]; t++) {
      struct lg_header h, r, old;
      struct memdev *m = formatted (&h);

      old = h;
      h.mode = LG_MODE_MAC; /* the update */
      lg_header_set_mac (&h, mk);
      m->writes_left = when;
      m->tear = tears[t];
      cr_assert_eq (lg_header_write (&m->dev, &h), -1);
      m->writes_left = -1;
      cr_assert_eq (lg_header_read (&m->dev, &r, err, sizeof err), 0,
                    "crash at write %d torn at %zu: %s", when, tears[t], err);
      if (when == 0) {
        assert_same (&r, &old);
      }
      else {
        assert_same (&r, &h);
      }
      cr_assert_eq (lg_header_check_mac (&r, mk), 0);
      /* Repaired by the next update, made with the key. */
      cr_assert_eq (lg_header_write (&m->dev, &r), 0);
      cr_assert_arr_eq (copy (m, 0), copy (m, 1), LG_HDR_SIZE,
                        "repaired after the crash");
      lg_dev_close (&m->dev);
    }
}
