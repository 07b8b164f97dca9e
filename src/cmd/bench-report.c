/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* lungate bench's results: a table, JSON, and SVG bar charts of
 * throughput and p99 latency (bench.h).  Main thread. */
#include <config.h>

#include <inttypes.h>
#include <stdio.h>

#include "cmd/bench.h"
#include "util/fmt.h"
#include "util/log.h"

static double
mbps (const struct result *r)
{
  return r->secs > 0 ? (double) r->bytes / r->secs / 1e6 : 0;
}

static double
iops (const struct result *r)
{
  return r->secs > 0 ? (double) r->ops / r->secs : 0;
}

static double
cpu_per_gib (const struct result *r)
{
  return r->bytes ? r->cpu / ((double) r->bytes / (1024.0 * 1024 * 1024)) : 0;
}

/* The figure a job is judged by: MB/s for sequential, IOPS for random. */
static double
figure (const struct job *j, const struct result *r)
{
  return j->random ? iops (r) : mbps (r);
}

void
lg_bench_table (const struct job *jobs, unsigned njobs,
                const char *const *modes, unsigned nmodes,
                struct result res[][MAX_MODES])
{
  printf ("%-22s %-5s %9s %9s %8s %8s %9s %9s %8s\n", "workload", "mode",
          "MB/s", "IOPS", "p50 us", "p99 us", "p99.9 us", "CPU s/GiB",
          "vs plain");
  for (unsigned i = 0; i < njobs; i++)
    for (unsigned m = 0; m < nmodes; m++) {
      const struct result *r = &res[i][m];
      char ratio[16] = "";

      if (!r->done)
        continue;
      if (m > 0 && res[i][0].done && figure (&jobs[i], &res[i][0]) > 0)
        snprintf (ratio, sizeof ratio, "%.2fx",
                  figure (&jobs[i], r) / figure (&jobs[i], &res[i][0]));
      printf ("%-22s %-5s %9.1f %9.0f %8" PRIu64 " %8" PRIu64 " %9" PRIu64
              " %9.2f %8s\n",
              m == 0 ? jobs[i].label : "", modes[m], mbps (r), iops (r), r->p50,
              r->p99, r->p999, cpu_per_gib (r), ratio);
    }
}

void
lg_bench_json (const char *lun, uint64_t region, double secs,
               const struct job *jobs, unsigned njobs, const char *const *modes,
               unsigned nmodes, struct result res[][MAX_MODES])
{
  bool first = true;

  printf ("{\n  \"lun\": ");
  lg_json_string (stdout, lun);
  printf (",\n  \"region_bytes\": %" PRIu64 ",\n  \"seconds_per_run\": %.1f,\n"
          "  \"results\": [",
          region, secs);
  for (unsigned i = 0; i < njobs; i++)
    for (unsigned m = 0; m < nmodes; m++) {
      const struct result *r = &res[i][m];

      if (!r->done)
        continue;
      printf ("%s\n    {\"workload\": \"%s\", \"rw\": \"%s\", \"pattern\": "
              "\"%s\", \"block_size\": %" PRIu32 ", \"queue_depth\": %u, "
              "\"mode\": \"%s\", \"seconds\": %.3f, \"ops\": %" PRIu64
              ", \"bytes\": %" PRIu64 ", \"mb_per_s\": %.2f, \"iops\": %.1f, "
              "\"latency_us\": {\"p50\": %" PRIu64 ", \"p99\": %" PRIu64
              ", \"p99_9\": %" PRIu64 "}, \"cpu_s_per_gib\": %.3f",
              first ? "" : ",", jobs[i].name, jobs[i].write ? "write" : "read",
              jobs[i].random ? "random" : "sequential", jobs[i].bs,
              jobs[i].depth, modes[m], r->secs, r->ops, r->bytes, mbps (r),
              iops (r), r->p50, r->p99, r->p999, cpu_per_gib (r));
      if (m > 0 && res[i][0].done && figure (&jobs[i], &res[i][0]) > 0)
        printf (", \"ratio_to_plain\": %.3f",
                figure (&jobs[i], r) / figure (&jobs[i], &res[i][0]));
      printf ("}");
      first = false;
    }
  printf ("\n  ]\n}\n");
}

