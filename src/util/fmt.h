/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Small output helpers for the commands: sizes for people, JSON strings. */
#ifndef LG_FMT_H
#define LG_FMT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* "1.00 GiB" */
const char *lg_human_size (uint64_t bytes, char *buf, size_t len);

/* Parses "N", "NK", "NM", "NG", "NT" (powers of 1024; "KiB" etc. too):
 * 0, or -1 for anything else or an overflow. */
int lg_parse_size (const char *s, uint64_t *out);

/* Parses the whole of s as an integer in base 8 or 10 ("-" allowed, no
 * space, no "+", no prefix) from min to max: 0, or -1 for anything else. */
int lg_parse_long (const char *s, int base, long min, long max, long *out);

/* Parses "A,B,C": 1 to maxn decimal integers from min to max into out.
 * The count, or -1 (an empty item, too many, one out of range). */
int lg_parse_long_list (const char *s, long min, long max, long *out,
                        size_t maxn);

/* Writes s as a JSON string literal, quotes included. */
void lg_json_string (FILE *f, const char *s);

#endif
