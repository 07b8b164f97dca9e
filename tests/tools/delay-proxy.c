/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* A TCP proxy that behaves like a slow link, for kernels without netem.
 *
 *   delay-proxy --upstream HOST:PORT [--listen [HOST:]PORT]
 *               [--delay-ms MS] [--rate RATE] [--queue BYTES] [-v]
 *               [--jitter-ms MS] [--stall-every S --stall-ms MS]
 *               [--reset-every S] [--rate-low RATE --rate-period S]
 *               [--seed N]
 *
 * Each accepted client is connected to the upstream, and the bytes of
 * each direction go through a model of one link, shared by all the
 * connections (as several TCP connections share one WAN link): they are
 * serialized at RATE (the link is busy len / RATE per chunk, chunks wait
 * behind each other), then arrive DELAY later.  So no byte is released
 * before DELAY after it was read, and no direction carries more than RATE
 * on average, whatever the number of connections.  The link's buffer
 * holds --buffer-ms of bytes (default 2 ms): while it is full nobody
 * reads for that link, and TCP's flow control pushes back on the senders.
 * A connection also queues at most --queue bytes a direction (default:
 * twice the bandwidth-delay product, at least 4 MiB): memory stays
 * bounded.  A FIN is forwarded after the last byte, with the same delay.
 *
 * One thread: an epoll loop over non-blocking sockets, plus one timerfd
 * armed at the next release time of any queue.  Reads are up to 64 KiB,
 * each read is one chunk with one timestamp: no per-byte work.  The TCP
 * handshake itself is not delayed (the client's connect completes at
 * once); everything after it is.
 *
 * A flaky link (a Wi-Fi link, say) on top of that: each chunk arrives
 * up to --jitter-ms later than the delay (never before the chunk ahead
 * of it); every --stall-every seconds the link carries nothing for
 * --stall-ms (roaming, interference); every --reset-every seconds one
 * connection, picked at random, is reset (RST both ways); and the rate
 * drops to --rate-low for the second half of every --rate-period
 * seconds.  --seed makes the picks repeatable.  Each fault is counted
 * on stderr as it happens ("stall", "reset").
 *
 * With --listen port 0 (the default) the kernel picks the port, and the
 * port the proxy listens on is printed on stdout, one line, once it
 * accepts connections.
 */
#include <config.h>

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#define PROG "delay-proxy"
#define READ_SIZE (64u << 10) /* one read, one chunk */
#define MIN_QUEUE (4u << 20)
#define MAX_EVENTS 64
#define NS 1000000000ull

/* One read: released to the other side at `release`. */
struct chunk {
  struct chunk *next;
  uint64_t release; /* CLOCK_MONOTONIC, ns */
  size_t len, off;  /* off: bytes already written */
  unsigned char data[];
};

/* One direction of a connection: reads from fd[side], writes to
 * fd[1 - side]. */
struct dir {
  struct chunk *head, *tail;
  size_t queued;   /* bytes read and not yet written */
  uint64_t eof_at; /* when to forward the FIN, once eof */
  bool eof;        /* read returned 0 */
  bool shut;       /* FIN forwarded */
  bool blocked;    /* the last write said EAGAIN: wait for EPOLLOUT */
};

enum end_kind { END_LISTEN, END_TIMER, END_CONN };

/* What an epoll event points at. */
struct end {
  enum end_kind kind;
  struct conn *conn;
  int side; /* 0: the client, 1: the upstream */
};

struct conn {
  struct conn *next;
  int fd[2];
  struct end end[2];
  uint32_t mask[2]; /* the events registered for fd[i] */
  bool registered[2];
  bool hup[2];       /* EPOLLHUP seen: no more writes to fd[i] */
  struct dir dir[2]; /* dir[0]: client to upstream, dir[1]: back */
  bool connecting;   /* the upstream connect is in progress */
  bool dead;         /* closed, freed at the end of the event batch */
  unsigned id;
};

static uint64_t delay_ns = 0;
static uint64_t buffer_ns = 2000000; /* the link's buffer, in time */
/* The two links, shared by every connection: links_free[0] carries
 * client to upstream, links_free[1] back.  Each is when that link has
 * sent the last byte queued on it. */
