/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Shared by the plugin and the filter (each links its own copy).  Any
 * thread. */
#include <config.h>

#include <stdlib.h>
#include <string.h>

#define NBDKIT_API_VERSION 2
#include <nbdkit-plugin.h>

#include <sodium.h>

#include "common/glue.h"
#include "dev/dev.h"
#include "util/secret.h"

void
lg_nbdkit_log_sink (enum lg_log_level level, const char *msg)
{
  if (level <= LG_LOG_WARN)
    nbdkit_error ("%s", msg);
  else
    nbdkit_debug ("%s", msg);
}

int
lg_nbdkit_read_secret (const char *key, const char *value, char **slot)
{
  char *tmp = NULL;
  char *s;

  /* nbdkit_read_password hands back ordinary malloc'd memory: move the
   * secret into sodium memory and wipe the original at once. */
  if (nbdkit_read_password (value, &tmp) < 0)
    return -1;
  s = lg_secret_dup (tmp);
  sodium_memzero (tmp, strlen (tmp));
  free (tmp);
  if (s == NULL) {
    nbdkit_error ("%s: cannot store the secret", key);
    return -1;
  }
  lg_secret_free (*slot);
  *slot = s;
  return 0;
}

unsigned
lg_nbdkit_dev_flags (uint32_t flags)
{
  return ((flags & NBDKIT_FLAG_FUA) ? LG_FUA : 0)
      | ((flags & NBDKIT_FLAG_MAY_TRIM) ? LG_MAY_TRIM : 0)
      | ((flags & NBDKIT_FLAG_FAST_ZERO) ? LG_FAST_ZERO : 0);
}
