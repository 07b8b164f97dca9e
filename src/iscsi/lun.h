/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* What a LUN is: INQUIRY (standard, Block Limits and Logical Block
 * Provisioning VPD pages), READ CAPACITY(16), MODE SENSE for write
 * protection; and REPORT LUNS for a target. */
#ifndef LG_LUN_H
#define LG_LUN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <iscsi/iscsi.h>
#include <iscsi/scsi-lowlevel.h>

#include "iscsi/pool.h"

struct lg_lun_info {
  int lun;
  int device_type;
  const char *type_name; /* static string */
  bool removable;
  char vendor[9];
  char product[17];
  char revision[5];

  /* Direct-access (disk) LUNs only. */
  bool is_disk;
  bool no_medium; /* NOT READY / medium not present */
  uint64_t nblocks;
  uint32_t block_size; /* logical */
  uint32_t phys_block_size;
  uint64_t size;     /* bytes */
  bool lbpme, lbprz; /* READ CAPACITY(16) provisioning bits */

  bool has_block_limits;    /* VPD 0xB0 */
  uint32_t max_xfer_blocks; /* 0 = no limit reported */
  uint32_t opt_xfer_blocks;
  uint32_t opt_gran_blocks;
  uint32_t max_unmap_blocks;
  uint32_t max_unmap_desc;
  uint32_t opt_unmap_gran;
  uint64_t max_ws_blocks;

  bool has_lbp; /* VPD 0xB2 */
  bool lbpu, lbpws, lbpws10, anc_sup;
  int provisioning_type; /* 0 none, 1 resource, 2 thin */

  bool write_protected; /* MODE SENSE WP bit */
};

/* How the probe sends a command: the pool's in the gateway, replies made
 * up from the input in the fuzzer.  task() runs task and returns 0, or -1
 * with errno set and msg filled. */
struct lg_lun_io {
  int (*task) (void *opaque, int lun, struct scsi_task *task, char *msg,
               size_t len);
  void *opaque;
  const char *target; /* for messages */
};

int lg_lun_probe_io (const struct lg_lun_io *io, int lun,
                     struct lg_lun_info *info, char *err, size_t errlen);
int lg_report_luns_io (const struct lg_lun_io *io, int **luns, size_t *n,
                       char *err, size_t errlen);

/* scsi_datain_unmarshall, after padding a short INQUIRY reply with zeroes
 * and cutting in-band list lengths to what arrived, so that libiscsi reads
 * no further than the buffer.  NULL for a malformed reply, or with errno
 * ENOMEM when out of memory. */
void *lg_datain_unmarshall (struct scsi_task *task);

/* What the descriptors of a GET LBA STATUS reply starting at lba say about
 * blocks lba to end - 1 of a LUN of nblocks: fn is called for each run
 * (bytes, with block size bs), in order, while the descriptors are
 * well-formed (contiguous from lba, non-empty, inside the LUN).  Returns the
 * first block not described (lba when nothing usable came back); *stopped
 * is set when fn returned < 0. */
uint64_t lg_lba_status_walk (const struct scsi_get_lba_status *st, uint64_t lba,
                             uint64_t end, uint64_t nblocks, uint32_t bs,
                             int (*fn) (void *opaque, uint64_t off,
                                        uint64_t len, bool hole),
                             void *opaque, bool *stopped);

/* Probes lun over the pool.  -1 with errno set and err filled: ENOENT
 * when the LUN does not exist, the mapped SCSI errno otherwise. */
int lg_lun_probe (struct lg_pool *p, int lun, struct lg_lun_info *info,
                  char *err, size_t errlen);

/* REPORT LUNS: a malloc'd array of LUN numbers (flat addressing). */
int lg_report_luns (struct lg_pool *p, int **luns, size_t *n, char *err,
                    size_t errlen);

#endif
