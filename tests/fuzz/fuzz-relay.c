/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* libFuzzer harness for the relay's checks of what a target sends: the
 * input is a run of PDUs (48-byte headers, each followed by its data
 * segment as the header says, cut where the input ends).  Before each,
 * the relay is told of an outbound command with the header's task tag
 * and a kind taken from the input, so that the checks past the tag
 * lookup are reached.  Never a crash, a leak or undefined behaviour; once
 * a check fails, the relay stays failed. */
#include <config.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "iscsi/relay.h"

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size);

/* The CDBs whose blocks the relay's messages name, and one it does not
 * know. */
static const uint8_t ops[] = { 0x28, 0x2a, 0x88, 0x8a, 0x89, 0x12 };

/* An outbound PDU of kind k with task tag itt (bytes 16-19 of h); a READ
 * or WRITE takes its LUN (bytes 8-9) and CDB (32-47) from h too. */
static void
note (struct lg_relay *r, const uint8_t *h, uint8_t k)
{
  uint8_t out[48 + 64];

  memset (out, 0, sizeof out);
  memcpy (out + 16, h + 16, 4);
  if (k % 5 < 2) {
    memcpy (out + 8, h + 8, 2);
    memcpy (out + 32, h + 32, 16);
    out[32] = ops[(k / 5) % sizeof ops];
  }
  switch (k % 5) {
  case 0: /* a READ of up to 64 KiB */
    out[0] = 0x01;
    out[1] = 0x80 | 0x40;
    out[21] = 0x01;
    break;
  case 1: /* a WRITE */
    out[0] = 0x01;
    out[1] = 0x80 | 0x20;
    out[21] = 0x01;
    break;
  case 2:
    out[0] = 0x00; /* NOP-Out */
    break;
  case 3:
    out[0] = 0x03; /* Login */
    out[7] = 30;
    memcpy (out + 48, "MaxRecvDataSegmentLength=8192", 30);
    break;
  default:
    out[0] = 0x02; /* ABORT TASK */
    out[1] = 0x81;
    break;
  }
  lg_relay_note_out (r, out, sizeof out);
}

int
LLVMFuzzerTestOneInput (const uint8_t *data, size_t size)
{
  struct lg_relay *r = lg_relay_new_detached ();
  size_t p = 0;

  if (r == NULL)
    return 0;
  while (p + 49 <= size) {
    const uint8_t *h = data + p + 1;
    size_t dsl = (size_t) h[5] << 16 | (size_t) h[6] << 8 | h[7];
    size_t len = 48 + dsl;

    if (len > size - p - 1)
      len = size - p - 1;
    note (r, h, data[p]);
    if (lg_relay_check_in (r, h, len) < 0 && lg_relay_error (r)[0] == '\0')
      abort (); /* a failure always says why */
    p += 1 + len;
  }
  lg_relay_free (r);
  return 0;
}
