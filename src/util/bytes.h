/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Big-endian fields, as SCSI and iSCSI carry them.  (The lungate header's
 * fields are little-endian: crypt/header.c.) */
#ifndef LG_BYTES_H
#define LG_BYTES_H

#include <stdint.h>

static inline uint16_t
lg_be16 (const uint8_t *p)
{
  return (uint16_t) (p[0] << 8 | p[1]);
}

static inline uint32_t
lg_be24 (const uint8_t *p)
{
  return (uint32_t) p[0] << 16 | (uint32_t) p[1] << 8 | p[2];
}

static inline uint32_t
lg_be32 (const uint8_t *p)
{
  return (uint32_t) p[0] << 24 | (uint32_t) p[1] << 16 | (uint32_t) p[2] << 8
      | p[3];
}

static inline uint64_t
lg_be64 (const uint8_t *p)
{
  return (uint64_t) lg_be32 (p) << 32 | lg_be32 (p + 4);
}

static inline void
lg_put_be16 (uint8_t *p, uint16_t v)
{
  p[0] = (uint8_t) (v >> 8);
  p[1] = (uint8_t) v;
}

static inline void
lg_put_be32 (uint8_t *p, uint32_t v)
{
  p[0] = (uint8_t) (v >> 24);
  p[1] = (uint8_t) (v >> 16);
  p[2] = (uint8_t) (v >> 8);
  p[3] = (uint8_t) v;
}

#endif
