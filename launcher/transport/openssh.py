"""The Runner protocol over the system's OpenSSH client (``transport: openssh``).

For clusters whose login wants more than a key (a TOTP code, a push, a password):
paramiko can neither join a connection the user opened nor answer such a prompt, the
system ``ssh`` can do both.

- ``launcher targets login NAME`` (``OpenSSHRunner.login``) runs ``ssh -f -N`` with
  ``ControlMaster=yes`` in the user's terminal: they answer the prompts once, and the
  master stays in the background on THIS machine (``ControlPersist``: the SSH config's
  value, else the target's ``ssh_control_persist``, 8h). A socket whose master died is
  removed first (``stale_socket`` says when); an ssh that logged in but could not become
  the master is killed by PID (a failed login leaves no ssh behind).
- Every other command runs ``ssh -o BatchMode=yes -o ControlMaster=no``: it goes through
  the master's socket and never prompts. With no master (never opened, expired, closed)
  ssh tries a direct login; on an MFA host that fails at once, and the error is one line
  saying to run ``launcher targets login NAME`` (``classify``). A command never becomes a
  master itself (a backgrounded master would hold our pipes open).
- The user's ``~/.ssh/config`` applies as ssh applies it (ProxyJump, ControlPath,
  ControlPersist, Match...); host keys are checked by ssh against known_hosts, as ssh
  does (never StrictHostKeyChecking=no). The target's ``ssh_*`` keys are passed as
  ``-p``/``-l``/``-i``/``-o`` and win, as on ssh's command line. ``ssh -G`` says what
  the config resolves to (``merge``): a ControlPath set there is used; else the
  launcher's own, ``$LAUNCHER_HOME/ssh/<hash>``, or under /tmp when that path would
  not fit a Unix socket's ~104 bytes.
- Output is framed as over paramiko (``frame``); commands go through up to
  ``MAX_SHELLS`` long-lived ``bash --noprofile --norc`` per runner, each one ``ssh``
  process over the master (``ssh_shell: persistent``), or one ``ssh`` each
  (``exec``, large stdin, all shells busy). Binary stdin is sent in-band as base64.
- Nothing runs on the login node once the launcher is done: a shell's bash ends when
  its ssh process does (EOF on its stdin), and ``close`` ends them.

The pure parts (``base_options``, ``merge``, the argv builders, ``classify``) have unit
tests; ``tests/integration/test_openssh_mfa.py`` drives it against an sshd that wants a
key and a TOTP code.
"""

from __future__ import annotations

import atexit
import base64
import hashlib
import io
import logging
import os
import re
import select
import shlex
import signal
import socket
import stat
import subprocess
import tempfile
import threading
import time
import weakref
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence

from launcher.core.errors import ConfigError
from launcher.core.redact import redact_text
from launcher.transport import transfer
from launcher.transport.cmdline import shown
from launcher.transport.errors import (ConnectionLostError, HostKeyChangedError, HostNotFoundError,
                                       HostUnreachableError, NotLoggedInError, RemoteCommandTimeout, SSHError,
                                       UnknownHostKeyError)
from launcher.transport.frame import Frame, FrameError, FrameParser
from launcher.transport.remote import RemoteRunner, unframe
from launcher.transport.shell import ShellDied, fits_a_shell, prepare_shell, shell_start_timeout

log = logging.getLogger("launcher.ssh")  # the transport's one logger name

SSH = "ssh"
SOCKET_PATH_MAX = 104  # sun_path: 108 bytes on Linux, 104 on macOS and the BSDs (with its NUL)
MUX_TEMP_SUFFIX = 17  # ssh binds the master's socket as PATH.<16 random chars>, then renames it
MAX_SHELLS = 3
SSH_EXIT_ERROR = 255  # ssh's own failures (and a remote command's exit 255: the frame tells them apart)


# --------------------------------------------------------------------------- pure: argv

def _config_value(v: str) -> str:
    """A path as an ``-o Key=VALUE`` value: ``%`` escaped (ssh expands tokens in it), quoted
    when it has spaces."""
    if any(c in v for c in '"\n\r\0'):
        raise ConfigError(f"path {v!r}: quotes and line breaks cannot be passed to ssh")
    v = v.replace("%", "%%")
    return f'"{v}"' if any(c.isspace() for c in v) else v


