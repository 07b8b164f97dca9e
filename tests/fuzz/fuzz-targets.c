/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* libFuzzer harness for what lungate keeps of a SendTargets reply.  The
 * input is read as the text of the reply (key=value pairs separated by
 * NUL bytes: TargetName= starts a target, TargetAddress= adds an address
 * to the last one), arranged as libiscsi hands it over, and given to
 * lg_targets_copy.  Never a crash or a leak, and what comes out holds: only
 * names and addresses that pass the checks, no repeated name, every input
 * target either kept or counted as left out, bounds respected. */
#include <config.h>

#include <stdlib.h>
#include <string.h>

#include "iscsi/targets.h"

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size);

#define MAXREC 4096

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
  static struct iscsi_discovery_address a[MAXREC];
  static struct iscsi_target_portal p[MAXREC];
  char *text = malloc (size + 1);
  size_t na = 0, np = 0, nportals_in = 0;
  struct lg_target_list *l;

  if (text == NULL)
    return 0;
  memcpy (text, data, size);
  text[size] = '\0';
  for (char *k = text; k < text + size; k += strlen (k) + 1) {
    if (strncmp (k, "TargetName=", 11) == 0 && na < MAXREC) {
      memset (&a[na], 0, sizeof a[na]);
      a[na].target_name = k + 11;
      if (na)
        a[na - 1].next = &a[na];
      na++;
    }
    else if (strncmp (k, "TargetAddress=", 14) == 0 && na && np < MAXREC) {
      memset (&p[np], 0, sizeof p[np]);
      p[np].portal = k + 14;
      p[np].next = a[na - 1].portals;
      a[na - 1].portals = &p[np++];
    }
  }
  l = lg_targets_copy (na ? &a[0] : NULL);
  if (l == NULL)
    abort ();
  if (l->n + l->dropped != na || l->n > LG_TARGETS_MAX)
    abort ();
  for (size_t i = 0; i < l->n; i++) {
    const struct lg_target *t = &l->t[i];

    if (!lg_iscsi_name_ok (t->name) || strchr (t->name, '/')
        || strlen (t->name) > LG_ISCSI_NAME_MAX
        || t->nportals > LG_TARGET_PORTALS_MAX)
      abort ();
    for (size_t j = 0; j < i; j++)
      if (strcmp (l->t[j].name, t->name) == 0)
        abort ();
    for (size_t j = 0; j < t->nportals; j++) {
      if (!lg_target_address_ok (t->portals[j]))
        abort ();
      for (const char *c = t->portals[j]; *c; c++)
        if (*c <= ' ' || *c >= 0x7f)
          abort ();
    }
    nportals_in += t->nportals;
  }
  if (nportals_in + l->dropped_portals > np)
    abort ();
  lg_target_list_free (l);
  free (text);
  return 0;
}
