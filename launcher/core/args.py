"""Checking what a caller passes (command-line arguments, the Python API's arguments) before
it reaches the store or a backend: a wrong type or an empty id is one ``ArgumentError``
naming the argument and what was expected, never a raw ``TypeError`` or ``sqlite3`` error."""

from __future__ import annotations

from typing import Any

from launcher.core.errors import EXIT_USAGE, LauncherError


class ArgumentError(LauncherError, TypeError):
    """A wrong argument (type or value); still a TypeError for callers that catch that."""

    exit_code = EXIT_USAGE


def type_name(value: Any) -> str:
    return type(value).__name__


def require(value: Any, types, name: str, expected: str) -> Any:
    """VALUE if it is an instance of TYPES (bool never counts as a number), else ArgumentError
    "NAME: expected EXPECTED, got <type> <value>"."""
    ok = isinstance(value, types) and not (isinstance(value, bool) and bool not in _as_tuple(types))
    if not ok:
        raise ArgumentError(f"{name}: expected {expected}, got {type_name(value)} {value!r:.80}")
    return value


def job_ref(value: Any, name: str = "job id") -> str:
    """A job-id argument: a non-empty str (an exact id or a prefix of one). An empty or
    blank id is refused rather than matching every job as an empty prefix would."""
    require(value, str, name, "a str (a job id or an unambiguous prefix of one)")
    if not value.strip():
        raise ArgumentError(f"{name} is empty: give a job's id or an unambiguous prefix of it "
                            f"(see `launcher status`)")
    return value


def _as_tuple(types) -> tuple:
    return types if isinstance(types, tuple) else (types,)
