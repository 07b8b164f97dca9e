#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Runs a command on a new pseudo-terminal (its controlling terminal, its
standard input, output and error) and answers its prompts, as a person at
a terminal would.

  pty-run.py [--timeout S] [--answer REGEX TEXT]... -- COMMAND [ARG...]

Each --answer waits, in order, until the output since the previous answer
matches REGEX, then types TEXT and Enter (TEXT ^C alone: Ctrl-C, no
Enter).  Everything the terminal showed (prompts, echoed typing,
messages) is printed on standard output; the exit status is the
command's (128 + N if killed by signal N), or 124 if a prompt did not
come within the timeout (the command is then killed), 125 if the command
ended before a prompt, 126 if it left the terminal without echo.
"""
import argparse
import os
import pty
import re
import select
import signal
import sys
import termios
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--timeout", type=float, default=120)
    ap.add_argument("--answer", nargs=2, action="append", default=[],
                    metavar=("REGEX", "TEXT"))
    ap.add_argument("command", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    cmd = a.command[1:] if a.command[:1] == ["--"] else a.command
    if not cmd:
        ap.error("no command")
    pid, fd = pty.fork()
    if pid == 0:
        try:
            os.execvp(cmd[0], cmd)
        finally:
            os._exit(127)
    seen = b""
    start = 0
    answers = list(a.answer)
    deadline = time.monotonic() + a.timeout
    status = None
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            sys.stdout.write(seen.decode(errors="replace"))
            print("\npty-run: timed out waiting for %r"
                  % (answers[0][0] if answers else "the end"))
            return 124
        r, _, _ = select.select([fd], [], [], min(left, 0.2))
        if r:
            try:
                chunk = os.read(fd, 4096)
            except OSError:
                chunk = b""
            if not chunk:
                break
            seen += chunk
        if answers and re.search(answers[0][0].encode(), seen[start:]):
            start = len(seen)
            text = answers.pop(0)[1]
            os.write(fd, b"\x03" if text == "^C" else text.encode() + b"\n")
    _, status = os.waitpid(pid, 0)
    try:
        echo = termios.tcgetattr(fd)[3] & termios.ECHO
    except termios.error:
        echo = True  # the terminal is gone: nothing to leave broken
    sys.stdout.write(seen.decode(errors="replace"))
    if answers:
        print("\npty-run: the command ended before %r" % answers[0][0])
        return 125
    if not echo:
        print("\npty-run: the command left the terminal without echo")
        return 126
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    return os.WEXITSTATUS(status)


if __name__ == "__main__":
    sys.exit(main())
