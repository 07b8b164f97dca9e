/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Secrets (CHAP secrets, later passphrases) read from a file, a file
 * descriptor or the terminal, straight into sodium_malloc'd memory, so no
 * copy lingers in stdio buffers, argv or the environment.
 */
#ifndef LG_SECRET_H
#define LG_SECRET_H

#include <stddef.h>

#define LG_SECRET_MAX 1024

/* Each returns a NUL-terminated secret in sodium_malloc memory (free it
 * with lg_secret_free), the first line of the source without its line
 * ending, or NULL with errno set and a message logged.  An empty secret is
 * an error (EINVAL). */
char *lg_secret_from_file (const char *path);
char *lg_secret_from_fd (int fd, const char *what);
char *lg_secret_prompt (const char *prompt);
char *lg_secret_dup (const char *s);

/* Asks twice (prompt, then again) and fails (EINVAL, logged) unless both
 * answers are the same: for a secret being set. */
char *lg_secret_prompt_twice (const char *prompt, const char *again);

/* Wipes and frees; NULL is fine. */
void lg_secret_free (char *secret);

#endif
