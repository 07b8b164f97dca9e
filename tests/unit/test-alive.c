/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Proving a gateway of this host dead (util/alive.h): a live marker is
 * alive, a killed one dead, an unknown key unknown, and a runtime
 * directory somebody else can write is not trusted. */
#include <config.h>

#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "util/alive.h"

static char dir[] = "/tmp/lungate-alive-XXXXXX";

static void
setup (void)
{
  cr_assert_not_null (mkdtemp (dir));
  setenv ("XDG_RUNTIME_DIR", dir, 1);
}

static void
teardown (void)
{
  char cmd[sizeof dir + 16];

  snprintf (cmd, sizeof cmd, "rm -rf %s", dir);
  if (system (cmd) != 0)
    cr_log_warn ("could not remove %s", dir);
}

/* A child that marks key and waits for a signal; returns once marked. */
static pid_t
marker (uint64_t key)
{
  int p[2];
  char c;
  pid_t pid;

  cr_assert_eq (pipe (p), 0);
  pid = fork ();
  cr_assert_geq (pid, 0);
  if (pid == 0) {
    close (p[0]);
    if (lg_alive_mark (key) < 0)
      _exit (1);
    if (write (p[1], "m", 1) != 1)
      _exit (1);
    pause ();
    _exit (0);
  }
  close (p[1]);
  cr_assert_eq (read (p[0], &c, 1), 1, "the child could not mark its key");
  close (p[0]);
  return pid;
}

Test (alive, live_dead_unknown, .init = setup, .fini = teardown)
{
  uint64_t key = 0x4c00aabbccdd0001ull;
  pid_t pid = marker (key), got;

  cr_assert_eq (lg_alive_dead (key, &got), 0, "a live marker counts as dead");
  cr_assert_eq (got, pid);
  kill (pid, SIGKILL);
  waitpid (pid, NULL, 0);
  cr_assert_eq (lg_alive_dead (key, &got), 1, "a killed marker is not dead");
  cr_assert_eq (got, pid);
  /* Still proven dead on a second look (the killed gateway's other
   * LUNs are taken back on the same proof). */
  cr_assert_eq (lg_alive_dead (key, &got), 1, "a dead key is not dead twice");
  cr_assert_eq (lg_alive_dead (0x4c00aabbccdd0002ull, &got), -1);
}

Test (alive, foreign_dir_not_trusted, .init = setup, .fini = teardown)
{
  char sub[sizeof dir + 16];
  pid_t got;

  snprintf (sub, sizeof sub, "%s/lungate", dir);
  cr_assert_eq (mkdir (sub, 0777), 0);
  cr_assert_eq (chmod (sub, 0777), 0);
  cr_assert_lt (lg_alive_mark (0x4c00aabbccdd0003ull), 0,
                "a directory others can write was used");
  cr_assert_eq (lg_alive_dead (0x4c00aabbccdd0003ull, &got), -1);
}

/* A process that says it is closing is seen so, with its pid still read
 * from its file; a key that never said so is not. */
Test (alive, closing, .init = setup, .fini = teardown)
{
  uint64_t key = 0x4c00aabbccdd0004ull;
  pid_t got;

  cr_assert_eq (lg_alive_mark (key), 0);
  cr_assert_not (lg_alive_is_closing (key), "closing before it said so");
  lg_alive_closing ();
  cr_assert (lg_alive_is_closing (key), "its closing is not seen");
  cr_assert_eq (lg_alive_dead (key, &got), 0);
  cr_assert_eq (got, getpid (), "the pid is no longer read from the file");
  cr_assert_not (lg_alive_is_closing (0x4c00aabbccdd0005ull));
}
