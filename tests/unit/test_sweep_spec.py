"""The sweep: section is validated like the rest of the spec: every error names its field."""

from __future__ import annotations

import pytest

from launcher.core.errors import SpecError
from launcher.backend.sections import parse_spec
from launcher.spec.sweep import MAX_SIZE, MAX_VALUE_CHARS, param_env_name


def spec(sweep) -> dict:
    return {"name": "s", "run": "true", "sweep": sweep}


def problems(sweep) -> list[tuple[str, str]]:
    with pytest.raises(SpecError) as ei:
        parse_spec(spec(sweep), "s.yaml")
    return ei.value.problems


def one_problem(sweep) -> tuple[str, str]:
    p = problems(sweep)
    assert len(p) == 1, p
    return p[0]


def test_a_spec_without_a_sweep_has_none():
    assert parse_spec({"name": "s", "run": "true"}).sweep is None


def test_grid_is_the_cartesian_product_of_its_axes():
    s = parse_spec(spec({"grid": {"lr": [1.0e-4, 3.0e-4], "batch": [32, 64, 128]}, "max_parallel": 4})).sweep
    assert (s.kind, s.size, s.param_names, s.max_parallel) == ("grid", 6, ["lr", "batch"], 4)


def test_points_and_random_sizes():
    assert parse_spec(spec({"points": [{"lr": 1, "wd": 0.1}, {"lr": 2, "wd": 0.0}]})).sweep.size == 2
    r = parse_spec(spec({"random": {"n": 20, "seed": 7, "space": {
        "lr": {"loguniform": [1.0e-5, 1.0e-2]}, "dropout": {"uniform": [0, 0.5]},
        "layers": {"int": [2, 8]}, "opt": {"choice": ["adam", "sgd"]}}}})).sweep
    assert (r.kind, r.size, r.param_names) == ("random", 20, ["lr", "dropout", "layers", "opt"])


def test_values_keep_their_types_and_1_and_true_are_different_values():
    s = parse_spec(spec({"grid": {"v": [1, 1.0, True, "1", "", "a\nb"]}})).sweep
    assert [type(v) for v in s.grid["v"]] == [int, float, bool, str, str, str]


@pytest.mark.parametrize("sweep,field,words", [
    ({"gird": {"a": [1]}}, "sweep.gird", "did you mean 'grid'"),
    ({"grid": {"a": [1]}, "max_paralel": 2}, "sweep.max_paralel", "did you mean 'max_parallel'"),
    ({"grid": {"a": [1]}, "early_stop": {"metric": "l", "mode": "min", "rungs": [1], "kep": 0.5}},
     "sweep.early_stop.kep", "did you mean 'keep'"),
    ({"random": {"n": 2, "seed": 1, "space": {"a": {"uniform": [0, 1]}}, "count": 3}}, "sweep.random.count",
     "unknown key"),
    ({"random": {"n": 2, "seed": 1, "space": {"a": {"normal": [0, 1]}}}}, "sweep.random.space.a.normal",
     "unknown key"),
])
def test_unknown_keys_are_refused_with_a_suggestion(sweep, field, words):
    path, msg = one_problem(sweep)
    assert path == field and words in msg


@pytest.mark.parametrize("sweep,field,words", [
    ({"grid": {"lr": []}}, "sweep.grid", "grid axis 'lr' is empty"),
    ({"grid": {}}, "sweep.grid", "grid is empty"),
    ({"points": []}, "sweep.points", "points is empty"),
    ({"points": [{}]}, "sweep.points", "points[0] is empty"),
    ({"random": {"n": 2, "seed": 1, "space": {}}}, "sweep.random.space", "space is empty"),
    ({"random": {"n": 2, "seed": 1, "space": {"c": {"choice": []}}}}, "sweep.random.space.c.choice", "at least 1"),
    ({"random": {"n": 0, "seed": 1, "space": {"a": {"uniform": [0, 1]}}}}, "sweep.random.n", "greater than or equal to 1"),
])
def test_empty_axes_and_sets_are_refused(sweep, field, words):
    path, msg = one_problem(sweep)
    assert path == field and words in msg, (path, msg)


