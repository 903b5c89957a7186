"""The Runner protocol over SSH (paramiko), for driving a login node from a laptop.

``SSHRunner`` runs commands the way ``launcher.transport.runner.LocalRunner`` does (``run``,
``put_file``, ``where``, ``close``), on the far side of an SSH connection:

- Connections come from the pool (``pool``): one per target per process, reached
  through its jump hosts with verified host keys and public keys only (``connect``).
- Every argv element is ``shlex.quote``d; ``env`` becomes ``env K=V ...`` in front of
  the command (``cmdline``).
- Every command's output is framed by random start/end markers (``frame``): only what
  lies inside the frame is output, so login-shell noise is never parsed as a job id or
  a status. Commands go through persistent shells (``shell``, ``ssh_shell:
  persistent``, the default) or one framed ``exec`` channel each.
- Files: ``put_file`` and ``put_tree`` (``transfer``).
- Errors say what to do (``errors``); retrying is the caller's choice (``retry``).

paramiko comes from ``sdk.paramiko_module()`` inside functions: importing this module is cheap.
"""

from __future__ import annotations

import io
import logging
import shlex
import threading
import time
from dataclasses import replace
from typing import Any, Mapping, Optional, Sequence

from launcher.transport import transfer
from launcher.transport.cmdline import shown
from launcher.transport.connect import trust_hint
from launcher.transport.errors import ConnectionLostError, RemoteCommandTimeout
from launcher.transport.frame import Frame
from launcher.transport.pool import Connection, acquire, release
from launcher.transport.remote import RemoteRunner, unframe
from launcher.transport.runner import LocalRunner
from launcher.transport.sdk import paramiko_module
from launcher.transport.shell import ShellUnavailable, fits_a_shell, shell_exec, wait_on_channel
from launcher.transport.sshconfig import Route, SSHOptions, resolve
from launcher.transport.openssh import OpenSSHRunner

log = logging.getLogger("launcher.ssh")  # the transport's one logger name

CHUNK = 32768


