/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Latency histograms (see hist.h).  Any thread. */
#include <config.h>

#include "util/hist.h"

static unsigned
bucket (uint64_t us)
{
  unsigned e;

  if (us < 16)
    return (unsigned) us;
  e = 63u - (unsigned) __builtin_clzll (us); /* 2^e <= us, e >= 4 */
  if (e > 40)
    return LG_HIST_BUCKETS - 1;
  return 16 + (e - 4) * 8 + (unsigned) ((us >> (e - 3)) & 7);
}

/* The largest value that falls in bucket i. */
static uint64_t
upper (unsigned i)
{
  unsigned e, sub;

  if (i < 16)
    return i;
  e = (i - 16) / 8 + 4;
  sub = (i - 16) % 8;
  return ((UINT64_C (8) + sub + 1) << (e - 3)) - 1;
}

void
lg_hist_add (struct lg_hist *h, uint64_t us)
{
  atomic_fetch_add_explicit (&h->b[bucket (us)], 1, memory_order_relaxed);
}

void
lg_hist_merge (struct lg_hist *dst, const struct lg_hist *src)
{
  for (unsigned i = 0; i < LG_HIST_BUCKETS; i++)
    atomic_fetch_add_explicit (
        &dst->b[i], atomic_load_explicit (&src->b[i], memory_order_relaxed),
        memory_order_relaxed);
}

uint64_t
lg_hist_count (const struct lg_hist *h)
{
  uint64_t n = 0;

  for (unsigned i = 0; i < LG_HIST_BUCKETS; i++)
    n += atomic_load_explicit (&h->b[i], memory_order_relaxed);
  return n;
}

uint64_t
lg_hist_quantile (const struct lg_hist *h, double q)
{
  uint64_t n = lg_hist_count (h), want, seen = 0;

  if (n == 0)
    return 0;
  want = (uint64_t) (q * (double) n + 0.5);
  if (want < 1)
    want = 1;
  if (want > n)
    want = n;
  for (unsigned i = 0; i < LG_HIST_BUCKETS; i++) {
    seen += atomic_load_explicit (&h->b[i], memory_order_relaxed);
    if (seen >= want)
      return upper (i);
  }
  return upper (LG_HIST_BUCKETS - 1);
}
