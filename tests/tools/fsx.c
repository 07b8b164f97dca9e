/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* fsx: a file exerciser in the spirit of xfstests' fsx, written here for
 * the mount's fixed-size LUN files.  Random operations on the first LEN
 * bytes of FILE, each checked against a shadow copy in memory:
 *
 *   write     pwrite of random bytes at a random (unaligned) offset
 *   read      pread, compared with the shadow
 *   mapwrite  the same through a MAP_SHARED mapping, then msync
 *   mapread   a read through a mapping
 *   punch     fallocate PUNCH_HOLE (reads as zeroes after)
 *   zero      fallocate ZERO_RANGE
 *   fsync     fsync, or fdatasync
 *   reopen    close and open again
 *
 *   fsx [-S SEED] [-N OPS] [-l LEN] [-m MAXLEN] [-M] [-o SHADOW] FILE
 *
 * -M: no mmap (a -o direct_io mount refuses it).  An operation the file
 * refuses with EOPNOTSUPP is left out from then on.  At the end the whole
 * range is read back (a fresh descriptor) and compared; -o writes the
 * shadow to SHADOW, for a comparison with the target's backing file after
 * the unmount.  On a mismatch: the first bad offset, the expected and
 * found bytes, and the last operations that touched it.  Exit 0 when all
 * matched, 1 on a mismatch or an error, 2 on bad arguments. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define HISTORY 64

enum op {
  OP_WRITE,
  OP_READ,
  OP_MAPWRITE,
  OP_MAPREAD,
  OP_PUNCH,
  OP_ZERO,
  OP_FSYNC,
  OP_REOPEN,
  NOPS
};

static const char *const op_name[NOPS] = {
  "write", "read", "mapwrite", "mapread", "punch", "zero", "fsync", "reopen",
};

struct done {
  uint64_t n;
  enum op op;
  uint64_t off, len;
};

static const char *path;
static int fd = -1;
static uint8_t *shadow, *buf;
static uint64_t len = 16u << 20, maxlen = 256u << 10;
static uint64_t rng_state;
static bool off_ops[NOPS];
static struct done history[HISTORY];
static uint64_t nops_done, counts[NOPS];

/* xorshift64*: reproducible from the seed; not for secrets. */
static uint64_t
rnd (void)
{
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return rng_state * 0x2545F4914F6CDD1DULL;
}

static uint64_t
below (uint64_t n)
{
  return n ? rnd () % n : 0;
}

static void
note (enum op op, uint64_t off, uint64_t n)
{
  history[nops_done % HISTORY] = (struct done){ nops_done, op, off, n };
}

static void
show_history (uint64_t bad)
{
  fprintf (stderr, "fsx: the last operations (* touched offset %" PRIu64 "):\n",
           bad);
  for (uint64_t i = nops_done > HISTORY ? nops_done - HISTORY + 1 : 1;
       i <= nops_done; i++) {
    const struct done *d = &history[i % HISTORY];

    if (d->n != i)
      continue;
    fprintf (stderr, "  %c %6" PRIu64 " %-8s %10" PRIu64 " +%" PRIu64 "\n",
             bad >= d->off && bad < d->off + d->len ? '*' : ' ', d->n,
             op_name[d->op], d->off, d->len);
  }
}

static void
die (const char *what)
{
  fprintf (stderr, "fsx: operation %" PRIu64 ": %s: %s\n", nops_done, what,
           strerror (errno));
  exit (1);
}

static void
compare (const uint8_t *got, uint64_t off, uint64_t n, const char *how)
{
  for (uint64_t i = 0; i < n; i++)
    if (got[i] != shadow[off + i]) {
      uint64_t end = i;

      while (end < n && got[end] != shadow[off + end])
        end++;
      fprintf (stderr,
               "fsx: operation %" PRIu64 " (%s): offset %" PRIu64
               ": expected 0x%02x, found 0x%02x (%" PRIu64
               " bytes differ from there)\n",
               nops_done, how, off + i, shadow[off + i], got[i], end - i);
      show_history (off + i);
      exit (1);
    }
}

static void
open_file (void)
{
  fd = open (path, O_RDWR);
  if (fd < 0)
    die ("open");
}

static void
fill (uint8_t *p, uint64_t n)
{
  uint64_t v = rnd ();

  for (uint64_t i = 0; i < n; i++) {
    if (i % 8 == 0)
      v = rnd ();
    p[i] = (uint8_t) (v >> (8 * (i % 8)));
  }
}

static void
do_write (uint64_t off, uint64_t n)
{
  fill (buf, n);
  if (pwrite (fd, buf, n, (off_t) off) != (ssize_t) n)
    die ("pwrite");
  memcpy (shadow + off, buf, n);
}

static void
do_read (uint64_t off, uint64_t n)
{
  ssize_t r = pread (fd, buf, n, (off_t) off);

  if (r != (ssize_t) n)
    die (r < 0 ? "pread" : "pread: short");
  compare (buf, off, n, "read");
}

/* A mapping of the pages around [off, off + n). */
static bool
map (uint64_t off, uint64_t n, uint8_t **base, uint64_t *at, uint64_t *mlen)
{
  long page = sysconf (_SC_PAGESIZE);
  uint64_t start = off - off % (uint64_t) page;
  void *p;

  *mlen = off + n - start;
  p = mmap (NULL, *mlen, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t) start);
  if (p == MAP_FAILED) {
    if (errno == ENODEV || errno == EOPNOTSUPP) {
      off_ops[OP_MAPWRITE] = off_ops[OP_MAPREAD] = true;
      return false;
    }
    die ("mmap");
  }
  *base = p;
  *at = off - start;
  return true;
}

