"""A launcher that dies while starting a queued sweep element (between the SUBMITTING write
and the backend's accept) leaves it back in the queue, once, with a ``start_lost`` event
(``launcher.sweep.one_by_one.lost_start``); a start the backend did accept is adopted."""

from __future__ import annotations

import time

import pytest

from launcher.recovery import watch
from tests.fixtures.polling import poll
from launcher.state.claims import claim_ttl
from launcher.core.status import QUEUED
from launcher.sweep import one_by_one

from .test_sweep_one_by_one import launch, lx, states  # noqa: F401 - the fixture

# the tests with a store: on SQLite and on PostgreSQL (tests.fixtures.stores)
both_engines = pytest.mark.usefixtures("state_engine")

# ---- pure: the decision
def test_within_a_claims_time_the_start_may_still_be_submitting():
    d = one_by_one.lost_start(age_s=5.0, ttl_s=120.0, tries=0)
    assert d.action == "wait" and "may still be submitting" in d.reason


def test_after_a_claims_time_with_no_job_it_goes_back_to_the_queue():
    d = one_by_one.lost_start(age_s=121.0, ttl_s=120.0, tries=0)
    assert d.action == "requeue" and "nothing ran" in d.reason and "dedupe token" in d.reason


def test_the_last_try_fails_instead_of_queueing_again():
    assert one_by_one.lost_start(200.0, 120.0, tries=one_by_one.START_TRIES - 2).action == "requeue"
    assert one_by_one.lost_start(200.0, 120.0, tries=one_by_one.START_TRIES - 1).action == "fail"


# ---- on the local backend: a start interrupted mid-submit
def interrupted_start(lx, tmp_path, monkeypatch, accept: bool) -> tuple[str, str]:
    """A sweep whose element 2 is being started when the launcher is interrupted: before the
    backend's accept (ACCEPT False) or right after it, before anything was recorded."""
    from launcher_backends.local.backend import LocalBackend

    sweep_id = launch(lx, tmp_path)
    lx.cancel(f"{sweep_id}-e0")  # frees a slot
    real = LocalBackend.submit

    def dies(self, request):
        if accept:
            real(self, request)
        raise KeyboardInterrupt("the watcher was killed")

    monkeypatch.setattr(LocalBackend, "submit", dies)
    with pytest.raises(KeyboardInterrupt):
        one_by_one.fill(lx.app, sweep_id)
    monkeypatch.undo()
    job_id = f"{sweep_id}-e2"
    assert states(lx, sweep_id)[2] == "SUBMITTING"
    return sweep_id, job_id


@both_engines
def test_a_start_killed_before_the_accept_goes_back_to_the_queue_once_then_runs(lx, tmp_path, monkeypatch):
    sweep_id, job_id = interrupted_start(lx, tmp_path, monkeypatch, accept=False)
    store = lx.app.store
    (o,) = watch.reconcile(lx.app)
    assert o.action == "waiting" and states(lx, sweep_id)[2] == "SUBMITTING"  # within the claim's time
    later = lambda: time.time() + claim_ttl() + 1  # noqa: E731
    (o,) = watch.reconcile(lx.app, clock=later)
    assert o.action == "start_lost" and states(lx, sweep_id)[2] == QUEUED
    assert watch.reconcile(lx.app, clock=later) == []  # exactly once: nothing left to reconcile
    lost = [e for e in store.events(job_id) if e["kind"] == "start_lost"]
    assert len(lost) == 1 and "nothing ran" in lost[0]["reason"] and lost[0]["tries"] == 1
    assert [(x.job_id, x.action) for x in one_by_one.fill(lx.app, sweep_id)] == [(job_id, "started")]
    assert [a.attempt for a in store.attempts(job_id)] == [1]
    lx.cancel_sweep(sweep_id)


@both_engines
def test_a_start_killed_after_the_accept_is_adopted_not_started_again(lx, tmp_path, monkeypatch):
    sweep_id, job_id = interrupted_start(lx, tmp_path, monkeypatch, accept=True)
    # the detached supervisor registers its token on its own schedule: until then, "waiting"
    adopted = poll("adopted", lambda: [o for o in watch.reconcile(lx.app) if o.action == "adopted"], timeout=15,
                   interval=0.1)
    assert [o.job_id for o in adopted] == [job_id]
    store = lx.app.store
    assert [a.attempt for a in store.attempts(job_id)] == [1]
    assert not [e for e in store.events(job_id) if e["kind"] == "start_lost"]
    assert states(lx, sweep_id)[2] in ("PENDING", "RUNNING")
    lx.cancel_sweep(sweep_id)


@both_engines
def test_a_plain_launch_left_submitting_is_not_taken_for_a_queued_start(lx, tmp_path):
    sweep_id = launch(lx, tmp_path)
    row = lx.app.store.get_job(f"{sweep_id}-e0")
    assert one_by_one.started_at(row) is None  # launched, not started from the queue
    lx.cancel_sweep(sweep_id)


@both_engines
def test_a_start_that_got_through_late_is_adopted_by_the_next_start_not_submitted_twice(lx, tmp_path, monkeypatch):
    # the start's submission got through but the lookup missed it (slower than the claim): the
    # element went back to the queue; its next start finds the job by its token and keeps it
    sweep_id, job_id = interrupted_start(lx, tmp_path, monkeypatch, accept=True)
    store = lx.app.store
    c = store.claim(job_id)
    assert one_by_one.requeue_lost_start(lx.app, c, time.time() + claim_ttl() + 1).action == "start_lost"
    store.release(job_id, c.owner)
    poll("the first start's job is found", lambda: one_by_one._earlier_start(lx.app, store.get_job(job_id)), timeout=15,
         interval=0.1)
    from launcher_backends.local.backend import LocalBackend

    def never(self, request):
        raise AssertionError("submitted a second time")

    monkeypatch.setattr(LocalBackend, "submit", never)
    assert [(x.job_id, x.action) for x in one_by_one.fill(lx.app, sweep_id)] == [(job_id, "started")]
    monkeypatch.undo()
    (sub,) = [e for e in store.events(job_id) if e["kind"] == "submitted"]
    assert sub["found_existing"] is True and "earlier start" in sub["reason"]
    assert [a.attempt for a in store.attempts(job_id)] == [1]
    lx.cancel_sweep(sweep_id)
