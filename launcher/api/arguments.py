"""The ``Launcher`` methods' arguments, checked before any work: a wrong type or an empty
value is one ``launcher.core.args.ArgumentError`` (a LauncherError, exit 2 in the CLI, and a
TypeError) naming the method, the argument and what was expected; never a raw TypeError from
pathlib, an AttributeError, or a sqlite3 error from deep inside (``diff(1, 2)`` used to open
and close file descriptor 1).

``checked_arguments`` decorates the class once: each method named in ``RULES`` gets its call
bound to its own signature (a missing or unknown argument is an ArgumentError too) and each
named argument checked. An argument a method no longer has is simply not checked, so the
facade's signatures can change without this table breaking them.
"""

from __future__ import annotations

import functools
import inspect
import numbers
import os
from typing import Callable

from launcher.core.args import ArgumentError, job_ref, type_name
from launcher.spec.model import JobSpec


def _fail(where: str, name: str, expected: str, value) -> None:
    raise ArgumentError(f"{where}: {name}: expected {expected}, got {type_name(value)} {value!r:.80}")


def _str(nonempty: bool = True, optional: bool = False, what: str = "a str") -> Callable:
    def check(where, name, v):
        if v is None and optional:
            return
        if not isinstance(v, str):
            _fail(where, name, what + (" or None" if optional else ""), v)
        if nonempty and not v.strip():
            raise ArgumentError(f"{where}: {name} is empty: expected {what}")
    return check


def _path(optional: bool = False) -> Callable:
    def check(where, name, v):
        if v is None and optional:
            return
        if isinstance(v, os.PathLike):
            v = os.fspath(v)
        if not isinstance(v, str):
            _fail(where, name, "a path (str or os.PathLike)" + (" or None" if optional else ""), v)
        if not v.strip():
            raise ArgumentError(f"{where}: {name} is empty: expected a path")
    return check


def _spec(where, name, v):
    if isinstance(v, JobSpec):
        return
    if isinstance(v, os.PathLike):
        v = os.fspath(v)
    if not isinstance(v, str):
        _fail(where, name, "a spec: a path, YAML text (a str with a line break) or a JobSpec", v)
    if not v.strip():
        raise ArgumentError(f"{where}: {name} is empty: expected a path, YAML text or a JobSpec")


def _bool(where, name, v):
    if not isinstance(v, bool):
        _fail(where, name, "a bool (True or False)", v)


def _int(optional: bool = False, minimum=None) -> Callable:
    def check(where, name, v):
        if v is None and optional:
            return
        if isinstance(v, bool) or not isinstance(v, numbers.Integral):
            _fail(where, name, "an int" + (" or None" if optional else ""), v)
        if minimum is not None and v < minimum:
            raise ArgumentError(f"{where}: {name}: expected an int >= {minimum}, got {v}")
    return check


def _number(optional: bool = False, positive: bool = False, or_duration: bool = False) -> Callable:
    def check(where, name, v):
        if v is None and optional:
            return
        if or_duration and isinstance(v, str):
            return  # a duration ("36h"), parsed (and reported) where it is used
        if isinstance(v, bool) or not isinstance(v, numbers.Real) or v != v or v in (float("inf"), float("-inf")):
            expected = "a finite number" + (" or a duration (\"36h\")" if or_duration else "")
            _fail(where, name, expected + (" or None" if optional else ""), v)
        if (v <= 0) if positive else (v < 0):
            raise ArgumentError(f"{where}: {name}: expected a number {'> 0' if positive else '>= 0'}, got {v}")
    return check


def _job(where, name, v):
    try:
        job_ref(v, name)
    except ArgumentError as e:
        raise ArgumentError(f"{where}: {e}") from None


def _names(optional: bool = True) -> Callable:
    def check(where, name, v):
        if v is None and optional:
            return
        if isinstance(v, str) or not isinstance(v, (list, tuple, set, frozenset)) or \
                not all(isinstance(x, str) and x.strip() for x in v):
            _fail(where, name, "a list of target names (str)" + (" or None" if optional else ""), v)
    return check


def _callable(optional: bool = True) -> Callable:
    def check(where, name, v):
        if v is None and optional:
            return
        if not callable(v):
            _fail(where, name, "a callable taking one line (str)" + (" or None" if optional else ""), v)
    return check


def _opt_spec(where, name, v):
    if v is not None:
        _spec(where, name, v)


OPT_STR, OPT_PATH = _str(optional=True), _path(optional=True)
RULES: dict[str, dict[str, Callable]] = {
    "__init__": {"config": OPT_PATH, "home": OPT_PATH, "note": _callable()},
    "load": {"spec": _spec},
    "validate": {"spec": _spec},
    "render": {"spec": _spec, "target": OPT_STR, "fresh": _bool, "facts_file": OPT_PATH},
    "launch": {"spec": _spec, "target": OPT_STR, "fresh": _bool},
    "plan": {"spec": _spec, "targets": _names(), "work": _number(True, False, True),
             "checkpoint_cost": _number(True, False, True), "live_spot_prices": _bool, "queue": _bool},
    "status": {"job": _job},
    "sweep": {"sweep_id": _str()},
    "jobs": {"all": _bool},
    "logs": {"job": _job, "follow": _bool, "element": _int(optional=True, minimum=0)},
    "wait": {"job": _job, "poll": _number(positive=True), "timeout": _number(optional=True)},
    "cancel": {"job": _job},
    "is_sweep": {"name": _str()},
    "cancel_sweep": {"sweep": _str(), "element": _int(optional=True, minimum=0)},
    "report": {"job": _job, "refresh": _bool, "plot": OPT_PATH},
    "report_sweep": {"sweep": _str(), "metric": OPT_STR, "mode": OPT_STR, "scope": _str(), "refresh": _bool},
    "lineage": {"checkpoint": _path()},
    "diff": {"run_a": _path(), "run_b": _path()},
    "checkpoints": {"root": _path(), "verify": _bool},
    "gc": {"root": _path(), "keep": _int(), "dry_run": _bool, "verify": _bool},
    "targets": {"probe": _bool},
    "submit": {"target": OPT_STR, "spec": _opt_spec, "name": OPT_STR},
    "map": {"target": OPT_STR, "spec": _opt_spec, "name": OPT_STR, "max_parallel": _int(optional=True, minimum=1)},
}


def checked_arguments(cls):
    """CLS with each method in RULES checking its arguments first (see the module docstring)."""
    for method, rules in RULES.items():
        fn = cls.__dict__.get(method)
        if fn is not None and callable(fn):
            setattr(cls, method, _checking(fn, rules, cls.__name__))
    return cls


def _checking(fn, rules: dict, owner: str):
    sig = inspect.signature(fn)

    @functools.wraps(fn)
    def call(*args, **kwargs):
        called = type(args[0]).__name__ if args else owner  # Launcher.render(), though SpecLauncher defines it
        where = f"{called}()" if fn.__name__ == "__init__" else f"{called}.{fn.__name__}()"
        try:
            bound = sig.bind(*args, **kwargs)
        except TypeError as e:  # a missing, extra or unknown argument
            raise ArgumentError(f"{where}: {e}") from None
        for name, value in bound.arguments.items():
            check = rules.get(name)
            if check is not None:
                check(where, name, value)
        return fn(*args, **kwargs)

    return call
