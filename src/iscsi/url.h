/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* iSCSI URLs, libiscsi's syntax:
 *   iscsi://[USER[%PASSWORD]@]HOST[:PORT][/TARGET-IQN[/LUN]]
 * A URL with no target names a portal, one with a target but no LUN a
 * target, and one with both a LUN.  The parser is ours, not libiscsi's,
 * so that a bad URL is answered with what exactly is wrong; it is fed
 * hostile input (argv, plugin parameters) and is fuzzed.
 */
#ifndef LG_URL_H
#define LG_URL_H

#include <stddef.h>

#define LG_URL_HOST_MAX 255
#define LG_URL_TARGET_MAX 223 /* RFC 3720 limit on iSCSI names */
#define LG_URL_LUN_MAX 16383  /* flat-space addressing */

enum lg_url_kind {
  LG_URL_PORTAL,
  LG_URL_TARGET,
  LG_URL_LUN,
};

struct lg_url {
  enum lg_url_kind kind;
  char host[LG_URL_HOST_MAX + 1]; /* without the brackets of an IPv6 */
  int port;
  char portal[LG_URL_HOST_MAX + 10]; /* "host:port" as libiscsi wants it */
  char target[LG_URL_TARGET_MAX + 1];
  int lun;        /* -1 unless kind == LG_URL_LUN */
  char *user;     /* NULL, or from the URL */
  char *password; /* NULL, or sodium_malloc'd */
};

/* Returns 0, or -1 with errno = EINVAL and a sentence in err that names
 * the part that is wrong.  On success free with lg_url_clear. */
int lg_url_parse (const char *s, struct lg_url *u, char *err, size_t errlen);
void lg_url_clear (struct lg_url *u);

/* The URL without its password, for messages. */
void lg_url_format (const struct lg_url *u, char *buf, size_t len);

#endif