def base_options(opts) -> list[str]:
    """ssh options for a target's ``ssh_*`` keys (an SSHOptions). Given keys win over the
    SSH config, as ssh's ``-p``/``-l``/``-i``/``-o`` do; unset ones leave the config alone."""
    args: list[str] = []
    if opts.ssh_config is not None:
        args += ["-F", os.path.expanduser(opts.ssh_config) if opts.ssh_config else "none"]
    if opts.ssh_port:
        args += ["-p", str(int(opts.ssh_port))]
    if opts.ssh_user:
        if opts.ssh_user.startswith("-") or any(c.isspace() for c in opts.ssh_user):
            raise ConfigError(f"ssh_user {opts.ssh_user!r}: a user name, without spaces and not starting with '-'")
        args += ["-l", opts.ssh_user]
    if opts.ssh_key:
        args += ["-i", os.path.expanduser(opts.ssh_key)]
    if opts.known_hosts:
        args += ["-o", "UserKnownHostsFile=" + _config_value(os.path.expanduser(opts.known_hosts))]
    if not opts.ssh_agent:
        args += ["-o", "IdentityAgent=none"]
    if opts.ssh_keepalive is not None:
        args += ["-o", f"ServerAliveInterval={int(opts.ssh_keepalive)}"]
    return args


def parse_ssh_g(text: str) -> dict:
    """``ssh -G``'s output (``key value`` lines) as a dict; repeated keys keep the first value
    (what ssh uses for single-valued options)."""
    out: dict = {}
    for line in text.splitlines():
        key, _, value = line.strip().partition(" ")
        if key and key.lower() not in out:
            out[key.lower()] = value.strip()
    return out


@dataclass(frozen=True)
class Plan:
    """How to reach a target with the system ssh: what ``merge`` made of the target's options
    and the SSH config (``ssh -G``)."""

    options: tuple  # ssh options before ``-- DEST``
    dest: str  # ssh_host as given (an alias of the SSH config, or a host name)
    where: str  # user@host[:port], as resolved
    control_path: str
    control_persist: str
    own_control_path: bool  # the launcher's default (its directory is ours to create)


def control_key(target: str, eff: Mapping[str, str]) -> str:
    """What a shared connection is for: the target and where ssh would go (a changed host,
    port, user or jump is another connection)."""
    return "\0".join([target, eff.get("user", ""), eff.get("hostname", ""), eff.get("port", ""),
                      eff.get("proxyjump", ""), eff.get("proxycommand", "")])


def default_control_path(home: str, key: str, uid: int, tmp: str = "/tmp") -> str:
    """The launcher's ControlPath for KEY: ``HOME/ssh/<16 hex>``, or ``TMP/launcher-UID/<16 hex>``
    when that would not fit a Unix socket path (with the suffix ssh adds while binding)."""
    name = hashlib.sha256(key.encode()).hexdigest()[:16]
    path = os.path.join(os.path.abspath(os.path.expanduser(home)), "ssh", name)
    if len(path.encode()) + MUX_TEMP_SUFFIX < SOCKET_PATH_MAX:
        return path
    return os.path.join(tmp, f"launcher-{uid}", name)


def merge(opts, eff: Mapping[str, str], *, target: str, home: str, uid: int, tmp: str = "/tmp") -> Plan:
    """The Plan for OPTS given EFF, ``ssh -G``'s view of the SSH config with OPTS applied.
    A ControlPath or ControlPersist of the SSH config wins; so does its ConnectTimeout."""
    options = base_options(opts)
    user_path = eff.get("controlpath", "none")
    own = user_path.lower() == "none"
    path = default_control_path(home, control_key(target, eff), uid, tmp) if own else user_path
    if own:
        options += ["-o", "ControlPath=" + _config_value(path)]
    persist = eff.get("controlpersist", "no")
    if persist.lower() in ("no", "false", ""):
        persist = opts.ssh_control_persist
    if eff.get("connecttimeout", "none").lower() == "none":
        options += ["-o", f"ConnectTimeout={max(1, round(opts.ssh_connect_timeout))}"]
    user, host, port = eff.get("user", "?"), eff.get("hostname", opts.ssh_host), eff.get("port", "22")
    where = f"{user}@{host}" + ("" if port == "22" else f":{port}")
    return Plan(tuple(options), opts.ssh_host, where, path, persist, own)


