"""Reading a file a user names (a spec, a config, ``--facts``) without hanging or reading
without bound: only a regular file is read, and at most a bounded size of it.

A FIFO given as a spec would block ``open()`` until a writer appears (forever), and
``/dev/zero`` would be read until memory runs out. So the path is ``stat``-ed before it is
opened (a FIFO, device, socket or directory is refused without opening it), then opened
with ``O_NONBLOCK`` (so a FIFO swapped in between the two never blocks) and checked again on
the open descriptor; at most LIMIT bytes are read.
"""

from __future__ import annotations

import os
import stat

DEFAULT_LIMIT = 16 * 1024 * 1024  # bytes: far beyond any spec, config or facts file


class NotReadable(OSError):
    """The path is not a regular file, or is larger than the limit: the message says which."""


def kind_of(mode: int) -> str:
    """What a non-regular file is, in words."""
    for test, words in ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
                        (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"),
                        (stat.S_ISDIR, "a directory")):
        if test(mode):
            return words
    return "not a regular file"


def check_regular(path, what: str = "file") -> None:
    """Raise NotReadable unless PATH (symlinks followed) is a regular file; FileNotFoundError
    and PermissionError as ``os.stat`` raises them. Never opens PATH."""
    mode = os.stat(path).st_mode
    if not stat.S_ISREG(mode):
        raise NotReadable(f"expected a regular {what}, got {kind_of(mode)}")


def read_regular(path, what: str = "file", limit: int = DEFAULT_LIMIT) -> bytes:
    """The bytes of the regular file PATH, at most LIMIT of them (NotReadable beyond, or when
    PATH is a FIFO, a device, a socket or a directory). Never blocks on a FIFO."""
    check_regular(path, what)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):  # replaced between the stat and the open
            raise NotReadable(f"expected a regular {what}, got {kind_of(st.st_mode)}")
        if st.st_size > limit:
            raise NotReadable(f"the {what} is {st.st_size:,} bytes, more than the {limit:,} read at most")
        chunks, total = [], 0
        while True:
            chunk = os.read(fd, min(1 << 20, limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > limit:  # it grew while being read
                raise NotReadable(f"the {what} is more than the {limit:,} bytes read at most")
        return b"".join(chunks)
    finally:
        os.close(fd)
