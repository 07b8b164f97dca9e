/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* URL parsing.  Pure function of its input: any thread. */
#include <config.h>

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "iscsi/url.h"
#include "util/secret.h"

static int fail (char *err, size_t errlen, const char *fmt, ...)
    __attribute__ ((format (printf, 3, 4)));

static int
fail (char *err, size_t errlen, const char *fmt, ...)
{
  va_list ap;

  va_start (ap, fmt);
  vsnprintf (err, errlen, fmt, ap);
  va_end (ap);
  errno = EINVAL;
  return -1;
}

/* Copies s[0..n) into a printable, bounded form for an error message. */
static const char *
excerpt (const char *s, size_t n, char *buf, size_t len)
{
  size_t i, j = 0;

  for (i = 0; i < n && j + 4 < len; i++)
    buf[j++] = isprint ((unsigned char) s[i]) ? s[i] : '?';
  if (i < n && j + 4 <= len) {
    memcpy (buf + j, "...", 3);
    j += 3;
  }
  buf[j] = '\0';
  return buf;
}

/* Parses a decimal number in s[0..n) into [0, max]; -1 if it is not one. */
static long
parse_number (const char *s, size_t n, long max)
{
  long v = 0;
  size_t i;

  if (n == 0 || n > 9)
    return -1;
  for (i = 0; i < n; i++) {
    if (!isdigit ((unsigned char) s[i]))
      return -1;
    v = v * 10 + (s[i] - '0');
  }
  return v <= max ? v : -1;
}

static int
valid_host_char (char c)
{
  return isalnum ((unsigned char) c) || c == '.' || c == '-' || c == '_';
}

static int
valid_name_char (char c)
{
  /* RFC 3722: lower-case letters, digits, '-', '.', ':'; targets in the
   * wild also use upper case and '_', which libiscsi passes through. */
  return isalnum ((unsigned char) c) || c == '-' || c == '.' || c == ':'
      || c == '_';
}

void
lg_url_clear (struct lg_url *u)
{
  free (u->user);
  lg_secret_free (u->password);
  u->user = NULL;
  u->password = NULL;
}

/* USER[%PASSWORD]@ before the host, when there is an '@' in the
 * authority p..slash: *p moves past it.  0, or -1 (err says why). */
static int
parse_userinfo (const char **p, const char *slash, struct lg_url *u, char *err,
                size_t errlen)
{
  const char *at = NULL, *pct;
  size_t ulen, plen;
  char *tmp;

  for (const char *q = *p; q < slash; q++)
    if (*q == '@')
      at = q; /* userinfo is before the last '@' */
  if (at == NULL)
    return 0;
  pct = memchr (*p, '%', (size_t) (at - *p));
  ulen = (size_t) ((pct ? pct : at) - *p);
  if (ulen == 0)
    return fail (err, errlen, "empty user name before '@'");
  u->user = strndup (*p, ulen);
  if (u->user == NULL)
    return fail (err, errlen, "out of memory");
  if (pct) {
    plen = (size_t) (at - pct - 1);
    if (plen == 0 || plen > LG_SECRET_MAX)
      return fail (err, errlen, "bad password after '%%' (empty or too long)");
    tmp = strndup (pct + 1, plen);
    u->password = tmp ? lg_secret_dup (tmp) : NULL;
    if (tmp) {
      explicit_bzero (tmp, plen);
      free (tmp);
    }
    if (u->password == NULL)
      return fail (err, errlen, "out of memory");
  }
  *p = at + 1;
  return 0;
}

/* The host: a bracketed IPv6 address, or a name or IPv4 address, in
 * p..slash; where it ends in *host_end.  0, or -1 (err says why). */
static int
parse_host (const char *p, const char *slash, struct lg_url *u,
            const char **host_end, char *err, size_t errlen)
{
  char ex[64];
  size_t n;

  if (*p == '[') {
    const char *close = memchr (p, ']', (size_t) (slash - p));

    n = close ? (size_t) (close - p - 1) : 0;
    if (n == 0 || n > LG_URL_HOST_MAX)
      return fail (err, errlen, "bad IPv6 address in brackets");
    for (size_t i = 1; i <= n; i++)
      if (!isxdigit ((unsigned char) p[i]) && p[i] != ':' && p[i] != '.')
        return fail (err, errlen, "bad IPv6 address in brackets");
    memcpy (u->host, p + 1, n);
    *host_end = close + 1;
    return 0;
  }
  *host_end = p;
  while (*host_end < slash && **host_end != ':')
    (*host_end)++;
  n = (size_t) (*host_end - p);
  if (n == 0)
    return fail (err, errlen, "missing host after 'iscsi://'");
  if (n > LG_URL_HOST_MAX)
    return fail (err, errlen, "host name longer than %d characters",
                 LG_URL_HOST_MAX);
  for (size_t i = 0; i < n; i++)
    if (!valid_host_char (p[i]))
      return fail (err, errlen, "bad character in host '%s'",
                   excerpt (p, n, ex, sizeof ex));
  memcpy (u->host, p, n);
  return 0;
}

