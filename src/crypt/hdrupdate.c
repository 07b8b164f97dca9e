/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Header updates serialised on the LUN (lg_header_update, header.h).
 *
 * Several writers may update one header at once: `lungate key add' on one
 * machine while a gateway marks the volume dirty or clean on another.  A
 * plain read-change-write loses one of two such changes (a key slot can
 * vanish).  Here every write of a copy is conditional on the copy still
 * holding the bytes the change was made from:
 *
 *  - COMPARE AND WRITE where the LUN has it (istgt does, under a lock;
 *    tgt 1.0.85 lists it in VPD page B0h but answers INVALID OPERATION
 *    CODE, its entry in usr/sbc.c being commented out, and its backing
 *    store code would compare and write with no lock against another).
 *  - Elsewhere, a timed scheme.  Just before each copy is written, both
 *    copies are read again and the change starts over unless they still
 *    hold what it expects (what it was made from, and its own bytes in a
 *    copy it wrote); the write is sent only if that check was sent at
 *    most LG_HDR_RMW_MS ago, counting a read's round trip once more (for
 *    the write's own way to the target).  The time the change itself
 *    takes (a passphrase's key derivation, a slow or loaded machine)
 *    does not count; round trips up to a third of LG_HDR_RMW_MS (the
 *    check is two reads) do not make it give up.
 *
 * Either way, both copies are read back LG_HDR_VERIFY_MS after the
 * writes, and the change starts over on top of what is there unless they
 * hold ours.  A write of another that lands after our read-back was
 * checked (or compared) less than LG_HDR_VERIFY_MS before it landed, so
 * after our writes: it found our bytes and started over.  A write of
 * another that lands before our read-back either saw our bytes too or
 * shows in the read-back.  This holds while no header write lands more
 * than the difference after its check, beyond the check's round trip;
 * lungate-format(5) says so, and that a write held back by a reconnect
 * and sent again later can break it.  The COMPARE AND WRITE path reads
 * back as late as the timed one: a process without COMPARE AND WRITE
 * (the nbdkit filter over another plugin, a LUN that refused it once)
 * may update the same header, and a target whose compare and write are
 * not one step is covered too.
 *
 * An update with nothing to change (the slot is there, the flag is set)
 * may have read bytes that have not settled: another update's first
 * copy, or our own earlier attempt's, that a write checked before they
 * landed is about to overwrite.  So it reads the header again
 * LG_HDR_VERIFY_MS later, and counts only if there is still nothing to
 * change: by then every write checked before our read has landed.  This
 * is not the whole answer: a model of this scheme (a hostile review)
 * built, by hand, two interleavings within the assumption where what
 * reads as "nothing to change" after the wait is a copy that reappeared
 * only for a moment, with a late write still to land (three writers, one
 * of them crashing, or a check that ran slow).  Requiring both copies to
 * be byte for byte what was read closes those, and starved `key add'
 * under three gateways that open and close all the time; which to keep
 * is written down in doc/header-updates.md.
 *
 * Threads: any; nothing shared.
 */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <sodium.h>

#include "crypt/header.h"
#include "util/log.h"

#define TRIES 40

static const uint64_t copy_off[2]
    = { LG_HDR_COPY0_OFFSET, LG_HDR_COPY1_OFFSET };

/* The times of one update: the read-back's wait, and the timed scheme's
 * budget from a check to its write (a quarter less). */
struct times {
  uint64_t verify_us, rmw_us;
};

static void
sleep_us (uint64_t us)
{
  struct timespec ts
      = { (time_t) (us / 1000000), (long) (us % 1000000) * 1000L };

  while (nanosleep (&ts, &ts) < 0 && errno == EINTR)
    ;
}

/* The valid copies of buf, newest first (as lg_header_read_all), the
 * highest seq, and which copy to write first (the older or damaged). */
static unsigned
parse_copies (struct lg_dev *dev, uint8_t buf[2][LG_HDR_SIZE],
              struct lg_header hc[2], uint64_t *seq, int *first)
{
  struct lg_header p[2];
  int r[2], c;
  unsigned n = 0;