def command_argv(plan: Plan, remote: str) -> list[str]:
    """One command through the shared connection: never a prompt (BatchMode), never a master
    of its own, no tty, no forwardings of the SSH config."""
    return [SSH, *plan.options, "-o", "BatchMode=yes", "-o", "ControlMaster=no", "-o", "ClearAllForwardings=yes",
            "-T", "--", plan.dest, remote]


def login_argv(plan: Plan) -> list[str]:
    """The one interactive ssh: authenticates in the user's terminal (MFA prompts included), then
    stays in the background as the master (``-f -N``), for ControlPersist after its last use."""
    return [SSH, *plan.options, "-o", "ControlMaster=yes", "-o", f"ControlPersist={plan.control_persist}",
            "-o", "ClearAllForwardings=yes", "-f", "-N", "--", plan.dest]


def control_argv(plan: Plan, op: str) -> list[str]:
    """``ssh -O check|exit``: ask the master (never starts one)."""
    return [SSH, *plan.options, "-o", "BatchMode=yes", "-O", op, "--", plan.dest]


# --------------------------------------------------------------------------- pure: errors

_KEY_CHANGED = ("REMOTE HOST IDENTIFICATION HAS CHANGED", "POSSIBLE DNS SPOOFING", "REVOKED HOST KEY",
                "Host key for", "has changed and you have requested strict checking")
_NOT_LOGGED_IN = ("Permission denied", "Too many authentication failures", "Authentication failed",
                  "No more authentication methods", "keyboard-interactive")
_NOT_FOUND = ("Could not resolve hostname", "Name or service not known", "nodename nor servname")
_UNREACHABLE = ("Connection refused", "Connection timed out", "No route to host", "Network is unreachable",
                "Operation timed out", "kex_exchange_identification", "Connection reset by peer",
                "banner exchange", "Connection closed by", "UNKNOWN port")
_LOST = ("Broken pipe", "mux_client", "Control socket", "closed by remote host", "Timeout, server",
         "Connection to ", "client_loop")


def failure_kind(stderr: str, started: bool) -> str:
    """What STDERR says went wrong with an ssh that failed before (STARTED False) or while (True)
    running our command: a key in ``FAILURES``."""
    text = stderr or ""
    if any(m in text for m in _KEY_CHANGED):
        return "key_changed"
    if "Host key verification failed" in text:
        return "unknown_key"
    if any(m in text for m in _NOT_FOUND):
        return "not_found"
    if not started and any(m in text for m in _NOT_LOGGED_IN):
        return "not_logged_in"
    if not started and any(m in text for m in _UNREACHABLE):
        return "unreachable"
    if started or any(m in text for m in _LOST):
        return "lost"
    return "failed"


# {kind: (its error, its message)}; the message may name {where}, {name} (the target), {last}
# (the last line ssh said) and {rc}
FAILURES = {
    "key_changed": (HostKeyChangedError, "{where}: the host key does not match the one in known_hosts (ssh refused "
                                         "it: {last}); if the change is expected, remove the old entry "
                                         "(ssh-keygen -R HOST) and log in again"),
    "unknown_key": (UnknownHostKeyError, "{where}: the host key is not in known_hosts: run `launcher targets login "
                                         "{name}`, where ssh shows the key and asks ({last})"),
    "not_found": (HostNotFoundError, "{where}: the host name does not resolve ({last})"),
    "not_logged_in": (NotLoggedInError, "{where}: not logged in (no shared SSH connection, or it expired): "
                                        "run `launcher targets login {name}`"),
    "unreachable": (HostUnreachableError, "cannot reach {where}: {last}"),
    "lost": (ConnectionLostError, "connection to {where} lost: {last}; the command may or may not have run"),
    "failed": (SSHError, "ssh to {where} failed (exit {rc}): {last}"),
}


def classify(rc: int, stderr: str, *, target: Optional[str], where: str, started: bool = False) -> Exception:
    """The error for an ssh that failed with RC before (STARTED False) or while (True) running
    our command; STDERR is what ssh said. One line each, saying what to do."""
    said = [line.strip() for line in (stderr or "").splitlines() if line.strip()]
    last = redact_text(said[-1]) if said else f"ssh exited {rc}"
    error, message = FAILURES[failure_kind(stderr, started)]
    return error(message.format(where=where, name=target or "NAME", last=last, rc=rc))


