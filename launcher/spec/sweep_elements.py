"""A sweep's elements and what each one sees. Pure: no I/O, no clock.

Order (the element's index is its position, and it never depends on anything but the spec):

- ``grid``: the cartesian product with the axes in the order the spec writes them, the
  last axis varying fastest (``{lr: [1, 2], batch: [32, 64]}`` -> (1, 32), (1, 64),
  (2, 32), (2, 64));
- ``points``: the order of the list;
- ``random``: element i draws its parameters, in the order the space names them, from its
  own stream seeded with sha256("<seed>:<i>"), using only ``random.random()`` (whose
  sequence Python keeps stable for a given seed): adding elements never changes the
  earlier ones, and every Python draws the same values.

Each element's environment (``element_env``): ``LAUNCHER_SWEEP_ID``, ``LAUNCHER_SWEEP_INDEX``,
``LAUNCHER_SWEEP_SIZE``, ``LAUNCHER_PARAM_<NAME>`` per parameter (booleans as ``true``/``false``,
floats in Python's shortest round-trip form), ``LAUNCHER_PARAMS`` (all of them as one JSON
object, types kept), ``LAUNCHER_SEED`` (the element's seed, see ``element_seed``) and
``LAUNCHER_SWEEP_SEED`` (the sweep's), and, where the spec has a checkpoint root,
``LAUNCHER_CKPT_ROOT``: the element's own root, ``<root>/element-<index:04d>``.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import random
from dataclasses import dataclass
from typing import Optional

from launcher.spec.sweep import SweepSpec, param_env_name

ELEMENT_DIR = "element-{index:04d}"


@dataclass(frozen=True)
class Element:
    index: int
    params: dict  # name -> value (bool, int, float or str), in the spec's order

    def params_json(self) -> str:
        return params_json(self.params)


def params_json(params: dict) -> str:
    """LAUNCHER_PARAMS of PARAMS: one JSON object, types kept (a non-finite float is a
    ValueError, never 'Infinity' or 'NaN', which are not JSON)."""
    return json.dumps(params, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def elements(sweep: SweepSpec) -> list[Element]:
    """Every element of SWEEP, index 0 to size-1, in the documented order."""
    if sweep.grid is not None:
        names = list(sweep.grid)
        combos = itertools.product(*(sweep.grid[n] for n in names))
        return [Element(i, dict(zip(names, c))) for i, c in enumerate(combos)]
    if sweep.points is not None:
        names = list(sweep.points[0])
        return [Element(i, {n: p[n] for n in names}) for i, p in enumerate(sweep.points)]
    r = sweep.random
    return [Element(i, draw(r.space, r.seed, i)) for i in range(r.n)]


def _stream(seed: int, index: int) -> random.Random:
    digest = hashlib.sha256(f"{seed}:{index}".encode()).digest()
    return random.Random(int.from_bytes(digest[:16], "big"))


def draw(space: dict, seed: int, index: int) -> dict:
    """Element INDEX of a random sweep: one ``random()`` per parameter, mapped onto its range.
    Every draw is a finite number within [lo, hi] (the spec refuses a range whose draw could
    overflow, ``launcher.spec.sweep._drawable``; rounding is clamped to the bounds)."""
    rng = _stream(seed, index)
    out = {}
    for name, dist in space.items():
        u = rng.random()  # in [0, 1)
        kind = dist.kind
        if kind == "uniform":  # clamped: rounding never takes a draw past a bound (or to inf)
            lo, hi = dist.uniform
            out[name] = min(hi, max(lo, lo + (hi - lo) * u))
        elif kind == "loguniform":
            lo, hi = dist.loguniform
            try:
                v = math.exp(math.log(lo) + (math.log(hi) - math.log(lo)) * u)
            except OverflowError:  # rounding past the largest float: hi is the bound it rounded past
                v = hi
            out[name] = min(hi, max(lo, v))
        elif kind == "int":
            lo, hi = dist.int_
            out[name] = min(hi, lo + int(u * (hi - lo + 1)))
        else:
            out[name] = dist.choice[min(len(dist.choice) - 1, int(u * len(dist.choice)))]
    return out


def element_seed(sweep_seed: int, index: int) -> int:
    """The element's LAUNCHER_SEED: the first 31 bits of sha256("launcher-sweep-seed:<sweep seed>:<index>").
    Stable across Python versions and machines; distinct elements get unrelated seeds."""
    digest = hashlib.sha256(f"launcher-sweep-seed:{int(sweep_seed)}:{int(index)}".encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


def element_root(root: Optional[str], index: int) -> Optional[str]:
    """The element's checkpoint root: a subdirectory of the sweep's (POSIX path or s3:// prefix)."""
    if not root:
        return None
    sub = ELEMENT_DIR.format(index=index)
    if root.startswith("s3://"):
        rest = root[len("s3://"):].rstrip("/")
        return f"s3://{rest}/{sub}"
    base = root.rstrip("/")
    return f"{base}/{sub}" if base else f"/{sub}"


def env_value(value) -> str:
    """A parameter as an environment value: true/false, integers as written, floats in their
    shortest round-trip form (1e-05, 0.0003), strings as they are."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    return str(value)


def element_env(sweep_id: str, element: Element, size: int, sweep_seed: Optional[int] = None,
                root: Optional[str] = None) -> dict[str, str]:
    """What element ELEMENT of sweep SWEEP_ID (SIZE elements) sees, in a fixed order. Values
    are raw: whoever writes them into a shell quotes them."""
    env = {"LAUNCHER_SWEEP_ID": sweep_id, "LAUNCHER_SWEEP_INDEX": str(element.index),
           "LAUNCHER_SWEEP_SIZE": str(size)}
    for name, value in element.params.items():
        env[param_env_name(name)] = env_value(value)
    env["LAUNCHER_PARAMS"] = element.params_json()
    if sweep_seed is not None:
        env["LAUNCHER_SWEEP_SEED"] = str(int(sweep_seed))
        env["LAUNCHER_SEED"] = str(element_seed(sweep_seed, element.index))
    ckpt = element_root(root, element.index)
    if ckpt:
        env["LAUNCHER_CKPT_ROOT"] = ckpt
    return env


def sweep_seed_of(spec, job_seed: Optional[int] = None) -> int:
    """The sweep's seed, from which each element's is derived: the run's LAUNCHER_SEED (the
    launch puts it in the spec's env, or JOB_SEED), else the spec's ``seed``, else the random
    search's seed, else 0."""
    env_seed = (spec.env or {}).get("LAUNCHER_SEED")
    for v in (env_seed, job_seed, spec.seed, spec.sweep.random.seed if spec.sweep and spec.sweep.random else None):
        if v is not None and str(v).strip():
            return int(str(v).strip())
    return 0
