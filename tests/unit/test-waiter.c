/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Waiters: the waiting caller returns only after the last completion is
 * done with the waiter, which lives in the caller's stack frame.  The
 * test build widens the window between the completion's decrement and its
 * post (LG_WAITER_TEST_HOOK) and checks that the waiter has not returned
 * inside it. */
#include <config.h>

#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

#include "iscsi/selfpoll.h"
#include "iscsi/session.h"

/* No session here: waiters without a home never poll. */
void
lg_s_wait_polling (struct lg_session *s, struct lg_waiter *w)
{
  (void) s;
  (void) w;
}

void
lg_s_poke (struct lg_session *s, struct lg_waiter *w)
{
  (void) s;
  (void) w;
}

extern void (*lg_waiter_test_hook) (struct lg_waiter *w);

static atomic_bool decremented, returned, returned_early;

/* Runs in the completing thread after its decrement, before its post. */
static void
slow_post (struct lg_waiter *w)
{
  (void) w;
  atomic_store (&decremented, true);
  usleep (200 * 1000);
  if (atomic_load (&returned))
    atomic_store (&returned_early, true);
}

static void *
complete (void *opaque)
{
  lg_waiter_done (opaque);
  return NULL;
}

Test (waiter, wait_returns_only_after_the_post)
{
  struct lg_waiter w;
  pthread_t t;

  lg_waiter_test_hook = slow_post;
  lg_waiter_init (&w, 1);
  cr_assert_eq (pthread_create (&t, NULL, complete, &w), 0);
  /* Wait from inside the window: the count is 0, the post not done. */
  while (!atomic_load (&decremented))
    usleep (1000);
  lg_waiter_wait (&w);
  atomic_store (&returned, true);
  pthread_join (t, NULL);
  lg_waiter_destroy (&w);
  lg_waiter_test_hook = NULL;
  cr_assert (!atomic_load (&returned_early),
             "lg_waiter_wait returned before the completion posted");
}

Test (waiter, zero_expected_does_not_block)
{
  struct lg_waiter w;

  lg_waiter_init (&w, 0);
  lg_waiter_wait (&w);
  lg_waiter_destroy (&w);
}

Test (waiter, many_completions)
{
  enum { N = 8 };
  struct lg_waiter w;
  pthread_t t[N];

  lg_waiter_init (&w, N);
  for (int i = 0; i < N; i++)
    cr_assert_eq (pthread_create (&t[i], NULL, complete, &w), 0);
  lg_waiter_wait (&w);
  cr_assert_eq (atomic_load (&w.pending), 0);
  for (int i = 0; i < N; i++)
    pthread_join (t[i], NULL);
  lg_waiter_destroy (&w);
}
