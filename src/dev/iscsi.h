/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The block device over one LUN of an iSCSI session pool. */
#ifndef LG_DEV_ISCSI_H
#define LG_DEV_ISCSI_H

#include <stdbool.h>

#include "dev/dev.h"
#include "iscsi/lun.h"
#include "iscsi/pool.h"

/* Probes lun and returns a device over it; with owns_pool the device
 * closes the pool when it is closed.  A write-protected LUN opens
 * read-only (and says so).  NULL with errno and err set. */
struct lg_dev *lg_iscsi_dev_open (struct lg_pool *p, bool owns_pool, int lun,
                                  bool read_only, char *err, size_t errlen);

/* What the probe found. */
const struct lg_lun_info *lg_iscsi_dev_info (const struct lg_dev *d);

#endif
