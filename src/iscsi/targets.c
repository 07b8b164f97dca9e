/* SPDX-License-Identifier: LGPL-2.1-or-later */
#include <config.h>

#include <stdlib.h>
#include <string.h>

#include "iscsi/targets.h"

static bool
text_ok (const char *s, size_t max, bool slash_ok)
{
  size_t n = 0;

  if (s == NULL)
    return false;
  for (; s[n]; n++) {
    unsigned char c = (unsigned char) s[n];

    if (n == max || c <= 0x20 || c >= 0x7f || (c == '/' && !slash_ok))
      return false;
  }
  return n > 0;
}

bool
lg_iscsi_name_ok (const char *s)
{
  return text_ok (s, LG_ISCSI_NAME_MAX, false) && strcmp (s, ".") != 0
      && strcmp (s, "..") != 0;
}

bool
lg_target_address_ok (const char *s)
{
  return text_ok (s, LG_TARGET_ADDRESS_MAX, true);
}

void
lg_target_list_free (struct lg_target_list *l)
{
  if (l == NULL)
    return;
  for (size_t i = 0; i < l->n; i++) {
    free (l->t[i].name);
    for (size_t j = 0; j < l->t[i].nportals; j++)
      free (l->t[i].portals[j]);
    free (l->t[i].portals);
  }
  free (l->t);
  free (l);
}

static bool
seen (const struct lg_target_list *l, const char *name)
{
  for (size_t i = 0; i < l->n; i++)
    if (strcmp (l->t[i].name, name) == 0)
      return true;
  return false;
}

/* Adds one target and the addresses of it that pass; -1 when out of
 * memory. */
static int
add (struct lg_target_list *l, const struct iscsi_discovery_address *a)
{
  struct lg_target *t = &l->t[l->n];
  size_t np = 0;

  for (const struct iscsi_target_portal *p = a->portals; p; p = p->next)
    np++;
  if (np > LG_TARGET_PORTALS_MAX)
    np = LG_TARGET_PORTALS_MAX;
  memset (t, 0, sizeof *t);
  t->name = strdup (a->target_name);
  t->portals = calloc (np ? np : 1, sizeof *t->portals);
  if (t->name == NULL || t->portals == NULL) {
    free (t->name);
    free (t->portals);
    return -1;
  }
  l->n++;
  for (const struct iscsi_target_portal *p = a->portals; p; p = p->next) {
    if (t->nportals == np || !lg_target_address_ok (p->portal)) {
      l->dropped_portals++;
      continue;
    }
    if ((t->portals[t->nportals] = strdup (p->portal)) == NULL)
      return -1;
    t->nportals++;
  }
  return 0;
}

struct lg_target_list *
lg_targets_copy (const struct iscsi_discovery_address *da)
{
  struct lg_target_list *l = calloc (1, sizeof *l);
  size_t n = 0;

  if (l == NULL)
    return NULL;
  for (const struct iscsi_discovery_address *a = da; a; a = a->next)
    n++;
  if (n > LG_TARGETS_MAX)
    n = LG_TARGETS_MAX;
  l->t = calloc (n ? n : 1, sizeof *l->t);
  if (l->t == NULL)
    goto err;
  for (const struct iscsi_discovery_address *a = da; a; a = a->next) {
    if (l->n == n || !lg_iscsi_name_ok (a->target_name)
        || seen (l, a->target_name)) {
      l->dropped++;
      continue;
    }
    if (add (l, a) < 0)
      goto err;
  }
  return l;

err:
  lg_target_list_free (l);
  return NULL;
}
