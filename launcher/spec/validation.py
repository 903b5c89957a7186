"""Turn pydantic validation errors into SpecError lines a person can act on:
the dotted field path, the line it is on, what was expected, and a "did you
mean" for misspelt keys."""

from __future__ import annotations

import difflib
import re
import typing
from typing import Any, Callable

from pydantic import BaseModel, ValidationError

from launcher.core.errors import SpecError


def _model_at(model: type[BaseModel], loc: tuple) -> type[BaseModel] | None:
    """Walk the model classes along loc (minus its last item) to find the model owning the key."""
    cur: Any = model
    for key in loc[:-1]:
        if not (isinstance(cur, type) and issubclass(cur, BaseModel)):
            return None
        field = cur.model_fields.get(key) if isinstance(key, str) else None
        if field is None:
            # dict values / list items: keep the annotation's inner model if any
            continue
        ann = field.annotation
        cur = _inner_model(ann)
    return cur if isinstance(cur, type) and issubclass(cur, BaseModel) else None


def _inner_model(ann):
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return ann
    for arg in typing.get_args(ann) or ():
        m = _inner_model(arg)
        if m is not None:
            return m
    return None


def _aliases(model: type[BaseModel]) -> list[str]:
    return [f.alias or name for name, f in model.model_fields.items()]


def _unknown_key(model: type[BaseModel], loc: tuple) -> str:
    """The message for the key at LOC that its model does not have: the key it may be a
    misspelling of, else the keys there are."""
    owner = _model_at(model, loc)
    known = _aliases(owner) if owner else []
    key = str(loc[-1])
    guess = difflib.get_close_matches(key, known, n=1, cutoff=0.6) or \
        [k for k in known if k.startswith(key) or key in k][:1]
    if guess:
        return f"unknown key; did you mean '{guess[0]}'?"
    if known:
        return f"unknown key; expected one of: {', '.join(sorted(known))}"
    return "unknown key"


def _message(e: dict, model: type[BaseModel], loc: tuple) -> str:
    """What pydantic's error E at LOC says, in a person's words: the value it got (shortened)."""
    msg = e["msg"]
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, "):]
    if e["type"] == "extra_forbidden":
        return _unknown_key(model, loc)
    if e["type"] == "missing":
        return "required field is missing"
    if "input" in e and e["type"] not in ("value_error",):
        got = e["input"]
        shown = repr(got) if not isinstance(got, (dict, list)) else type(got).__name__
        if len(shown) > 60:
            shown = shown[:57] + "..."
        return f"{msg} (got {shown})"
    return msg


def to_problems(err: ValidationError, model: type[BaseModel], line_of: Callable | None = None):
    problems: list[tuple[str, str]] = []
    for e in err.errors():
        loc = tuple(x for x in e["loc"] if not (isinstance(x, str) and (x.startswith("function-") or x == "[key]")))
        path = _path(loc)
        msg = _message(e, model, loc)
        m = _FIELD_FIRST.match(msg) if not loc else None
        if m:  # a check across fields (a model validator) that names the field it refuses
            loc, path, msg = tuple(m.group(1).split(".")), m.group(1), msg[m.end():]
        where = line_of(loc) if line_of else ""
        problems.append((path, f"{msg}" + (f" [{where}]" if where else "")))
    return problems


MAX_DEPTH = 64
_FIELD_FIRST = re.compile(r"^([a-z_]+\.[a-z_]+): ")


def _path(loc) -> str:
    return ".".join(str(x) if not isinstance(x, int) else f"[{x}]" for x in loc).replace(".[", "[")


def raw_problems(data: Any, line_of=None) -> list[tuple[str, str]]:
    """Problems no field may have, found before the models see the data: a NUL byte in any
    string (no file name, argument or environment value can carry one), and nesting deeper than
    MAX_DEPTH (a clear error instead of a RecursionError, whoever built the data). Iterative."""
    problems: list[tuple[str, str]] = []
    stack = [((), data)]
    while stack:
        loc, cur = stack.pop()
        if len(loc) > MAX_DEPTH:
            problems.append((_path(loc[:MAX_DEPTH]), f"nested deeper than {MAX_DEPTH} levels"))
            continue
        if isinstance(cur, str):
            if "\0" in cur:
                where = line_of(loc) if line_of and loc else ""
                problems.append((_path(loc), "contains a NUL byte, which no path, argument or environment "
                                             "value can carry" + (f" [{where}]" if where else "")))
        elif isinstance(cur, dict):
            for k, v in cur.items():
                if isinstance(k, str) and "\0" in k:
                    problems.append((_path(loc + (k,)), "the key contains a NUL byte"))
                stack.append((loc + (k,), v))
        elif isinstance(cur, (list, tuple)):
            stack.extend((loc + (i,), v) for i, v in enumerate(cur))
    return sorted(problems)


def validate_model(model: type[BaseModel], data: Any, source: str, line_of=None, context=None):
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise SpecError(source, [("", f"expected a mapping at the top level, got {type(data).__name__}")])
    problems = raw_problems(data, line_of)
    if problems:
        raise SpecError(source, problems)
    try:
        return model.model_validate(data, context=context)
    except ValidationError as err:
        raise SpecError(source, to_problems(err, model, line_of)) from None
