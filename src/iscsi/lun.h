/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* What a LUN is: INQUIRY (standard, Unit Serial Number, Device
 * Identification, Block Limits and Logical Block Provisioning VPD pages),
 * READ CAPACITY(16), MODE SENSE for write protection; and REPORT LUNS for
 * a target. */
#ifndef LG_LUN_H
#define LG_LUN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <iscsi/iscsi.h>
#include <iscsi/scsi-lowlevel.h>

#include "iscsi/pool.h"

/* Bounds on what is kept of VPD 0x80 and 0x83: a longer serial is cut
 * (and compared cut), longer designators are cut at a whole descriptor. */
#define LG_SERIAL_MAX 64
#define LG_DESIG_MAX 512
#define LG_DESIG_NAME_MAX 80

/* What names a logical unit (VPD 0x80 and 0x83). */
struct lg_lun_ident {
  bool has_serial;                /* VPD 0x80, non-empty */
  char serial[LG_SERIAL_MAX + 1]; /* printable, spaces trimmed */
  bool has_desig;                 /* VPD 0x83 with a designator of the LU */
  size_t desig_len;
  uint8_t desig[LG_DESIG_MAX]; /* the raw descriptors of LU association */
  /* The first NAA, EUI-64 or T10 designator, printable ("naa.6...",
   * "eui.0...", "t10.IET 00010001"); empty when there is none. */
  char desig_name[LG_DESIG_NAME_MAX];
};

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
  uint32_t max_caw_blocks; /* COMPARE AND WRITE; 0 = not supported */

  bool has_lbp; /* VPD 0xB2 */
  bool lbpu, lbpws, lbpws10, anc_sup;
  int provisioning_type; /* 0 none, 1 resource, 2 thin */

  bool write_protected; /* MODE SENSE WP bit */
  /* Acknowledged writes may be lost at a power cut until a flush: WCE=1
   * in the caching mode page, or no caching page seen (the safe guess). */
  bool volatile_cache;

  struct lg_lun_ident ident; /* VPD 0x80 and 0x83, where listed */
};

/* The serial number in a VPD 0x80 reply of n bytes (as the target sent
 * them, or padded): printable, leading and trailing spaces trimmed, cut at
 * LG_SERIAL_MAX.  0, or -1 when the page is malformed (then nothing is
 * set). */
int lg_vpd_serial_parse (const uint8_t *d, size_t n, struct lg_lun_ident *id);
/* The WCE bit of the caching mode page (0x08) in a MODE SENSE(6) reply:
 * 1 set, 0 clear, -1 no caching page in the n bytes of d. */
int lg_mode_wce (const uint8_t *d, size_t n);

/* The designators of the logical unit (association 0) in a VPD 0x83 reply
 * of n bytes: the page length and each descriptor's are checked against n;
 * the walk stops at the first descriptor that does not fit.  0, or -1 when
 * the page is malformed (then nothing is set). */
int lg_vpd_desig_parse (const uint8_t *d, size_t n, struct lg_lun_ident *id);

/* What differs between two identities, in words for a message
 * ("serial beaf11 -> beaf12"); 0 when a and b name the same LU.  Where a
 * (the LU as it was opened) has no serial or designators, they are not
 * compared; where a has them and b lacks them, they differ. */
/* How well the target's identity tells this LUN's disk from another:
 * "unique" (a unit serial or designators of the target's own), "weak"
 * (tgt's defaults, made from the target and LUN numbers: the same for
 * whatever disk is behind the number) or "none" (neither).  why gets a
 * few words.  Pure. */
const char *lg_lun_ident_strength (const struct lg_lun_info *li, char *why,
                                   size_t len);
int lg_lun_ident_diff (const struct lg_lun_ident *a,
                       const struct lg_lun_ident *b, char *buf, size_t len);

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

/* The preferred I/O size for a LUN: its physical block, or its optimal
 * transfer granularity where larger, rounded down to a power of 2 (what
 * nbdkit and FUSE accept: an odd but legal granularity such as 24 blocks
 * gives 8 KiB of 512-byte blocks), at least the logical block and at most
 * LG_PREF_IO_MAX. */
#define LG_PREF_IO_MAX (1u << 20)
uint32_t lg_lun_pref_io (const struct lg_lun_info *li);

/* What the descriptors of a GET LBA STATUS reply starting at lba say about
 * blocks lba to end - 1 of a LUN of nblocks: fn is called for each run
 * (bytes, with block size bs), in order, while the descriptors are
 * well-formed (contiguous from lba, inside the LUN; a length of 0, tgt's
 * for 2^32 blocks and more, ends where the next descriptor starts, or after
 * one block).  Returns the
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