def test_a_grid_over_the_cap_says_how_big_it_is_and_what_the_cap_is():
    axes = {f"a{i}": list(range(10)) for i in range(4)}
    axes["b"] = [1, 2]
    path, msg = one_problem({"grid": axes})
    assert path == "sweep" and "20,000 elements (10 x 10 x 10 x 10 x 2)" in msg and f"{MAX_SIZE:,}" in msg


def test_the_cap_itself_is_allowed_and_other_kinds_are_capped_by_their_count():
    assert parse_spec(spec({"grid": {"a": list(range(100)), "b": list(range(100))}})).sweep.size == MAX_SIZE
    path, _ = one_problem({"random": {"n": MAX_SIZE + 1, "seed": 1, "space": {"a": {"uniform": [0, 1]}}}})
    assert path == "sweep.random.n"
    path, _ = one_problem({"points": [{"a": i} for i in range(MAX_SIZE + 1)]})
    assert path == "sweep.points"


@pytest.mark.parametrize("name", ["bad-name", "1st", "_x", "a b", "lr$(id)", "ä", "a" * 65, ""])
def test_parameter_names_must_be_able_to_become_environment_variable_names(name):
    path, msg = one_problem({"grid": {name: [1]}})
    assert path.startswith("sweep.grid") and "LAUNCHER_PARAM_" in msg and "a letter, then letters" in msg


def test_parameter_names_are_checked_in_points_and_random_too():
    assert one_problem({"points": [{"a-b": 1}]})[0].startswith("sweep.points[0]")
    assert one_problem({"random": {"n": 1, "seed": 1, "space": {"a.b": {"uniform": [0, 1]}}}})[0] \
        .startswith("sweep.random.space")


def test_names_that_differ_only_by_case_would_share_a_variable_and_are_refused():
    path, msg = one_problem({"grid": {"lr": [1], "LR": [2]}})
    assert path == "sweep.grid" and "LAUNCHER_PARAM_LR" in msg
    assert param_env_name("lr") == param_env_name("Lr") == "LAUNCHER_PARAM_LR"


def test_points_must_all_name_the_same_parameters():
    path, msg = one_problem({"points": [{"a": 1, "b": 2}, {"a": 1, "b": 3}, {"a": 1, "c": 3}]})
    assert path == "sweep.points" and "points[2]" in msg and "missing ['b']" in msg and "['c']" in msg


def test_replicated_points_are_allowed_but_a_repeated_grid_value_is_a_mistake():
    assert parse_spec(spec({"points": [{"a": 1}, {"a": 1}]})).sweep.size == 2
    path, msg = one_problem({"grid": {"a": [0.1, 0.2, 0.1]}})
    assert path == "sweep.grid" and "lists 0.1 twice" in msg


@pytest.mark.parametrize("sweep", [{}, {"max_parallel": 2},
                                   {"grid": {"a": [1]}, "points": [{"a": 1}]},
                                   {"grid": {"a": [1]}, "random": {"n": 1, "seed": 1, "space": {"a": {"uniform": [0, 1]}}}}])
def test_exactly_one_of_grid_points_random(sweep):
    path, msg = one_problem(sweep)
    assert path == "sweep" and "exactly one of grid, points or random" in msg


@pytest.mark.parametrize("value,words", [
    ([1], "boolean, an integer, a number or a string"), ({"x": 1}, "boolean, an integer"),
    (None, "boolean, an integer"), (float("nan"), "finite"), (float("inf"), "finite"),
    ("x" * (MAX_VALUE_CHARS + 1), f"at most {MAX_VALUE_CHARS}"),
])
def test_a_value_is_one_scalar_with_one_clear_error(value, words):
    path, msg = one_problem({"grid": {"a": [value]}})
    assert path == "sweep.grid.a[0]" and words in msg, (path, msg)


@pytest.mark.parametrize("dist,words", [
    ({"uniform": [1, 1]}, "lo < hi"), ({"uniform": [2, 1]}, "lo < hi"), ({"loguniform": [0, 1]}, "lo > 0"),
    ({"loguniform": [-1, 1]}, "lo > 0"), ({"int": [3, 2]}, "lo <= hi"), ({"uniform": [0]}, "at least 2"),
    ({"uniform": [0, 1, 2]}, "at most 2"), ({"uniform": [0, 1], "choice": [1]}, "exactly one of"),
    ({}, "exactly one of"), ({"int": [0.5, 2]}, "valid integer"), ({"uniform": [True, 2]}, "finite number"),
])
def test_random_distributions_are_checked(dist, words):
    p = problems({"random": {"n": 2, "seed": 1, "space": {"a": dist}}})
    assert all(path.startswith("sweep.random.space.a") for path, _ in p) and any(words in m for _, m in p), p