static void
do_mapwrite (uint64_t off, uint64_t n)
{
  uint8_t *p;
  uint64_t at, mlen;

  if (!map (off, n, &p, &at, &mlen))
    return;
  fill (p + at, n);
  memcpy (shadow + off, p + at, n);
  if (msync (p, mlen, MS_SYNC) < 0)
    die ("msync");
  munmap (p, mlen);
}

static void
do_mapread (uint64_t off, uint64_t n)
{
  uint8_t *p;
  uint64_t at, mlen;

  if (!map (off, n, &p, &at, &mlen))
    return;
  compare (p + at, off, n, "mapread");
  munmap (p, mlen);
}

static void
do_fallocate (enum op op, uint64_t off, uint64_t n)
{
  int mode = op == OP_PUNCH ? FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE
                            : FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE;

  if (fallocate (fd, mode, (off_t) off, (off_t) n) < 0) {
    if (errno == EOPNOTSUPP) {
      off_ops[op] = true;
      return;
    }
    die (op_name[op]);
  }
  memset (shadow + off, 0, n);
}

static int
usage (void)
{
  fprintf (stderr,
           "usage: fsx [-S SEED] [-N OPS] [-l LEN] [-m MAXLEN] [-M] "
           "[-o SHADOW] FILE\n");
  return 2;
}

int
main (int argc, char **argv)
{
  uint64_t seed = 1, nops = 1000;
  const char *out = NULL;
  int c;

  while ((c = getopt (argc, argv, "S:N:l:m:Mo:")) != -1)
    switch (c) {
    case 'S':
      seed = strtoull (optarg, NULL, 0);
      break;
    case 'N':
      nops = strtoull (optarg, NULL, 0);
      break;
    case 'l':
      len = strtoull (optarg, NULL, 0);
      break;
    case 'm':
      maxlen = strtoull (optarg, NULL, 0);
      break;
    case 'M':
      off_ops[OP_MAPWRITE] = off_ops[OP_MAPREAD] = true;
      break;
    case 'o':
      out = optarg;
      break;
    default:
      return usage ();
    }
  if (optind + 1 != argc || len == 0 || maxlen == 0)
    return usage ();
  path = argv[optind];
  if (maxlen > len)
    maxlen = len;
  rng_state = seed ? seed : 1;
  shadow = malloc (len);
  buf = malloc (maxlen);
  if (shadow == NULL || buf == NULL)
    die ("malloc");
  open_file ();
  /* The starting point: what the file holds now. */
  for (uint64_t off = 0; off < len; off += maxlen) {
    uint64_t n = len - off < maxlen ? len - off : maxlen;

    if (pread (fd, shadow + off, n, (off_t) off) != (ssize_t) n)
      die ("reading the starting content");
  }
  for (nops_done = 1; nops_done <= nops; nops_done++) {
    uint64_t r = below (100), off, n;
    enum op op = r < 40 ? OP_WRITE
        : r < 70        ? OP_READ
        : r < 78        ? OP_MAPWRITE
        : r < 84        ? OP_MAPREAD
        : r < 90        ? OP_PUNCH
        : r < 95        ? OP_ZERO
        : r < 98        ? OP_FSYNC
                        : OP_REOPEN;

    if (off_ops[op])
      op = op == OP_MAPREAD ? OP_READ : OP_WRITE;
    off = below (len);
    n = 1 + below (maxlen);
    if (n > len - off)
      n = len - off;
    note (op, off, n);
    counts[op]++;
    switch (op) {
    case OP_WRITE:
      do_write (off, n);
      break;
    case OP_READ:
      do_read (off, n);
      break;
    case OP_MAPWRITE:
      do_mapwrite (off, n);
      break;
    case OP_MAPREAD:
      do_mapread (off, n);
      break;
    case OP_PUNCH:
    case OP_ZERO:
      do_fallocate (op, off, n);
      break;
    case OP_FSYNC:
      note (op, 0, 0);
      if ((rnd () & 1 ? fsync (fd) : fdatasync (fd)) < 0)
        die ("fsync");
      break;
    case OP_REOPEN:
      note (op, 0, 0);
      if (close (fd) < 0)
        die ("close");
      open_file ();
      break;
    default:
      break;
    }
  }
  nops_done--;
  if (fsync (fd) < 0 || close (fd) < 0)
    die ("the last fsync and close");
  open_file ();
  for (uint64_t off = 0; off < len; off += maxlen) {
    uint64_t n = len - off < maxlen ? len - off : maxlen;

    do_read (off, n);
  }
  close (fd);
  if (out) {
    int o = open (out, O_WRONLY | O_CREAT | O_TRUNC, 0600);

    if (o < 0 || write (o, shadow, len) != (ssize_t) len || close (o) < 0)
      die (out);
  }
  printf ("fsx: seed %" PRIu64 ", %" PRIu64 " operations on %" PRIu64
          " bytes, all verified:",
          seed, nops_done, len);
  for (int i = 0; i < NOPS; i++)
    printf (" %s %" PRIu64 "%s", op_name[i], counts[i],
            off_ops[i] && i != OP_FSYNC && i != OP_REOPEN ? " (refused)" : "");
  printf ("\n");
  return 0;
}
