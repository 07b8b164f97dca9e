/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* The test suite's switches.  lg_test_hook (NAME) is getenv (NAME) in a
 * build configured with --enable-test-hooks, and NULL in any other: no
 * environment variable switches a promise off (the single writer, the
 * barriers, the relay) in a production build.  The names:
 *   LUNGATE_TEST_IGNORE_PR     act as on a target without reservations
 *   LUNGATE_TEST_NO_OWNER      no owner record on a volume
 *   LUNGATE_TEST_PR_KEY        this reservation key, not a fresh one
 *   LUNGATE_TEST_NAP_MS        the session loop's nap
 *   LUNGATE_TEST_OPEN_NAP_MS   a wait between a volume's header read and
 *                              the crypt layer's open (dev/stack.c)
 *   LUNGATE_TEST_TAKEOVER_NAP_MS  a wait before a dead holder's LUN is
 *                              cleared as its own nexus (dev/reserve.c)
 *   LUNGATE_TEST_RA_AGE_MS     how long read-ahead data is served before
 *                              it is dropped as stale (dev/ra.c)
 *   LUNGATE_BENCH_NO_BARRIERS  the crypt layer's writes unordered
 *   LUNGATE_NO_RELAY           libiscsi on the socket, unchecked
 *   LUNGATE_TEST_RELAY_COPY    the relay copies data segments through its
 *                              buffer rather than splice them (a benchmark
 *                              of the splice; everything is still checked)
 *   LUNGATE_TEST_WRITE_BEHIND  write-behind of this size where the front
 *                              end asked for none (dev/dev.c)
 */
#ifndef LG_UTIL_HOOKS_H
#define LG_UTIL_HOOKS_H

#include <stdlib.h>

#ifdef LG_TEST_HOOKS
#define lg_test_hook(name) getenv (name)
#else
#define lg_test_hook(name) ((void) (name), (const char *) NULL)
#endif

#endif
