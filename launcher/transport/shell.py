"""Persistent shells: commands through a few long-lived ``bash --noprofile --norc`` per connection.

Login shells are noisy (banners, module systems, conda/pyenv init) and slow. With
``ssh_shell: persistent`` (the default) the login shell starts once per shell, the login
environment of ``bash -l`` (PATH, module settings) is captured once, and a command then
costs one round trip. Every command is framed (``frame``), stdin (sbatch's secrets) is
sent in-band, length-prefixed, never in argv or a file. A command that times out closes
its shell (the next command gets a fresh one); when no shell can start on a connection,
``ShellUnavailable`` sends its commands to exec channels (``runner``).
"""

from __future__ import annotations

import logging
import select
import shlex
import socket
import time
from typing import Optional

from launcher.core import knobs
from launcher.transport.cmdline import shown
from launcher.transport.errors import ConnectionLostError, HostUnreachableError, RemoteCommandTimeout
from launcher.transport.frame import Frame, FrameError, FrameParser
from launcher.transport.pool import Connection
from launcher.transport.sdk import paramiko_module

log = logging.getLogger("launcher.ssh")  # the transport's one logger name

MAX_SHELLS = 3  # persistent shells per connection (each holds one session for its lifetime)
SHELL_START_TIMEOUT = 30.0  # seconds for a shell's start-up and login-environment capture (the default)


def shell_start_timeout() -> float:
    """How long a persistent shell may take to start and capture the login environment
    ($LAUNCHER_SSH_SHELL_START_TIMEOUT, default 30 s): past it, the commands to that host run each
    on its own channel (slower, never wrong). A slow login node (a heavy ~/.bashrc, a loaded
    machine) can be given longer."""
    return knobs.number("LAUNCHER_SSH_SHELL_START_TIMEOUT", SHELL_START_TIMEOUT, positive=True)
MAX_SHELL_INPUT = 1 << 20  # larger (or binary) stdin goes through an exec channel
# the login environment of `bash -l`, printed NUL-separated on fd 3, its noise to /dev/null
CAPTURE_LOGIN_ENV = "bash -lc 'env -0 >&3' 3>&1 >/dev/null 2>/dev/null"
_NOT_FROM_LOGIN_ENV = {"PWD", "OLDPWD", "SHLVL", "_", "BASH_EXECUTION_STRING", "BASHOPTS", "SHELLOPTS", "PS1",
                       "BASH_ENV", "ENV"}


# paramiko's Channel.fileno() is one OS pipe that stdout and stderr share through two OrPipes
# whose set and clear are not synchronised (paramiko PR #1235, still open upstream): output
# arriving on one stream while the other is being read can leave the pipe clear with bytes
# buffered, and a select on it then sleeps to the deadline. Every wait is therefore capped and
# the buffers checked again: a lost wake-up costs at most this long, never the command's timeout.
CHANNEL_RECHECK_SECONDS = 0.1


def wait_on_channel(fd: int, left: float) -> None:
    """Sleep until the channel's fileno() says readable, at most ``left`` and at most
    CHANNEL_RECHECK_SECONDS (the caller checks recv_ready()/recv_stderr_ready() again)."""
    select.select([fd], [], [], max(0.0, min(left, CHANNEL_RECHECK_SECONDS)))


class ShellUnavailable(Exception):
    """No persistent shell for this command: run it through an exec channel instead."""


class ShellDied(Exception):
    """The shell's channel ended before the command's frame did. ``started``: False when
    not even the start marker came back (then the command surely did not run)."""

    def __init__(self, started: bool):
        super().__init__("the shell ended" + (" mid-command" if started else " before the command started"))
        self.started = started


