"""The Runner protocol over SSH (paramiko), for driving a Slurm login node from a laptop.

- One connection per (user, host, port, proxy) per process, shared by every
  SSHRunner and reused for every command (a command costs one channel, not one
  handshake), with keepalive, and a reconnect when the pooled connection is found
  dead before a command was sent.
- Host keys are verified against known_hosts (hashed names, ``[host]:port``,
  wildcards, ``@revoked``); an unknown key is refused with its type, SHA256
  fingerprint and the command that trusts it (``launcher targets trust NAME``); a
  changed key is refused and never replaced. Nothing is ever added on its own: we
  drive ``paramiko.Transport`` ourselves (the checks of SSHClient + RejectPolicy,
  plus the fingerprints in the errors and the @revoked/wildcard rules).
- Public keys only: ``ssh_key``, the SSH config's IdentityFile, the agent, then
  the default ~/.ssh/id_* files. No password, no keyboard-interactive, no prompt.
- Every argv element is ``shlex.quote``d; ``env`` becomes ``env K=V ...`` in front
  of the command because sshd usually refuses to set variables (AcceptEnv).
- Login shells are noisy (banners, module systems, conda/pyenv init, on stdout and
  stderr) and slow. Every command's output is framed by random start/end markers
  (``launcher.transport.frame``): only what lies inside the frame is output, so noise is never
  parsed as a job id or a status. Commands run through a few long-lived ``bash
  --noprofile --norc`` shells per connection (``ssh_shell: persistent``, the default):
  the login shell starts once per shell, the login environment (``bash -l``: PATH,
  module settings) is captured once, and a command then costs one round trip. stdin
  (sbatch's secrets) is sent in-band, length-prefixed, never in argv or a file. A
  command that times out closes its shell (the next command gets a fresh one); when no
  shell can start, commands fall back to one framed ``exec`` channel each.
- Errors say what to do: ``HostUnreachableError`` (transient; the command surely
  did not run), ``ConnectionLostError`` / ``RemoteCommandTimeout`` (transient; the
  command may have run), ``UnknownHostKeyError``, ``HostKeyChangedError``,
  ``AuthenticationError``, ``RemoteCommandNotFound`` (exit 127),
  ``RemoteDiskFullError``.

paramiko is imported inside functions only: importing this module is cheap.
"""

from __future__ import annotations

import atexit
import io
import logging
import os
import posixpath
import select
import shlex
import socket
import tarfile
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, replace
from fnmatch import fnmatch
from typing import Any, Callable, Optional, Sequence

from .errors import CommandError, LauncherError
from .runner import LocalRunner, Result
from .transport.cmdline import remote_command
from .transport.cmdline import shown as _shown
from .transport.errors import (AuthenticationError, ConnectionLostError, HostKeyChangedError, HostNotFoundError,
                               HostUnreachableError, RemoteCommandNotFound, RemoteCommandTimeout,
                               RemoteDiskFullError, SSHError, StagingError, UnknownHostKeyError,
                               may_have_run)  # noqa: F401 (importers move in the next commit)
from .transport.retry import retry_idempotent  # noqa: F401 (importers move in the next commit)
from .transport.frame import Frame, FrameError, FrameParser
from .transport.known_hosts import KnownHosts, append_known_host, display_type, fingerprint
from .transport.sshconfig import DEFAULT_IDENTITIES, Hop, Route, SSHOptions, resolve

log = logging.getLogger("launcher.ssh")

# until the runner moves to launcher.transport (next commit), where the backend passes these in
SLURM_PROGRAMS = {p: "Slurm's client" for p in ("sbatch", "squeue", "scontrol", "scancel", "sacct", "sinfo",
                                                "srun", "salloc", "sprio", "sshare")}
MAX_SESSIONS = 8  # concurrent channels on one connection (sshd's MaxSessions is 10; SFTP takes one)
MAX_SHELLS = 3  # persistent shells per connection (each holds one session for its lifetime)
SHELL_START_TIMEOUT = 30.0  # seconds for a shell's start-up and login-environment capture
MAX_SHELL_INPUT = 1 << 20  # larger (or binary) stdin goes through an exec channel
CHUNK = 32768
# the login environment of `bash -l`, printed NUL-separated on fd 3, its noise to /dev/null
CAPTURE_LOGIN_ENV = "bash -lc 'env -0 >&3' 3>&1 >/dev/null 2>/dev/null"
_NOT_FROM_LOGIN_ENV = {"PWD", "OLDPWD", "SHLVL", "_", "BASH_EXECUTION_STRING", "BASHOPTS", "SHELLOPTS", "PS1",
                       "BASH_ENV", "ENV"}


def _remote_path(path: str) -> str:
    """SFTP and exec both start in the remote home: "~/x" is sent as "x"."""
    path = str(path)
    if path == "~":
        return "."
    if path.startswith("~/"):
        return path[2:] or "."
    if path.startswith("~"):
        raise StagingError(f"remote path {path!r}: only ~/ (the login user's home) is supported")
    return path