  for (c = 0; c < 2; c++)
    r[c] = lg_header_parse (buf[c], lg_dev_size (dev), &p[c], NULL, 0);
  c = r[0] == 0 && (r[1] < 0 || p[0].seq >= p[1].seq) ? 0 : 1;
  *seq = 0;
  if (r[c] == 0) {
    hc[n++] = p[c];
    *seq = p[c].seq;
  }
  if (r[1 - c] == 0 && memcmp (buf[0], buf[1], LG_HDR_SIZE) != 0)
    hc[n++] = p[1 - c];
  *first = 1 - c; /* the older copy (or the damaged one) first */
  sodium_memzero (p, sizeof p);
  return n;
}

/* The timed scheme's check (see the top): 1 both copies hold expect and
 * the write may be sent, 0 not (start again: changed, or too slow), -1
 * read error. */
static int
still_expected (struct lg_dev *dev, const uint8_t expect[2][LG_HDR_SIZE],
                const struct times *tm)
{
  uint8_t buf[LG_HDR_SIZE];
  uint64_t sent = lg_dev_now_us (), rtt = 0;
  int r = 1;

  for (int c = 0; c < 2 && r == 1; c++) {
    uint64_t t = lg_dev_now_us ();

    if (lg_dev_pread (dev, buf, LG_HDR_SIZE, copy_off[c]) < 0)
      r = -1;
    else if (memcmp (buf, expect[c], LG_HDR_SIZE) != 0)
      r = 0;
    t = lg_dev_now_us () - t;
    rtt = t > rtt ? t : rtt;
  }
  sodium_memzero (buf, sizeof buf);
  if (r == 1 && lg_dev_now_us () - sent + rtt > tm->rmw_us) {
    lg_debug ("%s: a header check took %" PRIu64 " ms: again", dev->name,
              (lg_dev_now_us () - sent) / 1000);
    r = 0; /* the write might land too late for another's read-back */
  }
  return r;
}

/* Writes out over copy c, conditionally (see the top): expect holds both
 * copies as this update last saw them.  0, or -1 with errno (EAGAIN: the
 * copy changed since, or the check was too slow). */
static int
write_copy (struct lg_dev *dev, bool *caw, const uint8_t expect[2][LG_HDR_SIZE],
            const uint8_t *out, int c, const struct times *tm)
{
  uint8_t other[LG_HDR_SIZE];
  int r;

  if (*caw) {
    /* The change was made from the newest copy, which may be the other
     * one: that must still be as read too (COMPARE AND WRITE compares
     * only the copy it writes). */
    if (lg_dev_pread (dev, other, LG_HDR_SIZE, copy_off[1 - c]) < 0)
      return -1;
    r = memcmp (other, expect[1 - c], LG_HDR_SIZE) == 0;
    sodium_memzero (other, sizeof other);
    if (!r) {
      errno = EAGAIN;
      return -1;
    }
    if (lg_dev_compare_write (dev, expect[c], out, LG_HDR_SIZE, copy_off[c])
        == 0)
      return lg_dev_flush (dev);
    if (errno != ENOTSUP)
      return -1;
    *caw = false;
    lg_debug ("%s: no COMPARE AND WRITE: header updates use the timed "
              "scheme",
              dev->name);
  }
  r = still_expected (dev, expect, tm);
  if (r <= 0) {
    if (r == 0)
      errno = EAGAIN;
    return -1;
  }
  if (lg_dev_pwrite (dev, out, LG_HDR_SIZE, copy_off[c], 0) < 0)
    return -1;
  return lg_dev_flush (dev);
}

/* After the read-back's wait, both copies hold want: 1 yes, 0 no, -1
 * read error. */
static int
copies_hold (struct lg_dev *dev, const uint8_t want[2][LG_HDR_SIZE],
             const struct times *tm)
{
  uint8_t buf[2][LG_HDR_SIZE];
  int r;

  sleep_us (tm->verify_us);
  if (lg_header_read_copies (dev, buf, NULL, 0) < 0)
    return -1;
  r = memcmp (buf, want, sizeof buf) == 0;
  sodium_memzero (buf, sizeof buf);
  return r;
}

/* The change had nothing to do in what was read: read again once that
 * has settled, LG_HDR_VERIFY_MS later, and ask again.  1 still nothing
 * to do (h: the header as it stands), 0 something to do now (start
 * again), -1 failed. */
static int
still_nothing (struct lg_dev *dev, lg_header_change_fn *change, void *opaque,
               struct lg_header *h, const struct times *tm)
{
  uint8_t buf[2][LG_HDR_SIZE];
  struct lg_header hc[2];
  uint64_t seq;
  unsigned n;
  int first, r = 0;