/* One bar chart: a group of bars (one per mode) per job. */
static void
svg_chart (FILE *f, double y0, const char *title, const struct job *jobs,
           unsigned njobs, unsigned nmodes, struct result res[][MAX_MODES],
           bool latency)
{
  static const char *const colour[MAX_MODES]
      = { "#4e79a7", "#f28e2b", "#59a14f" };
  const double left = 70, width = 860, height = 220;
  double max = 0, group = width / (njobs ? njobs : 1);
  double bar = (group - 16) / (nmodes ? nmodes : 1);

  for (unsigned i = 0; i < njobs; i++)
    for (unsigned m = 0; m < nmodes; m++) {
      double v
          = latency ? (double) res[i][m].p99 : figure (&jobs[i], &res[i][m]);

      if (res[i][m].done && v > max)
        max = v;
    }
  if (max <= 0)
    max = 1;
  fprintf (f,
           "<text x=\"%.0f\" y=\"%.0f\" font-size=\"15\" "
           "font-weight=\"bold\">%s</text>\n",
           left, y0 + 18, title);
  fprintf (f,
           "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" "
           "stroke=\"#333\"/>\n",
           left, y0 + 30 + height, left + width, y0 + 30 + height);
  for (unsigned i = 0; i < njobs; i++) {
    double gx = left + i * group + 8;

    for (unsigned m = 0; m < nmodes; m++) {
      const struct result *r = &res[i][m];
      double v, h;

      if (!r->done)
        continue;
      v = latency ? (double) r->p99 : figure (&jobs[i], r);
      h = v / max * height;
      fprintf (f,
               "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" "
               "fill=\"%s\"><title>%s: %.0f</title></rect>\n",
               gx + m * bar, y0 + 30 + height - h, bar - 2, h, colour[m],
               jobs[i].label, v);
      fprintf (f,
               "<text x=\"%.1f\" y=\"%.1f\" font-size=\"9\" "
               "text-anchor=\"middle\">%.0f</text>\n",
               gx + m * bar + (bar - 2) / 2, y0 + 26 + height - h, v);
    }
    fprintf (f,
             "<text x=\"%.1f\" y=\"%.0f\" font-size=\"10\" "
             "text-anchor=\"middle\">%s</text>\n",
             gx + (group - 16) / 2, y0 + 46 + height, jobs[i].label);
    fprintf (f,
             "<text x=\"%.1f\" y=\"%.0f\" font-size=\"9\" "
             "text-anchor=\"middle\" fill=\"#555\">%s</text>\n",
             gx + (group - 16) / 2, y0 + 58 + height,
             latency              ? "p99 latency, us"
                 : jobs[i].random ? "IOPS"
                                  : "MB/s");
  }
}

int
lg_bench_svg (const char *path, const char *lun, const struct job *jobs,
              unsigned njobs, const char *const *modes, unsigned nmodes,
              struct result res[][MAX_MODES])
{
  static const char *const colour[MAX_MODES]
      = { "#4e79a7", "#f28e2b", "#59a14f" };
  FILE *f = fopen (path, "w");

  if (f == NULL) {
    lg_error ("%s: %m", path);
    return -1;
  }
  fprintf (f,
           "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
           "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"1000\" "
           "height=\"640\" viewBox=\"0 0 1000 640\" "
           "font-family=\"sans-serif\">\n"
           "<rect width=\"1000\" height=\"640\" fill=\"white\"/>\n"
           "<text x=\"70\" y=\"24\" font-size=\"13\">lungate bench: ");
  for (const char *s = lun; *s; s++)
    if (*s == '<')
      fputs ("&lt;", f);
    else if (*s == '&')
      fputs ("&amp;", f);
    else
      fputc (*s, f);
  fprintf (f, "</text>\n");
  for (unsigned m = 0; m < nmodes; m++)
    fprintf (
        f,
        "<rect x=\"%u\" y=\"34\" width=\"12\" height=\"12\" "
        "fill=\"%s\"/><text x=\"%u\" y=\"45\" font-size=\"12\">%s</text>\n",
        70 + m * 90, colour[m], 86 + m * 90, modes[m]);
  svg_chart (f, 50, "Throughput (MB/s sequential, IOPS random)", jobs, njobs,
             nmodes, res, false);
  svg_chart (f, 340, "Latency (p99, microseconds)", jobs, njobs, nmodes, res,
             true);
  fprintf (f, "</svg>\n");
  if (fclose (f) != 0) {
    lg_error ("%s: %m", path);
    return -1;
  }
  return 0;
}
