"""The local backend cancels many jobs in one call (``Backend.cancel_many``): every group gets its
SIGTERM first and one grace period is waited for all of them; each id's failure is its own."""

from __future__ import annotations

import signal

import pytest

from launcher.backend.protocols import Handle
from launcher.launching.launch import launch
from launcher.backend.sections import spec_from_text
from launcher.core.status import JobState
from launcher_backends.local import processes
from launcher_backends.local.backend import LocalBackend
from tests.fixtures.polling import poll

from .test_sweep_one_by_one import lx  # noqa: F401 - the fixture


def _launch(app, name: str, run: str):
    text = f"name: {name}\nrun: {run!r}\n"
    return launch(app, spec_from_text(text), text, None, "local")


def _running(app, jobs) -> bool:
    return all(s.state is JobState.RUNNING for s in app.backend("local").status([j.handle for j in jobs]))


# ---- pure: what is signalled, with a made-up process table
def test_every_live_group_is_termed_once_and_those_left_after_the_grace_are_killed(monkeypatch):
    table = {101: True, 102: True, 103: False}  # 103 had ended already
    sent: list = []

    def kill(pid, sig):
        sent.append((pid, sig))
        if sig == signal.SIGTERM and pid == 101:
            table[101] = False  # 101 exits on its notice; 102 ignores it
        if sig == signal.SIGKILL:
            table[pid] = False

    monkeypatch.setattr(processes.os, "killpg", kill)
    errs = processes.stop_groups({"a": (101, 1), "b": (102, 1), "c": (103, 1)}, grace_s=0.2, poll=0.01,
                                 is_alive=lambda pid, ticks: table[pid], live=lambda pids: {p for p in pids if table[p]})
    assert errs == {}
    assert sent == [(101, signal.SIGTERM), (102, signal.SIGTERM), (102, signal.SIGKILL)]


def test_a_group_still_alive_after_sigkill_is_that_ids_error_not_a_stop(monkeypatch):
    monkeypatch.setattr(processes.os, "killpg", lambda pid, sig: None)  # nothing ever dies (an unkillable D state)
    monkeypatch.setattr(processes, "KILL_WAIT_S", 0.05)
    errs = processes.stop_groups({"a": (101, 1)}, grace_s=0.05, poll=0.01, is_alive=lambda pid, ticks: True,
                                 live=lambda pids: set(pids))
    assert list(errs) == ["a"] and "still has live members" in errs["a"]


def test_a_group_that_outlives_its_leader_is_waited_for_and_killed(monkeypatch):
    sent: list = []
    monkeypatch.setattr(processes.os, "killpg", lambda pid, sig: sent.append(sig))
    leader = {"up": True}

    def is_alive(pid, ticks):
        up, leader["up"] = leader["up"], False  # the leader dies on its notice; its job ignores it
        return up

    processes.stop_groups({"a": (101, 1)}, grace_s=0.1, poll=0.01, is_alive=is_alive, live=set)
    assert sent == [signal.SIGTERM, signal.SIGKILL]


def test_a_group_that_cannot_be_signalled_is_that_ids_error_alone(monkeypatch):
    def kill(pid, sig):
        if pid == 7:
            raise PermissionError(1, "Operation not permitted")
        raise ProcessLookupError(3, "No such process")  # gone meanwhile: stopped

    monkeypatch.setattr(processes.os, "killpg", kill)
    errs = processes.stop_groups({"7": (7, None), "8": (8, None), "0": (0, None)}, grace_s=0,
                                 is_alive=lambda pid, ticks: True, live=lambda pids: set())
    assert set(errs) == {"7", "0"}
    assert "Operation not permitted" in errs["7"] and "not a job's process id" in errs["0"]


def test_a_group_whose_only_members_are_zombies_is_not_live():
    import os
    import subprocess

    p = subprocess.Popen(["true"], start_new_session=True)  # a group of its own, not reaped yet
    try:
        poll("a zombie", lambda: open(f"/proc/{p.pid}/stat").read().rsplit(")", 1)[1].split()[0] == "Z",
             timeout=10, interval=0.01)
        assert processes.live_groups({p.pid, os.getpgrp()}) == {os.getpgrp()}
    finally:
        p.wait()
    assert processes.live_groups(set()) == set()