static uint64_t links_free[2];
static uint64_t rate_bps = 1000000000ull; /* bits per second, 0: no cap */
/* The flaky link's faults (0: none); last_release keeps each link's
 * chunks in order under jitter. */
static uint64_t jitter_ns, stall_every_ns, stall_ns, reset_every_ns;
static uint64_t rate_low_bps, rate_period_ns;
static uint64_t start_ns, next_stall_ns, stall_end_ns, next_reset_ns;
static uint64_t last_release[2];
static unsigned seed = 1;
static unsigned long stalls, resets;
static size_t queue_limit; /* per direction */
static int verbose;
static int epfd = -1, timerfd = -1;
static struct addrinfo *upstream;
static struct conn *conns;
static unsigned next_id;
static unsigned char readbuf[READ_SIZE];

static uint64_t
now_ns (void)
{
  struct timespec ts;

  clock_gettime (CLOCK_MONOTONIC, &ts);
  return (uint64_t) ts.tv_sec * NS + (uint64_t) ts.tv_nsec;
}

static void
usage (FILE *f)
{
  fprintf (f,
           "Usage: " PROG " --upstream HOST:PORT [OPTION]...\n"
           "A TCP proxy with a fixed one-way delay and a bandwidth cap in\n"
           "each direction.\n"
           "\n"
           "  -u, --upstream HOST:PORT  where to connect each client\n"
           "  -l, --listen [HOST:]PORT  where to listen (default "
           "127.0.0.1:0;\n"
           "                            the port is printed on stdout)\n"
           "  -d, --delay-ms MS         one-way delay, each direction "
           "(default 0;\n"
           "                            decimals allowed: 0.5)\n"
           "  -r, --rate RATE           cap per direction (default 1G): "
           "bits/s\n"
           "                            with k, M, G, T (x1000) and bit, "
           "bit/s or\n"
           "                            bps, or bytes/s with B, B/s or Bps "
           "(1.5G,\n"
           "                            100Mbit, 12.5MB/s); 0 or unlimited: "
           "no cap\n"
           "  -b, --buffer-ms MS        the link's buffer: a side waits "
           "while more\n"
           "                            than MS of bytes wait for the link "
           "(default 2)\n"
           "  -q, --queue BYTES         most bytes queued per direction, "
           "with k, M,\n"
           "                            G (x1024; default: 2 x rate x "
           "delay, at\n"
           "                            least 4M)\n"
           "      --jitter-ms MS        up to MS more delay, at random "
           "(order kept)\n"
           "      --stall-every S       every S seconds the link stalls "
           "for\n"
           "      --stall-ms MS         MS (nothing goes through)\n"
           "      --reset-every S       every S seconds one connection is "
           "reset\n"
           "      --rate-low RATE       the rate in the second half of "
           "every\n"
           "      --rate-period S       S seconds\n"
           "      --seed N              the random picks' seed (default "
           "1)\n"
           "  -v, --verbose             log connections on stderr\n"
           "  -h, --help                this help\n");
}

static void __attribute__ ((noreturn, format (printf, 1, 2)))
die (const char *fmt, ...)
{
  va_list ap;

  fputs (PROG ": ", stderr);
  va_start (ap, fmt);
  vfprintf (stderr, fmt, ap);
  va_end (ap);
  fputc ('\n', stderr);
  exit (EXIT_FAILURE);
}

/* A decimal number followed by an optional suffix: the number in *v, the
 * suffix in *end.  -1 if there is no number or it is negative. */
static int
parse_number (const char *s, double *v, const char **end)
{
  char *e;

  errno = 0;
  *v = strtod (s, &e);
  if (e == s || errno != 0 || !isfinite (*v) || *v < 0)
    return -1;
  *end = e;
  return 0;
}

static int
si_prefix (const char **s, double *mult, double base)
{
  switch (**s) {
  case 'k':
  case 'K':
    *mult = base;
    break;
  case 'M':
    *mult = base * base;
    break;
  case 'G':
    *mult = base * base * base;
    break;
  case 'T':
    *mult = base * base * base * base;
    break;
  default:
    *mult = 1;
    return 0;
  }
  (*s)++;
  return 0;
}

