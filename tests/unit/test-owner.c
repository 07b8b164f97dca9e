/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The owner record: what is built parses back, and a damaged, cleared
 * or foreign block is nobody's. */
#include <config.h>

#include <criterion/criterion.h>
#include <string.h>

#include "crypt/owner.h"

static const struct lg_owner_rec rec = {
  true, 0x4c00112233445566ull, 4242, 1764583200, 1764583260, "nas-client",
};

Test (owner, round_trip)
{
  uint8_t b[LG_OWNER_SIZE];
  struct lg_owner_rec r;
  char buf[256];

  lg_owner_build (&rec, b);
  lg_owner_parse (b, &r);
  cr_assert (r.valid);
  cr_assert_eq (r.key, rec.key);
  cr_assert_eq (r.pid, 4242);
  cr_assert_eq (r.heartbeat, rec.heartbeat);
  cr_assert_str_eq (r.host, "nas-client");
  lg_owner_describe (&r, buf, sizeof buf);
  cr_assert (strstr (buf,
                     "a gateway on host nas-client (pid 4242) since "
                     "2025-12-01 10:00 UTC, heartbeat ")
                 == buf,
             "%s", buf);
}

Test (owner, damaged_cleared_foreign)
{
  uint8_t b[LG_OWNER_SIZE];
  struct lg_owner_rec r, z = rec;

  lg_owner_build (&rec, b);
  b[100] ^= 1; /* outside the fields, inside the checksum */
  lg_owner_parse (b, &r);
  cr_assert (!r.valid);
  memset (b, 0, sizeof b);
  lg_owner_parse (b, &r);
  cr_assert (!r.valid);
  z.key = 0;
  lg_owner_build (&z, b);
  lg_owner_parse (b, &r);
  cr_assert (!r.valid);
  lg_owner_build (&rec, b);
  b[0] = 'X';
  lg_owner_parse (b, &r);
  cr_assert (!r.valid);
}

Test (owner, host_printable)
{
  struct lg_owner_rec h = rec, r;
  uint8_t b[LG_OWNER_SIZE];

  strcpy (h.host, "a\033[2Jb");
  lg_owner_build (&h, b);
  lg_owner_parse (b, &r);
  cr_assert (r.valid);
  cr_assert_str_eq (r.host, "a?[2Jb");
}
