"""A job that needs an action costs a watch pass a few store round trips (issue 29, item 1): the
claim takes the status's recovery changes and reads the decision's view in one transaction; the
decision's writes and the claim's release are one more; a resubmission adds its fence (the claim
still holds) before the scheduler is called. Counted on a real store, on both engines: a round
trip is a transaction, or a statement outside one."""

from __future__ import annotations

import contextlib
import threading
import time

import pytest

from launcher.backend.protocols import Handle
from launcher.launching.launch import launch
from launcher.recovery import watch
from launcher.spec.model import JobSpec
from launcher.state.store import StateStore

both_engines = pytest.mark.usefixtures("state_engine")


class Trips:
    """The store round trips made while ``counting`` is on: each transaction (``StateStore.tx``,
    however many statements it holds) and each statement sent outside one."""

    def __init__(self, monkeypatch, store):
        self.log: list = []
        self.counting = False
        self.thread = threading.current_thread()
        depth = [0]
        real_tx = StateStore.tx

        @contextlib.contextmanager
        def tx(this, jobs=None):
            # this pass's own store, on the pass's own thread: a thread an earlier test left behind (a
            # claim's keep-alive, a notification's delivery) writing its own store is not this job's trip
            ours = this is store and threading.current_thread() is self.thread
            if self.counting and ours and depth[0] == 0:
                self.log.append(("tx", jobs))
            depth[0] += ours
            try:
                with real_tx(this, jobs) as db:
                    yield db
            finally:
                depth[0] -= ours

        monkeypatch.setattr(StateStore, "tx", tx)
        db = store.db
        real_execute = db.execute

        def execute(sql, parameters=()):
            if self.counting and depth[0] == 0 and not db.in_transaction and threading.current_thread() is self.thread:
                self.log.append(("read", sql.split(" WHERE")[0]))
            return real_execute(sql, parameters)

        monkeypatch.setattr(db, "execute", execute)

    @contextlib.contextmanager
    def around(self, monkeypatch, job_id: str):
        """Count inside ``watch._one`` for JOB_ID only (a pass's own listing and marks are its own)."""
        real = watch._one

        def one(app, jid, *a, **k):
            self.counting = jid == job_id
            try:
                return real(app, jid, *a, **k)
            finally:
                self.counting = False

        monkeypatch.setattr(watch, "_one", one)
        yield self


def _ended(app, job_id: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    backend = app.backend("local")
    while time.monotonic() < deadline:
        if backend.status([Handle.from_json(app.store.get_job(job_id).handle)])[0].state.is_terminal:
            return
        time.sleep(0.1)
    raise AssertionError(f"job {job_id} did not end within {timeout}s")


def _pass(app, monkeypatch, job_id: str) -> tuple:
    monkeypatch.setattr(watch.notify, "kick", lambda app: None)
    trips = Trips(monkeypatch, app.store)
    with trips.around(monkeypatch, job_id):
        out = {o.job_id: o for o in watch.cycle(app)}
    return out[job_id], trips.log


def _failed_then_passed(app, monkeypatch, app_error: int) -> tuple:
    """A local job whose program fails (exit 3) with recovery.app_error APP_ERROR, once it ended:
    (its id, the pass's outcome for it, the round trips ``_one`` made for it)."""
    text = f"name: fails\nrun: exit 3\nrecovery: {{app_error: {app_error}}}\n"
    job_id = launch(app, JobSpec(name="fails", run="exit 3", recovery={"app_error": app_error}), text, None,
                    "local").job_id
    _ended(app, job_id)
    return (job_id, *_pass(app, monkeypatch, job_id))


@both_engines
def test_a_job_closed_by_its_decision_costs_two_round_trips_and_keeps_no_claim(app, monkeypatch):
    job_id, outcome, log = _failed_then_passed(app, monkeypatch, app_error=0)
    assert outcome.action == "gave_up", outcome
    # the claim (with its view; on PostgreSQL its row lock taken by SKIP LOCKED), the close (with the release)
    assert [kind for kind, _ in log] == ["tx", "tx"] and log[1] == ("tx", [job_id]), log
    assert app.store.claim_holder(job_id) is None
    assert app.store.get_job(job_id).state == "GAVE_UP"


@both_engines
def test_a_resubmitted_job_costs_three_round_trips_and_keeps_no_claim(app, monkeypatch):
    job_id, outcome, log = _failed_then_passed(app, monkeypatch, app_error=1)
    assert outcome.action == "resubmitted", outcome
    # the claim, the fence right before the scheduler is called, the submission's record (with the release)
    assert [kind for kind, _ in log] == ["tx", "read", "tx"], log
    assert log[1:] == [("read", "SELECT owner, expires FROM claims"), ("tx", [job_id])], log
    assert app.store.claim_holder(job_id) is None
    assert [a.attempt for a in app.store.attempts(job_id)] == [1, 2]


@both_engines
def test_the_claims_recovery_changes_are_written_with_it_and_read_back_in_its_view(app):
    text = "name: rc\nrun: sleep 30\n"
    job_id = launch(app, JobSpec(name="rc", run="sleep 30"), text, None, "local").job_id
    try:
        app.store.patch_meta(job_id, kept="by another writer")
        c = app.store.claim(job_id, ttl=30, recovery={"control_plane_errors": None, "unknown_since": 5.0},
                            view=True)
        assert c.job.meta["unknown_since"] == 5.0 and c.job.meta["kept"] == "by another writer"
        assert app.store.get_job(job_id).meta["unknown_since"] == 5.0
        assert c.observed == frozenset() and c.sharing == ()
        app.store.release(job_id, c.owner)
    finally:
        app.backend("local").cancel(Handle.from_json(app.store.get_job(job_id).handle))


def test_a_progress_read_becomes_one_set_of_writes_and_none_when_nothing_changed():
    from types import SimpleNamespace

    from launcher.recovery.progress import Progress, ProgressWrites, progress_writes

    job = SimpleNamespace(job_id="j", last_step=10)
    attempts = [SimpleNamespace(attempt=1, resume_step=-1, meta={}),
                SimpleNamespace(attempt=2, resume_step=None, meta={"kept": 1})]
    history = ({"job_id": "j", "attempt": 1, "generation": 1, "resume_step": -1},
               {"job_id": "j", "attempt": 2, "generation": 2, "resume_step": 10, "resume_tier": "peer"})
    writes = progress_writes(job, attempts, Progress(committed_step=20, history=history))
    assert writes == ProgressWrites(20, ((2, {"resume_step": 10, "meta": {"kept": 1, "resume_tier": "peer"}}),))
    done = [attempts[0], SimpleNamespace(attempt=2, resume_step=10, meta={"kept": 1, "resume_tier": "peer"})]
    same = progress_writes(SimpleNamespace(job_id="j", last_step=20), done, Progress(committed_step=20, history=history))
    assert not same and same == ProgressWrites()
    assert not progress_writes(job, attempts, Progress(committed_step=30, error="s3: timed out"))
