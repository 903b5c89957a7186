"""The ``launcher`` command lines that act on a job or a sweep, for the web view to show ready
to copy (the view itself stays read-only: it never acts). Pure: ids in, shell text out, every
value quoted for a POSIX shell (``shlex.quote``), so a job id with spaces or quotes pastes as
one word."""

from __future__ import annotations

from shlex import quote
from typing import Optional


def _line(prefix: str, *words) -> str:
    return prefix + " ".join(quote(str(w)) for w in words)


def _id(x: str) -> list:
    """An id as the command's argument: after "--" when it would read as an option."""
    return ["--", x] if str(x).startswith("-") else [x]


def env_prefix(home: Optional[str]) -> str:
    """``LAUNCHER_HOME=... `` when the view reads a home other than the default (None: none)."""
    return "" if not home else f"LAUNCHER_HOME={quote(str(home))} "


def job_commands(job_id: str, is_open: bool, home: Optional[str] = None) -> list[tuple[str, str]]:
    """[(what it does, command line)] for JOB_ID: status, logs (following while it runs),
    report, and cancel while it is open."""
    p = env_prefix(home)
    out = [("status", _line(p, "launcher", "status", *_id(job_id))),
           ("logs", _line(p, "launcher", "logs", *(["-f"] if is_open else []), *_id(job_id))),
           ("report", _line(p, "launcher", "report", *_id(job_id)))]
    if is_open:
        out.append(("cancel", _line(p, "launcher", "cancel", *_id(job_id))))
    return out


def sweep_commands(sweep_id: str, any_open: bool, home: Optional[str] = None) -> list[tuple[str, str]]:
    """[(what it does, command line)] for a sweep: status, report, one element's logs, and
    cancel (the whole sweep) while an element is open."""
    p = env_prefix(home)
    out = [("status", _line(p, "launcher", "status", *_id(sweep_id))),
           ("report", _line(p, "launcher", "report", *_id(sweep_id))),
           ("logs of element 0", _line(p, "launcher", "logs", "--element", 0, *_id(sweep_id)))]
    if any_open:
        out.append(("cancel", _line(p, "launcher", "cancel", *_id(sweep_id))))
    return out
