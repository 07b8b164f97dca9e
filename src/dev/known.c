/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Blocks whose content a LUN's only writer knows (known.h). */
#include <config.h>

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "dev/known.h"

#define HASH_BYTES 16
/* Writes tracked in flight at once; past that a write only forgets. */
#define MAX_INFLIGHT 256
#define READS 3

struct slot {
  bool used;
  uint64_t lba;
  uint64_t gen; /* changes whenever the slot does */
  unsigned n;   /* candidates */
  uint8_t hash[LG_KNOWN_CANDIDATES][HASH_BYTES];
};

struct flight {
  bool used;
  bool tainted; /* overlapped another write in flight */
  uint64_t lba, nblocks;
  const uint8_t *buf;
};

struct lg_known {
  pthread_mutex_t lock;
  uint32_t bs;
  uint64_t gen;
  unsigned next;      /* the slot the next block takes */
  unsigned untracked; /* writes in flight past MAX_INFLIGHT */
  struct slot slots[LG_KNOWN_SLOTS];
  struct flight fl[MAX_INFLIGHT];
};

struct lg_known *
lg_known_new (uint32_t bs)
{
  struct lg_known *k;

  if (bs == 0 || bs > 4096) {
    errno = EINVAL;
    return NULL;
  }
  if ((k = calloc (1, sizeof *k)) == NULL)
    return NULL;
  k->bs = bs;
  pthread_mutex_init (&k->lock, NULL);
  return k;
}

void
lg_known_free (struct lg_known *k)
{
  if (k == NULL)
    return;
  pthread_mutex_destroy (&k->lock);
  free (k);
}

static bool
overlaps (uint64_t a, uint64_t an, uint64_t b, uint64_t bn)
{
  return a < b + bn && b < a + an;
}

static void
hash_block (const struct lg_known *k, const uint8_t *b, uint8_t *h)
{
  crypto_generichash (h, HASH_BYTES, b, k->bs, NULL, 0);
}

static void
forget (struct lg_known *k, struct slot *s)
{
  s->used = false;
  s->gen = ++k->gen;
}

/* The token of a write past MAX_INFLIGHT: it only forgets, and every
 * write that overlaps its time counts as tainted. */
#define UNTRACKED (MAX_INFLIGHT + 1)

unsigned
lg_known_begin (struct lg_known *k, uint64_t lba, uint64_t nblocks,
                const uint8_t *buf)
{
  unsigned token = 0;
  bool tainted = false;

  pthread_mutex_lock (&k->lock);
  tainted = k->untracked > 0;
  for (unsigned i = 0; i < MAX_INFLIGHT; i++)
    if (k->fl[i].used
        && overlaps (k->fl[i].lba, k->fl[i].nblocks, lba, nblocks))
      k->fl[i].tainted = tainted = true;
  for (unsigned i = 0; i < MAX_INFLIGHT && token == 0; i++)
    if (!k->fl[i].used) {
      k->fl[i] = (struct flight){ true, tainted, lba, nblocks, buf };
      token = i + 1;
    }
  if (token == 0) {
    for (unsigned i = 0; i < MAX_INFLIGHT; i++)
      k->fl[i].tainted = true;
    k->untracked++;
    token = UNTRACKED;
  }
  for (unsigned i = 0; i < LG_KNOWN_SLOTS; i++) {
    struct slot *s = &k->slots[i];

    if (!s->used || !overlaps (s->lba, 1, lba, nblocks))
      continue;
    if (token == UNTRACKED || buf == NULL || s->n == LG_KNOWN_CANDIDATES)
      forget (k, s);
    else {
      hash_block (k, buf + (s->lba - lba) * k->bs, s->hash[s->n++]);
      s->gen = ++k->gen;
    }
  }
  pthread_mutex_unlock (&k->lock);
  return token;
}

void
lg_known_end (struct lg_known *k, unsigned token, bool ok)
{
  struct flight f;
  bool have = false;

  if (token == 0 || token > UNTRACKED)
    return;
  pthread_mutex_lock (&k->lock);
  if (token == UNTRACKED) {
    k->untracked--;
    pthread_mutex_unlock (&k->lock);
    return;
  }
  f = k->fl[token - 1];
  k->fl[token - 1].used = false;
  if (ok && !f.tainted && f.buf) {
    /* It executed, alone: the blocks it covers hold its data. */
    for (unsigned i = 0; i < LG_KNOWN_SLOTS; i++) {
      struct slot *s = &k->slots[i];

      if (!s->used || !overlaps (s->lba, 1, f.lba, f.nblocks))
        continue;
      hash_block (k, f.buf + (s->lba - f.lba) * k->bs, s->hash[0]);
      s->n = 1;
      s->gen = ++k->gen;
      have |= s->lba == f.lba;
    }
    if (!have) {
      struct slot *s = &k->slots[k->next];

      k->next = (k->next + 1) % LG_KNOWN_SLOTS;
      s->used = true;
      s->lba = f.lba;
      s->n = 1;
      s->gen = ++k->gen;
      hash_block (k, f.buf, s->hash[0]);
    }
  }
  pthread_mutex_unlock (&k->lock);
}

/* A copy of slot i, when it is in use. */
static bool
still (struct lg_known *k, unsigned i, struct slot *copy)
{
  bool ok;

  pthread_mutex_lock (&k->lock);
  ok = k->slots[i].used;
  if (ok)
    *copy = k->slots[i];
  pthread_mutex_unlock (&k->lock);
  return ok;
}

int
lg_known_check (struct lg_known *k, lg_known_read_fn *read, void *opaque,
                unsigned *checked, char *msg, size_t len)
{
  uint8_t buf[4096], h[HASH_BYTES];

  *checked = 0;
  for (unsigned i = 0; i < LG_KNOWN_SLOTS; i++) {
    struct slot s, now;
    unsigned differed = 0;
    bool compared = false;

    for (int r = 0; r < READS; r++) {
      bool match = false;

      if (!still (k, i, &s))
        break;
      if (read (opaque, s.lba, buf) < 0)
        return -1;
      hash_block (k, buf, h);
      /* A write to it began or ended meanwhile: the read may be of
       * either; the candidates now include both. */
      if (!still (k, i, &now) || now.lba != s.lba)
        break;
      compared = true;
      for (unsigned c = 0; c < now.n && !match; c++)
        match = sodium_memcmp (h, now.hash[c], HASH_BYTES) == 0;
      for (unsigned c = 0; c < s.n && !match; c++)
        match = sodium_memcmp (h, s.hash[c], HASH_BYTES) == 0;
      if (match)
        break;
      differed++;
    }
    if (compared)
      (*checked)++;
    if (differed == READS) {
      snprintf (msg, len,
                "LBA %" PRIu64 " holds other data than this gateway last "
                "wrote there, in %d reads",
                s.lba, READS);
      return 1;
    }
  }
  return 0;
}
