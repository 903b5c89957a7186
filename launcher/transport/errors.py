"""The transport's errors; each says what to do.

- ``HostUnreachableError``: transient; the command surely did not run.
- ``ConnectionLostError`` / ``RemoteCommandTimeout``: transient; the command may have run.
- ``UnknownHostKeyError``, ``HostKeyChangedError``, ``AuthenticationError``,
  ``HostNotFoundError``, ``NotLoggedInError``: a person has to fix them; retrying does not help.
- ``RemoteCommandNotFound`` (exit 127), ``RemoteDiskFullError``, ``StagingError``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from launcher.core.errors import CommandError, LauncherError, TransientError

if TYPE_CHECKING:
    from launcher.transport.sshconfig import Hop


class SSHError(LauncherError):
    """An SSH problem a user has to fix; retrying does not help."""


class HostKeyError(SSHError):
    def __init__(self, message: str, *, name: str = "", keytype: str = "", fingerprint: str = ""):
        super().__init__(message)
        self.name, self.keytype, self.fingerprint = name, keytype, fingerprint


class UnknownHostKeyError(HostKeyError):
    """The host's key is in no known_hosts file: refused until trusted."""


class HostKeyChangedError(HostKeyError):
    """The host offered a key other than the recorded one (or a revoked one): refused."""


class AuthenticationError(SSHError):
    def __init__(self, hop: Hop, tried: list, reason: str):
        self.tried = list(tried)
        lines = [f"SSH authentication as {hop.user} to {hop.hostname}:{hop.port} failed: {reason}"]
        lines += [f"  tried {t}" for t in tried] or ["  no key was offered"]
        lines.append("Set ssh_key (or IdentityFile in the SSH config) to a key listed in the remote "
                     "~/.ssh/authorized_keys, or load one into ssh-agent; launcher never uses passwords.")
        super().__init__("\n".join(lines))


class NotLoggedInError(SSHError):
    """transport: openssh: no shared connection (never opened, expired, or closed) and the
    host wants more than a key (MFA): a person runs ``launcher targets login NAME``."""


class HostNotFoundError(SSHError):
    """The host name does not resolve."""


class HostUnreachableError(TransientError):
    """Connecting failed (refused, timed out, handshake cut): the command surely did not run."""

    may_have_run = False


class ConnectionLostError(TransientError):
    """The connection died while a command was running: it may or may not have run."""

    may_have_run = True


class RemoteCommandTimeout(TransientError):
    """No answer within the timeout: the command may still be running."""

    may_have_run = True


class RemoteCommandNotFound(CommandError):
    """Exit 127: the program is not on the remote PATH of a non-interactive shell.
    ``what`` names the program in the hint ("Slurm's client"; "it" when nobody said)."""

    def __init__(self, argv, returncode, stdout, stderr, where, what: str = "it"):
        super().__init__(argv, returncode, stdout, stderr, where)
        prog = self.argv[0] if self.argv else "?"
        said = (stderr or "").strip().splitlines()
        self.args = (f"{prog} not found on {where}: is {what} installed / is PATH set in non-interactive shells?"
                     + (f" (exit 127: {said[-1]})" if said else " (exit 127)"),)


class RemoteDiskFullError(SSHError):
    """Staging failed because the remote file system is full (or the quota is exceeded)."""


class StagingError(SSHError):
    """Copying files to the remote host failed for another reason (permissions, paths)."""


def may_have_run(exc: BaseException) -> bool:
    """False only when the command surely did not start (the connection could not be made).
    For sbatch: False -> resubmit; True -> look for the dedupe token in the queue first."""
    return getattr(exc, "may_have_run", True)
