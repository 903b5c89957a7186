"""Errors a user can act on. Every one carries enough context to fix the input.

The CLI's exit codes (README, "Exit codes"); every error class carries its own:
"""

from __future__ import annotations

import errno
import os
import sys

EXIT_OK = 0
EXIT_FAILED = 1        # the command (or, with --follow, the job) failed
EXIT_USAGE = 2         # bad command line, spec, config or template: fix the input
EXIT_STATE = 3         # the state store cannot be opened, read or written
EXIT_UNREACHABLE = 4   # a target (scheduler, SSH host, cloud API) cannot be reached: retrying may work
EXIT_INSTALL = 5       # a Python package the command needs is not installed
EXIT_INTERNAL = 70     # EX_SOFTWARE: a bug; --debug shows the traceback
EXIT_INTERRUPTED = 130  # Ctrl-C (128 + SIGINT)


class LauncherError(Exception):
    """Base class: the CLI prints these without a traceback and exits non-zero."""

    exit_code = EXIT_FAILED


class SpecError(LauncherError):
    """A job spec or config file is invalid. ``problems`` lists (path, message)."""

    exit_code = EXIT_USAGE

    def __init__(self, source: str, problems: list[tuple[str, str]]):
        self.source = source
        self.problems = problems
        lines = [f"{source}: {len(problems)} error(s)"]
        lines += [f"  {path or '<top>'}: {msg}" for path, msg in problems]
        super().__init__("\n".join(lines))


class ConfigError(LauncherError):
    exit_code = EXIT_USAGE


class TemplateError(LauncherError):
    """A job-script template (built-in or a site override) does not render: names file and line."""

    exit_code = EXIT_USAGE


class StateStoreError(LauncherError):
    """The state store is damaged, unwritable, locked or on a full disk. Never repaired silently."""

    exit_code = EXIT_STATE


class MissingDependency(LauncherError):
    """A Python package a command needs is not installed; says what to install."""

    exit_code = EXIT_INSTALL


class CapabilityError(LauncherError):
    """The spec asks for something the target cannot do; says what to use instead."""

    exit_code = EXIT_USAGE


class NotSupported(CapabilityError):
    """A backend was asked for what its protocol lets it refuse and it does not do (the
    members of ``launcher.backend.protocols`` that say so); the core never asks it that."""


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

    exit_code = EXIT_UNREACHABLE


class SubmitError(LauncherError):
    """Submission failed; nothing was left running (any id obtained was cancelled)."""


class SubmitOutcomeUnknown(TransientError):
    """A submission whose outcome the launcher does not know: the scheduler may have accepted
    it (sbatch timed out talking to the controller, the call was interrupted). Never read as
    "nothing ran": the job row stays SUBMITTING with its dedupe token, and ``status``,
    ``watch`` and ``cancel`` settle it from what the scheduler has."""


class SubmissionUnsettled(TransientError):
    """A further attempt not submitted yet: an earlier submission of that attempt ended without
    the scheduler's answer a short while ago, and a stalled controller may still take it in
    (``launcher.launching.launch.resubmit``). Its pass waits; the next one looks again."""


# ---------------------------------------------------------------- the CLI's error boundary
# What to install when an import fails at run time (imports of heavy SDKs are lazy, so a
# missing one shows up only when a command needs it).
INSTALL_HINTS = {
    "paramiko": "pip install 'paramiko>=3.4' (a dependency of launcher: `pip install --force-reinstall launcher` "
                "restores it)",
    "boto3": "pip install 'boto3>=1.34' (a dependency of launcher: `pip install --force-reinstall launcher` "
             "restores it)",
    "sky": "pip install 'launcher[skypilot]'",
    "matplotlib": "pip install 'launcher[plot]'",
}
INSTALL_HINTS["botocore"] = INSTALL_HINTS["boto3"]


def missing_dependency(e: ImportError, needed_for: str = "") -> MissingDependency:
    """An ImportError as one line naming the package and the command that installs it."""
    name = (getattr(e, "name", None) or "").split(".")[0]
    hint = INSTALL_HINTS.get(name)
    what = f"the Python package '{name}'" if name else f"a Python package ({e})"
    return MissingDependency(f"{what} is not installed" + (f" (needed for {needed_for})" if needed_for else "")
                             + (f": {hint}" if hint else f": pip install {name}" if name else ""))


def describe(exc: BaseException) -> tuple[str, int]:
    """(one line for stderr, exit code) for any exception reaching the CLI. Pure: the caller
    prints. Known failures say what to do; anything else is reported as an internal error."""
    if isinstance(exc, LauncherError):
        return str(exc), exc.exit_code
    if isinstance(exc, ImportError):
        e = missing_dependency(exc)
        return str(e), e.exit_code
    sqlite3 = _loaded("sqlite3")
    if sqlite3 is not None and isinstance(exc, sqlite3.Error):
        return (f"state store error: {exc} (the file under $LAUNCHER_HOME was left as it is; "
                f"run with --debug for the traceback)"), EXIT_STATE
    if isinstance(exc, OSError):
        where = f" {exc.filename}" if exc.filename else ""
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return (f"no space left on the device{' holding' + where if where else ''} ({exc.strerror}): "
                    f"free some space and run the command again"), EXIT_FAILED
        if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            return f"not allowed to access{where or ' a file'}: {exc.strerror}", EXIT_FAILED
        return f"{exc.filename + ': ' if exc.filename else ''}{exc.strerror or exc}", EXIT_FAILED
    if isinstance(exc, RecursionError):
        return ("the input is nested too deeply to process (more levels than Python's recursion limit): "
                "flatten it"), EXIT_USAGE
    if isinstance(exc, ValueError) and "null byte" in str(exc):
        return "a path or value contains a NUL byte (\\0), which no file name or command can hold", EXIT_USAGE
    if isinstance(exc, MemoryError):
        return "out of memory", EXIT_FAILED
    return (f"internal error: {type(exc).__name__}: {_first_line(exc)} "
            f"(run with --debug for the traceback, and please report it)"), EXIT_INTERNAL


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else "(no message)"


def _loaded(module: str):
    return sys.modules.get(module)


def template_error(name: str, exc: BaseException) -> TemplateError:
    """A Jinja failure as one line naming the template file and line: a syntax error carries
    both; a runtime error (an undefined variable) is located from the template's own frame."""
    filename, lineno = getattr(exc, "filename", None), getattr(exc, "lineno", None)
    if not filename:
        tb = exc.__traceback__
        while tb is not None:  # Jinja rewrites the traceback so templates appear as frames
            f = tb.tb_frame.f_code.co_filename
            if f.endswith(".j2") or (os.environ.get("LAUNCHER_TEMPLATES") and os.path.isfile(f)
                                     and not f.endswith(".py")):
                filename, lineno = f, tb.tb_lineno
            tb = tb.tb_next
    where = f"{filename or name}" + (f":{lineno}" if lineno else "")
    kind = {"TemplateSyntaxError": "syntax error", "UndefinedError": "undefined variable",
            "TemplateNotFound": "template not found", "TemplatesNotFound": "template not found"}.get(
        type(exc).__name__, type(exc).__name__)
    message = getattr(exc, "message", None) or str(exc)
    hint = " (a site override from $LAUNCHER_TEMPLATES)" if _is_override(filename) else ""
    return TemplateError(f"template {where}{hint}: {kind}: {message}")


def _is_override(filename) -> bool:
    dirs = [d for d in os.environ.get("LAUNCHER_TEMPLATES", "").split(":") if d]
    return bool(filename) and any(os.path.abspath(filename).startswith(os.path.abspath(d) + os.sep) for d in dirs)
