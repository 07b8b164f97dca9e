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

int
lg_url_parse (const char *s, struct lg_url *u, char *err, size_t errlen)
{
  const char *p, *end, *slash, *at, *host_end;
  char ex[64];
  size_t n;
  long v;

  memset (u, 0, sizeof *u);
  u->lun = -1;
  u->port = 3260;

  if (strncasecmp (s, "iscsi://", 8) != 0)
    return fail (err, errlen, "missing 'iscsi://' scheme");
  p = s + 8;
  end = p + strlen (p);

  /* The authority ends at the first '/'.  Userinfo is before its last
   * '@'. */
  slash = strchr (p, '/');
  if (slash == NULL)
    slash = end;
  at = NULL;
  for (const char *q = p; q < slash; q++)
    if (*q == '@')
      at = q;
  if (at) {
    const char *pct = memchr (p, '%', (size_t) (at - p));
    size_t ulen = (size_t) ((pct ? pct : at) - p);

    if (ulen == 0)
      return fail (err, errlen, "empty user name before '@'");
    u->user = strndup (p, ulen);
    if (u->user == NULL)
      return fail (err, errlen, "out of memory");
    if (pct) {
      size_t plen = (size_t) (at - pct - 1);
      char *tmp;

      if (plen == 0 || plen > LG_SECRET_MAX) {
        lg_url_clear (u);
        return fail (err, errlen,
                     "bad password after '%%' (empty or too long)");
      }
      tmp = strndup (pct + 1, plen);
      u->password = tmp ? lg_secret_dup (tmp) : NULL;
      if (tmp) {
        explicit_bzero (tmp, plen);
        free (tmp);
      }
      if (u->password == NULL) {
        lg_url_clear (u);
        return fail (err, errlen, "out of memory");
      }
    }
    p = at + 1;
  }

  /* Host: a bracketed IPv6 address, or a name / IPv4 address. */
  if (*p == '[') {
    const char *close = memchr (p, ']', (size_t) (slash - p));

    if (close == NULL)
      goto bad_host_bracket;
    n = (size_t) (close - p - 1);
    if (n == 0 || n > LG_URL_HOST_MAX)
      goto bad_host_bracket;
    for (size_t i = 1; i <= n; i++)
      if (!isxdigit ((unsigned char) p[i]) && p[i] != ':' && p[i] != '.')
        goto bad_host_bracket;
    memcpy (u->host, p + 1, n);
    host_end = close + 1;
  }
  else {
    host_end = p;
    while (host_end < slash && *host_end != ':')
      host_end++;
    n = (size_t) (host_end - p);
    if (n == 0) {
      lg_url_clear (u);
      return fail (err, errlen, "missing host after 'iscsi://'");
    }
    if (n > LG_URL_HOST_MAX) {
      lg_url_clear (u);
      return fail (err, errlen, "host name longer than %d characters",
                   LG_URL_HOST_MAX);
    }
    for (size_t i = 0; i < n; i++)
      if (!valid_host_char (p[i])) {
        lg_url_clear (u);
        return fail (err, errlen, "bad character in host '%s'",
                     excerpt (p, n, ex, sizeof ex));
      }
    memcpy (u->host, p, n);
  }
  if (host_end < slash) {
    if (*host_end != ':') {
      lg_url_clear (u);
      return fail (
          err, errlen, "unexpected '%s' after the host",
          excerpt (host_end, (size_t) (slash - host_end), ex, sizeof ex));
    }
    n = (size_t) (slash - host_end - 1);
    v = parse_number (host_end + 1, n, 65535);
    if (v <= 0) {
      lg_url_clear (u);
      return fail (err, errlen, "bad port '%s' (want 1-65535)",
                   excerpt (host_end + 1, n, ex, sizeof ex));
    }
    u->port = (int) v;
  }
  snprintf (u->portal, sizeof u->portal,
            strchr (u->host, ':') ? "[%s]:%d" : "%s:%d", u->host, u->port);

  /* Target. */
  u->kind = LG_URL_PORTAL;
  if (*slash == '\0' || slash[1] == '\0')
    return 0;
  p = slash + 1;
  slash = strchr (p, '/');
  if (slash == NULL)
    slash = end;
  n = (size_t) (slash - p);
  if (n > LG_URL_TARGET_MAX) {
    lg_url_clear (u);
    return fail (err, errlen, "target name longer than %d characters",
                 LG_URL_TARGET_MAX);
  }
  if (n < 5
      || (strncasecmp (p, "iqn.", 4) != 0 && strncasecmp (p, "eui.", 4) != 0
          && strncasecmp (p, "naa.", 4) != 0)) {
    lg_url_clear (u);
    return fail (err, errlen,
                 "target '%s' is not an iSCSI name (iqn., eui. or naa.)",
                 excerpt (p, n, ex, sizeof ex));
  }
  for (size_t i = 0; i < n; i++)
    if (!valid_name_char (p[i])) {
      lg_url_clear (u);
      return fail (err, errlen, "bad character in target '%s'",
                   excerpt (p, n, ex, sizeof ex));
    }
  memcpy (u->target, p, n);
  u->kind = LG_URL_TARGET;
  if (*slash == '\0' || slash[1] == '\0')
    return 0;

  /* LUN. */
  p = slash + 1;
  slash = strchr (p, '/');
  n = slash ? (size_t) (slash - p) : strlen (p);
  v = parse_number (p, n, LG_URL_LUN_MAX);
  if (v < 0) {
    lg_url_clear (u);
    return fail (err, errlen, "LUN '%s' is not a number from 0 to %d",
                 excerpt (p, n, ex, sizeof ex), LG_URL_LUN_MAX);
  }
  if (slash && slash[1] != '\0') {
    lg_url_clear (u);
    return fail (err, errlen, "unexpected '%s' after the LUN",
                 excerpt (slash, strlen (slash), ex, sizeof ex));
  }
  u->lun = (int) v;
  u->kind = LG_URL_LUN;
  return 0;

bad_host_bracket:
  lg_url_clear (u);
  return fail (err, errlen, "bad IPv6 address in brackets");
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
