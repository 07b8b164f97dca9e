/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* URL parser: what it accepts, and that each rejection names the part. */
#include <config.h>

#include <criterion/criterion.h>
#include <string.h>

#include "iscsi/url.h"

static struct lg_url u;
static char err[256];

static void
teardown (void)
{
  lg_url_clear (&u);
}

TestSuite (url, .fini = teardown);

Test (url, lun_url)
{
  cr_assert_eq (lg_url_parse ("iscsi://127.0.0.1:3261/iqn.2026-11.org.x:t/2",
                              &u, err, sizeof err),
                0, "%s", err);
  cr_assert_eq (u.kind, LG_URL_LUN);
  cr_assert_str_eq (u.host, "127.0.0.1");
  cr_assert_eq (u.port, 3261);
  cr_assert_str_eq (u.portal, "127.0.0.1:3261");
  cr_assert_str_eq (u.target, "iqn.2026-11.org.x:t");
  cr_assert_eq (u.lun, 2);
  cr_assert_null (u.user);
}

Test (url, portal_default_port)
{
  cr_assert_eq (lg_url_parse ("iscsi://example.org", &u, err, sizeof err), 0);
  cr_assert_eq (u.kind, LG_URL_PORTAL);
  cr_assert_eq (u.port, 3260);
  cr_assert_eq (u.lun, -1);
  lg_url_clear (&u);
  cr_assert_eq (lg_url_parse ("iscsi://example.org/", &u, err, sizeof err), 0);
  cr_assert_eq (u.kind, LG_URL_PORTAL);
}

Test (url, target_url)
{
  cr_assert_eq (lg_url_parse ("iscsi://h/iqn.a.b:c/", &u, err, sizeof err), 0);
  cr_assert_eq (u.kind, LG_URL_TARGET);
  cr_assert_str_eq (u.target, "iqn.a.b:c");
}

Test (url, ipv6)
{
  cr_assert_eq (
      lg_url_parse ("iscsi://[::1]:3300/iqn.a:b/0", &u, err, sizeof err), 0,
      "%s", err);
  cr_assert_str_eq (u.host, "::1");
  cr_assert_str_eq (u.portal, "[::1]:3300");
  cr_assert_eq (u.lun, 0);
}

Test (url, credentials)
{
  cr_assert_eq (
      lg_url_parse ("iscsi://alice%s3cret@h/iqn.a:b/1", &u, err, sizeof err), 0,
      "%s", err);
  cr_assert_str_eq (u.user, "alice");
  cr_assert_str_eq (u.password, "s3cret");
  cr_assert_str_eq (u.host, "h");
}

Test (url, format_hides_password)
{
  char buf[256];

  cr_assert_eq (
      lg_url_parse ("iscsi://alice%s3cret@h:99/iqn.a:b/1", &u, err, sizeof err),
      0);
  lg_url_format (&u, buf, sizeof buf);
  cr_assert_str_eq (buf, "iscsi://h:99/iqn.a:b/1");
}

static void
expect_bad (const char *url, const char *fragment)
{
  int r = lg_url_parse (url, &u, err, sizeof err);

  cr_assert_eq (r, -1, "accepted %s", url);
  cr_assert_not_null (strstr (err, fragment), "'%s': got '%s', want '%s'", url,
                      err, fragment);
  lg_url_clear (&u);
}

Test (url, rejections_name_the_part)
{
  expect_bad ("http://h/iqn.a:b/1", "scheme");
  expect_bad ("iscsi://", "missing host");
  expect_bad ("iscsi://:3260/iqn.a:b/1", "missing host");
  expect_bad ("iscsi://h:99999/iqn.a:b/1", "bad port '99999'");
  expect_bad ("iscsi://h:0/iqn.a:b/1", "bad port");
  expect_bad ("iscsi://h:x/iqn.a:b/1", "bad port 'x'");
  expect_bad ("iscsi://h/target/1", "not an iSCSI name");
  expect_bad ("iscsi://h/iqn.a:b/abc", "LUN 'abc'");
  expect_bad ("iscsi://h/iqn.a:b/99999", "LUN '99999'");
  expect_bad ("iscsi://h/iqn.a:b/-1", "LUN '-1'");
  expect_bad ("iscsi://h/iqn.a:b/1/extra", "after the LUN");
  expect_bad ("iscsi://h o/iqn.a:b/1", "bad character in host");
  expect_bad ("iscsi://[zz]/iqn.a:b/1", "IPv6");
  expect_bad ("iscsi://[::1/iqn.a:b/1", "IPv6");
  expect_bad ("iscsi://@h/iqn.a:b/1", "empty user");
  expect_bad ("iscsi://u%@h/iqn.a:b/1", "bad password");
  expect_bad ("iscsi://h/iqn.a b/1", "bad character in target");
}

Test (url, long_inputs_are_bounded)
{
  char big[4096];

  memset (big, 'a', sizeof big);
  memcpy (big, "iscsi://", 8);
  big[sizeof big - 1] = '\0';
  expect_bad (big, "longer than");
}
