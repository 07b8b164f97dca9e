/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* What the nbdkit plugin and the nbdkit filter share: the log sink, reading
 * a secret with nbdkit's password conventions into sodium memory, and the
 * mapping of NBD request flags to the block-device interface's. */
#ifndef LG_NBDKIT_GLUE_H
#define LG_NBDKIT_GLUE_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "util/log.h"

/* Routes lg_log: errors to nbdkit_error, warnings to lg_nbdkit_say, the
 * rest to nbdkit_debug. */
void lg_nbdkit_log_sink (enum lg_log_level level, const char *msg);

/* MSG where nbdkit writes its errors (its --log: stderr, syslog, none),
 * tagged for PRIORITY, syslog's LOG_WARNING ("nbdkit: lungate: warning:
 * MSG") or LOG_NOTICE ("notice:").  Any thread. */
void lg_nbdkit_say (int priority, const char *msg);

/* The name lg_nbdkit_say puts first: "lungate", or the filter's. */
extern const char *lg_nbdkit_who;

/* nbdkit_read_password (VALUE: SECRET, -, +FILE, -FD), moved at once into
 * sodium memory in *slot (a previous secret there is freed).  -1 with the
 * reason reported. */
int lg_nbdkit_read_secret (const char *key, const char *value, char **slot);

/* NBDKIT_FLAG_* to LG_FUA / LG_MAY_TRIM / LG_FAST_ZERO. */
unsigned lg_nbdkit_dev_flags (uint32_t flags);

/* The reply gate of one connection (issue 27, item 3).  nbdkit 1.32 checks
 * a connection's status before it takes the lock to send a reply, and a
 * send that fails (the client is gone) shuts the socket and marks it -1:
 * a second reply that passed the check in the meantime then aborts the
 * whole server ("raw_send_socket: Assertion 'sock >= 0' failed").  Our
 * requests can be held for a whole outage budget and end together, so
 * once the client is gone (nbdkit_nanosleep says so) they return one at a
 * time, each after the thread that returned before has ended (its reply
 * was sent, or failed and closed the connection, which the next one's
 * check then sees), or after LG_GATE_WAIT_MS: a filter above us may hold
 * a lock across its call to us that the thread before needs (nbdkit's
 * blocksize filter does, for a read-modify-write), and a wait without
 * end would deadlock the connection and nbdkit's exit.  While the client
 * is there a return costs one poll. */
#define LG_GATE_WAIT_MS 500
struct lg_nbdkit_gate {
  pthread_mutex_t lock;
  pthread_cond_t cond; /* on CLOCK_MONOTONIC */
  bool gone;           /* the client left (or the server is stopping) */
  bool passing;        /* passer went through and has not ended yet */
  pthread_t passer;
  struct timespec passed; /* when, CLOCK_MONOTONIC */
};

void lg_nbdkit_gate_init (struct lg_nbdkit_gate *g);
/* Every request callback, just before it returns. */
void lg_nbdkit_gate_pass (struct lg_nbdkit_gate *g);
/* At .close: after it, no thread refers to g. */
void lg_nbdkit_gate_destroy (struct lg_nbdkit_gate *g);

#endif