def test_the_local_backend_cancels_many_its_own_way():
    assert "cancel_many" in vars(LocalBackend)  # one grace period for all, not a cancel of each


# ---- real processes
def test_cancel_many_stops_every_job_and_marks_each_cancelled_and_is_idempotent(app):
    jobs = [_launch(app, f"c{i}", "sleep 300") for i in range(4)]
    poll("all running", lambda: _running(app, jobs), timeout=30, interval=0.05)
    backend = app.backend("local")
    assert backend.cancel_many([j.handle for j in jobs]) == {}
    assert [s.state for s in backend.status([j.handle for j in jobs])] == [JobState.CANCELLED] * 4
    assert backend.cancel_many([j.handle for j in jobs]) == {}  # again: nothing left, no error


def test_a_job_that_ignores_its_notice_is_killed_after_the_one_grace_period(app, monkeypatch, tmp_path):
    monkeypatch.setattr(processes, "GRACE_S", 0.5)
    ready = tmp_path / "ready"
    stubborn = _launch(app, "stubborn", f"trap '' TERM; touch {ready}; while true; do sleep 0.1; done")
    quick = _launch(app, "quick", "sleep 300")
    poll("the trap is set", ready.exists, timeout=30, interval=0.05)
    backend = app.backend("local")
    assert backend.cancel_many([stubborn.handle, quick.handle]) == {}
    assert [s.state for s in backend.status([stubborn.handle, quick.handle])] == [JobState.CANCELLED] * 2
    # the whole group is gone, not only its leader (the supervisor, which dies on the notice)
    assert processes.live_groups({int(stubborn.handle.native_id)}) == set()


def test_a_bad_handle_is_its_own_error_and_the_others_are_cancelled(app, tmp_path):
    job = _launch(app, "ok", "sleep 300")
    bad = Handle("local", "local", "x", "not-a-pid", 1, {"job_dir": str(tmp_path)})
    no_dir = Handle("local", "local", "y", "12345", 1, {})
    errs = app.backend("local").cancel_many([bad, job.handle, no_dir])
    assert set(errs) == {"not-a-pid", "12345"} and "not a local job's handle" in errs["not-a-pid"]
    assert app.backend("local").status([job.handle])[0].state is JobState.CANCELLED


def test_cancel_of_one_job_raises_what_cancel_many_reports(app, tmp_path):
    from launcher.core.errors import LauncherError

    with pytest.raises(LauncherError, match="not a local job's handle"):
        app.backend("local").cancel(Handle("local", "local", "x", "nope", 1, {"job_dir": str(tmp_path)}))


# ---- `launcher cancel SWEEP` on the local target: one cancel_many for every running element
def test_cancel_of_a_local_sweep_stops_its_running_elements_in_one_call(lx, tmp_path, monkeypatch):
    from launcher.sweep.cancelling import cancel_counts
    from launcher.sweep.elements import sweep_rows

    from .test_sweep_one_by_one import launch

    sweep_id = launch(lx, tmp_path)  # 4 elements, 2 running (sleep 60), 2 queued
    rows = sweep_rows(lx.app.store, sweep_id)
    running = [Handle.from_json(r.handle) for r in rows if r.handle]
    poll("both running", lambda: all(s.state is JobState.RUNNING for s in lx.app.backend("local").status(running)),
         timeout=30, interval=0.05)
    calls: list = []
    real = LocalBackend.cancel_many

    def counted(self, handles):
        calls.append(sorted(h.native_id for h in handles))
        return real(self, handles)

    def one_by_one(self, handle):
        raise AssertionError("cancelled one at a time")

    monkeypatch.setattr(LocalBackend, "cancel_many", counted)
    monkeypatch.setattr(LocalBackend, "cancel", one_by_one)
    reports = lx.cancel_sweep(sweep_id)
    monkeypatch.undo()
    assert calls == [sorted(h.native_id for h in running)]
    assert cancel_counts(reports) == {"cancelled": 4, "already_cancelled": 0, "already_finished": 0, "failed": 0}
    assert [r.state for r in sweep_rows(lx.app.store, sweep_id)] == ["CANCELLED"] * 4
    assert processes.live_groups({int(h.native_id) for h in running}) == set()
    for r in rows[:2]:
        assert [e["kind"] for e in lx.app.store.events(r.job_id)].count("cancelled") == 1
