"""`launcher watch` carries early stopping out: each pass judges the sweep on the elements'
reports and ends the elements it stops through the backend's cancel, as STOPPED (final, not a
failure, never resubmitted). Over a stateful fake scheduler (no cluster: the real one is in
tests/integration/test_sweep_early_stop_slurm.py)."""

from __future__ import annotations

import pytest

import launcher.jobside as jobside
from launcher.backend.protocols import Handle
from launcher.core.errors import LauncherError
from launcher.recovery import watch
from launcher.core.status import STOPPED, JobState, Status
from launcher.sweep.control import sweep_status
from launcher.sweep.judgements import record
from launcher.sweep.elements import element_rows, sweep_rows
from launcher.spec.sweep import EarlyStop
from launcher.sweep.summary import format_text
from launcher.backend.sections import spec_from_text

# the tests with a store: on SQLite and on PostgreSQL (tests.fixtures.stores)
both_engines = pytest.mark.usefixtures("state_engine")

LOSS = [0.4, 0.1, 0.3, 0.2]  # rung 10 stops 0 and 2; rung 20 stops 3 (ranks 2 of 2); 1 runs to the end


class FakeScheduler:
    """Answers status from its table; cancel marks an element CANCELLED (or fails, when told)."""

    name = "fake"

    def __init__(self):
        self.states: dict = {}
        self.cancelled: list = []
        self.fail_cancel = False

    def status(self, handles):
        return [Status(self.states.get(h.native_id, JobState.UNKNOWN), native_state="x") for h in handles]

    def cancel(self, h):
        if self.fail_cancel:
            raise LauncherError("scancel: slurm_load_jobs error: Socket timed out")
        self.cancelled.append(h.native_id)
        self.states[h.native_id] = JobState.CANCELLED

    def cancel_many(self, handles):
        errors = {}
        for h in handles:
            try:
                self.cancel(h)
            except LauncherError as e:
                errors[h.native_id] = str(e)
        return errors

    def find(self, job):
        return None  # it keeps no dedupe token

    def close(self):
        pass


@pytest.fixture
def rig(app, tmp_path):
    fake = FakeScheduler()
    app._backends["local"] = fake
    text = (f"name: sw\nrun: python3 train.py\ncheckpoint: {{root: {tmp_path / 'ck'}}}\n"
            "sweep: {grid: {x: [0, 1, 2, 3]}, early_stop: {metric: loss, mode: min, keep: 0.5, rungs: [10, 20]}}\n")
    for r in element_rows("sw-1", spec_from_text(text), 7, str(tmp_path)):
        app.store.begin_job(r["job_id"], "sw", "local", "fake", None, text, ckpt_root=r["ckpt_root"], meta=r["meta"])
        h = Handle("fake", "local", r["job_id"], f"100_{r['index']}")
        app.store.record_attempt(r["job_id"], 1, "local", h.to_json(), h.native_id, state="RUNNING")
        fake.states[h.native_id] = JobState.RUNNING
    return app, fake, tmp_path / "ck"


def reports(monkeypatch, root, step: int, elements) -> None:
    """What element I's program does: jobside.report(step, loss=LOSS[i]) every 5 steps."""
    for i in elements:
        monkeypatch.setenv("LAUNCHER_CKPT_ROOT", str(root / f"element-{i:04d}"))
        monkeypatch.setenv("LAUNCHER_ATTEMPT", "1")
        for s in range(5, step + 1, 5):
            jobside.report(s, loss=LOSS[i])


def states(app) -> list:
    return [r.state for r in sweep_rows(app.store, "sw-1")]


@both_engines
def test_each_rung_stops_the_worst_half_through_cancel_and_the_survivor_completes(rig, monkeypatch):
    app, fake, root = rig
    reports(monkeypatch, root, 10, range(4))
    out = watch.cycle(app)
    assert sorted(o.job_id for o in out if o.action == "early_stop") == [f"sw-1-e{i}" for i in range(4)]
    assert sorted(o.job_id for o in out if o.action == "stopped") == ["sw-1-e0", "sw-1-e2"]
    assert sorted(fake.cancelled) == ["100_0", "100_2"]
    assert states(app) == [STOPPED, "RUNNING", STOPPED, "RUNNING"]
    e0 = app.store.get_job("sw-1-e0")
    assert e0.reason == "rung 10: loss 0.4 ranks 4 of 4 (lowest first; the best 2 go on): stopped"
    assert [a.state for a in app.store.attempts("sw-1-e0")] == ["CANCELLED"]  # not a failure
    assert [e["kind"] for e in app.store.events("sw-1-e0")][-2:] == ["early_stop", "early_stopped"]

    assert [o.action for o in watch.cycle(app)] == ["running", "running"]  # nothing judged or stopped twice
    reports(monkeypatch, root, 20, (1, 3))
    out = watch.cycle(app)
    assert [(o.job_id, o.action) for o in out if o.action in ("early_stop", "stopped")] == [
        ("sw-1-e1", "early_stop"), ("sw-1-e3", "early_stop"), ("sw-1-e3", "stopped")]
    assert sorted(fake.cancelled) == ["100_0", "100_2", "100_3"]
    fake.states["100_1"] = JobState.COMPLETED
    watch.cycle(app)
    assert states(app) == [STOPPED, "COMPLETED", STOPPED, STOPPED]
    assert app.store.open_jobs() == []

    s = sweep_status(app, "sw-1")
    assert s["counts"] == {"COMPLETED": 1, STOPPED: 3} and s["metric"] == "loss"
    # the programs reported metrics and committed no checkpoint: no element has a step of its own (its
    # row's last committed step, launcher.state.rows.job_step); each reported step is its metric's
    assert [(e["state"], e["step"], e["metric"], e["metric_step"], e["rung"]) for e in s["elements"]] == [
        (STOPPED, None, 0.4, 10, 10), ("COMPLETED", None, 0.1, 20, None), (STOPPED, None, 0.3, 10, 10),
        (STOPPED, None, 0.2, 20, 20)]
    assert "element 3 stopped: rung 20: loss 0.2 ranks 2 of 2" in format_text(s)