def in_band(cmdline: str, data: Optional[bytes]) -> tuple[str, Optional[bytes]]:
    """A command line and its stdin as a persistent shell can take them: stdin with a NUL (or
    not UTF-8) goes base64-encoded, decoded on the far side."""
    if data is None or fits_a_shell(data) and _utf8(data):
        return cmdline, data
    return f"base64 -d | ( {cmdline} )", base64.encodebytes(data)


def _utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


# --------------------------------------------------------------------------- shells

class PipeShell:
    """A long-lived ``bash --noprofile --norc`` behind one ``ssh`` process (its pipes), fed
    framed commands; one command at a time."""

    def __init__(self, proc: subprocess.Popen):
        self.proc = proc
        self.commands = 0
        self.stderr_tail = b""  # the last 4 KiB of stderr: what ssh said when it ends
        os.set_blocking(proc.stdin.fileno(), False)

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        """EOF to the shell (it exits), then make sure the ssh process is gone."""
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(2)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for f in (self.proc.stdout, self.proc.stderr):
            f.close()

    def run(self, cmdline: str, data: Optional[bytes], deadline: float, *, subshell: bool = True
            ) -> tuple[int, bytes, bytes]:
        """One framed command; TimeoutError at the deadline, ShellDied when ssh ends first."""
        frame = Frame.new()
        parser = FrameParser(frame)
        head, tail = frame.shell_script(cmdline, None if data is None else len(data), subshell=subshell)
        pending = memoryview(head.encode() + (data or b"") + tail.encode())
        out_fd, err_fd, in_fd = self.proc.stdout.fileno(), self.proc.stderr.fileno(), self.proc.stdin.fileno()
        while not parser.done:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError()
            readable, writable, _ = select.select([out_fd, err_fd], [in_fd] if pending else [], [], left)
            if writable:
                try:
                    pending = pending[os.write(in_fd, pending[:65536]):]
                except BlockingIOError:
                    pass
                except OSError:  # EPIPE: ssh is gone (what it said goes into stderr_tail)
                    self._drain(err_fd)
                    raise ShellDied(parser.started) from None
            for fd in readable:
                chunk = os.read(fd, 65536)
                if not chunk:  # ssh is ending: what it said goes into stderr_tail
                    self._drain(err_fd)
                    raise ShellDied(parser.started)
                if fd == out_fd:
                    parser.feed_stdout(chunk)
                else:
                    self._note(chunk)
                    parser.feed_stderr(chunk)
        self.commands += 1
        return parser.result()

    def _note(self, chunk: bytes) -> None:
        self.stderr_tail = (self.stderr_tail + chunk)[-4096:]

    def _drain(self, err_fd: int) -> None:
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            return
        while select.select([err_fd], [], [], 0)[0]:
            chunk = os.read(err_fd, 65536)
            if not chunk:
                return
            self._note(chunk)


_RUNNERS: "weakref.WeakSet[OpenSSHRunner]" = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    for r in list(_RUNNERS):
        r.close()


# --------------------------------------------------------------------------- the runner

