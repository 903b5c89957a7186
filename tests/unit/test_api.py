"""launcher.api.facade.Launcher on the built-in local target: real processes on this machine, a
real state store and real checkpoints; typed results, launcher errors, nothing printed."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from launcher.api.facade import Launcher, Rendered, Submitted
from launcher.recovery.cancel import CancelReport
from launcher.core.errors import LauncherError, SpecError
from launcher.backend.sections import spec_from_text
from launcher.core.status import JobState
from tests.fixtures.polling import poll

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def lx(tmp_path):
    cfg = tmp_path / "config.yaml"
    cfg.write_text("targets: {}\n")
    notes: list = []
    with Launcher(config=cfg, home=tmp_path / "home", note=notes.append) as launcher:
        launcher.seen = notes
        yield launcher


@pytest.fixture
def train_spec(tmp_path) -> Path:
    shutil.copy(ROOT / "examples" / "train.py", tmp_path / "train.py")
    f = tmp_path / "train.yaml"
    f.write_text("name: train\nworkdir: .\n"
                 "run: python3 train.py --steps 12 --every 4 --sleep 0.01 --result result.json\n"
                 "checkpoint: {root: ./ckpt}\nresources: {time_limit: 10m}\n")
    return f


def test_launch_wait_status_logs_checkpoints_report(lx, train_spec, tmp_path):
    s = lx.launch(train_spec, target="local")
    assert isinstance(s, Submitted) and s.target == "local" and s.backend == "local" and s.native_id
    assert lx.wait(s.job_id, poll=0.2, timeout=120).state is JobState.COMPLETED

    d = lx.status(s.job_id)
    assert d.state == "COMPLETED" and not d.open and d.job.last_step == 12
    assert [a.attempt for a in d.attempts] == [1] and d.attempts[0].state == "COMPLETED"
    assert d.to_dict()["attempts"][0]["state"] == "COMPLETED"
    assert any(e["kind"] == "submitted" for e in d.events)
    assert [j.job_id for j in lx.jobs()] == [s.job_id]

    out = "".join(lx.logs(s.job_id))
    assert "RESULT " in out and "steps=12" in out

    listing = lx.checkpoints(str(tmp_path / "ckpt"))
    assert listing.latest is not None and listing.latest.step == 12
    assert {e.state for e in listing.entries} == {"committed"}

    rep = lx.report(s.job_id, refresh=False)
    d2 = rep.to_dict()
    assert rep.job.job_id == s.job_id and d2["state"] == "COMPLETED" and d2["target"] == "local"
    assert rep.accounting.goodput_pct is not None and d2["goodput_pct"] == rep.accounting.goodput_pct
    assert d2["categories"]["useful_compute"] > 0 and "plot" not in d2

    assert lx.watch() == []  # nothing open: one cycle, nothing to do


def test_a_relaunch_resumes_and_says_so_in_its_notes(lx, train_spec):
    first = lx.launch(train_spec, target="local")
    lx.wait(first.job_id, poll=0.2, timeout=120)
    again = lx.launch(train_spec, target="local")
    assert any("resum" in n for n in again.notes), again.notes
    assert set(again.notes) <= set(lx.seen)  # every note also went to the callback, as it came
    fresh = lx.launch(train_spec, target="local", fresh=True)
    assert any("fresh" in n for n in fresh.notes), fresh.notes


def test_follow_the_logs_to_the_end_and_take_the_exit_status(lx, tmp_path):
    from launcher.api.results import exit_status

    s = lx.launch("name: fails\nrun: 'echo out-line; exit 3'\n")
    logs = lx.logs(s.job_id, follow=True)
    assert "out-line" in "".join(logs)
    assert logs.status is not None and logs.status.state.is_terminal and exit_status(logs.status) == 3


def test_cancel_a_running_job_then_again(lx):
    s = lx.launch("name: sleeper\nrun: sleep 300\n", target="local")
    poll("running", lambda: lx.status(s.job_id).state == "RUNNING", timeout=60, interval=0.2)
    r = lx.cancel(s.job_id)
    assert isinstance(r, CancelReport) and r.ok and r.cancelled and r.finished is None
    d = lx.status(s.job_id)
    assert d.state == "CANCELLED" and not d.open
    again = lx.cancel(s.job_id)
    assert again.finished is not None and again.finished.startswith("CANCELLED") and not again.cancelled


def test_render_takes_a_path_yaml_text_or_a_jobspec(lx, train_spec, tmp_path):
    from_path = lx.render(train_spec)
    assert isinstance(from_path, Rendered) and from_path.target == "local"
    assert from_path.text.startswith("#!/bin/bash") and "train.py --steps 12" in from_path.text
    assert f"export LAUNCHER_SEED={from_path.seed}" in from_path.text
    assert any("drawn for this render only" in n for n in from_path.notes)

    text = "name: t\nrun: echo from-text\nseed: 7\n"
    r = lx.render(text)
    assert "echo from-text" in r.text and r.seed == 7 and not any("drawn" in n for n in r.notes)
    r = lx.render(spec_from_text(text))
    assert "echo from-text" in r.text and r.seed == 7


def test_a_jobspec_variant_launches_and_its_recorded_text_resubmits(lx, tmp_path):
    """What a sweep driver does: one base spec, variants made in Python, each launched."""
    base = spec_from_text("name: sweep\nrun: 'echo lr=$LR'\n")
    ids = []
    for lr in ("0.1", "0.01"):
        v = base.model_copy(update={"name": f"sweep-lr{lr}", "env": {"LR": lr}})
        ids.append(lx.launch(v).job_id)
    for job, lr in zip(ids, ("0.1", "0.01")):
        assert lx.wait(job, poll=0.2, timeout=60).state is JobState.COMPLETED
        assert f"lr={lr}" in "".join(lx.logs(job))
    from launcher.launching.submission import job_spec

    row = lx.app.store.get_job(ids[0])
    assert job_spec(row).env["LR"] == "0.1"  # what `launcher watch` would resubmit


def test_plan_validate_targets_backends(lx, train_spec):
    result = lx.plan(train_spec, work="1h")
    assert result.best is not None and result.best.offer.target == "local"
    assert result.assumptions["work_hours"] == 1.0
    assert lx.validate(train_spec).spec.name == "train"
    loaded = lx.load(train_spec)  # relative paths resolved against the file's folder
    assert loaded.workdir == str(train_spec.parent) and loaded.checkpoint.root == str(train_spec.parent / "ckpt")
    assert [t.to_dict() for t in lx.targets(probe=False)] == [{"name": "local", "backend": "local"}]
    probed = lx.targets()
    assert probed[0].facts and probed[0].error is None
    assert "local" in {b.name for b in lx.backends()}


def test_errors_are_launcher_errors_never_exits(lx, tmp_path):
    with pytest.raises(LauncherError, match="no job 'nope'"):
        lx.status("nope")
    with pytest.raises(SpecError) as e:
        lx.validate("name: x\nrun: echo\nresources: {nodes: -1}\n")
    assert e.value.problems[0][0] == "resources.nodes"
    with pytest.raises(SpecError, match="targets\\[0\\]"):
        lx.validate("name: x\nrun: echo\ntargets: [nowhere]\n")
    with pytest.raises(LauncherError, match="unknown target 'lcoal'"):
        lx.render("name: x\nrun: echo\n", target="lcoal")
    with pytest.raises(LauncherError):
        lx.checkpoints(str(tmp_path / "no-such-root"))
    with pytest.raises(SpecError, match="work"):
        lx.plan("name: x\nrun: echo\n", work="soon")


def test_close_releases_the_store(tmp_path):
    with Launcher(home=tmp_path / "home", config=tmp_path / "none.yaml") as lx:
        assert lx.jobs() == []
        store = lx.app.opened_store()
        assert store is not None
    assert lx.app.opened_store() is None
    lx.app.use_store(store)  # a given store is the one the app reads
    assert lx.app.store is store


def test_a_jobspec_is_recorded_as_text_that_parses_back_into_it():
    import glob

    from launcher.backend.sections import load_spec
    from launcher.launching.specinput import spec_text

    for f in glob.glob(str(ROOT / "examples" / "*.yaml")) + glob.glob(str(ROOT / "tests/golden/specs/*.yaml")):
        spec = load_spec(f)
        assert spec_from_text(spec_text(spec)).model_dump() == spec.model_dump(), f
