"""Framing of remote command output, so that login-shell noise is never taken for output.

A login node's shell prints what it likes: banners, ``module`` warnings, conda or pyenv
chatter, on stdout and on stderr, before, after and (from background jobs) even between
our commands. Every remote command is therefore wrapped in a small POSIX-sh script that
prints a start marker on both streams, runs the command, then prints an end marker on
both streams, the exit code after the stdout one. Only what lies between the markers is
the command's output; everything else is noise and is dropped.

Markers carry a fresh random token per command (128 bits), and the script never contains
a marker whole: it prints it from two halves (``printf '%s%s' HALF1 HALF2``), so a shell
that echoes its input (``set -x``, ``set -v``) cannot fake one. Output that happens to
contain marker-like text is harmless: a token is unknown before the command is sent.

Pure logic only (no I/O): ``Frame`` builds the script, ``FrameParser`` takes stdout and
stderr chunks of any size, in any split, and says when the frame is complete.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass, field
from typing import Optional

RC_VAR = "__launcher_rc"
IN_VAR = "__launcher_in"
MAX_NOISE_KEPT = 4096  # bytes of noise remembered for diagnostics, per stream
_RC_LINE = re.compile(rb" (-?[0-9]{1,4})\n")


@dataclass(frozen=True)
class Frame:
    """One command's markers. ``start``/``end`` are what appears on the wire; the halves
    are what the script contains."""

    a: str  # first half of the token
    b: str  # second half

    @classmethod
    def new(cls) -> "Frame":
        return cls(secrets.token_hex(8), secrets.token_hex(8))

    @property
    def start(self) -> bytes:
        return f":LS:{self.a}{self.b}\n".encode()

    @property
    def end(self) -> bytes:
        return f"\n:LE:{self.a}{self.b}".encode()

    # -- scripts

    def _print_start(self) -> str:
        s = f"printf '%s%s\\n' ':LS:{self.a}' '{self.b}'"
        return f"{s}; {s} >&2"

    def _print_end(self) -> str:
        return (f"printf '\\n%s%s\\n' ':LE:{self.a}' '{self.b}' >&2; "
                f"printf '\\n%s%s %d\\n' ':LE:{self.a}' '{self.b}' \"${RC_VAR}\"")

    def exec_script(self, cmdline: str) -> str:
        """For one ``exec`` channel (``sh -c SCRIPT``): the command runs in a subshell and
        reads the channel's stdin; the script exits with the command's code. One line
        (when the command is), so that csh-family login shells can pass it to ``sh``."""
        return (f"{self._print_start()}; ( {cmdline} ); {RC_VAR}=$?; {self._print_end()}; "
                f"exit \"${RC_VAR}\"")

    def shell_script(self, cmdline: str, stdin_len: Optional[int] = None, subshell: bool = True) -> tuple[str, str]:
        """For a long-lived ``bash --noprofile --norc`` reading commands on its stdin.
        Returns (head, tail): send ``head``, then exactly ``stdin_len`` bytes of input (if
        any), then ``tail``. The command runs in a subshell (``exit``/``cd`` cannot touch
        the shell) with stdin from /dev/null, or, with input, from a variable filled by
        ``head -c N`` (bash reads its script a byte at a time from a pipe, so ``head``
        reads exactly the N bytes that follow, and never a byte of the protocol)."""
        run = f"( {cmdline}\n)" if subshell else cmdline
        if stdin_len is None:
            head = f"{self._print_start()}\n{run} </dev/null\n{RC_VAR}=$?\n{self._print_end()}\n"
            return head, ""
        head = f"{self._print_start()}\n{IN_VAR}=$(head -c {int(stdin_len)}; printf x)\n"
        tail = (f"{IN_VAR}=${{{IN_VAR}%x}}\nprintf '%s' \"${IN_VAR}\" | {run}\n{RC_VAR}=$?\n"
                f"unset {IN_VAR}\n{self._print_end()}\n")
        return head, tail


@dataclass
class _Stream:
    marker_start: bytes
    marker_end: bytes
    with_rc: bool
    state: str = "before"  # before -> inside -> (rc) -> done
    buf: bytearray = field(default_factory=bytearray)
    scanned: int = 0  # bytes of buf already searched for the marker
    noise: bytearray = field(default_factory=bytearray)
    rc: Optional[int] = None
    tail: bytearray = field(default_factory=bytearray)  # after the end marker, until its line ends
    rest: bytearray = field(default_factory=bytearray)  # bytes after the frame

    def feed(self, data: bytes) -> None:
        if not data:
            return
        if self.state == "done":
            self.rest += data
            return
        if self.state == "after":
            self.tail += data
        else:
            self.buf += data
        self._advance()

    def _advance(self) -> None:
        while True:
            if self.state == "before":
                i = self.buf.find(self.marker_start, max(0, self.scanned - len(self.marker_start) + 1))
                if i < 0:
                    keep = len(self.marker_start) - 1  # a marker may straddle two chunks
                    if len(self.buf) > keep:
                        self._note_noise(self.buf[:len(self.buf) - keep])
                        del self.buf[:len(self.buf) - keep]
                    self.scanned = len(self.buf)
                    return
                self._note_noise(self.buf[:i])
                del self.buf[:i + len(self.marker_start)]
                self.state, self.scanned = "inside", 0
            elif self.state == "inside":
                i = self.buf.find(self.marker_end, max(0, self.scanned - len(self.marker_end) + 1))
                if i < 0:
                    self.scanned = len(self.buf)
                    return
                self.tail = self.buf[i + len(self.marker_end):]
                del self.buf[i:]
                self.state, self.scanned = "after", 0
            elif self.state == "after":  # the end marker seen: its line ends with " RC\n" or "\n"
                t = self.tail
                if self.with_rc:
                    m = _RC_LINE.match(t)
                    if m is None:
                        if b"\n" in t or len(t) > 8:
                            raise FrameError(f"a malformed end marker: {bytes(t[:16])!r}")
                        return  # the rest of the line is still on its way
                    self.rc = int(m.group(1))
                    end = m.end()
                else:
                    if not t:
                        return
                    if t[:1] != b"\n":
                        raise FrameError(f"a malformed end marker: {bytes(t[:16])!r}")
                    end = 1
                self.rest = bytearray(t[end:])
                self.tail = bytearray()
                self.state = "done"
                return

    def _note_noise(self, data) -> None:
        room = MAX_NOISE_KEPT - len(self.noise)
        if room > 0 and data:
            self.noise += data[:room]


class FrameError(RuntimeError):
    """The framing broke: a marker line that does not parse."""


class FrameParser:
    """Collects one framed command's stdout and stderr from chunks of any size."""

    def __init__(self, frame: Frame):
        self.frame = frame
        self.out = _Stream(frame.start, frame.end, with_rc=True)
        self.err = _Stream(frame.start, frame.end, with_rc=False)

    def feed_stdout(self, data: bytes) -> None:
        self.out.feed(data)

    def feed_stderr(self, data: bytes) -> None:
        self.err.feed(data)

    @property
    def started(self) -> bool:
        """The command started: its start marker arrived on stdout or stderr."""
        return self.out.state != "before" or self.err.state != "before"

    @property
    def done(self) -> bool:
        return self.out.state == "done" and self.err.state == "done"

    @property
    def stdout_done(self) -> bool:
        return self.out.state == "done"

    def result(self) -> tuple[int, bytes, bytes]:
        if not self.done:
            raise FrameError("the frame is not complete")
        return self.out.rc, bytes(self.out.buf), bytes(self.err.buf)

    def partial(self) -> tuple[bytes, bytes]:
        """What arrived inside the frame so far (for errors)."""
        return bytes(self.out.buf), bytes(self.err.buf)

    @property
    def noise(self) -> tuple[bytes, bytes]:
        """Shell noise seen before the frame (first 4 KiB per stream)."""
        return bytes(self.out.noise), bytes(self.err.noise)

    @property
    def leftover(self) -> tuple[bytes, bytes]:
        """Bytes that arrived after the frame: noise, never the next command's output
        (a new command has a new token)."""
        return bytes(self.out.rest), bytes(self.err.rest)
