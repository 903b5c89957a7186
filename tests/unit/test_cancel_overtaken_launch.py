"""A `cancel` that gave up waiting for a launch, followed by that launch dying after the
scheduler accepted its job (issue 28 MEDIUM 4): watch finds that job by its dedupe token and
cancels it; it is never left running behind a CANCELLED row."""

from __future__ import annotations

import os
import socket
import time
from types import SimpleNamespace

import pytest

from launcher.backend.protocols import Handle
from launcher.core.status import JobState
from launcher.recovery.cancel import OVERTAKEN, cancel_job
from launcher.recovery.outcome import NO_HOOKS
from launcher.recovery.watch import reconcile
from launcher.state.store import StateStore


class Backend:
    name = "slurm"

    def __init__(self):
        self.found, self.cancelled, self.finds = None, [], 0

    def find(self, job):
        self.finds += 1
        return self.found

    def cancel(self, handle):
        self.cancelled.append(handle.native_id)

    def status(self, handles):
        from launcher.core.status import Status

        return [Status(JobState.CANCELLED if h.native_id in self.cancelled else JobState.RUNNING) for h in handles]


@pytest.fixture
def app(tmp_path, monkeypatch):
    monkeypatch.setenv("LAUNCHER_CANCEL_LAUNCH_WAIT", "0")
    store = StateStore(tmp_path / "home")
    backend = Backend()
    yield SimpleNamespace(store=store, backend=lambda name: backend, b=backend, watch_hooks=NO_HOOKS)
    store.close()


def _launching(app, pid=None):
    """A SUBMITTING row whose launch is this process (alive), or PID."""
    app.store.begin_job("j-1", "j", "cl", "slurm", None, "name: j\n",
                        meta={"launch_by": f"{socket.gethostname()}:{pid or os.getpid()}"})


def test_the_job_of_a_launch_that_died_after_its_submit_is_cancelled_by_watch(app):
    _launching(app)
    report = cancel_job(app, "j-1")
    assert "still under way" in report.note
    row = app.store.get_job("j-1")
    assert row.state == "CANCELLED" and row.meta[OVERTAKEN]["attempt"] == 1
    # the launch then dies after sbatch: its job runs with the attempt's dedupe token
    app.b.found = Handle("slurm", "cl", "j-1", "4242", 1)
    outcomes = reconcile(app)
    assert [(o.job_id, o.action) for o in outcomes] == [("j-1", "cancelled")]
    assert app.b.cancelled == ["4242"]
    (a,) = app.store.attempts("j-1")
    assert (a.native_id, a.state) == ("4242", "CANCELLED")
    row = app.store.get_job("j-1")
    assert row.state == "CANCELLED" and OVERTAKEN not in row.meta
    assert reconcile(app) == [] and app.b.cancelled == ["4242"]  # settled once


def test_while_the_launch_lives_and_nothing_is_found_watch_waits_then_clears_the_mark(app):
    _launching(app)
    cancel_job(app, "j-1")
    (o,) = reconcile(app)
    assert o.action == "waiting" and app.b.cancelled == []
    # the launch is over (no such process) and a minute passed with nothing found: nothing ran
    app.store.patch_meta("j-1", launch_by=f"{socket.gethostname()}:999999999")
    assert reconcile(app, clock=lambda: time.time() + 120) == []
    assert OVERTAKEN not in app.store.get_job("j-1").meta and app.b.cancelled == []


def test_a_launch_that_recorded_its_submission_needs_nothing_more(app):
    _launching(app)
    cancel_job(app, "j-1")
    h = Handle("slurm", "cl", "j-1", "77", 1)
    assert app.store.record_submission("j-1", 1, "cl", h.to_json(), "77") is False  # cancel won
    finds = app.b.finds
    app.b.found = h
    assert reconcile(app) == [] and app.b.finds == finds


def test_a_cancelled_job_keeps_the_last_step_its_root_committed(app, tmp_path):
    from launcher.checkpoint import commit, open_store, step_dir

    root = tmp_path / "ck"
    for step in (3, 7):  # committed after the last watch pass read the root: the row still says nothing
        d = root / step_dir(step, 1)
        d.mkdir(parents=True)
        (d / "model.bin").write_bytes(b"m")
        commit(open_store(str(root)), step, 1, fence=False)
    app.store.begin_job("j-2", "j", "cl", "slurm", None, "name: j\n", ckpt_root=str(root))
    h = Handle("slurm", "cl", "j-2", "88", 1)
    app.store.record_submission("j-2", 1, "cl", h.to_json(), "88", state="RUNNING")
    assert app.store.get_job("j-2").last_step is None
    report = cancel_job(app, "j-2", refresh_first=False)
    assert report.ok and app.b.cancelled == ["88"]
    row = app.store.get_job("j-2")
    assert row.state == "CANCELLED" and row.last_step == 7


def _unknown_outcome(app, at=None):
    """A SUBMITTING row whose launch is over (no such process) and recorded that the scheduler's
    answer was lost: the controller stalled, and may take the request in when it runs again."""
    app.store.begin_job("j-3", "j", "cl", "slurm", None, "name: j\n",
                        meta={"launch_by": f"{socket.gethostname()}:999999999"})
    app.store.mark_submit_unknown(["j-3"], "sbatch: Socket timed out")
    if at is not None:
        meta = app.store.get_job("j-3").meta
        app.store.patch_meta("j-3", submit_unknown={**meta["submit_unknown"], "at": at})


