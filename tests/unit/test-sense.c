/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The sense table only hands out errnos NBD can carry, and the right one. */
#include <config.h>

#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>

#include "iscsi/sense.h"

Test (sense, good_is_zero)
{
  cr_assert_eq (lg_scsi_errno (SCSI_STATUS_GOOD, 0, 0), 0);
  cr_assert_eq (lg_scsi_errno (SCSI_STATUS_CONDITION_MET, 0, 0), 0);
}

Test (sense, specific_ascq)
{
  cr_assert_eq (lg_scsi_errno (SCSI_STATUS_CHECK_CONDITION,
                               SCSI_SENSE_DATA_PROTECTION,
                               SCSI_SENSE_ASCQ_WRITE_PROTECTED),
                EPERM);
  cr_assert_eq (lg_scsi_errno (SCSI_STATUS_CHECK_CONDITION,
                               SCSI_SENSE_ILLEGAL_REQUEST,
                               SCSI_SENSE_ASCQ_INVALID_OPERATION_CODE),
                ENOTSUP);
  cr_assert_eq (lg_scsi_errno (SCSI_STATUS_CHECK_CONDITION,
                               SCSI_SENSE_ILLEGAL_REQUEST,
                               SCSI_SENSE_ASCQ_LBA_OUT_OF_RANGE),
                EINVAL);
  cr_assert_eq (lg_scsi_errno (SCSI_STATUS_CHECK_CONDITION,
                               SCSI_SENSE_DATA_PROTECTION, 0x2707),
                ENOSPC);
  cr_assert_eq (lg_scsi_errno (SCSI_STATUS_CHECK_CONDITION,
                               SCSI_SENSE_NOT_READY,
                               SCSI_SENSE_ASCQ_MEDIUM_NOT_PRESENT),
                ESHUTDOWN);
  cr_assert_eq (lg_scsi_errno (SCSI_STATUS_CHECK_CONDITION,
                               SCSI_SENSE_ILLEGAL_REQUEST,
                               SCSI_SENSE_ASCQ_LOGICAL_UNIT_NOT_SUPPORTED),
                ESHUTDOWN);
}

Test (sense, by_key)
{
  cr_assert_eq (lg_scsi_errno (SCSI_STATUS_CHECK_CONDITION,
                               SCSI_SENSE_MEDIUM_ERROR, 0x1100),
                EIO);
  cr_assert_eq (lg_scsi_errno (SCSI_STATUS_CHECK_CONDITION,
                               SCSI_SENSE_RECOVERED_ERROR, 0x1700),
                0);
}

Test (sense, only_nbd_errnos)
{
  static const int ok[] = { 0, EIO, EPERM, ENOSPC, EINVAL, ENOTSUP, ESHUTDOWN };
  static const int statuses[] = {
    SCSI_STATUS_CHECK_CONDITION,
    SCSI_STATUS_BUSY,
    SCSI_STATUS_RESERVATION_CONFLICT,
    SCSI_STATUS_TASK_SET_FULL,
    SCSI_STATUS_ACA_ACTIVE,
    SCSI_STATUS_TASK_ABORTED,
    SCSI_STATUS_REDIRECT,
    SCSI_STATUS_CANCELLED,
    SCSI_STATUS_ERROR,
    SCSI_STATUS_TIMEOUT,
    0x77,
  };

  for (size_t s = 0; s < sizeof statuses / sizeof statuses[0]; s++)
    for (int key = 0; key < 16; key++)
      for (int ascq = 0; ascq < 0x10000; ascq += 0x0101) {
        int e = lg_scsi_errno (statuses[s], key, ascq);
        bool found = false;

        for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
          found |= e == ok[i];
        cr_assert (found, "status %x key %x ascq %x gave errno %d", statuses[s],
                   key, ascq, e);
      }
}

Test (sense, message_names_sense)
{
  struct lg_cmd cmd;
  char msg[256];

  memset (&cmd, 0, sizeof cmd);
  cmd.status = SCSI_STATUS_CHECK_CONDITION;
  cmd.sense.key = SCSI_SENSE_ILLEGAL_REQUEST;
  cmd.sense.ascq = SCSI_SENSE_ASCQ_LBA_OUT_OF_RANGE;
  cr_assert_eq (lg_cmd_errno (&cmd, msg, sizeof msg), EINVAL);
  cr_assert_not_null (strstr (msg, "ILLEGAL"), "%s", msg);
  cr_assert_not_null (strstr (msg, "0x2100"), "%s", msg);

  memset (&cmd, 0, sizeof cmd);
  cmd.status = SCSI_STATUS_ERROR;
  strcpy (cmd.msg, "socket gone");
  cr_assert_eq (lg_cmd_errno (&cmd, msg, sizeof msg), EIO);
  cr_assert_not_null (strstr (msg, "socket gone"), "%s", msg);
}

/* The codes LIO sends on the reservation and LUN-change paths, and the
 * MEDIUM ERROR and space allocation family, have names (libiscsi 1.19
 * printed "unknown" for 08/00, 3F/0E, 2A/04, 2A/05). */
Test (sense, names_the_codes_targets_send)
{
  static const int codes[]
      = { 0x0800, 0x3f0e, 0x2a03, 0x2a04, 0x2a05, 0x2903, 0x2907,
          0x1100, 0x0c00, 0x2707, 0x3806, 0x0402, 0x040a, 0x4400 };
  struct lg_cmd cmd;
  char msg[256];

  for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++)
    cr_assert_str_neq (lg_ascq_name (codes[i]), "unknown", "0x%04x", codes[i]);
  memset (&cmd, 0, sizeof cmd);
  cmd.status = SCSI_STATUS_CHECK_CONDITION;
  cmd.sense.key = SCSI_SENSE_NOT_READY;
  cmd.sense.ascq = 0x0800;
  lg_cmd_errno (&cmd, msg, sizeof msg);
  cr_assert_not_null (strstr (msg, "communication failure"), "%s", msg);
}