@dataclass(frozen=True)
class HostKeyInfo:
    """A host key as seen while connecting (what `launcher targets trust` shows)."""

    hop: str  # user@host:port of the connection
    name: str  # the known_hosts name: host or [host]:port
    keytype: str
    fingerprint: str
    public_key: str  # "ssh-ed25519 AAAA..."
    known_hosts: str  # the file it is (or would be) recorded in
    status: str  # "unknown" (being asked about), "known" or "recorded"

    @property
    def display_type(self) -> str:
        return display_type(self.keytype)


@dataclass(frozen=True)
class TreeStats:
    files: int
    bytes: int  # size of the tar stream sent


# --------------------------------------------------------------------------- connecting

def _tcp_socket(hop: Hop):
    if hop.proxy_command:
        import paramiko

        try:
            return paramiko.ProxyCommand(hop.proxy_command)
        except Exception as e:
            raise HostUnreachableError(f"ProxyCommand for {hop.alias} failed to start: {e}") from None
    try:
        sock = socket.create_connection((hop.hostname, hop.port), timeout=hop.connect_timeout)
    except socket.gaierror as e:
        if e.errno == socket.EAI_AGAIN:
            raise HostUnreachableError(f"cannot resolve {hop.hostname!r} right now: {e.strerror}") from None
        raise HostNotFoundError(f"cannot resolve host {hop.hostname!r} (ssh_host {hop.alias!r}): "
                                f"{e.strerror}") from None
    except socket.timeout:
        raise HostUnreachableError(f"connecting to {hop.hostname}:{hop.port} timed out after "
                                   f"{hop.connect_timeout:g}s") from None
    except OSError as e:
        raise HostUnreachableError(f"cannot connect to {hop.hostname}:{hop.port}: {e.strerror or e}") from None
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    return sock


def _jump_channel(via, via_hop: Hop, hop: Hop):
    import paramiko

    try:
        return via.open_channel("direct-tcpip", (hop.hostname, hop.port), ("127.0.0.1", 0),
                                timeout=hop.connect_timeout)
    except paramiko.ChannelException as e:
        raise HostUnreachableError(f"jump host {via_hop.label} could not connect to {hop.hostname}:{hop.port}: "
                                   f"{e.text or e} (is TCP forwarding allowed there?)") from None
    except (paramiko.SSHException, EOFError, OSError) as e:
        raise HostUnreachableError(f"jump host {via_hop.label} dropped the connection to "
                                   f"{hop.hostname}:{hop.port}: {e or type(e).__name__}") from None


def _preferred_key_types(t, known: list) -> None:
    """Ask for the host key type we already know (as OpenSSH does), else a new type
    would look like an unknown host."""
    types = []
    for e in known:
        types += ["rsa-sha2-512", "rsa-sha2-256"] if e.keytype == "ssh-rsa" else [e.keytype]
    opts = t.get_security_options()
    have = list(opts.key_types)
    first = [k for k in dict.fromkeys(types) if k in have]
    if first:
        opts.key_types = first + [k for k in have if k not in first]


def _handshake(hop: Hop, sock):
    import paramiko

    t = paramiko.Transport(sock)
    t.banner_timeout = hop.connect_timeout
    kh = KnownHosts(hop.known_hosts_files + hop.global_known_hosts_files)
    _preferred_key_types(t, kh.lookup(hop.known_hosts_name))
    try:
        t.start_client(timeout=hop.connect_timeout)
    except paramiko.IncompatiblePeer as e:
        t.close()
        raise SSHError(f"{hop.label}: no common SSH algorithms: {e}") from None
    except (paramiko.SSHException, EOFError, OSError) as e:
        t.close()
        raise HostUnreachableError(f"SSH handshake with {hop.label} failed: {e or type(e).__name__} "
                                   "(is sshd running there?)") from None
    return t, kh


