"""jobside.report(step, **metrics): validation, the stored layout, and the launcher-side
reader (last value per step and metric wins; lost timelines dropped like their checkpoints)."""

from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest

from launcher import jobside
from launcher.checkpoint import CheckpointError, open_store, start_generation
from launcher.checkpoint.contract import Generations
from launcher.checkpoint.metrics import (check_report, encode_report, merge_reports, metrics_key, parse_reports,
                                         read_metrics, read_reports)
from launcher.jobside import metrics as jm


@pytest.fixture
def job_env(monkeypatch, tmp_path):
    for k in list(os.environ):
        if k.startswith("LAUNCHER_"):
            monkeypatch.delenv(k)
    monkeypatch.setattr(jm, "_FILES", {})
    root = tmp_path / "root"
    monkeypatch.setenv("LAUNCHER_CKPT_ROOT", str(root))
    monkeypatch.setenv("LAUNCHER_ATTEMPT", "1")
    return root


# ---------------------------------------------------------------- validation
@pytest.mark.parametrize("step", [-1, 1.0, "3", None, True, np.float64(2)])
def test_step_must_be_an_int_of_at_least_zero(step):
    with pytest.raises(ValueError, match="step must be an int >= 0"):
        check_report(step, {"loss": 1.0})


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, None, "0.3", True, [1.0], np.float32("nan")])
def test_values_must_be_finite_numbers_and_the_error_names_the_metric(value):
    with pytest.raises(ValueError, match="metric 'loss' must be a finite number"):
        check_report(3, {"acc": 0.5, "loss": value})


def test_ints_floats_and_numpy_scalars_are_stored_as_plain_numbers():
    step, m = check_report(np.int64(7), {"loss": np.float32(0.25), "tokens": np.int32(4096), "lr": 3e-4})
    assert step == 7 and m == {"loss": 0.25, "tokens": 4096, "lr": 3e-4}
    assert type(step) is int and type(m["loss"]) is float and type(m["tokens"]) is int


def test_a_report_needs_a_metric_with_a_sane_name():
    with pytest.raises(ValueError, match="no metric given"):
        check_report(1, {})
    for bad in ("", "a\nb", "x" * 129):
        with pytest.raises(ValueError, match="metric name"):
            check_report(1, {bad: 1.0})


def test_report_refuses_before_writing_anything(job_env):
    with pytest.raises(ValueError, match="metric 'loss'"):
        jobside.report(1, loss=float("nan"))
    with pytest.raises(TypeError):
        jobside.report(loss=1.0)                         # the step is required (positional)
    assert not job_env.exists()


def test_report_without_a_checkpoint_root_is_a_clear_error(job_env, monkeypatch):
    monkeypatch.delenv("LAUNCHER_CKPT_ROOT")
    with pytest.raises(CheckpointError, match="no checkpoint root"):
        jobside.report(1, loss=1.0)


# ---------------------------------------------------------------- parse and merge (pure)
def test_parse_keeps_file_order_and_names_the_lines_it_skips():
    good = encode_report(3, {"loss": 0.5}, 2, "t") + encode_report(3, {"loss": 0.4, "acc": 0.9}, 2, "t")
    data = good + b"\n{not json\n" + b'{"step": -4, "metrics": {"loss": 1}}\n' + b'{"step": 5, "metrics": {"x": NaN}}\n'
    reports, problems = parse_reports(data, "g2.jsonl")
    assert reports == [(3, {"loss": 0.5}), (3, {"loss": 0.4, "acc": 0.9})]
    assert [p.split(":")[0] for p in problems] == ["g2.jsonl line 4", "g2.jsonl line 5", "g2.jsonl line 6"]


def test_the_last_value_per_step_and_metric_wins_later_generations_last():
    by_gen = {2: [(10, {"loss": 0.5}), (20, {"loss": 0.4})],
              1: [(10, {"loss": 0.9, "acc": 0.1})],
              3: [(10, {"loss": 0.45}), (5, {"loss": 1.0})]}
    assert merge_reports(by_gen) == {5: {"loss": 1.0}, 10: {"loss": 0.45, "acc": 0.1}, 20: {"loss": 0.4}}
    assert list(merge_reports(by_gen)) == [5, 10, 20]


