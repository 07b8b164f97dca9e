/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Small output helpers for the commands: sizes for people, JSON strings. */
#ifndef LG_FMT_H
#define LG_FMT_H

#include <stdint.h>
#include <stdio.h>

/* "1.00 GiB" */
const char *lg_human_size (uint64_t bytes, char *buf, size_t len);

/* Parses "N", "NK", "NM", "NG", "NT" (powers of 1024; "KiB" etc. too):
 * 0, or -1 for anything else or an overflow. */
int lg_parse_size (const char *s, uint64_t *out);

/* Writes s as a JSON string literal, quotes included. */
void lg_json_string (FILE *f, const char *s);

#endif