def _verify(hop: Hop, kh: KnownHosts, key, hint: str,
            on_unknown: Optional[Callable[[HostKeyInfo], bool]] = None) -> HostKeyInfo:
    blob, ktype = key.asbytes(), key.get_name()
    name, fp = hop.known_hosts_name, fingerprint(blob)
    info = HostKeyInfo(hop=hop.label, name=name, keytype=ktype, fingerprint=fp,
                       public_key=f"{ktype} {key.get_base64()}",
                       known_hosts=hop.known_hosts_files[0] if hop.known_hosts_files else "", status="unknown")
    kw = dict(name=name, keytype=ktype, fingerprint=fp)
    revoked = kh.revoked(blob)
    if revoked is not None:
        raise HostKeyChangedError(f"the host key of {name} ({display_type(ktype)} {fp}) is marked @revoked in "
                                  f"{revoked.where()}: refusing to connect", **kw)
    entries = kh.lookup(name)
    if any(e.blob == blob for e in entries):
        return replace(info, status="known")
    if entries:
        e0 = ([e for e in entries if e.keytype == ktype] or entries)[0]
        raise HostKeyChangedError(
            f"THE HOST KEY OF {name} HAS CHANGED: refusing to connect (someone may be intercepting the "
            "connection, or the host was reinstalled).\n"
            f"  the server offers:    {display_type(ktype)} {fp}\n"
            f"  known_hosts records:  {display_type(e0.keytype)} {e0.fingerprint} ({e0.where()})\n"
            "If the change is expected (ask the cluster's admins), remove the old entry with\n"
            f"  ssh-keygen -R {shlex.quote(name)} -f {shlex.quote(e0.file)}\n"
            f"then record the new one with: {hint}", **kw)
    if on_unknown is not None and on_unknown(info):
        if not hop.known_hosts_files:
            raise SSHError(f"no known_hosts file to record {name} in")
        append_known_host(hop.known_hosts_files[0], name, ktype, blob, hashed=hop.hash_known_hosts)
        log.info("recorded the host key of %s (%s %s) in %s", name, display_type(ktype), fp, info.known_hosts)
        return replace(info, status="recorded")
    ca = (" (host certificates / @cert-authority are not supported: record the host key itself)"
          if kh.has_ca_for(name) else "")
    decided = "it was not accepted" if on_unknown is not None else "refusing to connect"
    raise UnknownHostKeyError(
        f"the host key of {name} is not known ({decided}): {display_type(ktype)} key {fp}{ca}.\n"
        f"Check this fingerprint with the cluster's admins, then record it with: {hint}\n"
        f"(known_hosts files read: {', '.join(hop.known_hosts_files + hop.global_known_hosts_files)})", **kw)


def _load_key(path: str, tried: list):
    import paramiko

    try:
        key = paramiko.PKey.from_path(path)
    except FileNotFoundError:
        tried.append(f"{path}: no such file")
        return None
    except paramiko.PasswordRequiredException:
        tried.append(f"{path}: passphrase-protected, not used (add it to ssh-agent: ssh-add {path})")
        return None
    except TypeError as e:  # cryptography: "Password was not given but private key is encrypted"
        if "password" in str(e).lower() or "encrypted" in str(e).lower():
            tried.append(f"{path}: passphrase-protected, not used (add it to ssh-agent: ssh-add {path})")
        else:
            tried.append(f"{path}: cannot read it ({type(e).__name__})")
        return None
    except (paramiko.SSHException, ValueError, OSError) as e:
        tried.append(f"{path}: cannot read it as a private key ({type(e).__name__})")
        return None
    return key


def _key_desc(key, where: str) -> str:
    return f"{where} ({display_type(key.get_name())} {fingerprint(key.asbytes())})"


def _pub_blob(path: str) -> Optional[bytes]:
    import base64

    try:
        with open(path + ".pub") as f:
            return base64.b64decode(f.read().split()[1])
    except (OSError, IndexError, ValueError):
        return None


def _authenticate(t, hop: Hop) -> None:
    """Public keys only. Never a password, never keyboard-interactive."""
    import paramiko

    tried: list = []

    def attempt(key, desc: str) -> bool:
        try:
            remaining = t.auth_publickey(hop.user, key)
        except paramiko.BadAuthenticationType as e:
            raise AuthenticationError(hop, tried, "the server does not accept public keys (it allows: "
                                      f"{', '.join(e.allowed_types)})") from None
        except paramiko.AuthenticationException:
            tried.append(f"{desc}: rejected")
            return False
        except (paramiko.SSHException, EOFError, OSError) as e:
            tried.append(f"{desc}: {e or type(e).__name__}")
            if not t.is_active():
                raise AuthenticationError(hop, tried, "the server closed the connection during authentication "
                                          "(too many keys offered? see its MaxAuthTries)") from None
            return False
        if remaining:
            raise AuthenticationError(hop, tried + [f"{desc}: accepted"], "the server also requires "
                                      f"{', '.join(remaining)}; launcher does not do interactive authentication")
        log.debug("authenticated to %s with %s", hop.label, desc)
        return True

    files = list(hop.identity_files)
    for path in files:
        key = _load_key(path, tried)
        if key is not None and attempt(key, _key_desc(key, path)):
            return
    if hop.use_agent:
        wanted = {b for b in (_pub_blob(p) for p in files) if b} if hop.identities_only else None
        try:
            agent = paramiko.Agent()
        except Exception as e:  # a stale SSH_AUTH_SOCK
            tried.append(f"ssh-agent: unavailable ({e})")
            agent = None
        if agent is not None:
            try:
                for key in agent.get_keys():
                    if wanted is not None and key.asbytes() not in wanted:
                        continue
                    if attempt(key, _key_desc(key, f"agent key {getattr(key, 'comment', '') or ''}".strip())):
                        return
            finally:
                agent.close()
    if not files:
        for path in DEFAULT_IDENTITIES:
            path = os.path.expanduser(path)
            if os.path.exists(path):
                key = _load_key(path, tried)
                if key is not None and attempt(key, _key_desc(key, path)):
                    return
    raise AuthenticationError(hop, tried, "no key was accepted" if tried else "no key to offer")


