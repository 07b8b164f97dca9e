/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The volume interface: what a front end that works on the volume format
 * itself (format, key, info, bench, verify, the crypt filter) may know of
 * a lungate volume, in terms of its job, without the on-disk header's
 * struct or the crypt layer's internals.  A volume's description holds
 * no secret; the master key never leaves the library.
 *
 * Implemented over the crypt layer (src/crypt/): dev/volume.c (the
 * description, opening, format's steps), dev/volume-key.c (key slots, a
 * header's backup and restore); the functions declared here with the
 * prefixes lg_crypt_, lg_header_, lg_owner_ and lg_keyfile_ are the crypt
 * layer's own, whose headers include this one for the constants.  The
 * format is lungate-format(5).
 *
 * Threads: the caller's; a device returned here is thread-safe (dev.h).
 */
#ifndef LG_VOLUME_H
#define LG_VOLUME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dev/dev.h"

#define LG_HDR_SIZE 4096 /* one copy */
#define LG_HDR_COPY0_OFFSET 0
#define LG_HDR_COPY1_OFFSET (64 * 1024)
#define LG_HDR_AREA (1024 * 1024) /* metadata starts here */
#define LG_UNIT_SIZE 4096
#define LG_KEYSLOTS 8
#define LG_KEY_BYTES 32 /* master key and key files */
#define LG_UUID_BYTES 16
/* A metadata block: the unit of a metadata cache's size (lg_stack_wrap's
 * md_cache_blocks). */
#define LG_MD_BLOCK 4096
/* Below this a device cannot hold both header copies: never a volume. */
#define LG_VOLUME_MIN_SIZE (LG_HDR_COPY1_OFFSET + LG_HDR_SIZE)

enum lg_crypt_mode {
  LG_MODE_AEAD = 1, /* XChaCha20-Poly1305-IETF */
  LG_MODE_MAC = 2,  /* plaintext + Poly1305 (key from XChaCha20) */
};

#define LG_HDR_FLAG_LAZY 0x1 /* metadata not initialised at format */
/* Open for writing, or not closed cleanly since: a unit's newer slot may
 * not authenticate its data (a crash between the metadata write and the
 * data write), so a write must first find out which slot does. */
#define LG_HDR_FLAG_DIRTY 0x2

enum lg_keyslot_kind {
  LG_SLOT_EMPTY = 0,
  LG_SLOT_PASSPHRASE = 1, /* Argon2id(passphrase, salt, ops, mem) */
  LG_SLOT_KEYFILE = 2,    /* the 32 bytes of a key file */
};

/* A UUID in hex, as info prints it and --key-dir names key files. */
#define LG_UUID_HEX (2 * LG_UUID_BYTES + 1)

/* Where the key comes from: exactly one of the two, both in sodium_malloc
 * memory (util/secret.h), owned by the caller. */
struct lg_keysrc {
  const uint8_t *keyfile; /* LG_KEY_BYTES */
  const char *passphrase;
};

/* Reads a key file (exactly LG_KEY_BYTES bytes) into sodium memory. */
uint8_t *lg_keyfile_read (const char *path);

/* ---- what a LUN holds ---- */

/* true if buf starts with the header's magic (a header, valid or not, is
 * there). */
bool lg_header_has_magic (const uint8_t buf[static LG_HDR_SIZE]);
/* buf is the block format writes over header copy 0 before it wipes
 * anything else: a format is under way, or was interrupted. */
bool lg_header_is_format_mark (const uint8_t buf[static LG_HDR_SIZE]);

/* A key slot, as anyone with the LUN can read it. */
struct lg_volume_slot {
  uint32_t kind;               /* enum lg_keyslot_kind */
  uint64_t opslimit, memlimit; /* Argon2id, passphrase slots */
};

/* A volume, as its newest valid header copy describes it. */
struct lg_volume_info {
  uint32_t mode;  /* enum lg_crypt_mode */
  uint32_t flags; /* LG_HDR_FLAG_* */
  char uuid[LG_UUID_HEX];
  uint64_t seq;                /* the header copy's sequence number */
  uint64_t md_offset, md_size; /* metadata area, bytes */
  uint64_t data_offset;        /* first unit */
  uint64_t nunits;             /* units of LG_UNIT_SIZE */
  struct lg_volume_slot slots[LG_KEYSLOTS];
};

/* Reads the header of d (writes nothing).  -1 with errno: ENOENT (no
 * header at all), EINVAL (only damaged copies: the reasons in err),
 * EIO. */
int lg_volume_describe (struct lg_dev *d, struct lg_volume_info *vi, char *err,
                        size_t errlen);

/* "passphrase", "key-file" or "empty". */
const char *lg_volume_slot_kind_name (uint32_t kind);

/* The owner record (crypt/owner.h): who serves a volume on a LUN without
 * persistent reservations. */
#define LG_OWNER_HOST_MAX 63
struct lg_owner_rec {
  bool valid; /* magic and checksum good, and held (key != 0) */
  uint64_t key;
  uint32_t pid;
  uint64_t since, heartbeat;        /* Unix seconds */
  char host[LG_OWNER_HOST_MAX + 1]; /* printable */
};
/* Reads the record of lower: 0, or -1 with errno. */
int lg_owner_read (struct lg_dev *lower, struct lg_owner_rec *r);
/* "a gateway on host H (pid P) since T, heartbeat N s ago". */
void lg_owner_describe (const struct lg_owner_rec *r, char *buf, size_t len);

/* ---- key slots, and a copy of the header ---- */

/* The key slot ks opens on d, or -1 with errno and err: ENOENT no
 * header, EINVAL damaged header, EACCES wrong key. */
int lg_volume_key_slot (struct lg_dev *d, const struct lg_keysrc *ks, char *err,
                        size_t errlen);

enum lg_volume_key_op {
  LG_VOLUME_KEY_ADD,    /* new key into slot (-1: the first free one) */
  LG_VOLUME_KEY_CHANGE, /* new key into the slot ks opens */
  LG_VOLUME_KEY_REMOVE, /* empty slot (the last one only with force) */
};

/* A change of d's key slots in one header update, made again on top of
 * what another writer left if it got there first, after ks unlocked the
 * volume; the new key is new_key (a key file's) or new_pass.  0 with
 * *done the slot changed, or -1 (said why). */
int lg_volume_change_keys (struct lg_dev *d, const struct lg_keysrc *ks,
                           enum lg_volume_key_op op, long slot, bool force,
                           const uint8_t *new_key, const char *new_pass,
                           long *done);

/* A header backup of d into buf: its newest valid copy, or with a key
 * (ks NULL or empty: none) the copy the key opens; without a key, two
 * valid copies that differ refuse.  uuid and *nslots (the key slots in
 * use) describe it.  0, or -1 (said why). */
int lg_volume_backup (struct lg_dev *d, const struct lg_keysrc *ks,
                      uint8_t buf[static LG_HDR_SIZE], char uuid[LG_UUID_HEX],
                      int *nslots);

/* Whether buf is a header backup, for a LUN of any size: 0, or -1 with
 * the reason in err. */
int lg_volume_backup_check (const uint8_t buf[static LG_HDR_SIZE], char *err,
                            size_t errlen);

/* Puts the backup (read from file, named in messages) back on d once ks
 * opens it and its MAC checks, marked dirty; over another volume's
 * header, or one this lungate cannot read, only with force.  The key
 * slot ks opens (and the volume's uuid), or -1 (said why). */
int lg_volume_restore (struct lg_dev *d,
                       const uint8_t backup[static LG_HDR_SIZE],
                       const char *file, const struct lg_keysrc *ks, bool force,
                       char uuid[LG_UUID_HEX]);

/* ---- format, as steps ---- */

/* Where a volume on a LUN of lun_size bytes keeps what. */
struct lg_volume_geometry {
  uint64_t md_offset, md_size; /* metadata area, bytes */
  uint64_t data_offset;        /* first unit */
  uint64_t nunits;             /* units of data */
};
/* -1 (EINVAL) if the LUN is too small to hold the header, some metadata
 * and one unit. */
int lg_volume_geometry (uint64_t lun_size, struct lg_volume_geometry *g);

/* A new volume, in memory until written: its geometry for lun_size, a
 * random UUID and master key.  NULL with errno (EINVAL: too small). */
struct lg_volume_new;
struct lg_volume_new *lg_volume_new (uint64_t lun_size, uint32_t mode,
                                     uint32_t flags);
/* Seals the master key into key slot 0 with ks (a passphrase with the
 * Argon2id limits given).  0, or -1 with errno. */
int lg_volume_new_key (struct lg_volume_new *v, const struct lg_keysrc *ks,
                       uint64_t opslimit, uint64_t memlimit);
/* The crypt device of the new volume over raw (which it does not own),
 * the header not written.  NULL with err. */
struct lg_dev *lg_volume_new_open (struct lg_volume_new *v, struct lg_dev *raw,
                                   char *err, size_t errlen);
/* The device cd (lg_volume_new_open) seals the units of a volume being
 * formatted: after a login, raw's header copy 0 must still hold what it
 * holds now, the format mark, or this volume's header, else the LUN holds
 * another disk.  0, or -1 with errno (copy 0 could not be read). */
int lg_volume_formatting (struct lg_dev *cd, struct lg_dev *raw);
/* Zeroes the end of the header area, then writes the format mark over
 * header copy 0, flushing after each.  0, or -1 with errno. */
int lg_volume_write_format_mark (struct lg_dev *raw);
/* Writes authenticated ZERO slots for units [first, first+n) directly
 * (format uses it for the whole volume).  progress, if not NULL, is called
 * now and then with the units done; when it returns non-zero, the call
 * stops there and fails with EINTR. */
int lg_crypt_init_units (struct lg_dev *d, uint64_t first, uint64_t n,
                         int (*progress) (uint64_t done, uint64_t total));
/* Writes the new volume's header on raw, both copies (raw becomes the
 * volume).  0, or -1 with errno. */
int lg_volume_new_write (struct lg_volume_new *v, struct lg_dev *raw);
/* Wipes and frees. */
void lg_volume_new_free (struct lg_volume_new *v);

/* A throw-away volume over raw for bench: never written to the header,
 * a random key, lazy metadata.  NULL with err. */
struct lg_dev *lg_volume_scratch (struct lg_dev *raw, uint32_t mode, char *err,
                                  size_t errlen);

/* ---- an open volume ---- */

/* The crypt device over lower (which it does not own) once ks unlocks
 * its header; with manage_dirty the header is marked dirty before the
 * first write and clean by a clean close (crypt/crypt.h); uuid receives
 * the volume's.  NULL with errno and err. */
struct lg_dev *lg_volume_open (struct lg_dev *lower, const struct lg_keysrc *ks,
                               bool manage_dirty,
                               uint8_t uuid[static LG_UUID_BYTES], char *err,
                               size_t errlen);

/* Whether buf, header copy 0 of a device of lun_size bytes, is a valid
 * header of the volume uuid. */
bool lg_volume_is (const uint8_t buf[static LG_HDR_SIZE], uint64_t lun_size,
                   const uint8_t uuid[static LG_UUID_BYTES]);

/* Nothing writes now (the last writer of a shared device left): flush,
 * and mark the header clean if this device marked it dirty; the next
 * write marks it dirty again. */
void lg_crypt_quiesce (struct lg_dev *d);
/* Close without touching the header (its lower device is gone). */
void lg_crypt_keep_dirty (struct lg_dev *d);

/* Whether the volume was found dirty at open. */
bool lg_crypt_was_dirty (const struct lg_dev *d);

/* Scrubs units [first, first+n): calls bad for each maximal range of
 * units that fail authentication.  Returns the number of bad units, or -1
 * on an I/O error.  With repair (a writable device opened with
 * manage_dirty), a unit whose newer slot does not authenticate it (left
 * by a crash) gets that slot cleared; and when the whole volume was
 * checked and no unit is bad, the volume is marked clean at close.
 * progress as for lg_crypt_init_units (a stop: -1, EINTR, the ranges
 * found so far reported). */
int64_t lg_crypt_verify (
    struct lg_dev *d, uint64_t first, uint64_t n, bool repair,
    void (*bad) (void *opaque, uint64_t first_unit, uint64_t nunits),
    int (*progress) (uint64_t done, uint64_t total), void *opaque);

#endif
