"""A watch pass decides only on the open jobs that changed or are due (issue 29, item 2):
the pure rules (``launcher.recovery.changes``), the marks in the store (``launcher.state.marks``),
and a pass over a real store whose scheduler is a scripted table of statuses (the status call
itself is what the pass cannot skip: one per target, every pass)."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import pytest

from launcher.backend.protocols import Handle
from launcher.core.errors import LauncherError
from launcher.core.status import JobState, Status
from launcher.launching.submission import job_spec
from launcher.recovery import changes, watch
from launcher.recovery.outcome import NO_HOOKS
from launcher.recovery.state import BurstRace, RecoveryState
from launcher.state import marks
from launcher.state.store import StateStore

SPEC = "name: j\nrun: python3 train.py\n"


def row(**kw):
    base = dict(job_id="j-1", state="RUNNING", updated=100.0, ckpt_root=None, meta={}, spec_yaml=SPEC,
                spec_path=None)
    return SimpleNamespace(**{**base, **kw})


RUNNING = Status(JobState.RUNNING, native_state="RUNNING", start_time=50.0)


# ---- the pure rules
def test_the_fingerprint_follows_every_field_the_decision_reads():
    base = changes.fingerprint(row(), RUNNING)
    assert base == changes.fingerprint(row(), replace(RUNNING, extra={"region": "x"}))  # not read by the decision
    for st in (replace(RUNNING, state=JobState.PENDING), replace(RUNNING, native_state="COMPLETING"),
               replace(RUNNING, reason="Priority"), replace(RUNNING, exit_code=0), replace(RUNNING, restarts=1),
               replace(RUNNING, nodes="n2"), replace(RUNNING, start_time=51.0), replace(RUNNING, end_time=60.0)):
        assert changes.fingerprint(row(), st) != base, st
    assert changes.fingerprint(row(updated=100.5), RUNNING) != base  # the row was written since
    assert changes.fingerprint(row(state="PENDING"), RUNNING) != base
    assert changes.fingerprint(row(), LauncherError("squeue: timed out")) is None
    assert changes.fingerprint(row(), None) is None


def test_a_job_is_passed_over_only_with_the_same_fingerprint_before_its_due_time():
    seen = changes.fingerprint(row(), RUNNING)
    assert changes.unchanged((seen, 200.0), seen, 199.9)
    assert not changes.unchanged((seen, 200.0), seen, 200.0)  # due
    assert not changes.unchanged(("other", 200.0), seen, 150.0)  # changed
    assert not changes.unchanged(None, seen, 150.0)  # never marked
    assert not changes.unchanged((seen, 200.0), None, 150.0)  # the status call failed


def test_due_reads_progress_sooner_than_it_revisits():
    assert changes.due(row(), 1000.0, progress_every=60, revisit=600) == 1600.0
    assert changes.due(row(ckpt_root="/ck"), 1000.0, progress_every=60, revisit=600) == 1060.0
    assert changes.due(row(ckpt_root="/ck"), 1000.0, progress_every=900, revisit=600) == 1600.0


def test_jobs_with_a_clock_only_a_pass_acts_on_are_decided_every_pass():
    plain = job_spec(row())
    bursting = job_spec(row(spec_yaml=SPEC + "targets: [a]\nburst: {after: 30m, to: [b]}\n"))
    deadline = job_spec(row(spec_yaml=SPEC + "cost: {deadline: 2h}\n"))
    rs = RecoveryState()
    pending = replace(RUNNING, state=JobState.PENDING)
    assert not changes.every_pass(rs, plain, RUNNING) and not changes.every_pass(rs, plain, pending)
    assert changes.every_pass(rs, bursting, pending) and not changes.every_pass(rs, bursting, RUNNING)
    assert changes.every_pass(rs, deadline, RUNNING)
    racing = replace(rs, burst=BurstRace("racing", queued_attempt=1, queued_target="a", queued_handle="{}",
                                         copy_attempt=2, copy_target="b"))
    assert changes.every_pass(racing, plain, RUNNING)


# ---- the marks in the store
def test_marks_are_written_replaced_and_forgotten_in_one_transaction(tmp_path):
    store = StateStore(tmp_path / "home")
    try:
        for j in ("a", "b"):
            store.begin_job(j, j, "t", "stub", None, SPEC)
        marks.save(store, [("a", "s1", 10.0), ("b", "s2", 20.0), ("gone", "s3", 30.0)])
        assert marks.load(store) == {"a": ("s1", 10.0), "b": ("s2", 20.0)}  # a mark needs its job
        marks.save(store, [("a", "s4", 40.0)], forget=["b"])
        assert marks.load(store) == {"a": ("s4", 40.0)}
    finally:
        store.close()


# ---- a pass
class Scripted:
    """A scheduler whose answers the test sets: {native id: Status}; every status call counted."""

    name = "stub"

    def __init__(self):
        self.states: dict = {}
        self.calls = 0
        self.fail = False

    def status(self, handles):
        self.calls += 1
        if self.fail:
            raise LauncherError("the scheduler did not answer")
        return [self.states[h.native_id] for h in handles]


@pytest.fixture
def fleet(tmp_path, monkeypatch):
    store = StateStore(tmp_path / "home")
    sched = Scripted()
    app = SimpleNamespace(store=store, backend=lambda name: sched, registry=None, watch_hooks=NO_HOOKS)
    for i in range(5):
        j = f"job-{i}"
        store.begin_job(j, j, "t", "stub", None, SPEC)
        h = Handle("stub", "t", j, str(i), 1)
        store.record_submission(j, 1, "t", h.to_json(), h.native_id, state="RUNNING")
        sched.states[str(i)] = RUNNING
    decided = []
    real = watch._one
    monkeypatch.setattr(watch, "_one", lambda app, job_id, *a, **k: decided.append(job_id) or real(app, job_id, *a, **k))
    monkeypatch.setattr(watch.notify, "kick", lambda app: None)
    clock = SimpleNamespace(now=1000.0)
    yield SimpleNamespace(store=store, sched=sched, app=app, decided=decided, clock=clock,
                          cycle=lambda: watch.cycle(app, clock=lambda: clock.now))
    store.close()


def test_a_pass_decides_on_the_jobs_that_changed_and_only_those(fleet):
    out = fleet.cycle()
    assert sorted(fleet.decided) == [f"job-{i}" for i in range(5)]
    assert {o.job_id: o.action for o in out} == {f"job-{i}": "running" for i in range(5)}
    assert set(marks.load(fleet.store)) == {f"job-{i}" for i in range(5)}
    fleet.decided.clear()
    fleet.clock.now += 10
    out = fleet.cycle()
    assert fleet.decided == [] and fleet.sched.calls == 2  # asked once per pass all the same
    assert {o.job_id: (o.action, o.reason) for o in out} == {f"job-{i}": ("running", "RUNNING") for i in range(5)}
    fleet.sched.states["2"] = replace(RUNNING, reason="a node was drained")  # a new status
    fleet.store.patch_meta("job-4", note="written by someone")  # a write to the row
    fleet.clock.now += 10
    fleet.cycle()
    assert sorted(fleet.decided) == ["job-2", "job-4"]
    fleet.decided.clear()
    fleet.clock.now += 10
    fleet.cycle()  # job-2's new reason was written on its row by that pass's refresh: decided once more
    assert fleet.decided == ["job-2"]
    fleet.decided.clear()
    fleet.clock.now += 10
    fleet.cycle()
    assert fleet.decided == []


def test_a_failed_status_call_decides_on_every_job_each_pass(fleet):
    fleet.cycle()
    fleet.decided.clear()
    fleet.sched.fail = True
    for _ in range(2):
        fleet.clock.now += 10
        out = fleet.cycle()
        assert sorted(fleet.decided) == [f"job-{i}" for i in range(5)]
        assert {o.action for o in out} == {"control_plane"}
        fleet.decided.clear()
    fleet.sched.fail = False
    fleet.clock.now += 10
    fleet.cycle()  # the control-plane errors are cleared: a write to each row...
    fleet.decided.clear()
    fleet.clock.now += 10
    fleet.cycle()  # ...so decided once more (a mark never covers a write it did not read)
    assert sorted(fleet.decided) == [f"job-{i}" for i in range(5)]
    fleet.decided.clear()
    fleet.clock.now += 10
    fleet.cycle()
    assert fleet.decided == []


def test_every_job_is_decided_on_again_once_due(fleet):
    fleet.cycle()
    fleet.decided.clear()
    fleet.clock.now += changes.REVISIT_S - 1
    fleet.cycle()
    assert fleet.decided == []
    fleet.clock.now += 2
    fleet.cycle()
    assert sorted(fleet.decided) == [f"job-{i}" for i in range(5)]


def test_an_ended_attempt_is_decided_at_once_and_never_marked(fleet):
    fleet.cycle()
    fleet.decided.clear()
    fleet.sched.states["1"] = Status(JobState.COMPLETED, native_state="COMPLETED", exit_code=0, start_time=50.0,
                                     end_time=990.0)
    fleet.clock.now += 10
    out = {o.job_id: o for o in fleet.cycle()}
    assert fleet.decided == ["job-1"] and out["job-1"].action == "done"
    assert fleet.store.get_job("job-1").state == "COMPLETED"
    assert "job-1" not in marks.load(fleet.store)


def test_spread_visits_every_job_once_starting_where_the_watcher_points():
    ids = [f"j{i}" for i in range(50)]
    orders = {w: changes.spread(ids, w) for w in ("host:1:aa", "host:2:bb", "host:3:cc", "other:9:dd")}
    for order in orders.values():
        assert sorted(order) == sorted(ids)  # every job, once
        k = ids.index(order[0])
        assert order == ids[k:] + ids[:k]  # the pass's order, rotated
    assert len({o[0] for o in orders.values()}) > 1  # watchers start apart
    assert changes.spread(ids, "host:1:aa") == orders["host:1:aa"]  # a watcher keeps its point
    assert changes.spread([], "w") == [] and changes.spread(["a"], "w") == ["a"]
