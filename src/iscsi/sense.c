/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Sense-to-errno table.  Pure functions: any thread. */
#include <config.h>

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "iscsi/sense.h"

/* ASC/ASCQ pairs worth a more precise errno than their sense key gives. */
static const struct {
  int ascq;
  int err;
} ascq_table[] = {
  { SCSI_SENSE_ASCQ_INVALID_OPERATION_CODE, ENOTSUP },
  { SCSI_SENSE_ASCQ_LBA_OUT_OF_RANGE, EINVAL },
  { SCSI_SENSE_ASCQ_INVALID_FIELD_IN_CDB, EINVAL },
  { SCSI_SENSE_ASCQ_INVALID_FIELD_IN_PARAMETER_LIST, EINVAL },
  { SCSI_SENSE_ASCQ_PARAMETER_LIST_LENGTH_ERROR, EINVAL },
  { SCSI_SENSE_ASCQ_LOGICAL_UNIT_NOT_SUPPORTED, ESHUTDOWN },
  { SCSI_SENSE_ASCQ_WRITE_PROTECTED, EPERM },
  { SCSI_SENSE_ASCQ_HARDWARE_WRITE_PROTECTED, EPERM },
  { SCSI_SENSE_ASCQ_SOFTWARE_WRITE_PROTECTED, EPERM },
  { 0x2707, ENOSPC }, /* space allocation failed write protect */
  { SCSI_SENSE_ASCQ_MEDIUM_NOT_PRESENT, ESHUTDOWN },
  { SCSI_SENSE_ASCQ_MEDIUM_NOT_PRESENT_TRAY_CLOSED, ESHUTDOWN },
  { SCSI_SENSE_ASCQ_MEDIUM_NOT_PRESENT_TRAY_OPEN, ESHUTDOWN },
};

static const struct {
  int key;
  int err;
} key_table[] = {
  { SCSI_SENSE_NO_SENSE, EIO },
  { SCSI_SENSE_RECOVERED_ERROR, 0 }, /* the command succeeded */
  { SCSI_SENSE_NOT_READY, EIO },
  { SCSI_SENSE_MEDIUM_ERROR, EIO },
  { SCSI_SENSE_HARDWARE_ERROR, EIO },
  { SCSI_SENSE_ILLEGAL_REQUEST, EINVAL },
  { SCSI_SENSE_UNIT_ATTENTION, EIO },
  { SCSI_SENSE_DATA_PROTECTION, EPERM },
  { SCSI_SENSE_BLANK_CHECK, EIO },
  { SCSI_SENSE_VENDOR_SPECIFIC, EIO },
  { SCSI_SENSE_COPY_ABORTED, EIO },
  { SCSI_SENSE_COMMAND_ABORTED, EIO },
  { SCSI_SENSE_OBSOLETE_ERROR_CODE, EIO },
  { SCSI_SENSE_OVERFLOW_COMMAND, ENOSPC },
  { SCSI_SENSE_MISCOMPARE, EIO },
};

int
lg_scsi_errno (int status, int sense_key, int ascq)
{
  size_t i;

  switch (status) {
  case SCSI_STATUS_GOOD:
  case SCSI_STATUS_CONDITION_MET:
    return 0;
  case SCSI_STATUS_CHECK_CONDITION:
    for (i = 0; i < sizeof ascq_table / sizeof ascq_table[0]; i++)
      if (ascq_table[i].ascq == ascq)
        return ascq_table[i].err;
    for (i = 0; i < sizeof key_table / sizeof key_table[0]; i++)
      if (key_table[i].key == sense_key)
        return key_table[i].err;
    return EIO;
  case SCSI_STATUS_RESERVATION_CONFLICT:
    return EPERM;
  case SCSI_STATUS_CANCELLED:
    return ESHUTDOWN;
  case SCSI_STATUS_BUSY:
  case SCSI_STATUS_TASK_SET_FULL:
  case SCSI_STATUS_ACA_ACTIVE:
  case SCSI_STATUS_TASK_ABORTED:
  case SCSI_STATUS_TIMEOUT:
  case SCSI_STATUS_ERROR:
  default:
    return EIO;
  }
}

