/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Whether the gateway behind a reservation key still runs on this host.
 *
 * A gateway about to hold a LUN (a reservation, an owner record) marks
 * its key: it creates "lungate-<key>.alive" (its pid inside) in its
 * runtime directory and holds an exclusive flock on it for the life of
 * the process, which the kernel drops when the process ends however it
 * ends (kill -9, OOM).  Another gateway of this host that finds the LUN
 * held under that key opens the file and tries the lock: taken, the
 * holder is dead, proven; refused, it runs; no file, nothing is known
 * (another user's or another container's gateway, whose runtime
 * directory is not this one, or a file removed): the LUN stays refused.
 *
 * The directory: $XDG_RUNTIME_DIR/lungate, else /run/lungate for root,
 * else /tmp/lungate-<uid> (root and uid as outside a user namespace); created mode 0700 and used only when it is a
 * directory of this user's that nobody else can write.  The file of a
 * clean exit is removed; a killed gateway's stays until the runtime
 * directory is emptied (at boot, or at the user's logout): taking one of
 * its LUNs back does not remove it, as the killed gateway may have held
 * others (a whole target's), and each is taken back on the same proof.
 *
 * Threads: any; marking is done once per key.
 */
#ifndef LG_UTIL_ALIVE_H
#define LG_UTIL_ALIVE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* The runtime directory (above) into buf, created when create: 0, or -1
 * with errno (EPERM: it exists and is not this user's alone). */
int lg_runtime_dir (char *buf, size_t len, bool create);

/* Marks key as this process's: 0, or -1 with errno (the process then
 * cannot be proven dead later; nothing else changes). */
int lg_alive_mark (uint64_t key);

/* 1: the process that marked key has ended (*pid says which it was);
 * 0: it runs; -1: not known here. */
int lg_alive_dead (uint64_t key, pid_t *pid);

/* This process keeps a LUN it could not release: its files stay at
 * exit, so that the next gateway can prove it dead. */
void lg_alive_keep (void);

/* This process stops serving, and releases its LUNs once its final
 * writes are done (an unmount, nbdkit stopping): its files say so, and a
 * gateway of this host refused by one of its LUNs waits longer for the
 * release (dev/reserve.c). */
void lg_alive_closing (void);
/* What a clean exit does (atexit): removes this process's files, unless
 * lg_alive_keep.  For a process about to die of a signal it raises. */
void lg_alive_exit (void);
/* Whether the process that marked key said it is closing. */
bool lg_alive_is_closing (uint64_t key);

/* Whether process pid (as this process sees pids) holds key's file open:
 * the pid a file names is the marking process's own, which is another
 * process here when that one runs in another PID namespace.  false also
 * when it cannot be told (another user's process). */
bool lg_alive_pid_holds (uint64_t key, pid_t pid);

/* What a mount daemon ending now could not do (its final flush failed):
 * one line for lungate umount, in the runtime directory as
 * "lungate-mount-<pid>.failed".  0, or -1 with errno. */
int lg_alive_failed_write (const char *why);
/* Takes (reads and removes) what process pid left so: 1 with why set,
 * 0 nothing left, -1 not readable. */
int lg_alive_failed_take (pid_t pid, char *why, size_t len);

#endif