/* RATE in bits per second; 0 for no cap. */
static int
parse_rate (const char *s, uint64_t *bps)
{
  const char *u;
  double v, mult, bits;

  if (strcmp (s, "unlimited") == 0) {
    *bps = 0;
    return 0;
  }
  if (parse_number (s, &v, &u) == -1)
    return -1;
  si_prefix (&u, &mult, 1000);
  if (*u == '\0' || strcmp (u, "bit") == 0 || strcmp (u, "bit/s") == 0
      || strcmp (u, "bps") == 0 || strcmp (u, "b") == 0
      || strcmp (u, "b/s") == 0)
    bits = 1;
  else if (strcmp (u, "B") == 0 || strcmp (u, "B/s") == 0
           || strcmp (u, "Bps") == 0)
    bits = 8;
  else
    return -1;
  v *= mult * bits;
  if (v > 1e15 || (v > 0 && v < 8))
    return -1;
  *bps = (uint64_t) v;
  return 0;
}

static int
parse_size (const char *s, size_t *bytes)
{
  const char *u;
  double v, mult;

  if (parse_number (s, &v, &u) == -1)
    return -1;
  si_prefix (&u, &mult, 1024);
  if (*u == 'B')
    u++;
  if (*u != '\0')
    return -1;
  v *= mult;
  if (v < READ_SIZE || v > (double) (1ull << 40))
    return -1;
  *bytes = (size_t) v;
  return 0;
}

/* HOST:PORT or [HOST]:PORT, or PORT alone when default_host is given. */
static struct addrinfo *
resolve (const char *what, const char *arg, const char *default_host,
         bool passive)
{
  char *copy = strdup (arg), *port, *colon;
  const char *host;
  struct addrinfo hints = { 0 }, *res = NULL;
  int r;

  if (copy == NULL)
    die ("%m");
  colon = strrchr (copy, ':');
  if (colon == NULL) {
    if (default_host == NULL)
      die ("%s: '%s': expected HOST:PORT", what, arg);
    host = default_host;
    port = copy;
  }
  else {
    *colon = '\0';
    port = colon + 1;
    if (copy[0] == '[' && colon > copy + 1 && colon[-1] == ']') {
      colon[-1] = '\0';
      host = copy + 1;
    }
    else
      host = copy;
  }
  if (*host == '\0' || *port == '\0')
    die ("%s: '%s': expected HOST:PORT", what, arg);
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  r = getaddrinfo (host, port, &hints, &res);
  if (r != 0)
    die ("%s: '%s': %s", what, arg, gai_strerror (r));
  free (copy);
  return res;
}

