"""The watcher's memo of parsed specs (``launching.submission.SpecMemo``) answers exactly what the
plain ``job_spec`` answers for the same row, parses again whenever an input of the spec
changes, and forgets the jobs that are no longer open. ``job_spec`` is its oracle."""

from __future__ import annotations

from dataclasses import replace

import pytest

from launcher.core.errors import LauncherError
from launcher.launching import submission
from launcher.launching.submission import SpecMemo, job_spec, spec_inputs
from launcher.state.rows import JobRow

SPEC = "name: memo\nrun: 'python train.py'\nworkdir: code\ncheckpoint:\n  root: ckpt\nenv:\n  A: '1'\n"


def row(job_id="j1", spec=SPEC, **meta) -> JobRow:
    return JobRow(job_id=job_id, name="memo", target="local", backend="local", spec_path=None, spec_yaml=spec,
                  created=0.0, updated=0.0, state="RUNNING", reason="", handle="{}", ckpt_root=None, last_step=None,
                  meta={"spec_base": "/srv/specs", "seed": 7, **meta})


def counting(monkeypatch) -> list:
    calls = []
    plain = submission.job_spec

    def counted(r):
        calls.append(r.job_id)
        return plain(r)

    monkeypatch.setattr(submission, "job_spec", counted)
    return calls


def test_the_memo_answers_what_job_spec_answers_and_parses_each_job_once(monkeypatch):
    calls = counting(monkeypatch)
    memo = SpecMemo()
    rows = [row("j1"), row("j2", seed=8), row("j3", fresh=True), row("j4", trackers={"mlflow": {"run_id": "r", "tracking_uri": "http://127.0.0.1:5000"}})]
    for _ in range(3):  # three passes over the same open jobs
        for r in rows:
            assert memo.spec(replace(r, state="PENDING")) == job_spec(r)
    assert sorted(calls) == ["j1", "j2", "j3", "j4"]
    fresh = memo.spec(rows[2])
    assert fresh.env.get("LAUNCHER_FRESH") == "1" and fresh.env["LAUNCHER_SEED"] == "7"
    assert memo.spec(rows[0]).workdir == "/srv/specs/code"
    assert memo.spec(rows[3]).env["MLFLOW_RUN_ID"] == "r"


@pytest.mark.parametrize("change", [
    {"spec_yaml": SPEC.replace("'1'", "'2'")},
    {"spec_path": "/elsewhere/job.yaml"},
    {"meta": {"spec_base": "/other", "seed": 7}},
    {"meta": {"spec_base": "/srv/specs", "seed": 9}},
    {"meta": {"spec_base": "/srv/specs", "seed": 7, "fresh": True}},
    {"meta": {"spec_base": "/srv/specs", "seed": 7, "trackers": {"wandb": {"run_id": "w"}}}},
])
def test_any_input_of_the_spec_that_changes_parses_it_again(monkeypatch, change):
    calls = counting(monkeypatch)
    memo = SpecMemo()
    before = row()
    memo.spec(before)
    after = replace(before, **change)
    assert spec_inputs(after) != spec_inputs(before)
    assert memo.spec(after) == job_spec(after)
    assert calls == ["j1", "j1"]


def test_jobs_no_longer_open_are_forgotten(monkeypatch):
    calls = counting(monkeypatch)
    memo = SpecMemo()
    for j in ("a", "b", "c"):
        memo.spec(row(j))
    memo.keep_only(j for j in ("b",))
    assert len(memo) == 1
    memo.spec(row("a"))
    memo.spec(row("b"))
    assert calls == ["a", "b", "c", "a"]


def test_a_spec_that_cannot_be_read_is_an_error_every_time_and_never_kept():
    memo = SpecMemo()
    bad = row(spec="name: [unclosed\n")
    for _ in range(2):
        with pytest.raises(LauncherError):
            memo.spec(bad)
    assert len(memo) == 0