class OpenSSHRunner(RemoteRunner):
    """Runs commands on a login node through the system ssh and its shared connection.

    ``OpenSSHRunner(options, target_name=None, known_programs=None, home=None)``: as
    ``SSHRunner``; ``home`` is where the default ControlPath lives ($LAUNCHER_HOME)."""

    def __init__(self, options: Any, *, target_name: Optional[str] = None,
                 known_programs: Optional[Mapping[str, str]] = None, home: Optional[str] = None):
        super().__init__(options, target_name=target_name, known_programs=known_programs)
        self.home = str(home or os.environ.get("LAUNCHER_HOME")
                        or os.path.join(os.environ.get("XDG_STATE_HOME", "~/.local/state"), "launcher"))
        self._plan: Optional[Plan] = None
        self._lock = threading.Lock()
        self._shells: list = []  # idle
        self._live = 0
        self._broken: Optional[str] = None  # why shells cannot start (then: one ssh per command)
        self._pid = os.getpid()
        self.shell_starts = 0
        _RUNNERS.add(self)

    # -- identity

    @property
    def plan(self) -> Plan:
        if self._plan is None:
            argv = [SSH, "-G", *base_options(self.options), "--", self.options.ssh_host]
            try:
                p = subprocess.run(argv, capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
            except FileNotFoundError:
                raise ConfigError("transport: openssh needs the OpenSSH client (`ssh`) on PATH") from None
            if p.returncode != 0:
                said = (p.stderr.strip().splitlines() or [f"exit {p.returncode}"])[-1]
                raise ConfigError(f"target {self.target_name or self.options.ssh_host}: ssh cannot use these "
                                  f"SSH options or config: {said}")
            self._plan = merge(self.options, parse_ssh_g(p.stdout), target=self.target_name or "",
                               home=self.home, uid=os.getuid(), tmp=tempfile.gettempdir())
        return self._plan

    @property
    def where(self) -> str:
        return self.plan.where

    @property
    def control_path(self) -> str:
        return self.plan.control_path

    # -- the shared connection

    def _control(self, op: str) -> bool:
        """``ssh -O OP`` answered yes (the master is there, and did it)."""
        return self._control_said(op) is None

    def check(self) -> bool:
        """Whether the shared connection is up (``ssh -O check``)."""
        return self._control("check")

    def login(self) -> bool:
        """Open the shared connection in this terminal (the one place ssh may prompt). False when
        it was open already; SSHError when ssh fails or no master is left running. A socket left
        by a master that died is removed first (``stale_socket``); an ssh that logged in but could
        not become the master is killed by PID, so a failed try leaves no ssh behind."""
        said = self._control_said("check")
        if said is None:
            return False
        self._socket_dir()
        self._clear_stale(said)
        argv = login_argv(self.plan)
        before = set(_processes_with_argv(argv))
        rc = _run_nohup(argv)
        if rc != 0:
            _end_pids(set(_processes_with_argv(argv)) - before)
            raise SSHError(f"target {self.target_name}: ssh could not log in to {self.where} (exit {rc}; "
                           "what ssh said is above)")
        ok, said = self._control_run("check")
        master = master_pid(said) if ok else None
        stray = set(_processes_with_argv(argv)) - before - {master}
        _end_pids(stray)  # ssh that authenticated but found the socket taken: a plain connection, not a master
        if not ok:
            raise SSHError(f"target {self.target_name}: ssh logged in but could not become the shared connection "
                           f"at {self.control_path} ({_last_line(said)}; what ssh said is above): "
                           + ("something else holds that path: remove it, or"
                              if os.path.lexists(self.control_path) else "check that")
                           + " the SSH config does not say ControlMaster/ControlPath no")
        return True

    def _control_run(self, op: str) -> tuple[bool, str]:
        """``ssh -O OP``: (the master answered yes, what ssh said). A check counts only with ssh's
        "Master running (pid=N)": when the socket answers but is no ssh master, ssh falls back to
        a plain connection of its own, whose exit status says nothing about a master."""
        p = subprocess.run(control_argv(self.plan, op), capture_output=True, text=True, timeout=30,
                           stdin=subprocess.DEVNULL, start_new_session=True)
        said = p.stderr or p.stdout or f"exit {p.returncode}"
        return p.returncode == 0 and (op != "check" or master_pid(said) is not None), said

    def _control_said(self, op: str) -> Optional[str]:
        """``ssh -O OP``: None when the master answered yes, else what ssh said."""
        ok, said = self._control_run(op)
        return None if ok else said

    def _clear_stale(self, said: str) -> None:
        """Remove the control socket of a master that is gone (see ``stale_socket``); refuse, in one
        line, a ControlPath that holds something other than a socket."""
        path = self.control_path
        verdict = stale_socket(path, said, own=self.plan.own_control_path)
        if verdict == "stale":
            log.info("removing the stale SSH control socket %s (its master is gone)", path)
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
        elif verdict is not None:
            raise SSHError(f"target {self.target_name}: the SSH control path {path} {verdict}: "
                           "remove it (or set another ControlPath), then log in again")

    def logout(self) -> bool:
        """Close the shared connection (``ssh -O exit``); False when none was open."""
        return self._control("exit")

    def _socket_dir(self) -> None:
        """The launcher's own socket directory: created 0700, refused when someone else owns it."""
        if not self.plan.own_control_path:
            return
        d = os.path.dirname(self.control_path)
        os.makedirs(d, mode=0o700, exist_ok=True)
        st = os.stat(d)
        if st.st_uid != os.getuid() or st.st_mode & 0o077:
            raise ConfigError(f"{d}: the directory of the SSH control socket must be yours and private (0700)")

    def connect(self) -> None:
        """Fail now, with the one-line hint, when there is no usable connection."""
        self.run(["true"], timeout=self.options.ssh_connect_timeout + 15)

    # -- commands

    def _run_line(self, cmdline: str, data: Optional[bytes], timeout: float, argv) -> tuple[int, bytes, bytes]:
        if self.options.ssh_shell == "persistent":
            line, payload = in_band(cmdline, data)
            if fits_a_shell(payload):
                sh = self._take_shell(argv)
                if sh is not None:
                    return self._in_shell(sh, line, payload, timeout, argv)
        return self.exec_channel(cmdline, io.BytesIO(data) if data else None, timeout, argv)

    def exec_channel(self, command: str, source, timeout: float, argv: Sequence[str]) -> tuple[int, bytes, bytes]:
        """One ``ssh`` for one framed command; ``source`` (a binary file object or None) feeds
        its stdin (a real file is handed to ssh as is)."""
        frame = Frame.new()
        remote = "sh -c " + shlex.quote(frame.exec_script(command))
        fd_source = source is not None and _has_fileno(source)
        data = None if source is None or fd_source else source.read()
        p = subprocess.Popen(command_argv(self.plan, remote), stdin=source if fd_source else (
            subprocess.PIPE if data is not None else subprocess.DEVNULL), stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, start_new_session=True)  # no controlling tty: ssh can never prompt
        try:
            out, err = p.communicate(data, timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.communicate()
            raise RemoteCommandTimeout(f"command timed out after {timeout:g}s on {self.where}: "
                                       f"{shown(argv)}") from None
        except BaseException:
            p.kill()
            p.wait()
            raise
        rc = p.returncode
        started = frame.start in out or frame.start in err
        if rc == SSH_EXIT_ERROR and not (started and frame.end in out):
            raise classify(rc, err.decode("utf-8", "replace"), target=self.target_name, where=self.where,
                           started=started)
        return unframe(frame, rc, out, err)

    # -- persistent shells

    def _take_shell(self, argv) -> Optional[PipeShell]:
        """An idle shell, a new one, or None (all busy, or shells do not work here)."""
        with self._lock:
            if self._pid != os.getpid():  # forked: the parent's shells are the parent's
                self._shells, self._live, self._pid = [], 0, os.getpid()
            while self._shells:
                sh = self._shells.pop()
                if sh.alive:
                    return sh
                self._live -= 1
                sh.close()
            if self._broken or self._live >= MAX_SHELLS:
                return None
            self._live += 1
        try:
            return self._start_shell()
        except BaseException as e:
            with self._lock:
                self._live -= 1
            if isinstance(e, _NoShell):
                return None
            raise

    def _give_back(self, sh: PipeShell, ok: bool) -> None:
        with self._lock:
            if ok and sh.alive and self._pid == os.getpid():
                self._shells.append(sh)
                return
            self._live -= 1
        sh.close()

    def _start_shell(self) -> Optional[PipeShell]:
        self._socket_dir()
        proc = subprocess.Popen(command_argv(self.plan, "exec bash --noprofile --norc"), stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0,
                                start_new_session=True)  # no controlling tty: ssh can never prompt
        sh = PipeShell(proc)
        try:
            prepare_shell(sh, time.monotonic() + shell_start_timeout(), self.where)
        except ShellDied:
            sh.close()
            raise classify(proc.returncode, sh.stderr_tail.decode("utf-8", "replace"),
                           target=self.target_name, where=self.where) from None
        except (TimeoutError, FrameError, OSError) as e:
            sh.close()
            self._broken = f"a persistent shell on {self.where} failed ({type(e).__name__})"
            log.warning("%s: running each command with its own ssh instead", self._broken)
            raise _NoShell() from None
        self.shell_starts += 1
        return sh

    def _in_shell(self, sh: PipeShell, line: str, data: Optional[bytes], timeout: float, argv):
        ok = False
        try:
            result = sh.run(line, data, time.monotonic() + timeout)
            ok = True
            return result
        except TimeoutError:
            raise RemoteCommandTimeout(f"command timed out after {timeout:g}s on {self.where}: "
                                       f"{shown(argv)} (its shell was closed)") from None
        except ShellDied as e:
            sh.close()
            raise classify(sh.proc.returncode or SSH_EXIT_ERROR, sh.stderr_tail.decode("utf-8", "replace"),
                           target=self.target_name, where=self.where, started=e.started) from None
        finally:
            self._give_back(sh, ok)

    def close(self) -> None:
        with self._lock:
            shells, self._shells = self._shells, []
            self._live -= len(shells)
            mine = self._pid == os.getpid()
        for sh in shells if mine else ():
            sh.close()

    # -- files

    def put_file(self, path: str, content: bytes, mode: int = 0o644) -> None:
        """Write ``content`` to ``path`` on the login node atomically, through a shell (see
        transfer.put_file_by_command)."""
        transfer.put_file_by_command(self, path, content, mode,
                                     lambda line, data, argv: self._run_line(line, data, 300, argv))


def stale_socket(path: str, said: str, *, own: bool) -> Optional[str]:
    """What is at a ControlPath whose master did not answer ``ssh -O check`` (SAID: what ssh
    said): None (nothing there, or a socket that is not ours to judge), ``"stale"`` (a socket
    of ours that no master listens on any more: remove it), or why the path cannot be used.

    The launcher's own path (OWN, in its 0700 directory) is stale when connecting to it is
    refused. A ControlPath of the user's SSH config is removed only when ssh itself said so
    (``Control socket connect(PATH): Connection refused``: what ssh's ControlMaster=auto
    unlinks as stale too) and our own connect is refused as well, and the socket is ours (uid)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as e:
        return f"cannot be examined ({e.strerror})"
    if not stat.S_ISSOCK(st.st_mode):
        return "exists and is not a socket"
    if st.st_uid != os.getuid():
        return None  # someone else's: never ours to remove
    if not own and "Connection refused" not in (said or ""):
        return None
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(5)
    try:
        s.connect(path)
    except ConnectionRefusedError:
        return "stale"
    except OSError:
        return None
    finally:
        s.close()
    return None  # something listens: a live master busy elsewhere, or another program


def master_pid(said: str) -> Optional[int]:
    """The master's PID from ``ssh -O check``'s "Master running (pid=N)"."""
    m = re.search(r"\(pid=(\d+)\)", said or "")
    return int(m.group(1)) if m else None


def _last_line(text: str) -> str:
    lines = [l.strip() for l in (text or "").splitlines() if l.strip()]
    return redact_text(lines[-1]) if lines else "no answer"


def _processes_with_argv(argv: Sequence[str]) -> list[int]:
    """PIDs of this user's processes whose command line is exactly ARGV (Linux /proc; elsewhere
    none): how the ``ssh -f`` that ``login`` backgrounded is found (it forks and leaves our
    process group)."""
    want = b"\0".join(a.encode() for a in argv) + b"\0"
    found = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return found
    uid = os.getuid()
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            if os.stat(f"/proc/{entry}").st_uid != uid:
                continue
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                if f.read() == want:
                    found.append(int(entry))
        except OSError:
            continue
    return found


def _end_pids(pids, grace: float = 5.0) -> None:
    """SIGTERM each PID (ssh then ends its ProxyJump children), SIGKILL what is left after GRACE."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace
    left = set(pids)
    while left and time.monotonic() < deadline:
        left = {p for p in left if _alive(p)}
        time.sleep(0.05)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


def _run_nohup(argv: list) -> int:
    """ARGV in this terminal (ssh's prompts and the answers), with SIGHUP ignored as under
    ``nohup``: the master it leaves, and a ProxyJump's ``ssh -W`` that the master started while
    still in this terminal's process group, must outlive the terminal (ssh keeps an ignored
    SIGHUP ignored)."""
    if threading.current_thread() is not threading.main_thread():
        return subprocess.run(argv).returncode
    old = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        return subprocess.run(argv).returncode
    finally:
        signal.signal(signal.SIGHUP, old)


class _NoShell(Exception):
    pass


def _has_fileno(f) -> bool:
    try:
        f.fileno()
        return True
    except (OSError, AttributeError, io.UnsupportedOperation):
        return False
