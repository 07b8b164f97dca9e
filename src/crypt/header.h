/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The on-disk header of an encrypted or integrity-protected LUN
 * (man/lungate-format.5): geometry, mode, UUID and up to 8 key slots, each
 * wrapping the one master key.  Two copies, each with a checksum and a
 * sequence number: opening takes the newest copy that authenticates and
 * writes nothing; every update writes the older copy first, then the
 * newer, so a crash at any point leaves one valid copy.
 *
 * Everything read here is hostile: lg_header_parse checks every field and
 * never trusts a length, count or offset (fuzzed: tests/fuzz/fuzz-header.c).
 * Pure functions except lg_header_read / _write / _update, which do I/O on
 * a device.  Not thread-safe for one struct lg_header: the caller
 * serialises.  Updates by several gateways and commands at once are
 * serialised on the LUN itself by lg_header_update (hdrupdate.c).
 */
#ifndef LG_CRYPT_HEADER_H
#define LG_CRYPT_HEADER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dev/dev.h"
#include "dev/volume.h"

#define LG_HDR_MAGIC "LUNGATE\0" /* 8 bytes */
#define LG_HDR_VERSION 1
/* Sizes and offsets, modes, flags and slot kinds: dev/volume.h. */
#define LG_SALT_BYTES 16

/* Per-unit metadata: two slots of LG_SLOT_BYTES, LG_UNITS_PER_MD units
 * per 4096-byte metadata block. */
#define LG_SLOT_BYTES 48   /* nonce 24, tag 16, seq+flags 8 */
#define LG_UNITS_PER_MD 42 /* 42 * 2 * 48 = 4032 <= 4096 */
/* LG_MD_BLOCK, the metadata block: dev/volume.h. */

struct lg_keyslot {
  uint32_t kind;
  uint64_t opslimit, memlimit; /* Argon2id, passphrase slots */
  uint8_t salt[LG_SALT_BYTES];
  uint8_t nonce[24];
  uint8_t wrapped[LG_KEY_BYTES + 16]; /* XChaCha20-Poly1305 of the MK */
};

struct lg_header {
  uint16_t version;
  uint32_t flags;
  uint8_t uuid[LG_UUID_BYTES];
  uint32_t mode;               /* enum lg_crypt_mode */
  uint32_t unit_size;          /* LG_UNIT_SIZE */
  uint64_t seq;                /* sequence number of this copy */
  uint64_t lun_size;           /* the LUN's size at format time */
  uint64_t md_offset, md_size; /* metadata area, bytes */
  uint64_t data_offset;        /* first unit */
  uint64_t nunits;             /* units of data (exported size / 4096) */
  struct lg_keyslot slots[LG_KEYSLOTS];
  uint8_t mac[32]; /* keyed by the master key (see below) */
};

/* Geometry for a LUN of lun_size bytes; -1 (EINVAL) if it is too small
 * to hold the header, some metadata and one unit. */
int lg_header_geometry (struct lg_header *h, uint64_t lun_size);

/* Serialises h (with its checksum) into buf; lg_header_parse is the
 * inverse: -1 with errno EINVAL and a reason in err when buf is not a
 * valid header (bad magic, version, checksum, any field out of range,
 * geometry not fitting lun_size, overlapping areas). */
void lg_header_serialize (const struct lg_header *h,
                          uint8_t buf[static LG_HDR_SIZE]);
int lg_header_parse (const uint8_t buf[static LG_HDR_SIZE], uint64_t lun_size,
                     struct lg_header *h, char *err, size_t errlen);

/* h's UUID in hex (LG_UUID_HEX: dev/volume.h). */
void lg_header_uuid_hex (const struct lg_header *h, char hex[LG_UUID_HEX]);

/* The block format writes over header copy 0 before it wipes anything
 * else, and replaces with the header when it is done: not a header (no
 * magic), it says that a format is under way, or was interrupted, and
 * lets the next format start over without --force (lungate-format(5)).
 * lg_header_is_format_mark, which tells it, and lg_header_has_magic are
 * in dev/volume.h. */
void lg_header_format_mark (uint8_t buf[static LG_HDR_SIZE]);

/* Reads both copies from dev and returns the newest valid one.  Nothing
 * is written: a copy that is damaged, older, or newer but forged is
 * rewritten only by the next lg_header_write, made by someone who opened
 * the header with its key.  -1 with errno: ENOENT (no header at all),
 * EINVAL (only damaged copies: the reasons in err), EIO. */
int lg_header_read (struct lg_dev *dev, struct lg_header *h, char *err,
                    size_t errlen);
