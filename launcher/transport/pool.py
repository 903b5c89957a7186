"""The connection pool: one SSH connection per (user, host, port, proxy) per process.

Shared by every SSHRunner of the target and reused for every command (a command costs
one channel, not one handshake), with keepalive, and a reconnect when the pooled
connection is found dead before a command was sent. A connection also holds its SFTP
session and its idle persistent shells (``shell``); a forked child never touches its
parent's sockets. Everything closes at exit (``close_all``).
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
from typing import Optional

from launcher.transport.connect import open_route
from launcher.transport.errors import HostUnreachableError
from launcher.transport.sdk import paramiko_module
from launcher.transport.sshconfig import Route

log = logging.getLogger("launcher.ssh")  # the transport's one logger name

MAX_SESSIONS = 8  # concurrent channels on one connection (sshd's MaxSessions is 10; SFTP takes one)


class Connection:
    """One SSH connection (plus its jump hosts), shared by every runner with the same key."""

    def __init__(self, route: Route, hint: str):
        self.route = route
        self.hint = hint
        self.lock = threading.RLock()
        self.transports: list = []
        self.sessions = threading.BoundedSemaphore(MAX_SESSIONS)
        self.sftp = None
        self.sftp_lock = threading.Lock()
        self.sftp_missing = False
        self.refs = 0
        self.connects = 0
        self.pid = os.getpid()
        self.shells: list = []  # idle persistent shells
        self.shells_live = 0  # idle + busy
        self.shell_cond = threading.Condition()
        self.shell_broken: Optional[str] = None  # why shells cannot start here (then: exec)
        self.shell_starts = 0

    def transport(self):
        """The live transport, connecting (again) if there is none or it died."""
        with self.lock:
            if self.pid != os.getpid():  # forked: the parent owns those sockets; never close them here
                self.transports, self.sftp, self.pid = [], None, os.getpid()
                self.shells, self.shells_live = [], 0
                self.sessions = threading.BoundedSemaphore(MAX_SESSIONS)
            t = self.transports[-1] if self.transports else None
            if t is not None and t.is_active():
                return t
            if t is not None:
                log.info("connection to %s was lost; reconnecting", self.route.describe())
            self._close_locked()
            start = time.monotonic()
            self.transports = open_route(self.route, self.hint)
            self.connects += 1
            log.debug("connected to %s in %.0f ms (connection #%d)", self.route.describe(),
                      (time.monotonic() - start) * 1000, self.connects)
            return self.transports[-1]

    def drop_shell(self, sh) -> None:
        """Close a shell (dead, timed out or at close) and give back its session."""
        sh.close()
        with self.shell_cond:
            self.shells_live -= 1
            self.shell_cond.notify()
        self.sessions.release()

    def invalidate(self, t) -> None:
        with self.lock:
            if self.transports and self.transports[-1] is t:
                self._close_locked()

    def open_session(self, deadline: float, where: str):
        """A new channel on the connection. A pooled connection found dead is replaced
        once: nothing was sent yet, so this never runs a command twice."""
        paramiko = paramiko_module()

        for attempt in (1, 2):
            t = self.transport()
            try:
                return t.open_session(timeout=max(1.0, deadline - time.monotonic()))
            except paramiko.ChannelException as e:  # MaxSessions and the like: the connection is fine
                raise HostUnreachableError(f"{where} refused a new session: {e.text or e}") from None
            except (paramiko.SSHException, EOFError, OSError) as e:
                self.invalidate(t)
                if attempt == 2:
                    raise HostUnreachableError(f"connection to {where} lost before the command "
                                               f"was sent: {e or type(e).__name__}") from None
                log.info("pooled connection to %s is dead (%s); reconnecting", where, e or type(e).__name__)

    def sftp_client(self):
        """The connection's SFTP session (opened once), or None if the server has no SFTP."""
        paramiko = paramiko_module()

        with self.lock:
            if self.sftp is not None and not self.sftp.get_channel().closed and self.transports \
                    and self.transports[-1].is_active():
                return self.sftp
            if self.sftp_missing:
                return None
            t = self.transport()
            try:
                self.sftp = paramiko.SFTPClient.from_transport(t)
            except paramiko.SSHException as e:
                if t.is_active():
                    log.info("no SFTP on %s (%s): staging through the shell", self.route.describe(), e)
                    self.sftp_missing = True
                    return None
                self.invalidate(t)
                raise HostUnreachableError(f"connection to {self.route.target.label} lost: {e}") from None
            return self.sftp

    def close(self) -> None:
        with self.lock:
            self._close_locked()

    def _close_locked(self) -> None:
        if self.pid != os.getpid():
            self.transports, self.sftp = [], None
            with self.shell_cond:
                self.shells, self.shells_live = [], 0
            return
        with self.shell_cond:
            idle, self.shells = self.shells, []
        for sh in idle:
            self.drop_shell(sh)
        if self.sftp is not None:
            try:
                self.sftp.close()
            except Exception:
                pass
            self.sftp = None
        for t in reversed(self.transports):
            try:
                t.close()
            except Exception:
                pass
        self.transports = []



_POOL: dict = {}
_POOL_LOCK = threading.Lock()
_ATEXIT = []


def acquire(route: Route, hint: str) -> Connection:
    with _POOL_LOCK:
        conn = _POOL.get(route.pool_key)
        if conn is None:
            conn = _POOL[route.pool_key] = Connection(route, hint)
            if not _ATEXIT:
                atexit.register(close_all)
                _ATEXIT.append(True)
        conn.refs += 1
        return conn


def release(conn: Connection) -> None:
    with _POOL_LOCK:
        conn.refs -= 1
        if conn.refs > 0:
            return
        if _POOL.get(conn.route.pool_key) is conn:
            del _POOL[conn.route.pool_key]
    conn.close()


def close_all() -> None:
    """Close every pooled connection (at exit, and between tests)."""
    with _POOL_LOCK:
        conns = list(_POOL.values())
        _POOL.clear()
    for c in conns:
        c.refs = 0
        c.close()


def pool_stats() -> dict:
    """{pool key: {"connects", "refs", "active", "shells", "shell_starts", "shell_broken"}}:
    how many handshakes and persistent shells each target cost (shell_broken: why commands
    go through exec channels there, else None)."""
    with _POOL_LOCK:
        return {k: {"connects": c.connects, "refs": c.refs,
                    "active": bool(c.transports and c.transports[-1].is_active()),
                    "shells": c.shells_live, "shell_starts": c.shell_starts, "shell_broken": c.shell_broken}
                for k, c in _POOL.items()}
