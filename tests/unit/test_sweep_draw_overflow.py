"""Random sweep draws are always finite and their JSON always valid (issue 20, §9). Before the
fix ``uniform: [-1.7e+308, 1.7e+308]`` drew +-inf (hi - lo overflows) and LAUNCHER_PARAMS was
'{"lr":Infinity}', which is not JSON; bounds beyond a float's range raised a raw
OverflowError. Decided: bounds whose draw can overflow are refused at validation, naming the
parameter; draws are clamped to [lo, hi]; the params' JSON refuses NaN and infinities."""

from __future__ import annotations

import json
import math

import pytest

from launcher.core.errors import SpecError
from launcher.backend.sections import spec_from_text
from launcher.spec.sweep_elements import Element, elements, params_json

BIG = "1" + "0" * 400


def sweep(space: str, n: int = 20):
    return spec_from_text(f"name: x\nrun: y\nsweep: {{random: {{n: {n}, seed: 1, space: {{lr: {space}}}}}}}\n",
                          "j.yaml")


def problems(space: str):
    with pytest.raises(SpecError) as e:
        sweep(space)
    return e.value.problems


@pytest.mark.parametrize("space,words", [
    ("{uniform: [-1.7e+308, 1.7e+308]}", "too wide"),
    ("{uniform: [-1.0e+308, 1.0e+308]}", "too wide"),
    (f"{{uniform: [-{BIG}, {BIG}]}}", "float"),
    (f"{{uniform: [0, {BIG}]}}", "float"),
    (f"{{loguniform: [1, {BIG}]}}", "float"),
    (f"{{int: [0, {BIG}]}}", "too wide"),
])
def test_bounds_whose_draw_can_overflow_are_refused_naming_the_parameter(space, words):
    found = problems(space)
    assert found and all(p.startswith("sweep.random.space.lr") and words in m for p, m in found), found


@pytest.mark.parametrize("space", ["{uniform: [-8.0e+307, 8.0e+307]}", "{uniform: [1.7e+308, 1.7976931348623157e+308]}",
                                   "{loguniform: [1.0e-300, 1.7976931348623157e+308]}",
                                   "{int: [-9007199254740992, 9007199254740992]}"])
def test_the_widest_accepted_ranges_draw_finite_values_within_bounds_and_valid_json(space):
    s = sweep(space, n=200)
    dist = s.sweep.random.space["lr"]
    lo, hi = getattr(dist, {"uniform": "uniform", "loguniform": "loguniform", "int": "int_"}[dist.kind])
    for e in elements(s.sweep):
        v = e.params["lr"]
        assert math.isfinite(v) and lo <= v <= hi, v
        assert json.loads(e.params_json()) == {"lr": v}


def test_params_json_refuses_non_finite_floats():
    for v in (math.inf, -math.inf, math.nan):
        with pytest.raises(ValueError):
            params_json({"lr": v})
        with pytest.raises(ValueError):
            Element(0, {"lr": v}).params_json()