static void
set_nodelay (int fd)
{
  int one = 1;

  /* The proxy's own writes must not wait for ACKs: the delay is ours. */
  setsockopt (fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

static void
conn_kill (struct conn *c, const char *why, int err)
{
  int i;

  if (c->dead)
    return;
  if (verbose || (err != 0 && err != ECONNRESET && err != EPIPE))
    fprintf (stderr, PROG ": connection %u: %s%s%s\n", c->id, why,
             err ? ": " : "", err ? strerror (err) : "");
  for (i = 0; i < 2; i++)
    if (c->fd[i] >= 0) {
      close (c->fd[i]); /* also leaves the epoll set */
      c->fd[i] = -1;
    }
  c->dead = true;
}

static void
conn_free (struct conn *c)
{
  struct chunk *ch, *next;
  int i;

  for (i = 0; i < 2; i++)
    for (ch = c->dir[i].head; ch != NULL; ch = next) {
      next = ch->next;
      free (ch);
    }
  free (c);
}

/* The rate now: --rate-low for the second half of each --rate-period. */
static uint64_t
rate_now (uint64_t now)
{
  if (rate_period_ns == 0 || rate_bps == 0)
    return rate_bps;
  return (now - start_ns) % rate_period_ns >= rate_period_ns / 2 ? rate_low_bps
                                                                 : rate_bps;
}

/* The link model: the chunk waits for the link, occupies it len / rate,
 * then travels delay_ns (plus up to jitter_ns, behind the chunk ahead). */
static uint64_t
release_time (int side, size_t len, uint64_t now)
{
  uint64_t start = links_free[side] > now ? links_free[side] : now;
  uint64_t rate = rate_now (now), r;

  if (rate != 0)
    start += (uint64_t) len * 8 * NS / rate;
  links_free[side] = start;
  r = start + delay_ns;
  if (jitter_ns != 0)
    r += (uint64_t) rand_r (&seed) % (jitter_ns + 1);
  if (r < last_release[side])
    r = last_release[side];
  last_release[side] = r;
  return r;
}

/* Whether the link stalls now (starting and ending stalls as due). */
static bool
stalled (uint64_t now)
{
  if (stall_every_ns == 0)
    return false;
  if (now >= next_stall_ns) {
    stall_end_ns = next_stall_ns + stall_ns;
    next_stall_ns += stall_every_ns;
    stalls++;
    fprintf (stderr, PROG ": stall %lu (%.0f ms)\n", stalls,
             (double) stall_ns / 1e6);
  }
  return now < stall_end_ns;
}

/* Whether the link's buffer is full: more than buffer_ns of bytes wait to
 * be sent on it.  No connection reads for that link until it drains, as
 * a sender is held back by a full router queue, so a bulk transfer adds
 * at most buffer_ns of queueing to the other connections' requests. */
static bool
link_full (int side, uint64_t now)
{
  return rate_bps != 0 && links_free[side] > now + buffer_ns;
}

/* The connection that last read for each link (fair_reads). */
static unsigned last_reader[2];

/* Reads what fd[side] has, up to the queue limit. */
static void
dir_read (struct conn *c, int side)
{
  struct dir *d = &c->dir[side];
  struct chunk *ch;
  ssize_t n;

  while (!d->eof && d->queued < queue_limit && !link_full (side, now_ns ())) {
    n = read (c->fd[side], readbuf, sizeof readbuf);
    if (n == 0) {
      d->eof = true;
      d->eof_at = release_time (side, 0, now_ns ());
      if (verbose)
        fprintf (stderr, PROG ": connection %u: EOF from the %s\n", c->id,
                 side == 0 ? "client" : "upstream");
      return;
    }
    if (n < 0) {
      if (errno == EINTR)
        continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK)
        conn_kill (
            c, side == 0 ? "read from the client" : "read from the upstream",
            errno);
      return;
    }
    ch = malloc (sizeof *ch + (size_t) n);
    if (ch == NULL) {
      conn_kill (c, "out of memory", ENOMEM);
      return;
    }
    last_reader[side] = c->id;
    memcpy (ch->data, readbuf, (size_t) n);
    ch->next = NULL;
    ch->len = (size_t) n;
    ch->off = 0;
    ch->release = release_time (side, ch->len, now_ns ());
    if (d->tail != NULL)
      d->tail->next = ch;
    else
      d->head = ch;
    d->tail = ch;
    d->queued += (size_t) n;
    if ((size_t) n < sizeof readbuf)
      return; /* drained: the next read would say EAGAIN */
  }
}

/* Writes every chunk of dir[side] that is due, then the FIN if due. */
static void
dir_flush (struct conn *c, int side, uint64_t now)
{
  struct dir *d = &c->dir[side];
  int to = c->fd[1 - side];
  struct chunk *ch;
  ssize_t n;

  if (d->blocked || (side == 0 && c->connecting) || stalled (now))
    return;
  while ((ch = d->head) != NULL && ch->release <= now) {
    n = send (to, ch->data + ch->off, ch->len - ch->off,
              MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK)
        d->blocked = true;
      else
        conn_kill (c,
                   side == 0 ? "write to the upstream" : "write to the client",
                   errno);
      return;
    }
    ch->off += (size_t) n;
    d->queued -= (size_t) n;
    if (ch->off < ch->len)
      continue;
    d->head = ch->next;
    if (d->head == NULL)
      d->tail = NULL;
    free (ch);
  }
  if (d->eof && !d->shut && d->head == NULL && d->eof_at <= now) {
    if (shutdown (to, SHUT_WR) == -1 && errno != ENOTCONN) {
      conn_kill (c, "shutdown", errno);
      return;
    }
    d->shut = true;
  }
}

