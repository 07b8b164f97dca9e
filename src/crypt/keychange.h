/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* What `lungate key add', `key remove' and `key change' change in a header, as
 * an lg_header_change_fn for lg_header_update: made again, on top of what
 * another writer left, when another update got there first, without
 * adding a key twice or removing one another machine added since.  Main
 * thread of the command (any, for the tests). */
#ifndef LG_CRYPT_KEYCHANGE_H
#define LG_CRYPT_KEYCHANGE_H

#include <stdbool.h>

#include "crypt/header.h"

/* What key add or remove changes, for lg_header_change_fn: made again on
 * top of whatever another writer left, if it got there first. */
struct lg_key_change {
  bool add, force, said;
  /* change: slot's key, old when the change began, becomes the new one
   * (refused if another writer changed that slot since). */
  bool replace;
  struct lg_keyslot old;
  long slot; /* asked for; -1: the first free one */
  long done; /* the slot changed */
  const uint8_t *mk;
  const uint8_t *new_key;
  const char *new_pass;
  const char *name;
  bool sealed; /* add: the slot sealed; remove: the slot's old bytes */
  struct lg_keyslot written;
};

/* opaque: a struct lg_key_change.  Errors are logged, and said set. */
int lg_key_change (const struct lg_header *copies, unsigned n,
                   struct lg_header *out, void *opaque);

#endif
