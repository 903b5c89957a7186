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
    yield SimpleNamespace(store=store, backend=lambda name: backend, b=backend)
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