  sleep_us (tm->verify_us);
  if (lg_header_read_copies (dev, buf, NULL, 0) < 0)
    return -1;
  n = parse_copies (dev, buf, hc, &seq, &first);
  if (n > 0) {
    memset (h, 0, sizeof *h);
    r = change (hc, n, h, opaque);
  }
  sodium_memzero (buf, sizeof buf);
  sodium_memzero (hc, sizeof hc);
  return r;
}

/* One read-change-write: 0 done, 1 do it again, -1 failed. */
static int
attempt (struct lg_dev *dev, bool *caw, const struct times *tm,
         lg_header_change_fn *change, void *opaque, struct lg_header *res,
         char *err, size_t errlen)
{
  uint8_t buf[2][LG_HDR_SIZE], out[LG_HDR_SIZE];
  struct lg_header hc[2], h, check;
  uint64_t seq;
  unsigned n;
  int first, r = -1;

  if (lg_header_read_copies (dev, buf, err, errlen) < 0)
    return -1;
  n = parse_copies (dev, buf, hc, &seq, &first);
  if (n == 0) {
    snprintf (err, errlen, "no valid lungate header to update");
    errno = EINVAL;
    goto out;
  }
  memset (&h, 0, sizeof h);
  r = change (hc, n, &h, opaque);
  if (r < 0) {
    snprintf (err, errlen, "%s", strerror (errno));
    goto out;
  }
  if (r == 1) {
    /* Nothing to change: so far as it still holds once what was read has
     * settled (see the top). */
    r = still_nothing (dev, change, opaque, &h, tm);
    if (r < 0)
      snprintf (err, errlen, "reading the header again: %s", strerror (errno));
    else if (r == 1 && res)
      *res = h;
    r = r == 1 ? 0 : r == 0 ? 1 : -1;
    goto out;
  }
  r = -1;
  if (seq == UINT64_MAX) {
    snprintf (err, errlen, "header sequence number exhausted");
    errno = EINVAL;
    goto out;
  }
  h.seq = seq + 1;
  lg_header_serialize (&h, out);
  if (lg_header_parse (out, lg_dev_size (dev), &check, err, errlen) < 0) {
    errno = EINVAL; /* never write a header that would not open */
    goto out;
  }
  for (int i = 0; i < 2; i++) {
    int c = i == 0 ? first : 1 - first;

    if (write_copy (dev, caw, buf, out, c, tm) < 0) {
      r = errno == EAGAIN ? 1 : -1;
      if (r < 0)
        snprintf (err, errlen, "checking or writing header copy %d: %s", c,
                  strerror (errno));
      goto out;
    }
    memcpy (buf[c], out, LG_HDR_SIZE); /* what copy c holds now */
  }
  r = copies_hold (dev, buf, tm);
  if (r < 0)
    snprintf (err, errlen, "reading the header back: %s", strerror (errno));
  else if (r == 0)
    r = 1; /* overwritten: again, on top of what is there */
  else {
    r = 0;
    if (res)
      *res = h;
  }

out:
  sodium_memzero (buf, sizeof buf);
  sodium_memzero (out, sizeof out);
  sodium_memzero (hc, sizeof hc);
  sodium_memzero (&h, sizeof h);
  sodium_memzero (&check, sizeof check);
  return r;
}

int
lg_header_update (struct lg_dev *dev, lg_header_change_fn *change, void *opaque,
                  struct lg_header *out, char *err, size_t errlen)
{
  return lg_header_update_timed (dev, change, opaque, out, err, errlen,
                                 LG_HDR_VERIFY_MS);
}

int
lg_header_update_timed (struct lg_dev *dev, lg_header_change_fn *change,
                        void *opaque, struct lg_header *out, char *err,
                        size_t errlen, unsigned verify_ms)
{
  const struct times tm
      = { (uint64_t) verify_ms * 1000, (uint64_t) verify_ms * 750 };
  bool caw = dev->ops->compare_write != NULL;

  for (int i = 0; i < TRIES; i++) {
    int r = attempt (dev, &caw, &tm, change, opaque, out, err, errlen);

    if (r <= 0)
      return r;
    /* Someone else is updating it: back off, at random, a little more
     * each time. */
    lg_debug ("%s: the header changed during an update: again", dev->name);
    sleep_us (1000 * (randombytes_uniform (20u * (unsigned) (i + 1)) + 1));
  }
  snprintf (err, errlen, "the header kept changing during %d attempts", TRIES);
  errno = EBUSY;
  return -1;
}