/* Registers for fd[i] the events its two directions wait for. */
static void
conn_update (struct conn *c, uint64_t now)
{
  struct epoll_event ev;
  uint32_t want;
  int i, op;

  for (i = 0; i < 2 && !c->dead; i++) {
    want = 0;
    if (!c->dir[i].eof && c->dir[i].queued < queue_limit && !link_full (i, now))
      want |= EPOLLIN;
    if (!c->hup[i] && (c->dir[1 - i].blocked || (i == 1 && c->connecting)))
      want |= EPOLLOUT;
    /* EPOLLHUP and EPOLLERR come whatever the mask: a hung-up socket we
     * do not want to read yet leaves the set until we do. */
    if (c->hup[i] && !(want & EPOLLIN))
      want = 0;
    if (c->registered[i] && want == c->mask[i])
      continue;
    if (want == 0 && !c->registered[i])
      continue;
    ev.events = want;
    ev.data.ptr = &c->end[i];
    op = want == 0 ? EPOLL_CTL_DEL
                   : (c->registered[i] ? EPOLL_CTL_MOD : EPOLL_CTL_ADD);
    if (epoll_ctl (epfd, op, c->fd[i], &ev) == -1) {
      conn_kill (c, "epoll_ctl", errno);
      return;
    }
    c->registered[i] = want != 0;
    c->mask[i] = want;
  }
}

static void
conn_connected (struct conn *c)
{
  int err = 0;
  socklen_t len = sizeof err;

  if (getsockopt (c->fd[1], SOL_SOCKET, SO_ERROR, &err, &len) == -1)
    err = errno;
  if (err != 0) {
    conn_kill (c, "connect to the upstream", err);
    return;
  }
  c->connecting = false;
  if (verbose)
    fprintf (stderr, PROG ": connection %u: connected upstream\n", c->id);
}

static void
conn_new (int cfd)
{
  struct conn *c = calloc (1, sizeof *c);
  int i, ufd;

  if (c == NULL) {
    fprintf (stderr, PROG ": accept: %s\n", strerror (ENOMEM));
    close (cfd);
    return;
  }
  c->id = ++next_id;
  c->fd[0] = cfd;
  c->fd[1] = -1;
  for (i = 0; i < 2; i++) {
    c->end[i].kind = END_CONN;
    c->end[i].conn = c;
    c->end[i].side = i;
  }
  c->next = conns;
  conns = c;
  set_nodelay (cfd);
  ufd = socket (upstream->ai_family,
                upstream->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                upstream->ai_protocol);
  if (ufd == -1) {
    conn_kill (c, "socket", errno);
    return;
  }
  c->fd[1] = ufd;
  set_nodelay (ufd);
  if (connect (ufd, upstream->ai_addr, upstream->ai_addrlen) == -1) {
    if (errno != EINPROGRESS) {
      conn_kill (c, "connect to the upstream", errno);
      return;
    }
    c->connecting = true;
  }
  if (verbose)
    fprintf (stderr, PROG ": connection %u: accepted\n", c->id);
  conn_update (c, now_ns ());
}

static void
do_accept (int lfd)
{
  int cfd;

  for (;;) {
    cfd = accept4 (lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (cfd >= 0) {
      conn_new (cfd);
      continue;
    }
    if (errno == EINTR || errno == ECONNABORTED)
      continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      /* XXX EMFILE spins until a connection closes: the listener stays
       * readable.  A test proxy has few clients. */
      fprintf (stderr, PROG ": accept: %s\n", strerror (errno));
    }
    return;
  }
}

static void
conn_event (struct conn *c, int side, uint32_t events)
{
  int err = 0;
  socklen_t len = sizeof err;

  if (c->dead)
    return;
  if (events & EPOLLERR) {
    getsockopt (c->fd[side], SOL_SOCKET, SO_ERROR, &err, &len);
    if (side == 1 && c->connecting)
      conn_kill (c, "connect to the upstream", err);
    else
      conn_kill (c, side == 0 ? "the client" : "the upstream", err);
    return;
  }
  if (side == 1 && c->connecting && (events & (EPOLLOUT | EPOLLHUP))) {
    conn_connected (c);
    if (c->dead)
      return;
  }
  if (events & EPOLLHUP) {
    /* Both ways shut, or reset: what is still queued for this side goes
     * out or fails with EPIPE at the next try, without EPOLLOUT. */
    c->hup[side] = true;
    c->dir[1 - side].blocked = false;
  }
  if (events & (EPOLLIN | EPOLLHUP))
    dir_read (c, side);
  if (events & EPOLLOUT)
    c->dir[1 - side].blocked = false;
}

/* Flushes what is due everywhere, closes the finished connections, and
 * arms the timer at the next release. */