static const char *
status_name (int status)
{
  switch (status) {
  case SCSI_STATUS_CHECK_CONDITION:
    return "CHECK CONDITION";
  case SCSI_STATUS_BUSY:
    return "BUSY";
  case SCSI_STATUS_RESERVATION_CONFLICT:
    return "RESERVATION CONFLICT";
  case SCSI_STATUS_TASK_SET_FULL:
    return "TASK SET FULL";
  case SCSI_STATUS_ACA_ACTIVE:
    return "ACA ACTIVE";
  case SCSI_STATUS_TASK_ABORTED:
    return "TASK ABORTED";
  case SCSI_STATUS_REDIRECT:
    return "REDIRECT";
  case SCSI_STATUS_CANCELLED:
    return "cancelled";
  case SCSI_STATUS_ERROR:
    return "transport error";
  case SCSI_STATUS_TIMEOUT:
    return "timed out";
  default:
    return "unknown status";
  }
}

/* libiscsi's names of sense keys and codes are NULL for unknown ones. */
static const char *
or_unknown (const char *s)
{
  return s ? s : "unknown";
}

/* Codes a target sends on the paths lungate uses that libiscsi 1.19 has
 * no name for (SPC-4 annex D); libiscsi's names for the rest. */
static const struct {
  int ascq;
  const char *name;
} ascq_names[] = {
  { 0x0400, "logical unit not ready, cause not reportable" },
  { 0x0401, "logical unit is in process of becoming ready" },
  { 0x0402, "logical unit not ready, initializing command required" },
  { 0x0403, "logical unit not ready, manual intervention required" },
  { 0x0404, "logical unit not ready, format in progress" },
  { 0x040a,
    "logical unit not accessible, asymmetric access state "
    "transition" },
  { 0x040b, "logical unit not accessible, target port in standby state" },
  { 0x040c,
    "logical unit not accessible, target port in unavailable "
    "state" },
  { 0x0800, "logical unit communication failure" },
  { 0x0801, "logical unit communication time-out" },
  { 0x0c00, "write error" },
  { 0x0c02, "write error - auto reallocation failed" },
  { 0x0c03, "write error - recommend reassignment" },
  { 0x1100, "unrecovered read error" },
  { 0x1101, "read retries exhausted" },
  { 0x1104, "unrecovered read error - auto reallocate failed" },
  { 0x1d00, "miscompare during verify operation" },
  { 0x2707, "space allocation failed write protect" },
  { 0x2900, "power on, reset, or bus device reset occurred" },
  { 0x2901, "power on occurred" },
  { 0x2902, "SCSI bus reset occurred" },
  { 0x2903, "bus device reset function occurred" },
  { 0x2904, "device internal reset" },
  { 0x2907, "I_T nexus loss occurred" },
  { 0x2a01, "mode parameters changed" },
  { 0x2a03, "reservations preempted" },
  { 0x2a04, "reservations released" },
  { 0x2a05, "registrations preempted" },
  { 0x2a09, "capacity data has changed" },
  { 0x3806, "thin provisioning soft threshold reached" },
  { 0x3f03, "inquiry data has changed" },
  { 0x3f0e, "reported LUNs data has changed" },
  { 0x4400, "internal target failure" },
  { 0x4b00, "data phase error" },
  { 0x5d00, "failure prediction threshold exceeded" },
};

/* SPC-4's names of the sense keys (libiscsi 1.19 has none for some, 0x3
 * among them: a full target's MEDIUM ERROR read "unknown"). */
