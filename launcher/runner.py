"""One command-runner protocol: ``run(argv, input, timeout) -> Result``.

The Slurm backend talks to a cluster only through a runner: local subprocess on a
login node, SSH (paramiko, ``launcher.transport``) from a laptop, or a stateful fake in
unit tests. A failed command raises CommandError with argv, exit code and stderr.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from typing import Optional, Protocol, Sequence

from .errors import CommandError, TransientError
from .watchdog import WATCHDOG


@dataclass(frozen=True)
class Result:
    argv: tuple
    returncode: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0


class Runner(Protocol):
    where: str

    def run(self, argv: Sequence[str], input: Optional[str] = None, timeout: float = 60,
            check: bool = True, env: Optional[dict] = None) -> Result: ...

    def put_file(self, path: str, content: bytes, mode: int = 0o644) -> None:
        """Write a file on the runner's host atomically (tmp + rename), creating its directory."""

    def close(self) -> None: ...


class _Popen(subprocess.Popen):
    """A child whose deadline the shared watchdog enforces: waiting for its exit is then one
    blocking waitpid instead of Python's sleep-polling wait-with-timeout."""

    def wait(self, timeout=None):
        return super().wait(None if WATCHDOG.watching(self) else timeout)


def _run(argv: list, input: Optional[str], timeout: Optional[float], env: dict) -> tuple:
    """``subprocess.run(argv, input=, capture_output=True, text=True, timeout=, env=)``:
    (returncode, stdout, stderr); TimeoutExpired when the command outlives TIMEOUT (reading
    its output is bounded by communicate's own timeout, its exit by the watchdog)."""
    with _Popen(argv, stdin=subprocess.PIPE if input is not None else None, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, text=True, env=env) as p:
        if timeout is not None:
            WATCHDOG.watch(p, timeout)
        try:
            out, err = p.communicate(input, timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            raise
        except BaseException:
            p.kill()
            raise
        finally:
            killed = timeout is not None and WATCHDOG.unwatch(p)
        if killed:
            raise subprocess.TimeoutExpired(argv, timeout, out, err)
        return p.poll(), out, err


class LocalRunner:
    """Runs commands on this host. ``env`` extends (never replaces) the process env."""

    where = "localhost"

    def __init__(self, env: Optional[dict] = None):
        self.base_env = dict(env or {})

    def run(self, argv, input=None, timeout=60, check=True, env=None) -> Result:
        full_env = {**os.environ, **self.base_env, **(env or {})}
        try:
            code, out, err = _run(list(argv), input, timeout, full_env)
        except FileNotFoundError:
            raise CommandError(argv, 127, "", f"{argv[0]}: command not found on {self.where}", self.where) from None
        except subprocess.TimeoutExpired:
            raise TransientError(f"command timed out after {timeout:g}s on {self.where}: {' '.join(argv)}") from None
        r = Result(tuple(argv), code, out, err)
        if check and code != 0:
            raise CommandError(argv, code, out, err, self.where)
        return r

    def put_file(self, path: str, content: bytes, mode: int = 0o644) -> None:
        from .checkpoint.posix_io import write_atomic

        # atomic for readers (sbatch never sees half a script); not durable: a script lost
        # to a power cut is re-rendered, it is not data
        write_atomic(path, content, mode)

    def close(self) -> None:
        pass