@both_engines
def test_an_element_whose_attempt_ended_with_a_stop_recorded_is_closed_stopped_not_resubmitted(rig, monkeypatch):
    app, fake, root = rig
    record(app.store, "sw-1", EarlyStop(metric="loss", mode="min", keep=0.5, rungs=[10, 20]),
           {i: {10: {"loss": v}} for i, v in enumerate(LOSS)})
    fake.states["100_0"] = JobState.PREEMPTED  # preempted before the stop was carried out
    out = watch.cycle(app)
    assert ("sw-1-e0", "stopped") in [(o.job_id, o.action) for o in out]
    assert app.store.get_job("sw-1-e0").state == STOPPED
    assert [a.attempt for a in app.store.attempts("sw-1-e0")] == [1]  # never resubmitted
    assert "100_0" not in fake.cancelled  # nothing was left to cancel


@both_engines
def test_a_cancel_that_fails_leaves_the_element_open_and_the_next_pass_stops_it(rig, monkeypatch):
    app, fake, root = rig
    reports(monkeypatch, root, 10, range(4))
    fake.fail_cancel = True
    out = watch.cycle(app)
    failed = [o for o in out if o.action == "control_plane"]
    assert sorted(o.job_id for o in failed) == ["sw-1-e0", "sw-1-e2"] and "Socket timed out" in failed[0].reason
    assert states(app) == ["RUNNING"] * 4
    fake.fail_cancel = False
    out = watch.cycle(app)
    assert sorted(o.job_id for o in out if o.action == "stopped") == ["sw-1-e0", "sw-1-e2"]
    assert not any(o.action == "early_stop" for o in out)  # judged once, in the first pass
    assert states(app) == [STOPPED, "RUNNING", STOPPED, "RUNNING"]


@both_engines
def test_a_sweep_without_early_stop_is_never_judged(app, tmp_path, monkeypatch):
    fake = FakeScheduler()
    app._backends["local"] = fake
    text = f"name: sw\nrun: python3 train.py\ncheckpoint: {{root: {tmp_path / 'ck'}}}\nsweep: {{grid: {{x: [0, 1]}}}}\n"
    for r in element_rows("sw-2", spec_from_text(text), 7, str(tmp_path)):
        app.store.begin_job(r["job_id"], "sw", "local", "fake", None, text, ckpt_root=r["ckpt_root"], meta=r["meta"])
        h = Handle("fake", "local", r["job_id"], f"200_{r['index']}")
        app.store.record_attempt(r["job_id"], 1, "local", h.to_json(), h.native_id, state="RUNNING")
        fake.states[h.native_id] = JobState.RUNNING
    monkeypatch.setenv("LAUNCHER_CKPT_ROOT", str(tmp_path / "ck" / "element-0001"))
    monkeypatch.setenv("LAUNCHER_ATTEMPT", "1")
    jobside.report(30, loss=9.0, acc=0.25)
    assert [o.action for o in watch.cycle(app)] == ["running", "running"]
    s = sweep_status(app, "sw-2")
    assert s["metric"] is None and s["elements"][1]["metrics"] == {"loss": 9.0, "acc": 0.25}
    assert s["elements"][1]["metric_step"] == 30 and s["elements"][1]["step"] is None  # reported, not committed
    assert "acc=0.25 loss=9" in format_text(s)


def test_early_stop_without_a_checkpoint_root_is_refused_at_validation():
    from launcher.core.errors import LauncherError as Err

    with pytest.raises(Exception) as e:
        spec_from_text("name: sw\nrun: python3 t.py\nsweep: {grid: {x: [0, 1]}, "
                       "early_stop: {metric: loss, mode: min, rungs: [10]}}\n")
    assert "sweep.early_stop needs checkpoint.root" in str(e.value)
    assert isinstance(e.value, (Err, ValueError))
