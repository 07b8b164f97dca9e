/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The block device over one LUN of an iSCSI session pool. */
#ifndef LG_DEV_ISCSI_H
#define LG_DEV_ISCSI_H

#include <stdbool.h>
#include <stdint.h>

#include "dev/dev.h"
#include "iscsi/lun.h"
#include "iscsi/pool.h"

/* Probes lun and returns a device over it; with owns_pool the device
 * closes the pool when it is closed.  A write-protected LUN opens
 * read-only (and says so).  NULL with errno and err set. */
struct lg_dev *lg_iscsi_dev_open (struct lg_pool *p, bool owns_pool, int lun,
                                  bool read_only, char *err, size_t errlen);

/* The blocks one READ or WRITE may carry on a LUN: its maximum transfer
 * length (or a default), rounded down to a whole number of 4 KiB units
 * (the crypt layer's) and of physical blocks, so that a request split in
 * several commands never splits one of those. */
uint32_t lg_iscsi_max_blocks (const struct lg_lun_info *li);

/* What the probe found. */
const struct lg_lun_info *lg_iscsi_dev_info (const struct lg_dev *d);

#endif