/* The same, with every valid copy: hc[0] the newest, hc[1] the other when
 * it is valid too and differs (*n is 1 or 2).  For whoever can check
 * which one authenticates (lg_crypt_unlock). */
int lg_header_read_all (struct lg_dev *dev, struct lg_header hc[2], unsigned *n,
                        char *err, size_t errlen);

/* Writes h with seq+1 to both copies, the older copy first, flushing
 * after each.  Updates h->seq.  Blind: for format, which owns the LUN;
 * every other writer uses lg_header_update. */
int lg_header_write (struct lg_dev *dev, struct lg_header *h);

/* A change to the header: given the valid copies as lg_header_read_all
 * returns them, puts the new header in out (its MAC set) and returns 0,
 * or puts the header as it stands in out and returns 1 when there is
 * nothing to change, or returns -1 with errno to give up.  It may run
 * several times, each time on what the LUN holds then. */
typedef int lg_header_change_fn (const struct lg_header *copies, unsigned n,
                                 struct lg_header *out, void *opaque);

/* Read, change, write both copies, serialised against every other
 * lg_header_update on the LUN, from any machine: each copy is written
 * with COMPARE AND WRITE against the bytes the change was made from, or
 * where the LUN has no COMPARE AND WRITE by the timed scheme of
 * lungate-format(5) (each copy is written only after both are read again
 * and found as expected, within LG_HDR_RMW_MS of that check counting a
 * round trip once more).  Either way both are read back after
 * LG_HDR_VERIFY_MS, and a change that another overwrote is made again on
 * top of what is there; a change with nothing to do counts only if it
 * still has nothing to do LG_HDR_VERIFY_MS later.  out (optional) receives the
 * header written.  -1 with errno (EBUSY: the header kept changing). */
#define LG_HDR_VERIFY_MS 1000
#define LG_HDR_RMW_MS (LG_HDR_VERIFY_MS * 3 / 4)
int lg_header_update (struct lg_dev *dev, lg_header_change_fn *change,
                      void *opaque, struct lg_header *out, char *err,
                      size_t errlen);
/* The same with another read-back wait (and a budget a quarter less):
 * for the unit tests' devices, whose writes land at once. */
int lg_header_update_timed (struct lg_dev *dev, lg_header_change_fn *change,
                            void *opaque, struct lg_header *out, char *err,
                            size_t errlen, unsigned verify_ms);

/* Both copies as they are, for lg_header_update. */
int lg_header_read_copies (struct lg_dev *dev, uint8_t buf[2][LG_HDR_SIZE],
                           char *err, size_t errlen);

/* Key slots.  The master key is LG_KEY_BYTES in sodium_malloc memory.
 * A slot's wrapping key comes from a passphrase (Argon2id with the given
 * limits, salt random) or is a key file's 32 bytes. */
int lg_keyslot_set_passphrase (struct lg_header *h, unsigned slot,
                               const uint8_t *mk, const char *passphrase,
                               uint64_t opslimit, uint64_t memlimit);
int lg_keyslot_set_keyfile (struct lg_header *h, unsigned slot,
                            const uint8_t *mk,
                            const uint8_t key[static LG_KEY_BYTES]);

/* Tries every slot of the matching kind; on success writes the master key
 * into mk (LG_KEY_BYTES, caller's sodium memory), returns the slot number.
 * -1 with errno EACCES when no slot opens. */
int lg_keyslot_open_passphrase (const struct lg_header *h,
                                const char *passphrase, uint8_t *mk);
int lg_keyslot_open_keyfile (const struct lg_header *h,
                             const uint8_t key[static LG_KEY_BYTES],
                             uint8_t *mk);

/* The header MAC: BLAKE2b keyed with a key derived from the master key,
 * over every field but the MAC itself.  Set before writing; checked after
 * a slot opened, so that a header edited by someone without the key
 * (geometry, mode, UUID) is refused. */
void lg_header_set_mac (struct lg_header *h, const uint8_t *mk);
int lg_header_check_mac (const struct lg_header *h, const uint8_t *mk);

/* Subkeys of the master key (crypto_kdf, context "lungate1"). */
enum lg_subkey {
  LG_SUBKEY_DATA = 1,
  LG_SUBKEY_HEADER_MAC = 2,
};
void lg_derive_subkey (uint8_t out[static 32], const uint8_t *mk,
                       enum lg_subkey id);

/* Index of the first empty slot, or -1. */
int lg_keyslot_free (const struct lg_header *h);

#endif
