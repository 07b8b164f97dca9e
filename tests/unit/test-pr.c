/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Persistent reservations: the replies are read no further than they
 * came, the key says who made it, and the descriptions say so. */
#include <config.h>

#include <criterion/criterion.h>
#include <string.h>
#include <time.h>

#include "iscsi/pr.h"

static void
be32 (uint8_t *p, uint32_t v)
{
  p[0] = v >> 24, p[1] = v >> 16, p[2] = v >> 8, p[3] = v;
}

static void
be64 (uint8_t *p, uint64_t v)
{
  be32 (p, (uint32_t) (v >> 32));
  be32 (p + 4, (uint32_t) v);
}

Test (pr, reservation_none_and_held)
{
  uint8_t d[24] = { 0 };
  struct lg_pr_state st;

  be32 (d, 7);
  cr_assert_eq (lg_pr_parse_reservation (d, 8, &st), 0);
  cr_assert (!st.reserved);
  cr_assert_eq (st.generation, 7);
  be32 (d + 4, 16);
  be64 (d + 8, 0x4c0102030405060full);
  d[21] = 0x05;
  cr_assert_eq (lg_pr_parse_reservation (d, 24, &st), 0);
  cr_assert (st.reserved);
  cr_assert_eq (st.holder, 0x4c0102030405060full);
  cr_assert_eq (st.type, LG_PR_TYPE);
}

Test (pr, reservation_malformed)
{
  uint8_t d[24] = { 0 };
  struct lg_pr_state st;

  cr_assert_eq (lg_pr_parse_reservation (d, 7, &st), -1);
  be32 (d + 4, 16);
  /* Says 16 bytes follow, but 8 came. */
  cr_assert_eq (lg_pr_parse_reservation (d, 16, &st), -1);
  be32 (d + 4, 8);
  cr_assert_eq (lg_pr_parse_reservation (d, 24, &st), -1);
}

Test (pr, keys_bounded)
{
  uint8_t d[8 + 8 * (LG_PR_MAX_KEYS + 4)] = { 0 };
  struct lg_pr_state st;

  /* A length that claims more than came: only what came is read. */
  be32 (d + 4, 0x7ffffff8u);
  for (int i = 0; i < 3; i++)
    be64 (d + 8 + 8 * i, 100 + i);
  cr_assert_eq (lg_pr_parse_keys (d, 8 + 8 * 3 + 5, &st), 0);
  cr_assert_eq (st.nkeys, 3);
  cr_assert_eq (st.keys[2], 102);
  /* More keys than kept. */
  be32 (d + 4, 8 * (LG_PR_MAX_KEYS + 4));
  cr_assert_eq (lg_pr_parse_keys (d, sizeof d, &st), 0);
  cr_assert_eq (st.nkeys, LG_PR_MAX_KEYS);
  be32 (d + 4, 12);
  cr_assert_eq (lg_pr_parse_keys (d, sizeof d, &st), -1);
  cr_assert_eq (lg_pr_parse_keys (d, 4, &st), -1);
}

Test (pr, my_key_names_this_host)
{
  uint64_t k = lg_pr_my_key ();
  char buf[200];

  cr_assert_eq (k >> 56, 0x4c);
  cr_assert_eq (lg_pr_my_key (), k);
  /* Made now: the time in it is today's. */
  {
    time_t t = time (NULL);
    struct tm tm;
    char day[16];

    gmtime_r (&t, &tm);
    strftime (day, sizeof day, "%Y-%m-%d", &tm);
    lg_pr_describe_key (k, buf, sizeof buf);
    cr_assert (strstr (buf, day), "%s", buf);
  }
  lg_pr_describe_key (k, buf, sizeof buf);
  cr_assert (strstr (buf, "a gateway on this host (") == buf, "%s", buf);
  cr_assert (strstr (buf, " UTC"), "%s", buf);
  /* Another host: the hash differs. */
  lg_pr_describe_key (k ^ (0xfffull << 44), buf, sizeof buf);
  cr_assert (strstr (buf, "a gateway on another host since 20") == buf, "%s",
             buf);
  lg_pr_describe_key (0x1234, buf, sizeof buf);
  cr_assert_str_eq (buf, "an initiator other than lungate");
}

Test (pr, describe)
{
  struct lg_pr_state st = { 0 };
  char buf[512];

  lg_pr_describe (&st, buf, sizeof buf);
  cr_assert_str_eq (buf, "no persistent reservations on this LUN");
  st.supported = true;
  st.nkeys = 3;
  st.keys[0] = 0x10, st.keys[1] = 0x10, st.keys[2] = 0x20;
  lg_pr_describe (&st, buf, sizeof buf);
  cr_assert_str_eq (buf,
                    "not reserved; registered: 0x0000000000000010, "
                    "0x0000000000000020");
  st.reserved = true;
  st.type = 5;
  st.holder = 0x10;
  lg_pr_describe (&st, buf, sizeof buf);
  cr_assert (strstr (buf,
                     "Write Exclusive, Registrants Only by an initiator "
                     "other than lungate (reservation key "
                     "0x0000000000000010)")
                 == buf,
             "%s", buf);
  /* A small buffer is cut, never overrun. */
  lg_pr_describe (&st, buf, 20);
  cr_assert_eq (strlen (buf), 19);
}

/* READ FULL STATUS: the holder's iSCSI name and ISID, as LIO gives them
 * (format 01b), found past a non-holder's descriptor; truncated and
 * lying lengths refused. */
Test (pr, holder_port)
{
  static const char other[] = "iqn.2026-12.org.other:x,i,0x80aabbccddee";
  static const char mine[] = "iqn.2026-11.org.lungate:host,i,0x8012345678ab";
  uint8_t d[512], isid[6];
  uint64_t key = 0;
  char name[256];
  size_t off = 8;

  memset (d, 0, sizeof d);
  be32 (d, 7);
  /* A registrant that does not hold it. */
  be64 (d + off, 0x1111);
  d[off + 24] = 0x45;
  d[off + 27] = 44;
  memcpy (d + off + 28, other, sizeof other);
  be32 (d + off + 20, 48);
  off += 24 + 48;
  /* The holder. */
  be64 (d + off, 0x2222);
  d[off + 12] = 0x01;
  d[off + 24] = 0x45;
  d[off + 27] = 48;
  memcpy (d + off + 28, mine, sizeof mine);
  be32 (d + off + 20, 52);
  off += 24 + 52;
  be32 (d + 4, (uint32_t) (off - 8));
  cr_assert_eq (lg_pr_parse_holder_port (d, off, name, sizeof name, isid, &key),
                0);
  cr_assert_eq (key, 0x2222);
  cr_assert_str_eq (name, "iqn.2026-11.org.lungate:host");
  cr_assert_eq (isid[0], 0x80);
  cr_assert_eq (isid[5], 0xab);
  cr_assert_eq (isid[2], 0x34);
  /* Cut inside the holder's TransportID: refused, nothing read past. */
  cr_assert_eq (
      lg_pr_parse_holder_port (d, off - 10, name, sizeof name, isid, &key), -1);
  /* A TransportID length beyond the reply. */
  be32 (d + 8 + 24 + 48 + 20, 4000);
  cr_assert_eq (lg_pr_parse_holder_port (d, off, name, sizeof name, isid, &key),
                -1);
  /* Not iSCSI (protocol 0x1: Fibre Channel). */
  be32 (d + 8 + 24 + 48 + 20, 52);
  d[8 + 24 + 48 + 24] = 0x01;
  cr_assert_eq (lg_pr_parse_holder_port (d, off, name, sizeof name, isid, &key),
                -1);
}