def _open_route(route: Route, hint: str, *, on_unknown=None, auth_last: bool = True,
                seen: Optional[list] = None) -> list:
    """Connect hop by hop (the next one through a direct-tcpip channel of the previous),
    verifying each host key and authenticating. Returns the transports, last = target."""
    transports: list = []
    current = None
    try:
        for i, hop in enumerate(route.hops):
            last = i == len(route.hops) - 1
            sock = _tcp_socket(hop) if i == 0 else _jump_channel(transports[-1], route.hops[i - 1], hop)
            current = sock
            t, kh = _handshake(hop, sock)
            current = t
            info = _verify(hop, kh, t.get_remote_server_key(), hint, on_unknown)
            if seen is not None:
                seen.append(info)
            if last and not auth_last:
                t.close()
                break
            _authenticate(t, hop)
            if hop.keepalive:
                t.set_keepalive(max(1, int(hop.keepalive)))
            transports.append(t)
            current = None
        return transports
    except BaseException:
        if current is not None:
            try:
                current.close()
            except Exception:
                pass
        for t in reversed(transports):
            t.close()
        raise


# --------------------------------------------------------------------------- the pool

class _Connection:
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
            self.transports = _open_route(self.route, self.hint)
            self.connects += 1
            log.debug("connected to %s in %.0f ms (connection #%d)", self.route.describe(),
                      (time.monotonic() - start) * 1000, self.connects)
            return self.transports[-1]

    def drop_shell(self, sh: _Shell) -> None:
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

    def sftp_client(self):
        """The connection's SFTP session (opened once), or None if the server has no SFTP."""
        import paramiko

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


class _ShellUnavailable(Exception):
    """No persistent shell for this command: run it through an exec channel instead."""


class _ShellDied(Exception):
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


