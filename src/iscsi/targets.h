/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* What a target says in its SendTargets reply, copied out of libiscsi's
 * list and checked: the names become directory names in a mount and lines
 * on a terminal, so a hostile target must not choose them freely. */
#ifndef LUNGATE_ISCSI_TARGETS_H
#define LUNGATE_ISCSI_TARGETS_H

#include <stdbool.h>
#include <stddef.h>

#include <iscsi/iscsi.h>

/* RFC 3720 3.2.6.1: an iSCSI name is at most 223 bytes.  TargetAddress is
 * "host[:port][,tpgt]" with a DNS name of at most 253 bytes (or an IPv6
 * literal in brackets). */
#define LG_ISCSI_NAME_MAX 223
#define LG_TARGET_ADDRESS_MAX 270
/* More than this many targets (or portals of one target) in one reply are
 * dropped: a portal that lists more is not one lungate can serve. */
#define LG_TARGETS_MAX 1024
#define LG_TARGET_PORTALS_MAX 64

struct lg_target {
  char *name;
  size_t nportals;
  char **portals; /* "addr:port,tpgt" as the target sent it */
};

struct lg_target_list {
  size_t n;
  struct lg_target *t;
  size_t dropped;         /* targets left out: bad or repeated name, too many */
  size_t dropped_portals; /* addresses left out: bad or too many */
};

/* A name lungate accepts from a target: 1 to LG_ISCSI_NAME_MAX bytes of
 * printable ASCII other than space and '/', and not "." or "..".  (The
 * RFC allows non-ASCII names after stringprep; lungate does not.) */
bool lg_iscsi_name_ok (const char *s);

/* An address lungate accepts: 1 to LG_TARGET_ADDRESS_MAX bytes of
 * printable ASCII other than space. */
bool lg_target_address_ok (const char *s);

/* Copies libiscsi's list (which it frees when its callback returns),
 * leaving out what the checks above refuse and repeated names, and
 * counting what it left out.  NULL only when out of memory. */
struct lg_target_list *
lg_targets_copy (const struct iscsi_discovery_address *da);

void lg_target_list_free (struct lg_target_list *l);

#endif
