"""Reading a command's output never depends on paramiko's fileno() pipe alone.

paramiko's Channel.fileno() is one OS pipe that stdout and stderr share through two OrPipes
whose set and clear are not synchronised (paramiko PR #1235): output arriving on one stream
while the other is read can leave the pipe clear with bytes buffered. A reader that then
selects on the pipe until its deadline hangs a whole command timeout (it did: a persistent
shell's start under a loaded CI hung 180 s and fell back to exec channels).

These channels reproduce that lost wake-up exactly: output becomes ready while the pipe is
never written. Pure logic of the two read loops (launcher/transport/shell.py Shell.run and
ssh_runner.SSHRunner._exchange), no network."""

from __future__ import annotations

import os
import re
import threading
import time
from types import SimpleNamespace

import pytest

from launcher.transport.shell import Shell
from launcher.transport.ssh_runner import SSHRunner

DEADLINE = 10.0  # a reader that waits on the pipe alone sleeps this long, then times out


class LostWakeupChannel:
    """Output that becomes ready ``delay`` seconds after it is due, with fileno() a pipe that
    never becomes readable (the state the OrPipe race leaves behind)."""

    def __init__(self, delay: float = 0.3):
        self.delay = delay
        self.rfd, self.wfd = os.pipe()
        self.out, self.err = b"", b""
        self.ready_at = None
        self.closed = False
        self.eof_received = False
        self.status_event = threading.Event()
        self.exit_status = -1

    # the answer, produced when the command is sent
    def answer(self, out: bytes, err: bytes, rc: int | None = None) -> None:
        self.out, self.err = out, err
        self.ready_at = time.monotonic() + self.delay
        if rc is not None:
            self.exit_status = rc

    def _due(self) -> bool:
        return self.ready_at is not None and time.monotonic() >= self.ready_at

    def settimeout(self, t):
        pass

    def fileno(self):
        return self.rfd

    def recv_ready(self):
        return self._due() and bool(self.out)

    def recv_stderr_ready(self):
        return self._due() and bool(self.err)

    def recv(self, n):
        data, self.out = self.out[:n], self.out[n:]
        self._maybe_eof()
        return data

    def recv_stderr(self, n):
        data, self.err = self.err[:n], self.err[n:]
        self._maybe_eof()
        return data

    def _maybe_eof(self):
        if self.exit_status != -1 and not self.out and not self.err:
            self.eof_received = True
            self.status_event.set()

    def close(self):
        os.close(self.rfd)
        os.close(self.wfd)


class ShellChannel(LostWakeupChannel):
    """A persistent shell: answers each framed command it is sent (markers from the script)."""

    def sendall(self, payload: bytes) -> None:
        a, b = re.search(rb"':LS:([0-9a-f]+)' '([0-9a-f]+)'", payload).groups()
        token = b":LS:" + a + b + b"\n", b"\n:LE:" + a + b
        self.answer(token[0] + b"out\n" + token[1] + b" 5\n", token[0] + b"err\n" + token[1] + b"\n")


@pytest.fixture
def shell_channel():
    ch = ShellChannel()
    yield ch
    ch.close()


def test_a_persistent_shell_reads_output_the_pipe_never_announced(shell_channel):
    """Two commands under one deadline, as a shell's start runs them (prepare_shell): a lost
    wake-up in the first must not eat the second's time."""
    sh = Shell(shell_channel, SimpleNamespace(is_active=lambda: True))
    deadline = time.monotonic() + DEADLINE
    for _ in range(2):
        assert sh.run("sh -c 'echo out; echo err >&2; exit 5'", None, deadline) == (5, b"out\n", b"err\n")


def test_an_exec_channel_reads_output_the_pipe_never_announced():
    ch = LostWakeupChannel()
    ch.shutdown_write = lambda: None
    ch.answer(b"out\n", b"err\n", rc=3)
    deadline = time.monotonic() + DEADLINE
    try:
        rc, out, err = SSHRunner._exchange(SimpleNamespace(where="test"), ch, None, deadline, DEADLINE, ["true"])
    finally:
        ch.close()
    assert (rc, bytes(out), bytes(err)) == (3, b"out\n", b"err\n")
    # read when it was ready, not when the deadline ended the wait (a real command would have
    # been reported as timed out)
    assert time.monotonic() < deadline