/* Resets one connection, picked at random, when one is due. */
static void
maybe_reset (uint64_t now)
{
  struct linger lg = { .l_onoff = 1, .l_linger = 0 };
  unsigned n = 0, pick;
  struct conn *c;

  if (reset_every_ns == 0 || now < next_reset_ns)
    return;
  next_reset_ns = now + reset_every_ns;
  for (c = conns; c != NULL; c = c->next)
    n += !c->dead && !c->connecting;
  if (n == 0)
    return;
  pick = (unsigned) rand_r (&seed) % n;
  for (c = conns; c != NULL; c = c->next) {
    if (c->dead || c->connecting || pick-- != 0)
      continue;
    for (int i = 0; i < 2; i++)
      setsockopt (c->fd[i], SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    resets++;
    fprintf (stderr, PROG ": reset %lu: connection %u\n", resets, c->id);
    conn_kill (c, "reset on purpose", 0);
    return;
  }
}

/* A link that drained is offered to the connections in turn, from the
 * one after the last that read for it, as a link shares itself among
 * its flows.  Left to epoll, it went to the connection registered first
 * again and again: at 100 Mbit/s one of lungate's connections, its
 * writes queued, waited 6 s with nothing read from it, and was taken
 * for dead (tests/test-wb-slow-link.sh). */
static void
fair_reads (uint64_t now)
{
  for (int side = 0; side < 2; side++) {
    unsigned at = last_reader[side], n = 0;
    struct conn *c, *pick;

    if (rate_bps == 0 || link_full (side, now))
      continue;
    for (c = conns; c != NULL; c = c->next)
      n++;
    /* The next id after at, cyclically, n times. */
    for (unsigned k = 0; k < n && !link_full (side, now_ns ()); k++) {
      pick = NULL;
      for (c = conns; c != NULL; c = c->next)
        if (c->id > at && (pick == NULL || c->id < pick->id))
          pick = c;
      if (pick == NULL)
        for (c = conns; c != NULL; c = c->next)
          if (pick == NULL || c->id < pick->id)
            pick = c;
      if (pick == NULL)
        break;
      at = pick->id;
      if (!pick->dead && !pick->connecting && !pick->dir[side].eof
          && pick->dir[side].queued < queue_limit)
        dir_read (pick, side);
    }
  }
}

static void
service (void)
{
  struct conn **pp, *c;
  uint64_t now = now_ns (), next = UINT64_MAX, t;
  struct itimerspec its = { 0 };
  static uint64_t armed = 0;
  struct dir *d;
  int i;

  maybe_reset (now);
  fair_reads (now);
  if (reset_every_ns != 0)
    next = next_reset_ns;
  if (stall_every_ns != 0) {
    t = stalled (now) ? stall_end_ns : next_stall_ns;
    if (t < next)
      next = t;
  }
  for (pp = &conns; (c = *pp) != NULL;) {
    for (i = 0; i < 2 && !c->dead; i++)
      dir_flush (c, i, now);
    if (!c->dead && c->dir[0].shut && c->dir[1].shut)
      conn_kill (c, "closed", 0);
    if (!c->dead)
      conn_update (c, now);
    if (c->dead) {
      *pp = c->next;
      conn_free (c);
      continue;
    }
    for (i = 0; i < 2; i++) {
      d = &c->dir[i];
      /* A side held back by a full link reads again when it drains. */
      if (!d->eof && d->queued < queue_limit && link_full (i, now)
          && links_free[i] - buffer_ns < next)
        next = links_free[i] - buffer_ns;
      if (d->blocked || (i == 0 && c->connecting))
        continue;
      if (d->head != NULL)
        t = d->head->release;
      else if (d->eof && !d->shut)
        t = d->eof_at;
      else
        continue;
      if (t < now && stalled (now))
        t = stall_end_ns;
      if (t < next)
        next = t;
    }
    pp = &c->next;
  }
  if (next == armed)
    return;
  if (next != UINT64_MAX) {
    its.it_value.tv_sec = (time_t) (next / NS);
    its.it_value.tv_nsec = (long) (next % NS);
  }
  if (timerfd_settime (timerfd, TFD_TIMER_ABSTIME, &its, NULL) == -1)
    die ("timerfd_settime: %m");
  armed = next;
}

/* A time option in units of unit ms (decimals allowed), as ns. */
static uint64_t
ms_option (const char *name, const char *arg, double unit)
{
  const char *u;
  double v;

  if (parse_number (arg, &v, &u) == -1 || *u != '\0' || v * unit > 3.6e6)
    die ("%s: '%s': expected a number, 0 to %g", name, arg, 3.6e6 / unit);
  return (uint64_t) (v * unit * 1e6 + 0.5);
}

/* The options: -1 to go on, else the exit status. */
static int
parse_options (int argc, char *argv[], const char **listen_arg,
               const char **upstream_arg)
{
  static const struct option opts[] = {
    { "upstream", required_argument, NULL, 'u' },
    { "listen", required_argument, NULL, 'l' },
    { "delay-ms", required_argument, NULL, 'd' },
    { "rate", required_argument, NULL, 'r' },
    { "queue", required_argument, NULL, 'q' },
    { "buffer-ms", required_argument, NULL, 'b' },
    { "jitter-ms", required_argument, NULL, 'J' },
    { "stall-every", required_argument, NULL, 'S' },
    { "stall-ms", required_argument, NULL, 'T' },
    { "reset-every", required_argument, NULL, 'R' },
    { "rate-low", required_argument, NULL, 'L' },
    { "rate-period", required_argument, NULL, 'P' },
    { "seed", required_argument, NULL, 'E' },
    { "verbose", no_argument, NULL, 'v' },
    { "help", no_argument, NULL, 'h' },
    { NULL, 0, NULL, 0 },
  };
  const char *u;
  double ms, bdp;
  int c;

  while (
      (c = getopt_long (argc, argv, "u:l:d:r:q:b:vhJ:S:T:R:L:P:E:", opts, NULL))
      != -1) {
    switch (c) {
    case 'u':
      *upstream_arg = optarg;
      break;
    case 'l':
      *listen_arg = optarg;
      break;
    case 'd':
      if (parse_number (optarg, &ms, &u) == -1 || *u != '\0' || ms > 3.6e6)
        die ("--delay-ms: '%s': expected milliseconds, 0 to 3600000", optarg);
      delay_ns = (uint64_t) (ms * 1e6 + 0.5);
      break;
    case 'r':
      if (parse_rate (optarg, &rate_bps) == -1)
        die ("--rate: '%s': expected a rate such as 1G, 100Mbit, "
             "12.5MB/s, or 0",
             optarg);
      break;
    case 'b':
      if (parse_number (optarg, &ms, &u) == -1 || *u != '\0' || ms < 0.01
          || ms > 3.6e6)
        die ("--buffer-ms: '%s': expected milliseconds, 0.01 to 3600000",
             optarg);
      buffer_ns = (uint64_t) (ms * 1e6 + 0.5);
      break;
    case 'q':
      if (parse_size (optarg, &queue_limit) == -1)
        die ("--queue: '%s': expected bytes, 64k to 1T, such as 8M", optarg);
      break;
    case 'J':
      jitter_ns = ms_option ("--jitter-ms", optarg, 1);
      break;
    case 'T':
      stall_ns = ms_option ("--stall-ms", optarg, 1);
      break;
    case 'S':
      stall_every_ns = ms_option ("--stall-every", optarg, 1000);
      break;
    case 'R':
      reset_every_ns = ms_option ("--reset-every", optarg, 1000);
      break;
    case 'P':
      rate_period_ns = ms_option ("--rate-period", optarg, 1000);
      break;
    case 'L':
      if (parse_rate (optarg, &rate_low_bps) == -1 || rate_low_bps == 0)
        die ("--rate-low: '%s': expected a rate such as 10M", optarg);
      break;
    case 'E':
      seed = (unsigned) strtoul (optarg, NULL, 10);
      break;
    case 'v':
      verbose = 1;
      break;
    case 'h':
      usage (stdout);
      return EXIT_SUCCESS;
    default:
      usage (stderr);
      return EXIT_FAILURE;
    }
  }
  if (optind < argc)
    die ("unexpected argument '%s' (see --help)", argv[optind]);
  if ((stall_every_ns != 0) != (stall_ns != 0))
    die ("--stall-every and --stall-ms go together");
  if (stall_every_ns != 0 && stall_ns >= stall_every_ns)
    die ("--stall-ms must be shorter than --stall-every");
  if ((rate_period_ns != 0) != (rate_low_bps != 0))
    die ("--rate-low and --rate-period go together");
  if (*upstream_arg == NULL)
    die ("--upstream HOST:PORT is required (see --help)");
  if (queue_limit == 0) {
    bdp = rate_bps != 0 ? (double) rate_bps / 8 * (double) delay_ns / 1e9
                        : 16.0 * (1 << 20);
    queue_limit = 2 * bdp > MIN_QUEUE ? (size_t) (2 * bdp) : MIN_QUEUE;
  }

  return -1;
}

/* The listening socket at listen_arg, its port number in port. */
static int
open_listener (const char *listen_arg, char port[NI_MAXSERV])
{
  struct sockaddr_storage ss;
  socklen_t sslen = sizeof ss;
  struct addrinfo *la;
  int lfd, one = 1;

  la = resolve ("--listen", listen_arg, "127.0.0.1", true);
  lfd = socket (la->ai_family, la->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                la->ai_protocol);
  if (lfd == -1)
    die ("socket: %m");
  setsockopt (lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind (lfd, la->ai_addr, la->ai_addrlen) == -1)
    die ("--listen: bind %s: %m", listen_arg);
  if (listen (lfd, 128) == -1)
    die ("listen: %m");
  freeaddrinfo (la);
  if (getsockname (lfd, (struct sockaddr *) &ss, &sslen) == -1
      || getnameinfo ((struct sockaddr *) &ss, sslen, NULL, 0, port, NI_MAXSERV,
                      NI_NUMERICSERV)
          != 0)
    die ("getsockname: %m");

  return lfd;
}

int
main (int argc, char *argv[])
{
  const char *listen_arg = "127.0.0.1:0", *upstream_arg = NULL;
  struct end listen_end = { END_LISTEN, NULL, 0 };
  struct end timer_end = { END_TIMER, NULL, 0 };
  struct epoll_event ev, evs[MAX_EVENTS];
  char port[NI_MAXSERV];
  int c, lfd, n, i;
  struct end *e;
  uint64_t expirations;

  if ((c = parse_options (argc, argv, &listen_arg, &upstream_arg)) >= 0)
    return c;
  upstream = resolve ("--upstream", upstream_arg, NULL, false);
  lfd = open_listener (listen_arg, port);
  signal (SIGPIPE, SIG_IGN);
  epfd = epoll_create1 (EPOLL_CLOEXEC);
  timerfd = timerfd_create (CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  if (epfd == -1 || timerfd == -1)
    die ("epoll/timerfd: %m");
  ev.events = EPOLLIN;
  ev.data.ptr = &listen_end;
  if (epoll_ctl (epfd, EPOLL_CTL_ADD, lfd, &ev) == -1)
    die ("epoll_ctl: %m");
  ev.data.ptr = &timer_end;
  if (epoll_ctl (epfd, EPOLL_CTL_ADD, timerfd, &ev) == -1)
    die ("epoll_ctl: %m");

  start_ns = now_ns ();
  next_stall_ns = start_ns + stall_every_ns;
  next_reset_ns = start_ns + reset_every_ns;
  printf ("%s\n", port);
  if (fflush (stdout) == EOF)
    die ("stdout: %m");
  if (verbose)
    fprintf (stderr,
             PROG ": listening on %s, upstream %s, delay %.3f ms, "
                  "rate %" PRIu64 " bit/s, queue %zu bytes\n",
             port, upstream_arg, (double) delay_ns / 1e6, rate_bps,
             queue_limit);

  for (;;) {
    n = epoll_wait (epfd, evs, MAX_EVENTS, -1);
    if (n == -1) {
      if (errno == EINTR)
        continue;
      die ("epoll_wait: %m");
    }
    for (i = 0; i < n; i++) {
      e = evs[i].data.ptr;
      switch (e->kind) {
      case END_LISTEN:
        do_accept (lfd);
        break;
      case END_TIMER:
        if (read (timerfd, &expirations, sizeof expirations) == -1
            && errno != EAGAIN)
          die ("timerfd: %m");
        break;
      case END_CONN:
        conn_event (e->conn, e->side, evs[i].events);
        break;
      }
    }
    service ();
  }
}
