/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Blocks whose content a LUN's only writer knows: a fingerprint of the
 * disk behind the LUN number, for the check after every login.
 *
 * A target's designators do not always tell disks apart: tgt derives its
 * default serial and designators from the target and LUN numbers, and a
 * LIO LUN without a unit serial offers none.  Two LUNs of one size
 * swapped while the gateway was disconnected then look the same, and the
 * gateway would write the other disk.  What it does know is what it last
 * wrote: the first block of each of its last LG_KNOWN_SLOTS writes, by
 * LBA and BLAKE2b hash.  After a login, those blocks are read back and
 * compared; one that differs three times in a row (a bit flipped on the
 * wire is no proof) says another disk is there.
 *
 * A remembered block has one or more candidate contents (hashes): a
 * write that starts over it adds what the block holds if the write
 * executes (writes here are of whole blocks), since from then on its
 * outcome is unknown (and a write held during an outage is exactly the
 * one that must not be let through unchecked); one that succeeds with no
 * other write overlapping it in flight leaves only its own content, and
 * remembers its first block.  A failed write leaves the candidates (it
 * may have executed).  Past LG_KNOWN_CANDIDATES, and for zeroing, trim
 * and compare-and-write, the block is forgotten.  Only meaningful while
 * this process is the LUN's only writer (its reservation held):
 * dev/iscsi.c enables it so.
 *
 * Threads: any; one mutex.  The check reads without it.
 */
#ifndef LG_DEV_KNOWN_H
#define LG_DEV_KNOWN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define LG_KNOWN_SLOTS 8
#define LG_KNOWN_CANDIDATES 4

struct lg_known;

/* For blocks of bs bytes (at most 4096): NULL when out of memory. */
struct lg_known *lg_known_new (uint32_t bs);
void lg_known_free (struct lg_known *k);

/* A write of nblocks at lba with buf (nblocks * bs bytes; NULL for what
 * is not a plain write: forgets) is about to be sent: its token for
 * lg_known_end.  buf must stay unchanged until then. */
unsigned lg_known_begin (struct lg_known *k, uint64_t lba, uint64_t nblocks,
                         const uint8_t *buf);
/* It ended, ok or not (failed, or its outcome unknown). */
void lg_known_end (struct lg_known *k, unsigned token, bool ok);

/* Reads one block at lba into buf (bs bytes): 0, or -1. */
typedef int lg_known_read_fn (void *opaque, uint64_t lba, uint8_t *buf);

/* Reads back every remembered block: 0 when all agree (or nothing is
 * remembered), 1 when one differed in three reads (msg says which), -1
 * when a read failed.  *checked: how many blocks were compared. */
int lg_known_check (struct lg_known *k, lg_known_read_fn *read, void *opaque,
                    unsigned *checked, char *msg, size_t len);

#endif
