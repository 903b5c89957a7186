"""A queued element's start slower than the claim's TTL (``launcher.state.claims``): the
starter keeps the element's claim alive while it submits, so no other watcher takes it over and
judges the start lost; a lost start is judged from the starter's last sign of life."""

from __future__ import annotations

import time

import pytest

from launcher.recovery import watch
from launcher.state.claims import claim_ttl
from launcher.state.store import StateStore
from launcher.core.status import QUEUED
from launcher.sweep import one_by_one
from launcher.state.claims import kept_alive, renewal_interval
from tests.fixtures.polling import poll

from .test_sweep_lost_start import interrupted_start
from .test_sweep_one_by_one import launch, lx, states  # noqa: F401 - the fixture

# the tests with a store: on SQLite and on PostgreSQL (tests.fixtures.stores)
both_engines = pytest.mark.usefixtures("state_engine")


# ---- pure
def row(meta: dict, state: str = "SUBMITTING", handle=None):
    from types import SimpleNamespace

    return SimpleNamespace(meta={"sweep": {"id": "sw", "index": 1}, **meta}, state=state, handle=handle)


def test_a_starts_last_sign_of_life_is_its_latest_renewal():
    assert one_by_one.last_seen(row({"start_at": 100.0})) == 100.0
    assert one_by_one.last_seen(row({"start_at": 100.0, "start_seen": 340.0})) == 340.0
    assert one_by_one.last_seen(row({"start_at": 100.0, "start_seen": 50.0})) == 100.0  # an earlier start's
    assert one_by_one.last_seen(row({"start_at": 100.0}, handle="{}")) is None  # recorded: no start in limbo
    assert one_by_one.last_seen(row({"start_seen": 340.0})) is None  # not a start


def test_a_claim_is_renewed_three_times_within_its_ttl():
    assert renewal_interval(120) == 40 and renewal_interval(0) > 0


# ---- the renewals, on a store
@pytest.fixture
def store(tmp_path):
    s = StateStore(tmp_path / "h")
    s.begin_job("j-1", "j", "t", "fake", None, "name: j\nrun: x\n")
    yield s
    s.close()


@both_engines
def test_a_claim_kept_alive_outlives_its_ttl_and_each_renewal_is_reported(store):
    c = store.claim("j-1", ttl=0.3)
    seen: list = []
    with kept_alive(store, "j-1", c.owner, 0.3, lambda own, job_id: seen.append(job_id)) as keeping:
        poll("two renewals", lambda: keeping.renewals >= 2, timeout=30, interval=0.05)
        assert store.claim_holder("j-1")[1] > c.expires  # renewed past the first expiry
        assert StateStore(store.home).claim("j-1", ttl=0.3, owner="another") is None
    assert not keeping.lost and seen[:2] == ["j-1", "j-1"]


@both_engines
def test_a_claim_taken_over_meanwhile_is_reported_lost_and_not_taken_back(store):
    c = store.claim("j-1", ttl=0.3)
    other = StateStore(store.home)
    try:
        with kept_alive(store, "j-1", c.owner, 0.3) as keeping:
            assert other.claim("j-1", ttl=600, owner="another", now=c.expires + 1) is not None  # we froze
            poll("lost", lambda: keeping.lost, timeout=30, interval=0.05)
        assert store.claim_holder("j-1")[0] == "another"
    finally:
        other.close()


# ---- on the local backend: the decision, and a real start slower than the TTL
@both_engines
def test_a_start_seen_submitting_within_a_ttl_is_waited_for_however_old_it_is(lx, tmp_path, monkeypatch):
    sweep_id, job_id = interrupted_start(lx, tmp_path, monkeypatch, accept=False)
    store = lx.app.store
    later = time.time() + claim_ttl() + 1  # a TTL after the start began...
    store.patch_meta(job_id, start_seen=later - 5)  # ...but its starter renewed its claim 5 s ago
    c = store.claim(job_id)
    o = one_by_one.requeue_lost_start(lx.app, c, later)
    store.release(job_id, c.owner)
    assert o.action == "waiting" and "last seen 5s ago" in o.reason and states(lx, sweep_id)[2] == "SUBMITTING"
    assert one_by_one.requeue_lost_start(lx.app, store.claim(job_id), later + claim_ttl()).action == "start_lost"
    lx.cancel_sweep(sweep_id)


@both_engines
def test_a_start_slower_than_the_claims_ttl_is_not_taken_over_and_runs_once(lx, tmp_path, monkeypatch):
    from launcher.api.context import App
    from launcher_backends.local.backend import LocalBackend

    monkeypatch.setenv("LAUNCHER_CLAIM_TTL", "1")
    sweep_id = launch(lx, tmp_path)
    lx.cancel(f"{sweep_id}-e0")  # frees a slot for element 2
    job_id, real, seen = f"{sweep_id}-e2", LocalBackend.submit, []
    other = App()  # a second watcher, with its own store and claim owner

    def slow(self, request):  # the backend answers after more than a TTL
        start = lx.app.store.get_job(job_id).meta["start_at"]
        poll("past the first claim's expiry", lambda: time.time() > start + 2 * claim_ttl(), timeout=30,
             interval=0.05)
        seen.extend(watch.reconcile(other, clock=lambda: time.time() + 2 * claim_ttl()))  # it looks meanwhile
        return real(self, request)

    monkeypatch.setattr(LocalBackend, "submit", slow)
    try:
        out = one_by_one.fill(lx.app, sweep_id)
    finally:
        other.close()
    monkeypatch.undo()
    assert [(o.job_id, o.action) for o in seen] == [(job_id, "claimed")]  # was: start_lost, then a 2nd start
    assert [(o.job_id, o.action) for o in out] == [(job_id, "started")]
    store = lx.app.store
    assert [a.attempt for a in store.attempts(job_id)] == [1]
    assert not [e for e in store.events(job_id) if e["kind"] == "start_lost"]
    assert store.get_job(job_id).meta["start_seen"] > store.get_job(job_id).meta["start_at"]
    assert states(lx, sweep_id)[2] != QUEUED
    lx.cancel_sweep(sweep_id)
