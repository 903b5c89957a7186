"""A watch pass carries its early stops out as ONE batch: one cancel per target for every
element stopped in the pass (``CancelsMany``: one grace period for all), each element then
closed STOPPED and recorded as a single stop is. An element whose cancel failed stays open,
is reported once and not cancelled again in the same pass; one another watcher holds is left
to that watcher. Over a stateful fake scheduler (the real local sweep is in
tests/integration/test_sweep_early_stop_local.py)."""

from __future__ import annotations

import pytest

import launcher.jobside as jobside
from launcher.backend.protocols import Handle
from launcher.backend.sections import spec_from_text
from launcher.core.status import STOPPED, JobState, Status
from launcher.recovery import watch
from launcher.sweep.elements import element_rows, sweep_rows

LOSS = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6]  # keep 0.5 at rung 10: elements 3, 4 and 5 are stopped


class ManyScheduler:
    """Status from its table; cancel_many records each call (and fails the ids it is told to)."""

    name = "fake"

    def __init__(self):
        self.states: dict = {}
        self.calls: list = []
        self.refuse: set = set()

    def status(self, handles):
        return [Status(self.states.get(h.native_id, JobState.UNKNOWN), native_state="x") for h in handles]

    def find(self, job):  # nothing submitted behind the store's back
        return None

    def close(self):
        pass

    def cancel_many(self, handles):
        self.calls.append(sorted(h.native_id for h in handles))
        errors = {}
        for h in handles:
            if h.native_id in self.refuse:
                errors[h.native_id] = "Socket timed out"
            else:
                self.states[h.native_id] = JobState.CANCELLED
        return errors

    def cancel(self, h):  # as LocalBackend: one cancel is a cancel_many of one
        from launcher.core.errors import LauncherError

        err = self.cancel_many([h]).get(h.native_id)
        if err:
            raise LauncherError(err)


@pytest.fixture
def rig(app, tmp_path, monkeypatch):
    fake = ManyScheduler()
    app._backends["local"] = fake
    text = (f"name: sw\nrun: python3 train.py\ncheckpoint: {{root: {tmp_path / 'ck'}}}\n"
            "sweep: {grid: {x: [0, 1, 2, 3, 4, 5]}, early_stop: {metric: loss, mode: min, keep: 0.5, rungs: [10]}}\n")
    for r in element_rows("sw-1", spec_from_text(text), 7, str(tmp_path)):
        app.store.begin_job(r["job_id"], "sw", "local", "fake", None, text, ckpt_root=r["ckpt_root"], meta=r["meta"])
        h = Handle("fake", "local", r["job_id"], f"100_{r['index']}")
        app.store.record_attempt(r["job_id"], 1, "local", h.to_json(), h.native_id, state="RUNNING")
        fake.states[h.native_id] = JobState.RUNNING
    for i, loss in enumerate(LOSS):
        monkeypatch.setenv("LAUNCHER_CKPT_ROOT", str(tmp_path / "ck" / f"element-{i:04d}"))
        monkeypatch.setenv("LAUNCHER_ATTEMPT", "1")
        jobside.report(10, loss=loss)
    return app, fake


def states(app) -> list:
    return [r.state for r in sweep_rows(app.store, "sw-1")]


def test_the_pass_stops_its_elements_with_one_cancel_and_records_each_stop(rig):
    app, fake = rig
    out = watch.cycle(app)
    assert fake.calls == [["100_3", "100_4", "100_5"]]
    assert [(o.job_id, o.action) for o in out if o.action == "stopped"] == [
        ("sw-1-e3", "stopped"), ("sw-1-e4", "stopped"), ("sw-1-e5", "stopped")]
    assert len([o for o in out if o.job_id == "sw-1-e4"]) == 2  # its judgement, its stop: one outcome each
    assert states(app) == ["RUNNING"] * 3 + [STOPPED] * 3
    for i in (3, 4, 5):
        e = app.store.get_job(f"sw-1-e{i}")
        assert e.reason == f"rung 10: loss 0.{i + 1} ranks {i + 1} of 6 (lowest first; the best 3 go on): stopped"
        assert [a.state for a in app.store.attempts(e.job_id)] == ["CANCELLED"]
        ev = app.store.events(e.job_id)
        assert [x["kind"] for x in ev][-2:] == ["early_stop", "early_stopped"]
        assert ev[-1]["by"] == "early_stop" and ev[-1]["cancelled"] == [f"attempt 1 (fake id 100_{i})"]
        assert ev[-1]["still_active"] == [] and ev[-1]["index"] == i and ev[-1]["stop"]
    assert [o.action for o in watch.cycle(app)] == ["running"] * 3 and len(fake.calls) == 1


def test_a_failed_cancel_stays_open_is_reported_once_and_is_retried_next_pass_only(rig):
    app, fake = rig
    fake.refuse = {"100_4"}
    out = watch.cycle(app)
    assert fake.calls == [["100_3", "100_4", "100_5"]]  # not cancelled again by the pass's per-job step
    e4 = [o for o in out if o.job_id == "sw-1-e4" and o.action != "early_stop"]
    assert [(o.action, o.reason) for o in e4] == [
        ("control_plane", "early stop: could not cancel: attempt 1 (fake id 100_4): Socket timed out")]
    assert states(app) == ["RUNNING"] * 3 + [STOPPED, "RUNNING", STOPPED]
    assert [x["kind"] for x in app.store.events("sw-1-e4")][-1] == "cancel_failed"

    fake.refuse = set()
    out = watch.cycle(app)
    assert fake.calls[1:] == [["100_4"]]
    assert [(o.job_id, o.action) for o in out if o.action in ("stopped", "early_stop")] == [("sw-1-e4", "stopped")]
    assert states(app) == ["RUNNING"] * 3 + [STOPPED] * 3


def test_an_element_another_watcher_holds_is_left_to_it(rig):
    app, fake = rig
    other = app.store.claim("sw-1-e5", ttl=60, owner="other-watcher")
    assert other is not None
    out = watch.cycle(app)
    assert fake.calls == [["100_3", "100_4"]]
    assert [(o.job_id, o.action) for o in out if o.job_id == "sw-1-e5" and o.action != "early_stop"] == [
        ("sw-1-e5", "claimed")]
    assert states(app) == ["RUNNING"] * 3 + [STOPPED, STOPPED, "RUNNING"]
    app.store.release("sw-1-e5", "other-watcher")
    watch.cycle(app)
    assert fake.calls[1:] == [["100_5"]] and states(app)[5] == STOPPED


def test_a_batch_that_cannot_run_leaves_each_stop_to_the_per_job_step(rig, monkeypatch):
    from launcher.core.errors import LauncherError
    from launcher.sweep import stopping

    app, fake = rig

    def broken(*_a, **_k):
        raise LauncherError("the batch could not run")

    monkeypatch.setattr(stopping, "cancel_claimed_many", broken)
    out = watch.cycle(app)  # the claims the batch took were released: each element is stopped on its own
    assert sorted(fake.calls) == [["100_3"], ["100_4"], ["100_5"]]  # one at a time, as before
    assert sorted(o.job_id for o in out if o.action == "stopped") == ["sw-1-e3", "sw-1-e4", "sw-1-e5"]
    assert states(app) == ["RUNNING"] * 3 + [STOPPED] * 3
