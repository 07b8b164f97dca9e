/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* SCSI-3 persistent reservations: one writer per LUN.
 *
 * A gateway that opens a LUN read-write registers one reservation key on
 * every session of its pool (every I_T nexus) and reserves the LUN Write
 * Exclusive - Registrants Only: the registered sessions, all the
 * gateway's, may write; anybody may read; a second gateway sees the
 * reservation and refuses before it writes anything.  Write Exclusive
 * alone would let only the one nexus that reserved write, and the pool
 * has several; the All Registrants type reports no holder key, so a
 * refusal could not say who holds the LUN.
 *
 * The key says who made it: its top byte is 'L' (0x4c), then 12 bits of
 * a hash of the host name, 28 bits of the seconds since 2024-01-01 UTC
 * at which the gateway process made it, and 16 random bits.  So a
 * restarted gateway is a new holder, two gateways started in the same
 * second almost surely differ (and a claim never takes a holder with its
 * own key for itself: reserve.c), and a refusal can say "on this host"
 * and since when.
 *
 * Pure functions here parse and describe; the commands go through
 * struct lg_lun_io (lun.h), so that they run on any session of a pool.
 */
#ifndef LG_PR_H
#define LG_PR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "iscsi/lun.h"

/* The type lungate reserves with. */
#define LG_PR_TYPE 5 /* Write Exclusive - Registrants Only */
#define LG_PR_MAX_KEYS 64

/* What PERSISTENT RESERVE IN says of a LUN. */
struct lg_pr_state {
  bool supported; /* the LUN answered PERSISTENT RESERVE IN */
  uint32_t generation;
  bool reserved;
  uint64_t holder; /* the reservation key; 0 for All Registrants types */
  int type;        /* SPC type code, 0 when not reserved */
  unsigned nkeys;  /* registrations (the same key may repeat) */
  uint64_t keys[LG_PR_MAX_KEYS];
};

/* This process's key (made once, never 0). */
uint64_t lg_pr_my_key (void);

/* The READ RESERVATION reply of n bytes: 0, or -1 when malformed. */
int lg_pr_parse_reservation (const uint8_t *d, size_t n,
                             struct lg_pr_state *st);
/* The READ KEYS reply of n bytes (at most LG_PR_MAX_KEYS are kept): 0, or
 * -1 when malformed. */
int lg_pr_parse_keys (const uint8_t *d, size_t n, struct lg_pr_state *st);

/* Who made key, in words: "a gateway on this host (nas) since
 * 2026-12-01 10:02 UTC", "a gateway on another host since ...", or
 * "an initiator other than lungate". */
void lg_pr_describe_key (uint64_t key, char *buf, size_t len);
/* Whether key is a lungate key made on a host of this host's name (the
 * name's hash: 12 bits, so only a hint). */
bool lg_pr_key_here (uint64_t key);
/* The type's name ("Write Exclusive, Registrants Only"). */
const char *lg_pr_type_name (int type);
/* One line on who holds the LUN: "not reserved", or the type, holder and
 * the registered keys. */
void lg_pr_describe (const struct lg_pr_state *st, char *buf, size_t len);
/* The same as a JSON value: "unsupported", or {"type": NAME or null,
 * "holder": "0x..." or null, "holder_is": WORDS, "keys": [...]}. */
void lg_pr_print_json (FILE *f, const struct lg_pr_state *st);

/* Reads the reservation and the keys of lun.  0 (st->supported false
 * when the LUN has no persistent reservations), or -1 with errno and
 * msg. */
int lg_pr_read (const struct lg_lun_io *io, int lun, struct lg_pr_state *st,
                char *msg, size_t len);

/* The initiator port that holds lun's reservation, from READ FULL
 * STATUS: its iSCSI name, its ISID when the target gave one (isid all
 * zero otherwise) and the key it holds with (the same reply: no other
 * holder can come between the two).  0, or -1 with errno (ENOENT: nobody
 * holds it or the holder is no iSCSI port) and msg. */
int lg_pr_holder_port (const struct lg_lun_io *io, int lun, char *name,
                       size_t namelen, uint8_t isid[6], uint64_t *key,
                       char *msg, size_t len);
/* The same from a READ FULL STATUS reply of n bytes (fuzzed, tested). */
int lg_pr_parse_holder_port (const uint8_t *d, size_t n, char *name,
                             size_t namelen, uint8_t isid[6], uint64_t *key);

/* PERSISTENT RESERVE OUT on one nexus (io's session): 0, or -1 with
 * errno (EPERM for RESERVATION CONFLICT; ENOTSUP when refused with NOT
 * READY or ILLEGAL REQUEST: the target cannot keep reservations) and
 * msg. */
int lg_pr_register (const struct lg_lun_io *io, int lun, uint64_t key,
                    char *msg, size_t len);
int lg_pr_unregister (const struct lg_lun_io *io, int lun, uint64_t key,
                      char *msg, size_t len);
int lg_pr_reserve (const struct lg_lun_io *io, int lun, uint64_t key, char *msg,
                   size_t len);
int lg_pr_preempt (const struct lg_lun_io *io, int lun, uint64_t key,
                   uint64_t victim, char *msg, size_t len);
/* RELEASE: from a registered nexus that does not hold the reservation
 * the standard makes it a no-op (GOOD); LIO answers RESERVATION CONFLICT
 * from a session of the holder's initiator name that is not the holder's
 * own nexus. */
int lg_pr_release (const struct lg_lun_io *io, int lun, uint64_t key, char *msg,
                   size_t len);
int lg_pr_clear (const struct lg_lun_io *io, int lun, uint64_t key, char *msg,
                 size_t len);

#endif
