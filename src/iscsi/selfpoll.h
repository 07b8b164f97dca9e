/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* A submitter that polls its own session while it waits (selfpoll.c). */
#ifndef LG_SELFPOLL_H
#define LG_SELFPOLL_H

struct lg_session;
struct lg_waiter;

/* Polls and services s until w's commands are done, as long as nobody else
 * polls s (the caller then waits on w's semaphore as usual).  Any thread
 * without s->lock. */
void lg_s_wait_polling (struct lg_session *s, struct lg_waiter *w);

/* w's last command completed on a thread other than its poller's: wakes
 * the poll (any thread; s->lock may be held). */
void lg_s_poke (struct lg_session *s, struct lg_waiter *w);

#endif
