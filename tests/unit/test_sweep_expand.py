"""A sweep's elements, their order, and what each element sees."""

from __future__ import annotations

import json
import math

import pytest

from launcher.backend.sections import parse_spec
from launcher.spec.sweep_elements import Element, element_env, element_root, element_seed, elements, env_value, \
    sweep_seed_of

HOSTILE = ["$(touch PWNED)", "`touch PWNED`", "it's \"quoted\"", "first\nsecond", "; rm -rf /", "${HOME}",
           "naïve — 日本", "back\\slash", " lead and trail ", ""]


def sweep(body, **spec):
    return parse_spec({"name": "s", "run": "true", "sweep": body, **spec}).sweep


def test_grid_order_is_the_product_with_the_last_axis_fastest():
    els = elements(sweep({"grid": {"lr": [1, 2], "batch": [32, 64], "opt": ["a"]}}))
    assert [e.index for e in els] == [0, 1, 2, 3]
    assert [e.params for e in els] == [{"lr": 1, "batch": 32, "opt": "a"}, {"lr": 1, "batch": 64, "opt": "a"},
                                       {"lr": 2, "batch": 32, "opt": "a"}, {"lr": 2, "batch": 64, "opt": "a"}]


def test_grid_order_follows_the_axes_as_written():
    els = elements(sweep({"grid": {"batch": [32, 64], "lr": [1, 2]}}))
    assert [tuple(e.params.items()) for e in els][:2] == [(("batch", 32), ("lr", 1)), (("batch", 32), ("lr", 2))]


def test_points_keep_their_order_and_their_key_order_is_the_first_points():
    els = elements(sweep({"points": [{"a": 1, "b": "x"}, {"b": "y", "a": 2}, {"a": 1, "b": "x"}]}))
    assert [list(e.params.items()) for e in els] == [[("a", 1), ("b", "x")], [("a", 2), ("b", "y")],
                                                     [("a", 1), ("b", "x")]]


RANDOM = {"n": 50, "seed": 7, "space": {"lr": {"loguniform": [1.0e-5, 1.0e-2]}, "dropout": {"uniform": [0, 0.5]},
                                        "layers": {"int": [2, 4]}, "opt": {"choice": ["adam", "sgd", True]}}}


def test_random_draws_stay_in_their_ranges_and_cover_them():
    els = elements(sweep({"random": RANDOM}))
    assert len(els) == 50
    for e in els:
        assert 1.0e-5 <= e.params["lr"] < 1.0e-2 and 0 <= e.params["dropout"] < 0.5
        assert e.params["layers"] in (2, 3, 4) and e.params["opt"] in ("adam", "sgd", True)
    assert {e.params["layers"] for e in els} == {2, 3, 4}
    assert {json.dumps(e.params["opt"]) for e in els} == {'"adam"', '"sgd"', "true"}
    logs = [math.log10(e.params["lr"]) for e in els]
    assert min(logs) < -4 and max(logs) > -3  # spread over the decades, not crowded at the top


def test_random_is_deterministic_and_growing_n_keeps_the_earlier_elements():
    a = elements(sweep({"random": RANDOM}))
    assert a == elements(sweep({"random": RANDOM}))
    more = elements(sweep({"random": {**RANDOM, "n": 80}}))
    assert more[:50] == a
    other = elements(sweep({"random": {**RANDOM, "seed": 8}}))
    assert [e.params for e in other] != [e.params for e in a]


def test_random_draws_are_pinned():
    """Known values (the same from Python 3.10 to 3.13, measured): a change in the drawing shows up here."""
    els = elements(sweep({"random": {"n": 2, "seed": 7, "space": {"x": {"uniform": [0, 1]}, "k": {"int": [0, 9]}}}}))
    assert [e.params for e in els] == [{"x": 0.10737686884935027, "k": 2}, {"x": 0.8900367497342596, "k": 9}]


def test_element_seed_is_stable_distinct_and_31_bit():
    assert element_seed(5, 0) == element_seed(5, 0)
    seeds = {element_seed(5, i) for i in range(1000)}
    assert len(seeds) == 1000 and all(0 <= s < 2 ** 31 for s in seeds)
    assert element_seed(5, 3) != element_seed(6, 3)
    # the documented derivation, pinned: the first 31 bits of sha256("launcher-sweep-seed:<seed>:<index>")
    import hashlib

    want = int.from_bytes(hashlib.sha256(b"launcher-sweep-seed:5:3").digest()[:4], "big") & 0x7FFFFFFF
    assert element_seed(5, 3) == want