static const char *const key_names[16] = {
  "NO SENSE",       "RECOVERED ERROR", "NOT READY",      "MEDIUM ERROR",
  "HARDWARE ERROR", "ILLEGAL REQUEST", "UNIT ATTENTION", "DATA PROTECT",
  "BLANK CHECK",    "VENDOR SPECIFIC", "COPY ABORTED",   "ABORTED COMMAND",
  "reserved (0xc)", "VOLUME OVERFLOW", "MISCOMPARE",     "COMPLETED",
};

static bool
is_write (const struct scsi_task *t)
{
  switch (t ? t->cdb[0] : 0) {
  case SCSI_OPCODE_WRITE10:
  case SCSI_OPCODE_WRITE12:
  case SCSI_OPCODE_WRITE16:
  case SCSI_OPCODE_WRITE_SAME10:
  case SCSI_OPCODE_WRITE_SAME16:
  case SCSI_OPCODE_COMPARE_AND_WRITE:
  case SCSI_OPCODE_WRITE_VERIFY10:
  case SCSI_OPCODE_WRITE_VERIFY16:
    return true;
  default:
    return false;
  }
}

/* What a sense says in words a user can act on, or "". */
static const char *
sense_hint (const struct lg_cmd *cmd)
{
  if (cmd->sense.ascq == 0x2707 || cmd->sense.ascq == 0x3806)
    return cmd->sense.ascq == 0x2707
        ? ": the target is out of space (thin provisioning)"
        : ": the target is running out of space (thin provisioning)";
  if (cmd->sense.key == SCSI_SENSE_MEDIUM_ERROR && is_write (cmd->task))
    return ": the target could not write to its disk (a thin-provisioned "
           "LUN out of space, or a failing disk)";
  return "";
}

const char *
lg_ascq_name (int ascq)
{
  for (size_t i = 0; i < sizeof ascq_names / sizeof ascq_names[0]; i++)
    if (ascq_names[i].ascq == ascq)
      return ascq_names[i].name;
  return or_unknown (scsi_sense_ascq_str (ascq));
}

int
lg_cmd_errno (const struct lg_cmd *cmd, char *msg, size_t len)
{
  int err = lg_scsi_errno (cmd->status, cmd->sense.key, cmd->sense.ascq);

  if (err == 0) {
    if (len)
      msg[0] = '\0';
    return 0;
  }
  if (cmd->status == SCSI_STATUS_CHECK_CONDITION)
    snprintf (msg, len, "CHECK CONDITION, sense %s (0x%x), %s (0x%04x)%s",
              key_names[cmd->sense.key & 0xf], cmd->sense.key,
              lg_ascq_name (cmd->sense.ascq), cmd->sense.ascq,
              sense_hint (cmd));
  else if (cmd->msg[0] && strcmp (cmd->msg, status_name (cmd->status)) != 0)
    snprintf (msg, len, "%s: %s", status_name (cmd->status), cmd->msg);
  else
    snprintf (msg, len, "%s (status 0x%x)", status_name (cmd->status),
              cmd->status);
  return err;
}

const char *
lg_scsi_opname (unsigned char op)
{
  switch (op) {
  case 0x00:
    return "TEST UNIT READY";
  case 0x12:
    return "INQUIRY";
  case 0x1a:
    return "MODE SENSE(6)";
  case 0x5a:
    return "MODE SENSE(10)";
  case 0x5e:
    return "PERSISTENT RESERVE IN";
  case 0x5f:
    return "PERSISTENT RESERVE OUT";
  case 0x89:
    return "COMPARE AND WRITE";
  case 0x28:
    return "READ(10)";
  case 0x2a:
    return "WRITE(10)";
  case 0x35:
    return "SYNCHRONIZE CACHE(10)";
  case 0x42:
    return "UNMAP";
  case 0x88:
    return "READ(16)";
  case 0x8a:
    return "WRITE(16)";
  case 0x91:
    return "SYNCHRONIZE CACHE(16)";
  case 0x93:
    return "WRITE SAME(16)";
  case 0x9e:
    return "SERVICE ACTION IN(16)";
  case 0xa0:
    return "REPORT LUNS";
  default:
    return "SCSI command";
  }
}
