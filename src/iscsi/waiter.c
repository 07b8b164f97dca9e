/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Waiters: a group of commands waited on together (session.h).
 *
 * Threads: the caller that waits, and the loop or submitting threads that
 * complete the commands.  The last completion posts a semaphore; glibc's
 * sem_post is safe against the waiter destroying the semaphore as soon as
 * sem_wait returns, so the waiter may live in the waiting caller's stack
 * frame.  That holds only if the caller returns through sem_wait: a caller
 * that saw the count reach 0 and returned without waiting could leave
 * while the completing thread is still between its decrement and its
 * sem_post, which then writes into a dead frame.  So a waiter that expects
 * completions always waits for the post; only one that expects none
 * returns at once.
 *
 * A waiter of one command waits by polling that command's session itself
 * when nobody else does (selfpoll.c): it then takes its own reply with no
 * thread woken.  A completion on another thread while it polls wakes its
 * poll (lg_s_poke) before the post.
 */
#include <config.h>

#include <errno.h>

#include "iscsi/selfpoll.h"
#include "iscsi/session.h"

#ifdef LG_WAITER_TEST_HOOK
/* Unit tests widen the window between the decrement and the post. */
void (*lg_waiter_test_hook) (struct lg_waiter *w);
#endif

void
lg_waiter_init (struct lg_waiter *w, unsigned n)
{
  atomic_init (&w->pending, n);
  w->none = n == 0;
  sem_init (&w->sem, 0, 0);
  w->fn = NULL;
  w->opaque = NULL;
  w->home = NULL;
  atomic_init (&w->polling, false);
}

void
lg_waiter_init_fn (struct lg_waiter *w, unsigned n, void (*fn) (void *),
                   void *opaque)
{
  atomic_init (&w->pending, n);
  w->none = n == 0;
  w->fn = fn;
  w->opaque = opaque;
  w->home = NULL;
  atomic_init (&w->polling, false);
}

void
lg_waiter_destroy (struct lg_waiter *w)
{
  if (w->fn == NULL)
    sem_destroy (&w->sem);
}

void
lg_waiter_wait (struct lg_waiter *w)
{
  if (w->none)
    return;
  if (w->home)
    lg_s_wait_polling (w->home, w);
  while (sem_wait (&w->sem) < 0 && errno == EINTR)
    ;
}

void
lg_waiter_done (struct lg_waiter *w)
{
  if (atomic_fetch_sub (&w->pending, 1) == 1) {
#ifdef LG_WAITER_TEST_HOOK
    if (lg_waiter_test_hook)
      lg_waiter_test_hook (w);
#endif
    if (w->fn)
      w->fn (w->opaque);
    else {
      /* Read before the post: the waiter may be gone after it. */
      if (atomic_load (&w->polling))
        lg_s_poke (w->home, w);
      sem_post (&w->sem);
    }
  }
}
