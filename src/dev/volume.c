/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The volume interface (dev/volume.h) over the crypt layer: a volume's
 * description, opening one, and format's steps.  The caller's thread. */
#include <config.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "crypt/crypt.h"
#include "crypt/header.h"
#include "dev/volume.h"
#include "util/log.h"

int
lg_volume_describe (struct lg_dev *d, struct lg_volume_info *vi, char *err,
                    size_t errlen)
{
  struct lg_header h;

  if (lg_header_read (d, &h, err, errlen) < 0)
    return -1;
  memset (vi, 0, sizeof *vi);
  vi->mode = h.mode;
  vi->flags = h.flags;
  lg_header_uuid_hex (&h, vi->uuid);
  vi->seq = h.seq;
  vi->md_offset = h.md_offset;
  vi->md_size = h.md_size;
  vi->data_offset = h.data_offset;
  vi->nunits = h.nunits;
  for (int i = 0; i < LG_KEYSLOTS; i++) {
    vi->slots[i].kind = h.slots[i].kind;
    vi->slots[i].opslimit = h.slots[i].opslimit;
    vi->slots[i].memlimit = h.slots[i].memlimit;
  }
  sodium_memzero (&h, sizeof h);
  return 0;
}

const char *
lg_volume_slot_kind_name (uint32_t kind)
{
  return kind == LG_SLOT_PASSPHRASE ? "passphrase"
      : kind == LG_SLOT_KEYFILE     ? "key-file"
                                    : "empty";
}

int
lg_volume_geometry (uint64_t lun_size, struct lg_volume_geometry *g)
{
  struct lg_header h;

  memset (&h, 0, sizeof h);
  if (lg_header_geometry (&h, lun_size) < 0)
    return -1;
  g->md_offset = h.md_offset;
  g->md_size = h.md_size;
  g->data_offset = h.data_offset;
  g->nunits = h.nunits;
  return 0;
}

/* A volume being made: its header, and its master key (LG_KEY_BYTES of
 * sodium memory). */
struct lg_volume_new {
  struct lg_header h;
  uint8_t *mk;
};

struct lg_volume_new *
lg_volume_new (uint64_t lun_size, uint32_t mode, uint32_t flags)
{
  struct lg_volume_new *v = calloc (1, sizeof *v);

  if (v == NULL)
    return NULL;
  if (lg_header_geometry (&v->h, lun_size) < 0
      || (v->mk = sodium_malloc (LG_KEY_BYTES)) == NULL) {
    int saved = errno;

    lg_volume_new_free (v);
    errno = saved;
    return NULL;
  }
  v->h.version = LG_HDR_VERSION;
  v->h.mode = mode;
  v->h.flags = flags;
  randombytes_buf (v->h.uuid, sizeof v->h.uuid);
  crypto_kdf_keygen (v->mk);
  return v;
}

int
lg_volume_new_key (struct lg_volume_new *v, const struct lg_keysrc *ks,
                   uint64_t opslimit, uint64_t memlimit)
{
  if ((ks->keyfile ? lg_keyslot_set_keyfile (&v->h, 0, v->mk, ks->keyfile)
                   : lg_keyslot_set_passphrase (&v->h, 0, v->mk, ks->passphrase,
                                                opslimit, memlimit))
      < 0)
    return -1;
  lg_header_set_mac (&v->h, v->mk);
  return 0;
}

struct lg_dev *
lg_volume_new_open (struct lg_volume_new *v, struct lg_dev *raw, char *err,
                    size_t errlen)
{
  return lg_crypt_open (raw, false, &v->h, v->mk, 0, false, err, errlen);
}

int
lg_volume_formatting (struct lg_dev *cd, struct lg_dev *raw)
{
  uint8_t was[LG_HDR_SIZE];

  if (lg_dev_pread (raw, was, sizeof was, 0) < 0)
    return -1;
  lg_crypt_formatting (cd, was);
  return 0;
}

int
lg_volume_write_format_mark (struct lg_dev *raw)
{
  uint8_t mark[LG_HDR_SIZE];

  lg_header_format_mark (mark);
  if (lg_dev_zero (raw, LG_HDR_AREA - sizeof mark, sizeof mark, LG_MAY_TRIM) < 0
      || lg_dev_flush (raw) < 0
      || lg_dev_pwrite (raw, mark, sizeof mark, 0, 0) < 0
      || lg_dev_flush (raw) < 0)
    return -1;
  return 0;
}

int
lg_volume_new_write (struct lg_volume_new *v, struct lg_dev *raw)
{
  return lg_header_write (raw, &v->h);
}

void
lg_volume_new_free (struct lg_volume_new *v)
{
  if (v == NULL)
    return;
  if (v->mk)
    sodium_free (v->mk);
  sodium_memzero (v, sizeof *v);
  free (v);
}

struct lg_dev *
lg_volume_scratch (struct lg_dev *raw, uint32_t mode, char *err, size_t errlen)
{
  struct lg_volume_new *v
      = lg_volume_new (lg_dev_size (raw), mode, LG_HDR_FLAG_LAZY);
  struct lg_dev *d;

  if (v == NULL) {
    snprintf (err, errlen,
              errno == EINVAL ? "the LUN is too small for a lungate volume"
                              : "out of memory");
    return NULL;
  }
  d = lg_volume_new_open (v, raw, err, errlen);
  lg_volume_new_free (v);
  return d;
}

struct lg_dev *
lg_volume_open (struct lg_dev *lower, const struct lg_keysrc *ks,
                bool manage_dirty, uint8_t uuid[static LG_UUID_BYTES],
                char *err, size_t errlen)
{
  struct lg_header h;
  uint8_t *mk = sodium_malloc (LG_KEY_BYTES);
  struct lg_dev *d = NULL;
  int saved;

  if (mk == NULL) {
    snprintf (err, errlen, "out of memory");
    errno = ENOMEM;
    return NULL;
  }
  if (lg_crypt_unlock (lower, ks, &h, mk, err, errlen) >= 0)
    d = lg_crypt_open (lower, false, &h, mk, 0, manage_dirty, err, errlen);
  saved = errno;
  if (d)
    memcpy (uuid, h.uuid, LG_UUID_BYTES);
  sodium_memzero (&h, sizeof h);
  sodium_free (mk);
  errno = saved;
  return d;
}

bool
lg_volume_is (const uint8_t buf[static LG_HDR_SIZE], uint64_t lun_size,
              const uint8_t uuid[static LG_UUID_BYTES])
{
  struct lg_header h;
  char err[512];

  return lg_header_parse (buf, lun_size, &h, err, sizeof err) == 0
      && sodium_memcmp (h.uuid, uuid, LG_UUID_BYTES) == 0;
}