def test_reports_of_a_stale_fork_and_of_a_run_started_over_are_dropped():
    # generation 2 resumed from step 100: generation 1's reports above 100 are a lost timeline
    gens = Generations(2, [{"generation": 1, "resume_step": -1}, {"generation": 2, "resume_step": 100}])
    by_gen = {1: [(100, {"loss": 1.0}), (150, {"loss": 0.7})], 2: [(110, {"loss": 0.9})]}
    assert merge_reports(by_gen, gens) == {100: {"loss": 1.0}, 110: {"loss": 0.9}}
    # generation 3 started over (--fresh): nothing before it counts
    gens.history.append({"generation": 3, "resume_step": -1, "fresh": True})
    by_gen[3] = [(0, {"loss": 2.0})]
    assert merge_reports(by_gen, gens) == {0: {"loss": 2.0}}


# ---------------------------------------------------------------- the job side writes, the launcher reads
def test_report_then_read_metrics_on_a_posix_root(job_env):
    assert jobside.report(1, loss=0.9) and jobside.report(2, loss=0.8, acc=0.5) and jobside.report(2, loss=0.75)
    raw = (job_env / metrics_key(1)).read_text().splitlines()
    assert [json.loads(x)["step"] for x in raw] == [1, 2, 2] and json.loads(raw[0])["generation"] == 1
    assert read_metrics(str(job_env)) == {1: {"loss": 0.9}, 2: {"loss": 0.75, "acc": 0.5}}


def test_a_second_process_of_the_same_start_continues_the_file(job_env, monkeypatch):
    jobside.report(1, loss=0.9)
    monkeypatch.setattr(jm, "_FILES", {})              # a new process, same generation
    jobside.report(2, loss=0.8)
    assert read_metrics(str(job_env)) == {1: {"loss": 0.9}, 2: {"loss": 0.8}}


def test_a_report_that_could_not_be_stored_goes_out_with_the_next(job_env, monkeypatch, capsys):
    jobside.report(1, loss=0.9)
    store = jobside.env.store_for(str(job_env))
    real_put, calls = store.put, []

    def flaky_put(key, data):
        calls.append(key)
        if len(calls) == 1:
            raise OSError(28, "No space left on device")
        return real_put(key, data)

    monkeypatch.setattr(store, "put", flaky_put)
    assert jobside.report(2, loss=0.8) is False
    assert "could not store the report of step 2" in capsys.readouterr().err
    assert read_metrics(str(job_env)) == {1: {"loss": 0.9}}
    assert jobside.report(3, loss=0.7) is True
    assert read_metrics(str(job_env)) == {1: {"loss": 0.9}, 2: {"loss": 0.8}, 3: {"loss": 0.7}}


def test_a_restarted_job_drops_what_its_lost_timeline_reported(job_env, monkeypatch):
    store = open_store(str(job_env))
    gens, _, _ = start_generation(store, job_id="j")
    monkeypatch.setenv("LAUNCHER_ATTEMPT", str(gens.generation))
    for step in range(1, 5):
        jobside.report(step, loss=1.0 / step)
        if step == 2:
            with jobside.save(step) as d:
                open(os.path.join(d, "w"), "w").write("x")
    gens, found, _ = start_generation(store, job_id="j")        # the restart resumes from step 2
    assert found.step == 2
    monkeypatch.setenv("LAUNCHER_ATTEMPT", str(gens.generation))
    jobside.report(3, loss=0.3)
    assert read_metrics(str(job_env)) == {1: {"loss": 1.0}, 2: {"loss": 0.5}, 3: {"loss": 0.3}}
    by_gen, problems = read_reports(store)
    assert sorted(by_gen) == [1, 2] and problems == []


def test_reading_a_root_without_reports_gives_nothing(tmp_path):
    assert read_metrics(str(tmp_path / "nothing-here")) == {}