def test_a_cancel_of_a_submission_whose_outcome_is_unknown_leaves_watch_looking(app):
    """Seed 29303 schedule 28: sbatch's answer was lost to a stopped slurmctld, the launch exited
    4, a cancel found no job by the token and closed the row; the controller then took the
    request in and ran attempt 1 with nothing in the store to cancel it."""
    _unknown_outcome(app)
    report = cancel_job(app, "j-3")
    assert report.ok and "not known yet" in report.note and "never got through" not in report.note
    row = app.store.get_job("j-3")
    assert row.state == "CANCELLED" and row.meta[OVERTAKEN]["attempt"] == 1
    # the stalled controller runs again and accepts the queued request: watch cancels and records it
    app.b.found = Handle("slurm", "cl", "j-3", "52", 1)
    assert [o.action for o in reconcile(app)] == ["cancelled"]
    assert app.b.cancelled == ["52"]
    (a,) = app.store.attempts("j-3")
    assert (a.attempt, a.native_id, a.state) == (1, "52", "CANCELLED")


def test_a_cancel_long_after_an_unknown_outcome_concludes_nothing_ran(app):
    _unknown_outcome(app, at=time.time() - 3600)
    report = cancel_job(app, "j-3")
    assert report.ok and "never got through" in report.note
    assert OVERTAKEN not in app.store.get_job("j-3").meta


def test_the_quiet_time_counts_from_the_schedulers_last_unanswered_lookup(app):
    """A controller stalled past the quiet time: lookups fail meanwhile, and "nothing ran" waits
    a quiet time from its return, when it takes in what queued at its socket."""
    from launcher.core.errors import LauncherError

    _unknown_outcome(app)
    cancel_job(app, "j-3")
    t0 = time.time()

    def unanswered(job):
        raise LauncherError("squeue: Socket timed out")

    app.b.find = unanswered
    (o,) = reconcile(app, clock=lambda: t0 + 300)  # the lookup fails 5 min later
    assert o.action == "waiting"
    del app.b.find
    (o,) = reconcile(app, clock=lambda: t0 + 310)  # answered, nothing yet: still within the quiet time
    assert o.action == "waiting" and OVERTAKEN in app.store.get_job("j-3").meta
    app.b.found = Handle("slurm", "cl", "j-3", "53", 1)  # the queued request is taken in
    assert [o.action for o in reconcile(app, clock=lambda: t0 + 320)] == ["cancelled"]
    assert app.b.cancelled == ["53"]


def test_a_submission_from_another_host_is_looked_for_after_its_cancel(app):
    """A launch on another login node cannot be seen from here (``launch_alive`` None): its row
    is closed, and watch goes on looking for what it may have submitted."""
    app.store.begin_job("j-4", "j", "cl", "slurm", None, "name: j\n", meta={"launch_by": "other-host:123"})
    report = cancel_job(app, "j-4")
    assert report.ok and OVERTAKEN in app.store.get_job("j-4").meta


def test_a_cancel_after_a_resubmission_whose_outcome_is_unknown_leaves_watch_looking(app):
    """The same on a running job: a watcher's resubmission of attempt 2 lost its answer
    (``launch.resubmit`` notes ``submit_unknown`` with the attempt and target), a cancel finds
    nothing by attempt 2's token yet; when the controller takes it in, watch cancels it."""
    app.store.begin_job("j-5", "j", "cl", "slurm", None, "name: j\n")
    h = Handle("slurm", "cl", "j-5", "60", 1)
    app.store.record_submission("j-5", 1, "cl", h.to_json(), "60", state="FAILED")
    app.store.patch_meta("j-5", submit_unknown={"at": time.time(), "reason": "sbatch: Socket timed out",
                                                "attempt": 2, "target": "cl2"})
    report = cancel_job(app, "j-5", refresh_first=False)
    assert report.ok and "attempt 2" in report.note and "not known yet" in report.note
    row = app.store.get_job("j-5")
    assert row.state == "CANCELLED" and row.meta[OVERTAKEN]["attempt"] == 2 and row.meta[OVERTAKEN]["target"] == "cl2"
    app.b.found = Handle("slurm", "cl2", "j-5", "61", 2)
    assert [o.action for o in reconcile(app)] == ["cancelled"]
    assert app.b.cancelled == ["61"]
    assert [(a.attempt, a.native_id, a.state) for a in app.store.attempts("j-5")][-1] == (2, "61", "CANCELLED")
    assert OVERTAKEN not in app.store.get_job("j-5").meta


def test_a_cancel_of_a_job_with_no_unsettled_submission_leaves_no_mark(app):
    app.store.begin_job("j-6", "j", "cl", "slurm", None, "name: j\n")
    h = Handle("slurm", "cl", "j-6", "70", 1)
    app.store.record_submission("j-6", 1, "cl", h.to_json(), "70", state="RUNNING")
    # an old unknown outcome of attempt 1 (settled since: attempt 1 is recorded) says nothing of attempt 2
    app.store.patch_meta("j-6", submit_unknown={"at": time.time(), "reason": "x", "attempt": 1})
    report = cancel_job(app, "j-6", refresh_first=False)
    assert report.ok and app.b.cancelled == ["70"] and OVERTAKEN not in app.store.get_job("j-6").meta