class _Shell:
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
        socket.timeout at the deadline, _ShellDied when the channel ends first."""
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
                raise _ShellDied(parser.started)
            left = deadline - time.monotonic()
            if left <= 0:
                raise socket.timeout()
            select.select([fd], [], [], left)
        self.commands += 1
        return parser.result()


_POOL: dict = {}
_POOL_LOCK = threading.Lock()
_ATEXIT = []


def _acquire(route: Route, hint: str) -> _Connection:
    with _POOL_LOCK:
        conn = _POOL.get(route.pool_key)
        if conn is None:
            conn = _POOL[route.pool_key] = _Connection(route, hint)
            if not _ATEXIT:
                atexit.register(close_all)
                _ATEXIT.append(True)
        conn.refs += 1
        return conn


def _release(conn: _Connection) -> None:
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


# --------------------------------------------------------------------------- the runner

_TREE_SCRIPT = r"""
dest=$1 tmp=$2 old=$3
command -v tar >/dev/null 2>&1 || { echo "tar: not found" >&2; exit 127; }
mkdir -p -- "$tmp" || exit 3
if ! tar -x -f - -C "$tmp" --no-same-owner; then rm -rf -- "$tmp"; exit 3; fi
if [ -e "$dest" ] || [ -L "$dest" ]; then mv -- "$dest" "$old" || { rm -rf -- "$tmp"; exit 4; }; fi
mv -- "$tmp" "$dest" || exit 4
rm -rf -- "$old"
"""

_PUT_SCRIPT = r"""
tmp=$1 dest=$2 mode=$3
mkdir -p -- "$(dirname -- "$dest")" || exit 3
umask 077
if ! cat > "$tmp"; then rm -f -- "$tmp"; exit 3; fi
chmod "$mode" "$tmp" && mv -f -- "$tmp" "$dest" || { rm -f -- "$tmp"; exit 4; }
"""

_FULL_MARKERS = ("No space left on device", "Disk quota exceeded", "quota exceeded")


class SSHRunner:
    """Runs commands on a remote host over SSH; see the module docstring.

    ``SSHRunner(options, target_name=None)``: ``options`` is an ``SSHOptions`` or
    anything ``SSHOptions.from_target`` takes (a target's raw dict, a pydantic
    target_options model, a ``Target``). ``target_name`` only improves the hints in
    errors (``launcher targets trust NAME``). Nothing connects until the first
    command; ``close()`` gives the shared connection back (it closes when its last
    runner does).
    """

    def __init__(self, options: Any, *, target_name: Optional[str] = None):
        self.options = options if isinstance(options, SSHOptions) else SSHOptions.from_target(options)
        self.target_name = target_name
        self._route: Optional[Route] = None
        self._conn: Optional[_Connection] = None
        self._lock = threading.Lock()
        self.commands = 0

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
        return f"launcher targets trust {shlex.quote(self.target_name) if self.target_name else 'TARGET'}"

    @property
    def connects(self) -> int:
        """SSH handshakes this runner's shared connection has made (1 when all went well)."""
        return self._conn.connects if self._conn else 0

    def _connection(self) -> _Connection:
        with self._lock:
            if self._conn is None:
                self._conn = _acquire(self.route, self.trust_hint)
            return self._conn

    def connect(self) -> None:
        """Connect now (verifying the host key and authenticating) instead of at the first command."""
        self._connection().transport()

    def close(self) -> None:
        with self._lock:
            conn, self._conn = self._conn, None
        if conn is not None:
            _release(conn)

    # -- commands

    def run(self, argv: Sequence[str], input: Optional[str] = None, timeout: float = 60,
            check: bool = True, env: Optional[dict] = None) -> Result:
        argv = [str(a) for a in argv]
        if not argv:
            raise ValueError("empty argv")
        merged = {**self.options.env, **(env or {})}
        log.debug("run on %s: %s%s", self.where, _shown(argv),
                  f" (env: {', '.join(sorted(merged))})" if merged else "")
        data = input.encode() if isinstance(input, str) else input
        rc, out_b, err_b = self._run_line(remote_command(argv, merged), data or None, timeout, argv)
        out, err = out_b.decode("utf-8", "replace"), err_b.decode("utf-8", "replace")
        self.commands += 1
        if rc == 127 and argv[0] in err and ("not found" in err or "No such file" in err):
            raise RemoteCommandNotFound(argv, rc, out, err, self.where, SLURM_PROGRAMS.get(argv[0], "it"))
        if check and rc != 0:
            raise CommandError(argv, rc, out, err, self.where)
        return Result(tuple(argv), rc, out, err)

    def _open_session(self, conn: _Connection, deadline: float):
        """A new channel on the shared connection. A pooled connection found dead is
        replaced once: nothing was sent yet, so this never runs a command twice."""
        import paramiko

        for attempt in (1, 2):
            t = conn.transport()
            try:
                return t.open_session(timeout=max(1.0, deadline - time.monotonic()))
            except paramiko.ChannelException as e:  # MaxSessions and the like: the connection is fine
                raise HostUnreachableError(f"{self.where} refused a new session: {e.text or e}") from None
            except (paramiko.SSHException, EOFError, OSError) as e:
                conn.invalidate(t)
                if attempt == 2:
                    raise HostUnreachableError(f"connection to {self.where} lost before the command "
                                               f"was sent: {e or type(e).__name__}") from None
                log.info("pooled connection to %s is dead (%s); reconnecting", self.where, e or type(e).__name__)

    # -- persistent shells

    def _run_line(self, cmdline: str, data: Optional[bytes], timeout: float, argv) -> tuple[int, bytes, bytes]:
        """A command line through a persistent shell when possible, else an exec channel."""
        if self.options.ssh_shell == "persistent" and (
                data is None or (len(data) <= MAX_SHELL_INPUT and b"\0" not in data)):
            try:
                return self._shell_exec(cmdline, data, timeout, argv)
            except _ShellUnavailable:
                pass
        return self._exec(cmdline, io.BytesIO(data) if data else None, timeout, argv)

    def _shell_exec(self, cmdline: str, data: Optional[bytes], timeout: float, argv) -> tuple[int, bytes, bytes]:
        import paramiko

        conn = self._connection()
        for attempt in (1, 2):
            sh = self._take_shell(conn, time.monotonic() + timeout, argv)
            deadline = time.monotonic() + timeout
            ok = False
            try:
                try:
                    result = sh.run(cmdline, data, deadline)
                except socket.timeout:
                    raise RemoteCommandTimeout(f"command timed out after {timeout:g}s on {self.where}: "
                                               f"{_shown(argv)} (its shell was closed)") from None
                except _ShellDied as e:
                    if sh.transport.is_active() and not e.started and attempt == 1:
                        # an idle shell ended (the site reaps idle processes?): nothing ran, retry once
                        log.info("persistent shell on %s had ended; starting another", self.where)
                        continue
                    self._shell_lost(conn, sh, argv, e)
                except (FrameError, paramiko.SSHException, EOFError, OSError) as e:
                    self._shell_lost(conn, sh, argv, e)
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

    def _shell_lost(self, conn: _Connection, sh: _Shell, argv, e: BaseException):
        if not sh.transport.is_active():
            conn.invalidate(sh.transport)
            raise ConnectionLostError(f"connection to {self.where} lost while running {_shown(argv)}: "
                                      "it may or may not have run") from None
        raise ConnectionLostError(f"the remote shell on {self.where} ended while running {_shown(argv)} "
                                  f"({e or type(e).__name__}): it may or may not have run") from None

    def _take_shell(self, conn: _Connection, deadline: float, argv) -> _Shell:
        """An idle shell of the connection, a new one, or (all busy) the next one freed."""
        while True:
            with conn.shell_cond:
                if conn.shell_broken:
                    raise _ShellUnavailable(conn.shell_broken)
                while conn.shells:
                    sh = conn.shells.pop()
                    if sh.alive and conn.transports and sh.transport is conn.transports[-1]:
                        return sh
                    conn.shells_live -= 1  # dead (reconnected since, or closed by the server)
                    sh.close()
                    conn.sessions.release()
                if conn.shells_live < MAX_SHELLS:
                    if not conn.sessions.acquire(blocking=False):
                        raise _ShellUnavailable("no free session")  # exec waits for one
                    conn.shells_live += 1
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    raise RemoteCommandTimeout(f"no free shell on {self.where} within the timeout: {_shown(argv)}")
                conn.shell_cond.wait(left)
        try:
            return self._start_shell(conn)
        except BaseException:
            with conn.shell_cond:
                conn.shells_live -= 1
                conn.shell_cond.notify()
            conn.sessions.release()
            raise

    def _start_shell(self, conn: _Connection) -> _Shell:
        """``bash --noprofile --norc`` on a new channel (the user's login shell runs once,
        to start it: its noise lands before the first frame), then the login environment
        of ``bash -l`` captured and exported in it once."""
        import paramiko

        deadline = time.monotonic() + SHELL_START_TIMEOUT
        chan = self._open_session(conn, deadline)
        t = chan.get_transport()
        try:
            chan.exec_command("exec bash --noprofile --norc")
        except (paramiko.SSHException, EOFError, OSError) as e:
            chan.close()
            raise HostUnreachableError(f"connection to {self.where} lost before the command was sent: "
                                       f"{e or type(e).__name__}") from None
        sh = _Shell(chan, t)
        start = time.monotonic()
        try:
            # dotfiles may export SHELLOPTS (xtrace, errexit): never echo stdin (secrets) or env
            # values, and a failing command must not end the shell
            sh.run("set +o xtrace +o verbose +o errexit +o nounset", None, deadline, subshell=False)
            rc, env0, _ = sh.run(CAPTURE_LOGIN_ENV, None, deadline)
            if rc == 0:
                rc2, _, err = sh.run(login_env_exports(env0), None, deadline, subshell=False)
                if rc2 != 0:
                    log.info("login environment of %s not applied: %s", self.where, err[-200:])
            else:
                log.info("login environment of %s not captured (bash -l exited %d)", self.where, rc)
        except (socket.timeout, _ShellDied, FrameError, paramiko.SSHException, EOFError, OSError) as e:
            sh.close()
            if not t.is_active():
                conn.invalidate(t)
                raise HostUnreachableError(f"connection to {self.where} lost while starting a shell: "
                                           f"{e or type(e).__name__}") from None
            why = "timed out" if isinstance(e, socket.timeout) else f"failed ({type(e).__name__} {e})"
            with conn.shell_cond:
                conn.shell_broken = f"a persistent shell on {self.where} {why}"
            log.warning("%s: running each command on its own channel instead", conn.shell_broken)
            raise _ShellUnavailable(conn.shell_broken) from None
        conn.shell_starts += 1
        log.debug("persistent shell #%d on %s ready in %.0f ms", conn.shell_starts, self.where,
                  (time.monotonic() - start) * 1000)
        return sh

    # -- exec channels

    def _exec(self, command: str, source, timeout: float, argv: Sequence[str]) -> tuple[int, bytes, bytes]:
        """Run a command line on its own channel, framed (``sh -c SCRIPT``: the login
        shell's noise falls outside the frame); ``source`` (a binary file object or None)
        feeds stdin."""
        import paramiko

        frame = Frame.new()
        command = "sh -c " + shlex.quote(frame.exec_script(command))
        deadline = time.monotonic() + timeout
        conn = self._connection()
        if not conn.sessions.acquire(timeout=max(0.0, deadline - time.monotonic())):
            raise RemoteCommandTimeout(f"no free session on {self.where} within {timeout:g}s: {_shown(argv)}")
        try:
            chan = self._open_session(conn, deadline)
            try:
                try:
                    chan.exec_command(command)
                except (paramiko.SSHException, EOFError, OSError) as e:
                    # the request may have reached sshd before the connection died
                    raise ConnectionLostError(f"connection to {self.where} lost while starting "
                                              f"{_shown(argv)}: {e or type(e).__name__}") from None
                rc, out, err = self._exchange(chan, source, deadline, timeout, argv)
            finally:
                chan.close()
        finally:
            conn.sessions.release()
        parser = FrameParser(frame)
        try:
            parser.feed_stdout(out)
            parser.feed_stderr(err)
        except FrameError:
            pass
        if parser.done:
            return parser.result()
        if not parser.started:  # the login shell failed before our script ran (no `sh`?): all it said
            return (rc if rc != 0 else -1), b"", err
        # no complete frame: the shell died (a signal) before printing it
        inside_out, inside_err = parser.partial()
        note = b"\n(no exit status: the remote command was killed by a signal)" if rc == -1 else b""
        return (rc if rc != 0 else -1), inside_out, inside_err + note

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
                raise RemoteCommandTimeout(f"command timed out after {timeout:g}s on {self.where}: {_shown(argv)}")
            if not busy:
                select.select([fd], [], [], min(left, 0.002 if sending else left))
        left = deadline - time.monotonic()
        if not chan.status_event.wait(max(0.0, left)):
            raise RemoteCommandTimeout(f"no exit status within {timeout:g}s on {self.where}: {_shown(argv)}")
        if chan.exit_status == -1 and not chan.get_transport().is_active():
            raise ConnectionLostError(f"connection to {self.where} lost while running {_shown(argv)}: "
                                      "it may or may not have run")
        return chan.exit_status, bytes(out), bytes(err)

    # -- files

    def put_file(self, path: str, content: bytes, mode: int = 0o644) -> None:
        """Write ``content`` to ``path`` on the remote host atomically: SFTP to a temp
        name in the same directory, chmod, then posix-rename over the target. Parent
        directories are created. ``~/`` means the login user's home."""
        if isinstance(content, str):
            content = content.encode()
        path = _remote_path(path)
        conn = self._connection()
        sftp = conn.sftp_client()
        if sftp is None:
            return self._put_file_shell(path, content, mode)
        import paramiko

        d, base = posixpath.split(path)
        tmp = posixpath.join(d, f".{base}.tmp-{uuid.uuid4().hex[:12]}")
        log.debug("put_file %s:%s (%d bytes, mode %o)", self.where, path, len(content), mode)
        with conn.sftp_lock:
            try:
                if d:
                    self._sftp_makedirs(sftp, d)
                try:
                    with sftp.open(tmp, "wb") as f:
                        sftp.chmod(tmp, mode)  # before any byte lands: secrets are never world-readable
                        f.set_pipelined(True)
                        f.write(content)
                        # paramiko's close() checks pipelined replies *before* flushing its buffer and
                        # ignores errors of the close itself: flush first so close() sees every write
                        f.flush()
                    size = sftp.stat(tmp).st_size
                    if size != len(content):
                        raise IOError(f"{tmp}: {size} of {len(content)} bytes written")
                    sftp.posix_rename(tmp, path)
                except IOError:
                    try:
                        sftp.remove(tmp)
                    except (IOError, paramiko.SSHException, EOFError):
                        pass
                    raise
            except OSError as e:  # SFTP status errors are IOErrors; so are socket errors
                alive = bool(conn.transports) and conn.transports[-1].is_active()
                if alive and not isinstance(e, (socket.timeout, ConnectionError)):
                    # SFTP says only "Failure" for ENOSPC/EDQUOT (no errno): then df decides
                    raise self._staging_error(f"writing {path}", d, len(content), e,
                                              unexplained=e.errno is None) from None
                self._lost(conn, f"writing {path}", e)
            except (paramiko.SSHException, EOFError) as e:
                self._lost(conn, f"writing {path}", e)

    def _lost(self, conn: _Connection, what: str, e: BaseException):
        conn.invalidate(conn.transports[-1] if conn.transports else None)
        conn.sftp = None
        raise ConnectionLostError(f"connection to {self.where} lost while {what}: {e or type(e).__name__}") from None

    @staticmethod
    def _sftp_makedirs(sftp, d: str) -> None:
        parts, cur = [p for p in d.split("/") if p], "/" if d.startswith("/") else ""
        for p in parts:
            cur = posixpath.join(cur, p) if cur else p
            try:
                sftp.stat(cur)
            except FileNotFoundError:
                try:
                    sftp.mkdir(cur)
                except IOError:
                    sftp.stat(cur)  # made meanwhile by someone else: fine; else raise

    def _put_file_shell(self, path: str, content: bytes, mode: int) -> None:
        d, base = posixpath.split(path)
        tmp = posixpath.join(d, f".{base}.tmp-{uuid.uuid4().hex[:12]}")
        argv = ["sh", "-c", _PUT_SCRIPT, "sh", tmp, path, format(mode, "o")]
        rc, _, err = self._exec(remote_command(argv), io.BytesIO(content), 300, ["put_file", path])
        if rc:
            raise self._staging_error(f"writing {path}", d, len(content), err.decode("utf-8", "replace"))

    def _staging_error(self, what: str, directory: str, need: int, detail, unexplained: bool = False) -> SSHError:
        text = str(detail).strip()
        full = [line for line in text.splitlines() if any(m in line for m in _FULL_MARKERS)]
        if full:
            return RemoteDiskFullError(f"{what} on {self.where} failed: the remote disk is full or over quota "
                                       f"({full[0].strip()})")
        if not unexplained:
            return StagingError(f"{what} on {self.where} failed: {text}")
        free = self._free_kib(directory)
        if free is not None and free * 1024 < need:
            return RemoteDiskFullError(f"{what} on {self.where} failed: the remote disk is full "
                                       f"({free} KiB free in {directory or '~'}, {need} bytes needed)")
        return StagingError(f"{what} on {self.where} failed: {text} (the SFTP server gives no reason: "
                            "a path that is not a directory, or an exceeded disk quota?)")

    def _free_kib(self, directory: str) -> Optional[int]:
        try:
            r = self.run(["df", "-Pk", directory or "."], timeout=30, check=False)
            return int(r.stdout.strip().splitlines()[-1].split()[3])
        except (LauncherError, ValueError, IndexError):
            return None

    def put_tree(self, local_dir: str, remote_dir: str, *, exclude: Sequence[str] = (),
                 timeout: float = 600) -> TreeStats:
        """Copy a local directory to ``remote_dir`` as one tar stream (one round trip,
        whatever the number of files), extracted into a temp dir beside it and renamed
        into place: a job never sees a half-copied workdir. An existing ``remote_dir``
        is replaced whole (moved aside, then deleted). ``exclude``: fnmatch patterns
        matched against each relative path and each name (".git", "*.pyc", "data/*").
        Modes and mtimes are kept; owners are not; symlinks are copied as links."""
        local_dir = os.path.abspath(os.path.expanduser(local_dir))
        if not os.path.isdir(local_dir):
            raise StagingError(f"put_tree: {local_dir} is not a directory")
        remote_dir = _remote_path(remote_dir).rstrip("/")
        if remote_dir in ("", ".", ".."):
            raise StagingError(f"put_tree: refusing to replace {remote_dir or '/'!r}")
        parent, name = posixpath.split(remote_dir)
        tag = uuid.uuid4().hex[:12]
        tmp = posixpath.join(parent, f".{name}.tmp-{tag}")
        old = posixpath.join(parent, f".{name}.old-{tag}")
        with tempfile.TemporaryFile() as spool:
            files = _write_tar(local_dir, spool, exclude)
            size = spool.tell()
            spool.seek(0)
            log.debug("put_tree %s -> %s:%s (%d files, %d bytes)", local_dir, self.where, remote_dir, files, size)
            argv = ["sh", "-c", _TREE_SCRIPT, "sh", remote_dir, tmp, old]
            rc, _, err_b = self._exec(remote_command(argv), spool, timeout, ["put_tree", remote_dir])
        err = err_b.decode("utf-8", "replace")
        if rc == 127:
            raise RemoteCommandNotFound(["tar"], rc, "", err, self.where)
        if rc:
            raise self._staging_error(f"staging {local_dir} to {remote_dir}", parent, size, err)
        return TreeStats(files=files, bytes=size)


