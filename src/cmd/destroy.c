/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Before a command destroys what a LUN holds (format, bench --write):
 * what it holds, by its signature, and the user's consent, typed at the
 * terminal as cryptsetup asks for it.  Main thread only.
 */
#include <config.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cmd/cmd.h"
#include "dev/volume.h"
#include "util/log.h"

const char *
lg_cmd_signature (const uint8_t *buf, size_t len)
{
  static const struct {
    size_t off;
    const char *magic;
    size_t n;
    const char *what;
  } sig[] = {
    { 0, "LUKS\xba\xbe", 6, "a LUKS volume" },
    { 0, "XFSB", 4, "an XFS file system" },
    { 512, "EFI PART", 8, "a GPT partition table" },
    { 4096, "EFI PART", 8, "a GPT partition table" },
    { 512 + 0, "LABELONE", 8, "an LVM physical volume" },
    { 1024 + 56, "\x53\xef", 2, "an ext2/3/4 file system" },
    { 65536 + 64, "_BHRfS_M", 8, "a Btrfs file system" },
    { 4096 - 10, "SWAPSPACE2", 10, "a swap area" },
    { 3, "NTFS    ", 8, "an NTFS file system" },
    { 82, "FAT32   ", 8, "a FAT file system" },
  };

  if (len >= LG_HDR_SIZE && lg_header_has_magic (buf))
    return "a lungate volume";
  for (size_t i = 0; i < sizeof sig / sizeof sig[0]; i++)
    if (sig[i].off + sig[i].n <= len
        && memcmp (buf + sig[i].off, sig[i].magic, sig[i].n) == 0)
      return sig[i].what;
  if (len >= 512 && buf[510] == 0x55 && buf[511] == 0xaa)
    return "a DOS partition table or boot sector";
  return NULL;
}

int
lg_cmd_confirm (const char *question)
{
  char line[16];
  size_t len = 0;
  int fd;

  /* A question nobody sees (standard error in a log) is no question. */
  if (!isatty (STDIN_FILENO) || !isatty (STDERR_FILENO))
    return 0;
  fd = open ("/dev/tty", O_RDWR | O_CLOEXEC | O_NOCTTY);
  if (fd < 0)
    return 0;
  if (dprintf (fd, "%s\nType YES (in capitals) to go on: ", question) < 0) {
    close (fd);
    return 0;
  }
  for (;;) {
    char c;
    ssize_t r = read (fd, &c, 1);

    if (r < 0 && errno == EINTR && !lg_cmd_stopped ())
      continue;
    if (r <= 0 || c == '\n')
      break;
    if (len < sizeof line - 1)
      line[len++] = c;
  }
  line[len] = '\0';
  close (fd);
  return !lg_cmd_stopped () && strcmp (line, "YES") == 0 ? 1 : -1;
}
