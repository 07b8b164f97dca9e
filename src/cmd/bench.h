/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* lungate bench: the workloads and their results (bench.c runs them,
 * bench-report.c shows them as a table, JSON or SVG bar charts). */
#ifndef LG_CMD_BENCH_H
#define LG_CMD_BENCH_H

#include <stdbool.h>
#include <stdint.h>

#define MAX_DEPTHS 8
#define MAX_MODES 3
#define MAX_JOBS (4 * MAX_DEPTHS)

struct job {
  char name[48];  /* "seqread-qd32" */
  char label[48]; /* "seq read 128K QD32" */
  bool write, random;
  uint32_t bs;
  unsigned depth;
};

struct result {
  bool done;
  double secs;
  uint64_t ops, bytes;
  double cpu; /* seconds of this process */
  uint64_t p50, p99, p999;
};

/* The results, res[job][mode], as a table or JSON on standard output. */
void lg_bench_table (const struct job *jobs, unsigned njobs,
                     const char *const *modes, unsigned nmodes,
                     struct result res[][MAX_MODES]);
void lg_bench_json (const char *lun, uint64_t region, double secs,
                    const struct job *jobs, unsigned njobs,
                    const char *const *modes, unsigned nmodes,
                    struct result res[][MAX_MODES]);

/* The results as two bar charts in an SVG file: 0, or -1 (said why). */
int lg_bench_svg (const char *path, const char *lun, const struct job *jobs,
                  unsigned njobs, const char *const *modes, unsigned nmodes,
                  struct result res[][MAX_MODES]);

#endif
