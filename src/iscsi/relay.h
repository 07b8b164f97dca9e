/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The relay between libiscsi and the target.  libiscsi 1.19 trusts what
 * the target sends (a Data-In with the tag of a Login or NOP-Out makes it
 * dereference NULL; it writes Data-In at any offset and never checks that
 * the data covered the buffer; it logs out by itself on an AsyncEvent and
 * frees queued tasks without their callbacks).  So once its TCP connect
 * completes, its socket is moved here (dup) and one end of a socketpair
 * takes its place (dup2): every byte passes through this file, where the
 * PDU framing of both directions is parsed and what comes from the target
 * is checked before libiscsi reads it (opcode, lengths against what was
 * negotiated, task tags against what libiscsi sent and of which kind,
 * Data-In offsets in order without gap or overlap and inside the command's
 * buffer, the status's residual against the data received, R2T ranges,
 * sense lengths).  The first violation closes the connection, with a
 * message naming it; the session then holds and reissues as after any
 * lost connection.  The data segments of large PDUs are not copied
 * into this process: once their header was checked they are spliced
 * through a pipe (relay.c); LUNGATE_TEST_RELAY_COPY=1 copies them, in a
 * test build, for contrib/bench/relay.
 *
 * Everything runs on the caller's thread, under the session's lock; the
 * sockets are non-blocking. */
#ifndef LG_RELAY_H
#define LG_RELAY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct lg_relay;

/* Takes over libiscsi's connected socket lib_fd (which becomes a
 * socketpair end).  NULL with err set when the descriptors cannot be
 * made. */
struct lg_relay *lg_relay_attach (int lib_fd, char *err, size_t errlen);

/* Closes the relay's sockets (libiscsi's end then reads EOF). */
void lg_relay_free (struct lg_relay *r);

/* The network socket to poll, and for which events. */
int lg_relay_net_fd (const struct lg_relay *r);
short lg_relay_net_events (const struct lg_relay *r);

/* Moves what can move, both ways, without blocking, reading from the
 * sides named in from (what was read before always moves on); *delivered
 * is set when bytes reached libiscsi's end (service it for POLLIN).  A
 * read that does not fill the buffer is taken to have emptied its socket:
 * the network socket is polled, and libiscsi writes only inside a call
 * that is followed by a pump.  -1 when the
 * connection is over: closed by the target, an error, or a violation
 * (lg_relay_error says which; lg_relay_broke_protocol whether the target
 * broke the protocol rather than the network failing). */
#define LG_RELAY_FROM_LIB 1u
#define LG_RELAY_FROM_NET 2u
int lg_relay_pump (struct lg_relay *r, unsigned from, bool *delivered);
const char *lg_relay_error (const struct lg_relay *r);
bool lg_relay_broke_protocol (const struct lg_relay *r);

/* The bytes passed on both ways so far: copied through the buffer, and
 * spliced. */
void lg_relay_bytes (const struct lg_relay *r, uint64_t *copied,
                     uint64_t *spliced);

/* When the last PDU header came from the target (CLOCK_MONOTONIC, ms; 0:
 * none yet): bytes of a PDU, not a close or a reset. */
int64_t lg_relay_heard_ms (const struct lg_relay *r);

/* Whether the target holds its command window closed (MaxCmdSN below
 * ExpCmdSN), and since how many seconds: into buf, "" when it is open. */
void lg_relay_window_note (const struct lg_relay *r, char *buf, size_t len);

/* Checks one PDU header the target sent, for the fuzzer: hdr holds at
 * least 48 bytes.  0, or -1 with lg_relay_error set. */
int lg_relay_check_in (struct lg_relay *r, const unsigned char *hdr,
                       size_t len);

/* A relay with no sockets, for the fuzzer and unit tests: outbound
 * headers are given with lg_relay_note_out. */
struct lg_relay *lg_relay_new_detached (void);
void lg_relay_note_out (struct lg_relay *r, const unsigned char *hdr,
                        size_t len);

#endif
