/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* What stack of devices a LUN gets: the iSCSI device, then the crypt
 * layer on it when the LUN holds a lungate header; and the key table that
 * decides.  Front ends open LUNs through open.h, which calls this (verify
 * and the tests wrap a device of their own directly). */
#ifndef LG_STACK_H
#define LG_STACK_H

#include <stdbool.h>
#include <stddef.h>

#include "dev/dev.h"
#include "dev/volume.h"

/* Given a device (the raw LUN), returns what a front end should use:
 * lower itself when it holds no lungate header and no key was given, or
 * the crypt device over it (which then owns lower) when it does and the
 * key opens it.  On failure lower is closed and NULL returned, errno and
 * err set: EACCES (header but no key, or a wrong key), EINVAL (key given
 * but the LUN is not formatted, or a damaged header). */
struct lg_dev *lg_stack_wrap (struct lg_dev *lower, const struct lg_keysrc *ks,
                              size_t md_cache_blocks, char *err, size_t errlen);

/* The keys of the volumes of a target: one for every volume (a key file
 * or a passphrase), one per LUN ("lunN:FILE" or "lunN=FILE"), and a key
 * directory where the file named by a volume's UUID (32 hex digits, as
 * lungate info shows it) holds that volume's key.  Key files are read
 * into sodium memory as they are added. */
#define LG_KEYTAB_LUNS 64
struct lg_keytab {
  struct lg_keysrc all;
  const char *dir;
  size_t n;
  struct {
    int lun;
    uint8_t *keyfile;
  } per[LG_KEYTAB_LUNS];
};

/* Adds a key file: "lunN:FILE" or "lunN=FILE" for LUN N, else FILE for
 * every volume (into all.keyfile, owned by the caller then).  -1 with the
 * problem logged. */
int lg_keytab_add (struct lg_keytab *t, const char *arg, uint8_t **all);
void lg_keytab_clear (struct lg_keytab *t);

/* As lg_stack_wrap, with the key the table has for this LUN: a LUN
 * without a lungate header is served plain unless a key was given for it
 * by LUN (or named, when the caller opened the LUN by its URL: named); a
 * volume takes its LUN's key, else the key directory's for its UUID,
 * else the key for every volume. */
struct lg_dev *lg_stack_wrap_lun (struct lg_dev *lower,
                                  const struct lg_keytab *t, int lun,
                                  bool named, size_t md_cache_blocks, char *err,
                                  size_t errlen);

#endif