def login_env_exports(raw: bytes, current: Optional[dict] = None) -> str:
    """``export`` lines for a login environment captured with ``env -0`` (pure). Names
    that are no plain identifiers (exported bash functions) and the shell's own
    bookkeeping (PWD, SHLVL, ...) are skipped; so are values equal to ``current``."""
    parts = []
    for item in raw.split(b"\0"):
        name, sep, value = item.partition(b"=")
        if not sep:
            continue
        try:
            k, v = name.decode(), value.decode("utf-8", "surrogateescape")
        except UnicodeDecodeError:
            continue
        if not k.isidentifier() or not k.isascii() or k in _NOT_FROM_LOGIN_ENV:
            continue
        if current is not None and current.get(k) == v:
            continue
        parts.append(f"{k}={shlex.quote(v)}")
    return f"export {' '.join(parts)}" if parts else "true"


class Shell:
    """One long-lived ``bash --noprofile --norc`` on its own channel, fed framed commands
    on stdin; one command at a time (the pool hands it to one caller)."""

    def __init__(self, chan, transport):
        self.chan = chan
        self.transport = transport
        self.commands = 0

    @property
    def alive(self) -> bool:
        return not (self.chan.closed or self.chan.eof_received) and self.transport.is_active()

    def close(self) -> None:
        try:
            self.chan.close()
        except Exception:
            pass

    def run(self, cmdline: str, data: Optional[bytes], deadline: float, *, subshell: bool = True
            ) -> tuple[int, bytes, bytes]:
        """Send one framed command and read until its frame is complete. Raises
        socket.timeout at the deadline, ShellDied when the channel ends first."""
        frame = Frame.new()
        parser = FrameParser(frame)
        head, tail = frame.shell_script(cmdline, None if data is None else len(data), subshell=subshell)
        payload = head.encode() + (data or b"") + tail.encode()
        chan = self.chan
        chan.settimeout(max(0.001, deadline - time.monotonic()))
        chan.sendall(payload)
        fd = chan.fileno()
        while True:
            while chan.recv_ready():
                parser.feed_stdout(chan.recv(65536))
            while chan.recv_stderr_ready():
                parser.feed_stderr(chan.recv_stderr(65536))
            if parser.done:
                break
            if chan.eof_received or chan.closed:
                if chan.recv_ready() or chan.recv_stderr_ready():
                    continue
                raise ShellDied(parser.started)
            left = deadline - time.monotonic()
            if left <= 0:
                raise socket.timeout()
            wait_on_channel(fd, left)
        self.commands += 1
        return parser.result()


def prepare_shell(sh, deadline: float, where: str) -> None:
    """A new shell made ready (``sh.run(cmdline, data, deadline, subshell=)``: a paramiko
    ``Shell`` or an OpenSSH ``PipeShell``): options the dotfiles may have exported undone, then
    the login environment of ``bash -l`` captured and exported in it, once."""
    # dotfiles may export SHELLOPTS (xtrace, errexit): never echo stdin (secrets) or env
    # values, and a failing command must not end the shell
    sh.run("set +o xtrace +o verbose +o errexit +o nounset", None, deadline, subshell=False)
    rc, env0, _ = sh.run(CAPTURE_LOGIN_ENV, None, deadline)
    if rc == 0:
        rc2, _, err = sh.run(login_env_exports(env0), None, deadline, subshell=False)
        if rc2 != 0:
            log.info("login environment of %s not applied: %s", where, err[-200:])
    else:
        log.info("login environment of %s not captured (bash -l exited %d)", where, rc)


def fits_a_shell(data: Optional[bytes]) -> bool:
    """Whether a command's stdin can go in-band through a persistent shell (else: exec)."""
    return data is None or (len(data) <= MAX_SHELL_INPUT and b"\0" not in data)