/* :PORT in p..slash (after the host), if any, and the portal.  0, or -1
 * (err says why). */
static int
parse_port (const char *p, const char *slash, struct lg_url *u, char *err,
            size_t errlen)
{
  char ex[64];
  size_t n;
  long v;

  if (p < slash) {
    if (*p != ':')
      return fail (err, errlen, "unexpected '%s' after the host",
                   excerpt (p, (size_t) (slash - p), ex, sizeof ex));
    n = (size_t) (slash - p - 1);
    v = parse_number (p + 1, n, 65535);
    if (v <= 0)
      return fail (err, errlen, "bad port '%s' (want 1-65535)",
                   excerpt (p + 1, n, ex, sizeof ex));
    u->port = (int) v;
  }
  snprintf (u->portal, sizeof u->portal,
            strchr (u->host, ':') ? "[%s]:%d" : "%s:%d", u->host, u->port);
  return 0;
}

/* The target name, p[0..n).  0, or -1 (err says why). */
static int
parse_target (const char *p, size_t n, struct lg_url *u, char *err,
              size_t errlen)
{
  char ex[64];

  if (n > LG_URL_TARGET_MAX)
    return fail (err, errlen, "target name longer than %d characters",
                 LG_URL_TARGET_MAX);
  if (n < 5
      || (strncasecmp (p, "iqn.", 4) != 0 && strncasecmp (p, "eui.", 4) != 0
          && strncasecmp (p, "naa.", 4) != 0))
    return fail (err, errlen,
                 "target '%s' is not an iSCSI name (iqn., eui. or naa.)",
                 excerpt (p, n, ex, sizeof ex));
  for (size_t i = 0; i < n; i++)
    if (!valid_name_char (p[i]))
      return fail (err, errlen, "bad character in target '%s'",
                   excerpt (p, n, ex, sizeof ex));
  memcpy (u->target, p, n);
  u->kind = LG_URL_TARGET;
  return 0;
}

/* The LUN, and at most a '/' after it, in p.  0, or -1 (err says why). */
static int
parse_lun (const char *p, struct lg_url *u, char *err, size_t errlen)
{
  const char *slash = strchr (p, '/');
  size_t n = slash ? (size_t) (slash - p) : strlen (p);
  long v = parse_number (p, n, LG_URL_LUN_MAX);
  char ex[64];

  if (v < 0)
    return fail (err, errlen, "LUN '%s' is not a number from 0 to %d",
                 excerpt (p, n, ex, sizeof ex), LG_URL_LUN_MAX);
  if (slash && slash[1] != '\0')
    return fail (err, errlen, "unexpected '%s' after the LUN",
                 excerpt (slash, strlen (slash), ex, sizeof ex));
  u->lun = (int) v;
  u->kind = LG_URL_LUN;
  return 0;
}

/* iscsi://[USER[%PASSWORD]@]HOST[:PORT][/TARGET[/LUN]][/]: 0, or -1. */
static int
parse (const char *s, struct lg_url *u, char *err, size_t errlen)
{
  const char *p, *slash, *host_end = NULL;

  if (strncasecmp (s, "iscsi://", 8) != 0)
    return fail (err, errlen, "missing 'iscsi://' scheme");
  p = s + 8;
  /* The authority ends at the first '/'. */
  slash = strchr (p, '/');
  if (slash == NULL)
    slash = p + strlen (p);
  if (parse_userinfo (&p, slash, u, err, errlen) < 0
      || parse_host (p, slash, u, &host_end, err, errlen) < 0
      || parse_port (host_end, slash, u, err, errlen) < 0)
    return -1;
  u->kind = LG_URL_PORTAL;
  if (*slash == '\0' || slash[1] == '\0')
    return 0;
  p = slash + 1;
  slash = strchr (p, '/');
  if (slash == NULL)
    slash = p + strlen (p);
  if (parse_target (p, (size_t) (slash - p), u, err, errlen) < 0)
    return -1;
  if (*slash == '\0' || slash[1] == '\0')
    return 0;
  return parse_lun (slash + 1, u, err, errlen);
}

int
lg_url_parse (const char *s, struct lg_url *u, char *err, size_t errlen)
{
  memset (u, 0, sizeof *u);
  u->lun = -1;
  u->port = 3260;
  if (parse (s, u, err, errlen) < 0) {
    lg_url_clear (u);
    return -1;
  }
  return 0;
}

void
lg_url_format (const struct lg_url *u, char *buf, size_t len)
{
  int n = snprintf (buf, len, "iscsi://%s", u->portal);

  if (n < 0 || (size_t) n >= len)
    return;
  if (u->kind != LG_URL_PORTAL)
    n += snprintf (buf + n, len - (size_t) n, "/%s", u->target);
  if (n >= 0 && (size_t) n < len && u->kind == LG_URL_LUN)
    snprintf (buf + n, len - (size_t) n, "/%d", u->lun);
}
