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

from launcher.core.errors import CommandError, TransientError
from launcher.transport.watchdog import WATCHDOG
from launcher.checkpoint.posix_io import write_atomic


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


def _start(argv: list, input: Optional[str], timeout: Optional[float], env: dict) -> _Popen:
    """The child of ``_run``, started (its deadline counted from now); ``_finish`` waits for it."""
    p = _Popen(argv, stdin=subprocess.PIPE if input is not None else None, stdout=subprocess.PIPE,
               stderr=subprocess.PIPE, text=True, encoding="utf-8", errors="replace", env=env)
    # errors="replace": a scheduler's output that is not UTF-8 is read, never a UnicodeDecodeError
    if timeout is not None:
        WATCHDOG.watch(p, timeout)
    return p


def _finish(p: _Popen, input: Optional[str], timeout: Optional[float]) -> tuple:
    with p:
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
            raise subprocess.TimeoutExpired(p.args, timeout, out, err)
        return p.poll(), out, err


def _run(argv: list, input: Optional[str], timeout: Optional[float], env: dict) -> tuple:
    """``subprocess.run(argv, input=, capture_output=True, text=True, timeout=, env=)``:
    (returncode, stdout, stderr); TimeoutExpired when the command outlives TIMEOUT (reading
    its output is bounded by communicate's own timeout, its exit by the watchdog)."""
    return _finish(_start(argv, input, timeout, env), input, timeout)


class Started:
    """A command ``LocalRunner.start`` started: ``wait()`` gives what ``run`` would have
    returned (or raised); an interrupted wait kills the command, as an interrupted ``run`` does."""

    def __init__(self, runner: "LocalRunner", argv: list, p: _Popen, input: Optional[str],
                 timeout: Optional[float], check: bool):
        self._runner, self.argv, self._p, self._input, self._timeout, self._check = \
            runner, argv, p, input, timeout, check

    def wait(self) -> Result:
        return self._runner._result(self.argv, self._timeout, self._check,
                                    lambda: _finish(self._p, self._input, self._timeout))


class LocalRunner:
    """Runs commands on this host. ``env`` extends (never replaces) the process env."""

    where = "localhost"

    def __init__(self, env: Optional[dict] = None):
        self.base_env = dict(env or {})

    def _env(self, env: Optional[dict]) -> dict:
        """This process's environment plus base_env and ENV."""
        return {**os.environ, **self.base_env, **(env or {})}

    def run(self, argv, input=None, timeout=60, check=True, env=None) -> Result:
        full_env = self._env(env)
        return self._result(argv, timeout, check, lambda: _run(list(argv), input, timeout, full_env))

    def start(self, argv, input=None, timeout=60, check=True, env=None) -> Started:
        """``run`` in two halves: the command starts now and runs while the caller does other
        work; ``.wait()`` gives its Result (errors as ``run`` raises them)."""
        full_env = self._env(env)
        try:
            p = _start(list(argv), input, timeout, full_env)
        except FileNotFoundError:
            raise self._not_found(argv) from None
        return Started(self, list(argv), p, input, timeout, check)

    def _not_found(self, argv) -> CommandError:
        return CommandError(argv, 127, "", f"{argv[0]}: command not found on {self.where}", self.where)

    def _result(self, argv, timeout, check, call) -> Result:
        try:
            code, out, err = call()
        except FileNotFoundError:
            raise self._not_found(argv) from None
        except subprocess.TimeoutExpired:
            raise TransientError(f"command timed out after {timeout:g}s on {self.where}: {' '.join(argv)}") from None
        r = Result(tuple(argv), code, out, err)
        if check and code != 0:
            raise CommandError(argv, code, out, err, self.where)
        return r

    def put_file(self, path: str, content: bytes, mode: int = 0o644) -> None:
        # atomic for readers (sbatch never sees half a script); not durable: a script lost
        # to a power cut is re-rendered, it is not data
        write_atomic(path, content, mode)

    def close(self) -> None:
        pass
