/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* What the nbdkit plugin and the nbdkit filter share: the log sink, reading
 * a secret with nbdkit's password conventions into sodium memory, and the
 * mapping of NBD request flags to the block-device interface's. */
#ifndef LG_NBDKIT_GLUE_H
#define LG_NBDKIT_GLUE_H

#include <stdint.h>

#include "util/log.h"

/* Routes lg_log to nbdkit_error (warnings and errors) and nbdkit_debug. */
void lg_nbdkit_log_sink (enum lg_log_level level, const char *msg);

/* nbdkit_read_password (VALUE: SECRET, -, +FILE, -FD), moved at once into
 * sodium memory in *slot (a previous secret there is freed).  -1 with the
 * reason reported. */
int lg_nbdkit_read_secret (const char *key, const char *value, char **slot);

/* NBDKIT_FLAG_* to LG_FUA / LG_MAY_TRIM / LG_FAST_ZERO. */
unsigned lg_nbdkit_dev_flags (uint32_t flags);

#endif
