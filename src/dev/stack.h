/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* How a stack of devices is opened: the iSCSI device, then the crypt
 * layer on it when the LUN holds a lungate header.  Front ends open LUNs
 * only through here. */
#ifndef LG_STACK_H
#define LG_STACK_H

#include <stdbool.h>
#include <stddef.h>

#include "crypt/crypt.h"
#include "dev/dev.h"

/* Given a device (the raw LUN), returns what a front end should use:
 * lower itself when it holds no lungate header and no key was given, or
 * the crypt device over it (which then owns lower) when it does and the
 * key opens it.  On failure lower is closed and NULL returned, errno and
 * err set: EACCES (header but no key, or a wrong key), EINVAL (key given
 * but the LUN is not formatted, or a damaged header). */
struct lg_dev *lg_stack_wrap (struct lg_dev *lower, const struct lg_keysrc *ks,
                              size_t md_cache_blocks, char *err, size_t errlen);

#endif