def _excluded(rel: str, patterns: Sequence[str]) -> bool:
    base = posixpath.basename(rel)
    return any(fnmatch(rel, p) or fnmatch(base, p) for p in patterns)


def _write_tar(root: str, fileobj, exclude: Sequence[str]) -> int:
    count = 0

    def keep(ti: tarfile.TarInfo):
        nonlocal count
        rel = ti.name[2:] if ti.name.startswith("./") else ("" if ti.name == "." else ti.name)
        if rel and _excluded(rel, exclude):
            return None
        ti.uid = ti.gid = 0
        ti.uname = ti.gname = ""
        if ti.isfile():
            count += 1
        return ti

    with tarfile.open(fileobj=fileobj, mode="w", format=tarfile.PAX_FORMAT) as tar:
        tar.add(root, arcname=".", filter=keep)
    return count


# --------------------------------------------------------------------------- trust and factory

def trust_host_keys(options: Any, confirm: Callable[[HostKeyInfo], bool], *,
                    target_name: Optional[str] = None) -> list[HostKeyInfo]:
    """Connect to every hop of a target's route and record each unknown host key that
    ``confirm`` accepts (jump hosts first: reaching the next hop needs them). A changed
    key raises HostKeyChangedError and is never replaced. Returns one HostKeyInfo per
    hop, status "known" or "recorded"."""
    opts = options if isinstance(options, SSHOptions) else SSHOptions.from_target(options)
    route = resolve(opts)
    hint = f"launcher targets trust {shlex.quote(target_name) if target_name else 'TARGET'}"
    seen: list = []
    for t in reversed(_open_route(route, hint, on_unknown=confirm, auth_last=False, seen=seen)):
        t.close()
    return seen


def runner_for_target(target_name: str, options: Any, env: Optional[dict] = None) -> SSHRunner:
    """The Slurm backend's entry point: an SSHRunner for a target's ``ssh_*`` options (its
    pydantic target_options model, a raw dict or a ``Target``), with ``env`` (e.g.
    SLURM_CONF) set for every remote command on top of the options' own ``env``."""
    opts = options if isinstance(options, SSHOptions) else SSHOptions.from_target(options)
    if env:
        opts = replace(opts, env={**opts.env, **env})
    return SSHRunner(opts, target_name=target_name)


def make_runner(options: Any, *, target_name: Optional[str] = None, env: Optional[dict] = None):
    """The runner a target's options ask for: SSHRunner when ``ssh_host`` is set, else a
    LocalRunner with ``env``. ``options``: a raw target dict, a pydantic target_options
    model or a ``Target``."""
    get = options.opt if hasattr(options, "opt") else (
        options.get if isinstance(options, dict) else lambda k, d=None: getattr(options, k, d))
    if get("ssh_host", None):
        return SSHRunner(options, target_name=target_name)
    return LocalRunner(env=env if env is not None else (get("env", None) or {}))