class SSHRunner(RemoteRunner):
    """Runs commands on a remote host over SSH; see the module docstring.

    ``SSHRunner(options, target_name=None, known_programs=None)``: ``options`` is an
    ``SSHOptions`` or anything ``SSHOptions.from_target`` takes (a target's raw dict, a
    pydantic target_options model, a ``Target``). ``target_name`` only improves the
    hints in errors (``launcher targets trust NAME``); ``known_programs`` (program name
    -> what it is, e.g. ``{"sbatch": "Slurm's client"}``) those for a missing program.
    Nothing connects until the first command; ``close()`` gives the shared connection
    back (it closes when its last runner does).
    """

    def __init__(self, options: Any, *, target_name: Optional[str] = None,
                 known_programs: Optional[Mapping[str, str]] = None):
        super().__init__(options, target_name=target_name, known_programs=known_programs)
        self._route: Optional[Route] = None
        self._conn: Optional[Connection] = None
        self._lock = threading.Lock()

    # -- identity

    @property
    def route(self) -> Route:
        if self._route is None:
            self._route = resolve(self.options)
        return self._route

    @property
    def where(self) -> str:
        t = self.route.target
        return f"{t.user}@{self.options.ssh_host}" + ("" if t.port == 22 else f":{t.port}")

    @property
    def trust_hint(self) -> str:
        return trust_hint(self.target_name)

    @property
    def connects(self) -> int:
        """SSH handshakes this runner's shared connection has made (1 when all went well)."""
        return self._conn.connects if self._conn else 0

    def connection(self) -> Connection:
        """The pooled connection this runner shares (taken from the pool on first use)."""
        with self._lock:
            if self._conn is None:
                self._conn = acquire(self.route, self.trust_hint)
            return self._conn

    def connect(self) -> None:
        """Connect now (verifying the host key and authenticating) instead of at the first command."""
        self.connection().transport()

    def close(self) -> None:
        with self._lock:
            conn, self._conn = self._conn, None
        if conn is not None:
            release(conn)

    # -- commands

    def _run_line(self, cmdline: str, data: Optional[bytes], timeout: float, argv) -> tuple[int, bytes, bytes]:
        """A command line through a persistent shell when possible, else an exec channel."""
        if self.options.ssh_shell == "persistent" and fits_a_shell(data):
            try:
                return shell_exec(self.connection(), self.where, cmdline, data, timeout, argv)
            except ShellUnavailable:
                pass
        return self.exec_channel(cmdline, io.BytesIO(data) if data else None, timeout, argv)

    # -- exec channels

    def exec_channel(self, command: str, source, timeout: float, argv: Sequence[str]) -> tuple[int, bytes, bytes]:
        """Run a command line on its own channel, framed (``sh -c SCRIPT``: the login
        shell's noise falls outside the frame); ``source`` (a binary file object or None)
        feeds stdin."""
        paramiko = paramiko_module()

        frame = Frame.new()
        command = "sh -c " + shlex.quote(frame.exec_script(command))
        deadline = time.monotonic() + timeout
        conn = self.connection()
        if not conn.sessions.acquire(timeout=max(0.0, deadline - time.monotonic())):
            raise RemoteCommandTimeout(f"no free session on {self.where} within {timeout:g}s: {shown(argv)}")
        try:
            chan = conn.open_session(deadline, self.where)
            try:
                try:
                    chan.exec_command(command)
                except (paramiko.SSHException, EOFError, OSError) as e:
                    # the request may have reached sshd before the connection died
                    raise ConnectionLostError(f"connection to {self.where} lost while starting "
                                              f"{shown(argv)}: {e or type(e).__name__}") from None
                rc, out, err = self._exchange(chan, source, deadline, timeout, argv)
            finally:
                chan.close()
        finally:
            conn.sessions.release()
        return unframe(frame, rc, out, err)

    def _exchange(self, chan, source, deadline: float, timeout: float, argv) -> tuple[int, bytes, bytes]:
        out, err = bytearray(), bytearray()
        pending = b""
        sending = source is not None
        if not sending:
            chan.shutdown_write()
        fd = chan.fileno()  # readable when output or EOF arrives
        while True:
            busy = False
            if sending and chan.send_ready():
                if not pending:
                    pending = source.read(CHUNK)
                if pending:
                    try:
                        n = chan.send(pending)
                    except (OSError, EOFError):  # the remote side stopped reading (or died)
                        n, sending = 0, False
                    pending = pending[n:]
                    busy = n > 0
                else:
                    sending = False
                    chan.shutdown_write()
            while chan.recv_ready():
                out += chan.recv(65536)
                busy = True
            while chan.recv_stderr_ready():
                err += chan.recv_stderr(65536)
                busy = True
            if chan.eof_received or chan.closed:
                if not chan.recv_ready() and not chan.recv_stderr_ready():
                    break
                continue
            left = deadline - time.monotonic()
            if left <= 0:
                raise RemoteCommandTimeout(f"command timed out after {timeout:g}s on {self.where}: {shown(argv)}")
            if not busy:
                wait_on_channel(fd, min(left, 0.002) if sending else left)
        left = deadline - time.monotonic()
        if not chan.status_event.wait(max(0.0, left)):
            raise RemoteCommandTimeout(f"no exit status within {timeout:g}s on {self.where}: {shown(argv)}")
        if chan.exit_status == -1 and not chan.get_transport().is_active():
            raise ConnectionLostError(f"connection to {self.where} lost while running {shown(argv)}: "
                                      "it may or may not have run")
        return chan.exit_status, bytes(out), bytes(err)

    # -- files (transfer)

    def put_file(self, path: str, content: bytes, mode: int = 0o644) -> None:
        """Write ``content`` to ``path`` on the remote host atomically (see transfer.put_file)."""
        transfer.put_file(self, path, content, mode)


def runner_for_target(target_name: Optional[str], options: Any, env: Optional[dict] = None, *,
                      known_programs: Optional[Mapping[str, str]] = None, home: Optional[str] = None
                      ) -> RemoteRunner:
    """A backend's entry point: the runner for a target's ``ssh_*`` options (its pydantic
    target_options model, a raw dict or a ``Target``): an SSHRunner (paramiko), or with
    ``transport: openssh`` an OpenSSHRunner (the system ssh; its default ControlPath lives
    under ``home``, the launcher's home). ``env`` (e.g. SLURM_CONF) is set for every remote
    command on top of the options' own ``env``; ``known_programs`` names the backend's
    programs in not-found errors."""
    opts = options if isinstance(options, SSHOptions) else SSHOptions.from_target(options)
    if env:
        opts = replace(opts, env={**opts.env, **env})
    if opts.transport == "openssh":
        return OpenSSHRunner(opts, target_name=target_name, known_programs=known_programs, home=home)
    return SSHRunner(opts, target_name=target_name, known_programs=known_programs)


def make_runner(options: Any, *, target_name: Optional[str] = None, env: Optional[dict] = None):
    """The runner a target's options ask for: SSHRunner when ``ssh_host`` is set, else a
    LocalRunner with ``env``. ``options``: a raw target dict, a pydantic target_options
    model or a ``Target``."""
    get = options.opt if hasattr(options, "opt") else (
        options.get if isinstance(options, dict) else lambda k, d=None: getattr(options, k, d))
    if get("ssh_host", None):
        return runner_for_target(target_name, options)
    return LocalRunner(env=env if env is not None else (get("env", None) or {}))