@pytest.mark.parametrize("root,index,want", [
    ("/shared/ck/run", 3, "/shared/ck/run/element-0003"),
    ("/shared/ck/run/", 12, "/shared/ck/run/element-0012"),
    ("/", 0, "/element-0000"),
    ("~/ck", 1, "~/ck/element-0001"),
    ("s3://bucket/prefix", 7, "s3://bucket/prefix/element-0007"),
    ("s3://bucket/prefix/", 7, "s3://bucket/prefix/element-0007"),
    ("s3://bucket", 9999, "s3://bucket/element-9999"),
    ("/with space/ck", 2, "/with space/ck/element-0002"),
])
def test_each_element_has_its_own_root_under_the_sweeps(root, index, want):
    assert element_root(root, index) == want


def test_no_root_no_element_root():
    assert element_root(None, 3) is None and element_root("", 3) is None


@pytest.mark.parametrize("value,text", [(True, "true"), (False, "false"), (3, "3"), (-2, "-2"), (1.0e-5, "1e-05"),
                                        (3.0e-4, "0.0003"), (0.1, "0.1"), (2.0, "2.0"), ("x y", "x y"), ("", "")])
def test_values_in_the_environment(value, text):
    assert env_value(value) == text


def test_element_env_names_order_and_json():
    e = Element(2, {"lr": 3.0e-4, "batch": 64, "amp": True, "tag": "a b"})
    env = element_env("sw-1", e, 12, 5, "/ck")
    assert list(env) == ["LAUNCHER_SWEEP_ID", "LAUNCHER_SWEEP_INDEX", "LAUNCHER_SWEEP_SIZE", "LAUNCHER_PARAM_LR",
                         "LAUNCHER_PARAM_BATCH", "LAUNCHER_PARAM_AMP", "LAUNCHER_PARAM_TAG", "LAUNCHER_PARAMS",
                         "LAUNCHER_SWEEP_SEED", "LAUNCHER_SEED", "LAUNCHER_CKPT_ROOT"]
    assert env["LAUNCHER_SWEEP_ID"] == "sw-1" and env["LAUNCHER_SWEEP_INDEX"] == "2"
    assert env["LAUNCHER_SWEEP_SIZE"] == "12" and env["LAUNCHER_PARAM_AMP"] == "true"
    assert json.loads(env["LAUNCHER_PARAMS"]) == {"lr": 3.0e-4, "batch": 64, "amp": True, "tag": "a b"}
    assert env["LAUNCHER_SEED"] == str(element_seed(5, 2)) and env["LAUNCHER_SWEEP_SEED"] == "5"
    assert env["LAUNCHER_CKPT_ROOT"] == "/ck/element-0002"
    assert all(isinstance(v, str) for v in env.values())


def test_element_env_without_seed_or_root_leaves_them_out():
    env = element_env("sw", Element(0, {"a": 1}), 1)
    assert "LAUNCHER_SEED" not in env and "LAUNCHER_CKPT_ROOT" not in env


@pytest.mark.parametrize("value", HOSTILE)
def test_hostile_values_are_carried_raw_and_json_round_trips(value):
    env = element_env("sw", Element(0, {"v": value}), 1)
    assert env["LAUNCHER_PARAM_V"] == value
    assert json.loads(env["LAUNCHER_PARAMS"]) == {"v": value}


def test_the_sweep_seed_comes_from_the_run_then_the_spec_then_the_search():
    base = {"name": "s", "run": "t", "sweep": {"grid": {"a": [1]}}}
    assert sweep_seed_of(parse_spec(base)) == 0
    assert sweep_seed_of(parse_spec({**base, "seed": 11})) == 11
    assert sweep_seed_of(parse_spec({**base, "seed": 11}), job_seed=12) == 12
    with_env = parse_spec({**base, "seed": 11}).model_copy(update={"env": {"LAUNCHER_SEED": "13"}})
    assert sweep_seed_of(with_env, job_seed=12) == 13
    rnd = parse_spec({**base, "sweep": {"random": {"n": 1, "seed": 9, "space": {"a": {"uniform": [0, 1]}}}}})
    assert sweep_seed_of(rnd) == 9


def test_a_sweep_at_the_cap_expands_quickly():
    s = sweep({"grid": {"a": list(range(100)), "b": list(range(100))}})
    els = elements(s)
    assert len(els) == 10_000 and els[-1].params == {"a": 99, "b": 99}
