/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* A latency histogram in microseconds: exact below 16 µs, then 8 buckets
 * per power of two (12.5% resolution) up to about 2^40 µs.  Adding is
 * lock-free (relaxed atomics), so any number of threads may record into
 * one histogram; reading while they do gives a consistent-enough view.
 */
#ifndef LG_HIST_H
#define LG_HIST_H

#include <stdatomic.h>
#include <stdint.h>

#define LG_HIST_BUCKETS (16 + 37 * 8)

struct lg_hist {
  atomic_uint_fast64_t b[LG_HIST_BUCKETS];
};

void lg_hist_add (struct lg_hist *h, uint64_t us);

/* Adds every count of src into dst. */
void lg_hist_merge (struct lg_hist *dst, const struct lg_hist *src);

uint64_t lg_hist_count (const struct lg_hist *h);

/* The value below which a fraction q (0 < q <= 1) of the samples lie, as
 * the upper bound of its bucket; 0 when empty. */
uint64_t lg_hist_quantile (const struct lg_hist *h, double q);

#endif
