/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The SendTargets reply as lungate keeps it: hostile names and addresses
 * (escape sequences, path separators, "..", oversize, repeats) are left
 * out and counted; good ones are kept in order. */
#include <config.h>

#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "iscsi/targets.h"

#define MAXT 2048
static struct iscsi_discovery_address a[MAXT];
static struct iscsi_target_portal p[MAXT];
static char names[MAXT][16];

/* Chains a[0..n-1] into one list. */
static void
chain (size_t n)
{
  for (size_t i = 0; i < n; i++)
    a[i].next = i + 1 < n ? &a[i + 1] : NULL;
}

Test (targets, names)
{
  char big[LG_ISCSI_NAME_MAX + 2];

  cr_assert (lg_iscsi_name_ok ("iqn.2026-11.org.lungate:t1"));
  cr_assert (lg_iscsi_name_ok ("eui.02004567A425678D"));
  cr_assert (lg_iscsi_name_ok ("naa.52004567BA64678D"));
  cr_assert (!lg_iscsi_name_ok (""));
  cr_assert (!lg_iscsi_name_ok (NULL));
  cr_assert (!lg_iscsi_name_ok ("."));
  cr_assert (!lg_iscsi_name_ok (".."));
  cr_assert (!lg_iscsi_name_ok ("iqn.x:a/b"));
  cr_assert (!lg_iscsi_name_ok ("../../etc"));
  cr_assert (!lg_iscsi_name_ok ("iqn.x:\033[2J"));
  cr_assert (!lg_iscsi_name_ok ("iqn.x:a b"));
  cr_assert (!lg_iscsi_name_ok ("iqn.x:\x7f"));
  cr_assert (!lg_iscsi_name_ok ("iqn.x:\xc2\x9b"));
  memset (big, 'a', sizeof big);
  big[LG_ISCSI_NAME_MAX] = '\0';
  cr_assert (lg_iscsi_name_ok (big));
  big[LG_ISCSI_NAME_MAX] = 'a';
  big[LG_ISCSI_NAME_MAX + 1] = '\0';
  cr_assert (!lg_iscsi_name_ok (big));
}

Test (targets, addresses)
{
  cr_assert (lg_target_address_ok ("127.0.0.1:3260,1"));
  cr_assert (lg_target_address_ok ("[fe80::1%eth0]:3260,1"));
  cr_assert (lg_target_address_ok ("san.example.org"));
  cr_assert (!lg_target_address_ok (""));
  cr_assert (!lg_target_address_ok (NULL));
  cr_assert (!lg_target_address_ok ("10.0.0.1:3260,1\n"));
  cr_assert (!lg_target_address_ok ("10.0.0.1 3260"));
}

Test (targets, copy_filters_and_counts)
{
  struct lg_target_list *l;

  memset (a, 0, sizeof a);
  memset (p, 0, sizeof p);
  a[0].target_name = (char *) "iqn.2026-11.org.lungate:one";
  a[0].portals = &p[0];
  p[0].portal = (char *) "127.0.0.1:3260,1";
  p[0].next = &p[1];
  p[1].portal = (char *) "\033]0;pwned\007";
  a[1].target_name = (char *) "../escape";
  a[1].portals = &p[2];
  p[2].portal = (char *) "127.0.0.1:3260,1";
  a[2].target_name = (char *) "iqn.2026-11.org.lungate:one"; /* repeated */
  a[3].target_name = NULL;
  a[4].target_name = (char *) "iqn.2026-11.org.lungate:two"; /* no portal */
  chain (5);
  l = lg_targets_copy (&a[0]);
  cr_assert_not_null (l);
  cr_assert_eq (l->n, 2);
  cr_assert_str_eq (l->t[0].name, "iqn.2026-11.org.lungate:one");
  cr_assert_eq (l->t[0].nportals, 1);
  cr_assert_str_eq (l->t[0].portals[0], "127.0.0.1:3260,1");
  cr_assert_str_eq (l->t[1].name, "iqn.2026-11.org.lungate:two");
  cr_assert_eq (l->t[1].nportals, 0);
  cr_assert_eq (l->dropped, 3);
  /* The portal of a dropped target is not counted: only kept targets'. */
  cr_assert_eq (l->dropped_portals, 1);
  lg_target_list_free (l);
}

Test (targets, copy_bounds_the_count)
{
  struct lg_target_list *l;

  memset (a, 0, sizeof a);
  memset (p, 0, sizeof p);
  for (size_t i = 0; i < MAXT; i++) {
    snprintf (names[i], sizeof names[i], "iqn.x:%zu", i);
    a[i].target_name = names[i];
  }
  /* One target with more portals than kept. */
  a[0].portals = &p[0];
  for (size_t i = 0; i < MAXT; i++) {
    p[i].portal = (char *) "127.0.0.1:3260,1";
    p[i].next = i + 1 < MAXT ? &p[i + 1] : NULL;
  }
  chain (MAXT);
  l = lg_targets_copy (&a[0]);
  cr_assert_not_null (l);
  cr_assert_eq (l->n, LG_TARGETS_MAX);
  cr_assert_eq (l->dropped, MAXT - LG_TARGETS_MAX);
  cr_assert_eq (l->t[0].nportals, LG_TARGET_PORTALS_MAX);
  cr_assert_eq (l->dropped_portals, MAXT - LG_TARGET_PORTALS_MAX);
  cr_assert_str_eq (l->t[LG_TARGETS_MAX - 1].name, "iqn.x:1023");
  lg_target_list_free (l);
}

Test (targets, empty)
{
  struct lg_target_list *l = lg_targets_copy (NULL);

  cr_assert_not_null (l);
  cr_assert_eq (l->n, 0);
  cr_assert_eq (l->dropped, 0);
  lg_target_list_free (l);
}
