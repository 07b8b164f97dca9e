/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The one table from SCSI status, sense key / ASC / ASCQ and libiscsi
 * transport failures to an errno, restricted to the errnos NBD carries
 * (EIO, EPERM, ENOSPC, EINVAL, ENOTSUP, ESHUTDOWN), and to a message. */
#ifndef LG_SENSE_H
#define LG_SENSE_H

#include <stddef.h>

#include "iscsi/session.h"

/* 0 when cmd succeeded; otherwise the errno, and a description of the
 * status and sense (without LUN or LBA, which the caller adds) in msg. */
int lg_cmd_errno (const struct lg_cmd *cmd, char *msg, size_t len);

/* The same mapping from raw values, for tests. */
int lg_scsi_errno (int status, int sense_key, int ascq);

/* "READ(16)" and the like, from the CDB's operation code. */
const char *lg_scsi_opname (unsigned char opcode);

/* libiscsi's name of an additional sense code, "unknown" when it has none. */
const char *lg_ascq_name (int ascq);

#endif
