"""The ``sweep:`` section of a job spec: one spec, many runs (elements).

Exactly one of three ways to list the elements:

- ``grid: {lr: [1.0e-4, 3.0e-4], batch: [32, 64]}``: the cartesian product of the axes;
- ``points: [{lr: 1.0e-4, wd: 0.1}, {lr: 3.0e-4, wd: 0.0}]``: the elements as written
  (every point names the same parameters; equal points are replicates, told apart by
  their seeds);
- ``random: {n: 20, seed: 7, space: {lr: {loguniform: [1.0e-5, 1.0e-2]}}}``: N draws,
  each parameter from ``uniform: [lo, hi]``, ``loguniform: [lo, hi]`` (lo > 0),
  ``int: [lo, hi]`` (both ends included) or ``choice: [v, ...]``.

Plus ``max_parallel`` (how many elements run at once) and ``early_stop`` (successive
halving over elements, see ``launcher.sweep.early_stop``).

Parameter names become environment variables ``LAUNCHER_PARAM_<NAME>`` (the name in
upper case), so a name is a letter followed by letters, digits or ``_`` (at most 64), and
no two names of one sweep may differ only by case. A value is a boolean, an integer, a
finite float or a string (one line or several, at most ``MAX_VALUE_CHARS`` characters;
it reaches the job literally, never through a shell). A sweep has at most ``MAX_SIZE``
elements.
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Literal, Optional, Union

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, \
    field_validator, model_validator

MAX_SIZE = 10_000  # elements per sweep: a bound on the sweep table, the status table and the scheduler's load
MAX_VALUE_CHARS = 4096  # characters per string value (every value travels in each element's environment)
PARAM_NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,63}$")
PARAM_NAME_HINT = "a letter, then letters, digits or '_' (at most 64 characters)"
PARAM_ENV_PREFIX = "LAUNCHER_PARAM_"
METRIC_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_./-]{0,127}$")


def param_env_name(name: str) -> str:
    """The environment variable carrying parameter NAME: ``lr`` -> ``LAUNCHER_PARAM_LR``."""
    return PARAM_ENV_PREFIX + name.upper()


def _param_name(v: str) -> str:
    if not PARAM_NAME_RE.match(v):
        raise ValueError(f"parameter name {v!r} must be {PARAM_NAME_HINT}: it becomes the environment "
                         f"variable {PARAM_ENV_PREFIX}<NAME>")
    return v


def _param_str(v: str) -> str:
    if len(v) > MAX_VALUE_CHARS:
        raise ValueError(f"a parameter value has at most {MAX_VALUE_CHARS} characters (got {len(v)})")
    return v


def _scalar(v):
    """One clear error for what no parameter can be (instead of one per member of the union)."""
    if isinstance(v, float) and not math.isfinite(v):
        raise ValueError(f"a parameter value must be a finite number (got {v})")
    if not isinstance(v, (bool, int, float, str)):
        raise ValueError(f"a parameter value is a boolean, an integer, a number or a string "
                         f"(got {type(v).__name__})")
    if isinstance(v, str):
        _param_str(v)
    return v


def _number(v):
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ValueError(f"expected a finite number (got {v!r})")
    try:
        finite = math.isfinite(v)
    except OverflowError:  # an int no float can hold
        raise ValueError(f"expected a finite number within a float's range (about +-1.8e308), got an integer "
                         f"of {v.bit_length()} bits") from None
    if not finite:
        raise ValueError(f"expected a finite number (got {v!r})")
    return v


ParamName = Annotated[str, AfterValidator(_param_name)]
# bool before int: YAML's true is a bool, never the integer 1
ParamValue = Annotated[Union[StrictBool, StrictInt, StrictFloat, str],
                       BeforeValidator(_scalar)]
Number = Annotated[Union[StrictInt, StrictFloat], BeforeValidator(_number)]


def value_key(v) -> tuple:
    """Equality that tells 1, 1.0 and true apart (Python's == does not)."""
    return (type(v).__name__, v)


def _check_case_collisions(names, where: str) -> None:
    seen: dict[str, str] = {}
    for n in names:
        other = seen.setdefault(n.upper(), n)
        if other != n:
            raise ValueError(f"{where}: parameters {other!r} and {n!r} differ only by case, but both would be "
                             f"{param_env_name(n)}")


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Distribution(_Section):
    """One parameter of a random sweep: exactly one of the keys."""

    uniform: Optional[list[Number]] = Field(None, min_length=2, max_length=2)
    loguniform: Optional[list[Number]] = Field(None, min_length=2, max_length=2)
    int_: Optional[list[StrictInt]] = Field(None, alias="int", min_length=2, max_length=2)
    choice: Optional[list[ParamValue]] = Field(None, min_length=1, max_length=MAX_SIZE)

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @model_validator(mode="after")
    def _one(self):
        given = [k for k in ("uniform", "loguniform", "int_", "choice") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError("give exactly one of uniform: [lo, hi], loguniform: [lo, hi], int: [lo, hi] "
                             f"or choice: [values] (got {len(given) or 'none'})")
        kind = given[0]
        if kind in ("uniform", "loguniform", "int_"):
            lo, hi = getattr(self, kind)
            name = kind.rstrip("_")
            bad = lo > hi if kind == "int_" else lo >= hi
            if bad:
                raise ValueError(f"{name}: [lo, hi] needs lo {'<=' if kind == 'int_' else '<'} hi (got [{lo}, {hi}])")
            if kind == "loguniform" and lo <= 0:
                raise ValueError(f"loguniform: [lo, hi] needs lo > 0 (got {lo})")
            _drawable(name, lo, hi)
        return self

    @property
    def kind(self) -> str:
        return next(k.rstrip("_") for k in ("uniform", "loguniform", "int_", "choice") if getattr(self, k) is not None)


def _drawable(name: str, lo, hi) -> None:
    """Refuse a range whose draw would overflow a float (``launcher.spec.sweep_elements.draw``
    computes lo + (hi - lo) * u, and int(u * (hi - lo + 1)) for int): a draw must always be a
    finite number, so the params' JSON is always valid."""
    width = hi - lo + 1 if name == "int" else hi - lo
    try:
        finite = math.isfinite(float(width))
    except OverflowError:
        finite = False
    if not finite:
        shown = ", ".join(f"<an integer of {v.bit_length()} bits>" if isinstance(v, int) and v.bit_length() > 64
                          else f"{v:.6g}" for v in (lo, hi))
        raise ValueError(f"{name}: [{shown}] is too wide: hi - lo must be a finite float (at most about "
                         f"1.8e308), or a draw would be infinite; narrow the range")


class RandomSearch(_Section):
    n: int = Field(ge=1, le=MAX_SIZE)
    seed: int = Field(ge=0, le=2 ** 63 - 1, description="the draws depend only on this seed and the element's index")
    space: dict[ParamName, Distribution] = Field(max_length=256)

    @field_validator("space")
    @classmethod
    def _space(cls, v):
        if not v:
            raise ValueError("space is empty: name at least one parameter and its distribution")
        _check_case_collisions(v, "space")
        return v


class EarlyStop(_Section):
    """Successive halving over elements (see launcher.sweep.early_stop)."""

    metric: str
    mode: Literal["min", "max"]
    min_steps: int = Field(0, ge=0, description="no element is judged before this step")
    keep: float = Field(0.5, gt=0, lt=1, description="the fraction of the elements at a rung that go on")
    rungs: list[Annotated[int, Field(ge=1)]] = Field(min_length=1, max_length=64)

    @field_validator("metric")
    @classmethod
    def _metric(cls, v):
        if not METRIC_RE.match(v):
            raise ValueError("expected a metric name as reported with jobside.report(step, NAME=value): "
                             "a letter or '_', then letters, digits, '_', '.', '/' or '-'")
        return v

    @model_validator(mode="after")
    def _rungs(self):
        if any(b <= a for a, b in zip(self.rungs, self.rungs[1:])):
            raise ValueError(f"rungs must be strictly increasing steps (got {self.rungs})")
        early = [r for r in self.rungs if r < self.min_steps]
        if early:
            raise ValueError(f"rungs {early} are below min_steps ({self.min_steps}): no element is judged "
                             f"before min_steps, so remove them or lower min_steps")
        return self


class SweepSpec(_Section):
    grid: Optional[dict[ParamName, list[ParamValue]]] = Field(None, max_length=64)
    points: Optional[list[dict[ParamName, ParamValue]]] = Field(None, max_length=MAX_SIZE)
    random: Optional[RandomSearch] = None
    max_parallel: Optional[int] = Field(None, ge=1, le=MAX_SIZE,
                                        description="elements running at once (default: as many as the target allows)")
    early_stop: Optional[EarlyStop] = None

    @field_validator("grid")
    @classmethod
    def _grid(cls, v):
        if v is None:
            return v
        if not v:
            raise ValueError("grid is empty: give at least one parameter with a list of values")
        for name, values in v.items():
            if not values:
                raise ValueError(f"grid axis {name!r} is empty: give it at least one value")
            seen = set()
            for x in values:
                if value_key(x) in seen:
                    raise ValueError(f"grid axis {name!r} lists {x!r} twice")
                seen.add(value_key(x))
        _check_case_collisions(v, "grid")
        return v

    @field_validator("points")
    @classmethod
    def _points(cls, v):
        if v is None:
            return v
        if not v:
            raise ValueError("points is empty: give at least one point")
        first = list(v[0])
        if not first:
            raise ValueError("points[0] is empty: a point names at least one parameter")
        for i, p in enumerate(v[1:], start=1):
            if set(p) != set(first):
                missing, extra = sorted(set(first) - set(p)), sorted(set(p) - set(first))
                what = "; ".join(x for x in (f"missing {missing}" if missing else "",
                                            f"not in points[0]: {extra}" if extra else "") if x)
                raise ValueError(f"points[{i}] names other parameters than points[0] ({what}): every point "
                                 f"names the same parameters {sorted(first)}")
        _check_case_collisions(first, "points")
        return v

    @model_validator(mode="after")
    def _exactly_one(self):
        given = [k for k in ("grid", "points", "random") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError("give exactly one of grid, points or random" +
                             (f" (got {' and '.join(given)})" if given else ""))
        if self.size > MAX_SIZE:
            axes = " x ".join(str(len(x)) for x in self.grid.values())
            raise ValueError(f"grid has {self.size:,} elements ({axes}), over the cap of {MAX_SIZE:,} "
                             f"elements per sweep: split it into several sweeps")
        return self

    @property
    def kind(self) -> str:
        return next(k for k in ("grid", "points", "random") if getattr(self, k) is not None)

    @property
    def size(self) -> int:
        if self.grid is not None:
            return math.prod(len(x) for x in self.grid.values())
        if self.points is not None:
            return len(self.points)
        return self.random.n

    @property
    def param_names(self) -> list[str]:
        if self.grid is not None:
            return list(self.grid)
        if self.points is not None:
            return list(self.points[0])
        return list(self.random.space)
