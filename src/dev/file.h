/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The block device over a file or a block device of this machine: what
 * format, verify, key and info use when given a path instead of a LUN URL
 * (a disk image the crypt filter will serve, say). */
#ifndef LG_DEV_FILE_H
#define LG_DEV_FILE_H

#include <stdbool.h>
#include <stddef.h>

#include "dev/dev.h"

/* Opens path (a regular file or a block device).  Unless read_only, the
 * claim (lg_dev_claim) takes an exclusive flock(2) on it: a second lungate
 * writer on this machine is refused.  NULL with errno and err set. */
struct lg_dev *lg_file_dev_open (const char *path, bool read_only, char *err,
                                 size_t errlen);

#endif
