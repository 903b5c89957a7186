"""What every runner on the far side of an SSH connection shares, whichever client carries
it (paramiko's ``SSHRunner``, the system ssh's ``OpenSSHRunner``): ``run`` (argv quoted, env
in front, errors with hints), the unframing of one exec's output, and ``put_tree``.

A subclass brings ``where``, ``_run_line(cmdline, data, timeout, argv) -> (rc, out, err)``
and ``exec_channel(command, source, timeout, argv)`` (one framed command fed from a file).
"""

from __future__ import annotations

import logging
from typing import Any, Mapping, Optional, Sequence

from launcher.core.errors import CommandError
from launcher.transport import transfer
from launcher.transport.cmdline import remote_command, shown
from launcher.transport.errors import RemoteCommandNotFound
from launcher.transport.frame import Frame, FrameError, FrameParser
from launcher.transport.runner import Result
from launcher.transport.sshconfig import SSHOptions
from launcher.transport.transfer import TreeStats

log = logging.getLogger("launcher.ssh")  # the transport's one logger name


class RemoteRunner:
    """The Runner protocol (``launcher.transport.runner``) over SSH; see the module docstring."""

    where: str

    def __init__(self, options: Any, *, target_name: Optional[str] = None,
                 known_programs: Optional[Mapping[str, str]] = None):
        self.options = options if isinstance(options, SSHOptions) else SSHOptions.from_target(options)
        self.target_name = target_name
        self.known_programs = dict(known_programs or {})
        self.commands = 0

    def _run_line(self, cmdline: str, data: Optional[bytes], timeout: float, argv) -> tuple[int, bytes, bytes]:
        raise NotImplementedError

    def exec_channel(self, command: str, source, timeout: float, argv: Sequence[str]) -> tuple[int, bytes, bytes]:
        raise NotImplementedError

    def run(self, argv: Sequence[str], input: Optional[str] = None, timeout: float = 60,
            check: bool = True, env: Optional[dict] = None) -> Result:
        argv = [str(a) for a in argv]
        if not argv:
            raise ValueError("empty argv")
        merged = {**self.options.env, **(env or {})}
        log.debug("run on %s: %s%s", self.where, shown(argv),
                  f" (env: {', '.join(sorted(merged))})" if merged else "")
        data = input.encode() if isinstance(input, str) else input
        rc, out_b, err_b = self._run_line(remote_command(argv, merged), data or None, timeout, argv)
        out, err = out_b.decode("utf-8", "replace"), err_b.decode("utf-8", "replace")
        self.commands += 1
        if rc == 127 and argv[0] in err and ("not found" in err or "No such file" in err):
            raise RemoteCommandNotFound(argv, rc, out, err, self.where, self.known_programs.get(argv[0], "it"))
        if check and rc != 0:
            raise CommandError(argv, rc, out, err, self.where)
        return Result(tuple(argv), rc, out, err)

    def put_tree(self, local_dir: str, remote_dir: str, *, exclude: Sequence[str] = (),
                 timeout: float = 600) -> TreeStats:
        """Copy a local directory to ``remote_dir`` as one tar stream, renamed into place
        (see transfer.put_tree)."""
        return transfer.put_tree(self, local_dir, remote_dir, exclude=exclude, timeout=timeout)


def unframe(frame: Frame, rc: int, out: bytes, err: bytes) -> tuple[int, bytes, bytes]:
    """What one framed exec (``Frame.exec_script``) said: the command's exit code and the output
    inside the frame; ``rc`` is the exit status the channel (or the ssh client) reported."""
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