def shell_exec(conn: Connection, where: str, cmdline: str, data: Optional[bytes], timeout: float,
               argv) -> tuple[int, bytes, bytes]:
    """Run a command line through one of the connection's persistent shells. Raises
    ShellUnavailable when there is none to be had (then: an exec channel)."""
    paramiko = paramiko_module()

    for attempt in (1, 2):
        sh = _take_shell(conn, where, time.monotonic() + timeout, argv)
        deadline = time.monotonic() + timeout
        ok = False
        try:
            try:
                result = sh.run(cmdline, data, deadline)
            except socket.timeout:
                raise RemoteCommandTimeout(f"command timed out after {timeout:g}s on {where}: "
                                           f"{shown(argv)} (its shell was closed)") from None
            except ShellDied as e:
                if sh.transport.is_active() and not e.started and attempt == 1:
                    # an idle shell ended (the site reaps idle processes?): nothing ran, retry once
                    log.info("persistent shell on %s had ended; starting another", where)
                    continue
                _shell_lost(conn, where, sh, argv, e)
            except (FrameError, paramiko.SSHException, EOFError, OSError) as e:
                _shell_lost(conn, where, sh, argv, e)
            ok = True
            return result
        finally:
            if ok and sh.alive:
                with conn.shell_cond:
                    conn.shells.append(sh)
                    conn.shell_cond.notify()
            else:
                conn.drop_shell(sh)
    raise AssertionError("unreachable")


def _shell_lost(conn: Connection, where: str, sh: Shell, argv, e: BaseException):
    if not sh.transport.is_active():
        conn.invalidate(sh.transport)
        raise ConnectionLostError(f"connection to {where} lost while running {shown(argv)}: "
                                  "it may or may not have run") from None
    raise ConnectionLostError(f"the remote shell on {where} ended while running {shown(argv)} "
                              f"({e or type(e).__name__}): it may or may not have run") from None


def _take_shell(conn: Connection, where: str, deadline: float, argv) -> Shell:
    """An idle shell of the connection, a new one, or (all busy) the next one freed."""
    while True:
        with conn.shell_cond:
            if conn.shell_broken:
                raise ShellUnavailable(conn.shell_broken)
            while conn.shells:
                sh = conn.shells.pop()
                if sh.alive and conn.transports and sh.transport is conn.transports[-1]:
                    return sh
                conn.shells_live -= 1  # dead (reconnected since, or closed by the server)
                sh.close()
                conn.sessions.release()
            if conn.shells_live < MAX_SHELLS:
                if not conn.sessions.acquire(blocking=False):
                    raise ShellUnavailable("no free session")  # exec waits for one
                conn.shells_live += 1
                break
            left = deadline - time.monotonic()
            if left <= 0:
                raise RemoteCommandTimeout(f"no free shell on {where} within the timeout: {shown(argv)}")
            conn.shell_cond.wait(left)
    try:
        return _start_shell(conn, where)
    except BaseException:
        with conn.shell_cond:
            conn.shells_live -= 1
            conn.shell_cond.notify()
        conn.sessions.release()
        raise


def _start_shell(conn: Connection, where: str) -> Shell:
    """``bash --noprofile --norc`` on a new channel (the user's login shell runs once,
    to start it: its noise lands before the first frame), then the login environment
    of ``bash -l`` captured and exported in it once."""
    paramiko = paramiko_module()

    deadline = time.monotonic() + shell_start_timeout()
    chan = conn.open_session(deadline, where)
    t = chan.get_transport()
    try:
        chan.exec_command("exec bash --noprofile --norc")
    except (paramiko.SSHException, EOFError, OSError) as e:
        chan.close()
        raise HostUnreachableError(f"connection to {where} lost before the command was sent: "
                                   f"{e or type(e).__name__}") from None
    sh = Shell(chan, t)
    start = time.monotonic()
    try:
        prepare_shell(sh, deadline, where)
    except (socket.timeout, ShellDied, FrameError, paramiko.SSHException, EOFError, OSError) as e:
        sh.close()
        if not t.is_active():
            conn.invalidate(t)
            raise HostUnreachableError(f"connection to {where} lost while starting a shell: "
                                       f"{e or type(e).__name__}") from None
        why = "timed out" if isinstance(e, socket.timeout) else f"failed ({type(e).__name__} {e})"
        with conn.shell_cond:
            conn.shell_broken = f"a persistent shell on {where} {why}"
        log.warning("%s: running each command on its own channel instead", conn.shell_broken)
        raise ShellUnavailable(conn.shell_broken) from None
    conn.shell_starts += 1
    log.debug("persistent shell #%d on %s ready in %.0f ms", conn.shell_starts, where,
              (time.monotonic() - start) * 1000)
    return sh