def test_an_int_range_may_be_a_single_value():
    assert parse_spec(spec({"random": {"n": 1, "seed": 0, "space": {"k": {"int": [3, 3]}}}})).sweep.size == 1


def test_random_needs_its_seed():
    path, msg = one_problem({"random": {"n": 2, "space": {"a": {"uniform": [0, 1]}}}})
    assert path == "sweep.random.seed" and "required" in msg


@pytest.mark.parametrize("max_parallel", [0, -1, MAX_SIZE + 1, "x"])
def test_max_parallel_is_a_positive_count(max_parallel):
    assert one_problem({"grid": {"a": [1]}, "max_parallel": max_parallel})[0] == "sweep.max_parallel"


def test_early_stop_is_parsed():
    e = parse_spec({**spec({"grid": {"a": [1]}, "early_stop": {
        "metric": "loss", "mode": "min", "min_steps": 100, "keep": 0.5, "rungs": [100, 300, 900]}}),
        "checkpoint": {"root": "/ck"}}).sweep.early_stop
    assert (e.metric, e.mode, e.min_steps, e.keep, e.rungs) == ("loss", "min", 100, 0.5, [100, 300, 900])


@pytest.mark.parametrize("early,field,words", [
    ({"mode": "min", "rungs": [1]}, "sweep.early_stop.metric", "required"),
    ({"metric": "loss", "rungs": [1]}, "sweep.early_stop.mode", "required"),
    ({"metric": "loss", "mode": "mid", "rungs": [1]}, "sweep.early_stop.mode", "'min' or 'max'"),
    ({"metric": "loss", "mode": "min", "rungs": []}, "sweep.early_stop.rungs", "at least 1"),
    ({"metric": "loss", "mode": "min", "rungs": [300, 100]}, "sweep.early_stop", "strictly increasing"),
    ({"metric": "loss", "mode": "min", "rungs": [100, 100]}, "sweep.early_stop", "strictly increasing"),
    ({"metric": "loss", "mode": "min", "rungs": [0]}, "sweep.early_stop.rungs[0]", "greater than or equal to 1"),
    ({"metric": "loss", "mode": "min", "min_steps": 200, "rungs": [100, 300]}, "sweep.early_stop", "below min_steps"),
    ({"metric": "loss", "mode": "min", "keep": 1, "rungs": [1]}, "sweep.early_stop.keep", "less than 1"),
    ({"metric": "loss", "mode": "min", "keep": 0, "rungs": [1]}, "sweep.early_stop.keep", "greater than 0"),
    ({"metric": "$(id)", "mode": "min", "rungs": [1]}, "sweep.early_stop.metric", "metric name"),
])
def test_early_stop_errors_name_the_field(early, field, words):
    path, msg = one_problem({"grid": {"a": [1]}, "early_stop": early})
    assert path == field and words in msg, (path, msg)


def test_errors_carry_the_line_of_the_yaml():
    from launcher.backend.sections import spec_from_text

    with pytest.raises(SpecError) as ei:
        spec_from_text("name: s\nrun: x\nsweep:\n  grid:\n    lr: []\n", "s.yaml")
    assert "line" in ei.value.problems[0][1]


def test_the_section_survives_a_json_dump_and_reload():
    from launcher.spec.sweep import SweepSpec

    s = parse_spec({**spec({"random": {"n": 3, "seed": 1, "space": {"k": {"int": [1, 3]}, "c": {"choice": [True, 1, 1.5, "x"]}}},
                         "max_parallel": 2, "early_stop": {"metric": "loss", "mode": "min", "rungs": [10]}}),
                   "checkpoint": {"root": "/ck"}}).sweep
    assert SweepSpec.model_validate(s.model_dump(mode="json")) == s
    assert SweepSpec.model_validate(s.model_dump(mode="json", by_alias=True)) == s
