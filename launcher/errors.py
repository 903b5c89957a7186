"""Errors a user can act on. Every one carries enough context to fix the input."""

from __future__ import annotations


class LauncherError(Exception):
    """Base class: the CLI prints these without a traceback and exits non-zero."""

    exit_code = 1


class SpecError(LauncherError):
    """A job spec or config file is invalid. ``problems`` lists (path, message)."""

    exit_code = 2

    def __init__(self, source: str, problems: list[tuple[str, str]]):
        self.source = source
        self.problems = problems
        lines = [f"{source}: {len(problems)} error(s)"]
        lines += [f"  {path or '<top>'}: {msg}" for path, msg in problems]
        super().__init__("\n".join(lines))


class ConfigError(LauncherError):
    exit_code = 2


class CapabilityError(LauncherError):
    """The spec asks for something the target cannot do; says what to use instead."""

    exit_code = 2


class BackendUnavailable(LauncherError):
    """A backend's plugin failed to import (its import error and install hint are kept)."""


class CommandError(LauncherError):
    """A command run on a cluster failed: shows argv, exit code and the tail of stderr."""

    def __init__(self, argv, returncode: int, stdout: str = "", stderr: str = "", where: str = "local"):
        self.argv = list(argv)
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr
        self.where = where
        tail = "\n".join((stderr or stdout or "").strip().splitlines()[-15:])
        cmd = " ".join(self.argv)
        super().__init__(f"command failed on {where} (exit {returncode}): {cmd}" + (f"\n{tail}" if tail else ""))


class TransientError(LauncherError):
    """The control plane (scheduler, SSH, cloud API) failed in a way worth retrying."""


class SubmitError(LauncherError):
    """Submission failed; nothing was left running (any id obtained was cancelled)."""
