"""One status call per target per tick, however many watchers (issue 29, item 3): the lease
and snapshot of ``launcher.state.polls`` on a real SQLite store, and ``ask_targets`` choosing
for each watcher whether to ask a target, read its poller's snapshot, or leave it to its poller."""

from __future__ import annotations

from types import SimpleNamespace

from launcher.backend.protocols import Handle
from launcher.core.errors import LauncherError
from launcher.core.status import JobState, Status
from launcher.launching.polling import Poller, ask_targets
from launcher.state import polls
from launcher.state.store import StateStore


class Scheduler:
    def __init__(self):
        self.calls: list = []  # (target, native ids asked)
        self.down = set()

    def ask(self, target, handles):
        self.calls.append((target, [h.native_id for h in handles]))
        if target in self.down:
            raise LauncherError(f"{target} did not answer")
        return [Status(JobState.RUNNING, native_state=f"R{h.native_id}") for h in handles]


def fleet(n_per_target=3, targets=("t1", "t2")):
    out = {}
    for t in targets:
        out[t] = [(SimpleNamespace(job_id=f"{t}-j{i}"), Handle("stub", t, f"{t}-j{i}", f"{t}{i}", 1))
                  for i in range(n_per_target)]
    return out


def test_one_watcher_asks_and_publishes_the_others_read_its_snapshot(tmp_path):
    store = StateStore(tmp_path / "h")
    try:
        sched, jobs = Scheduler(), fleet()
        a, b, c = Poller(10.0, owner="a"), Poller(10.0, owner="b"), Poller(10.0, owner="c")
        got_a = ask_targets(store, jobs, sched.ask, a, clock=lambda: 1000.0)
        assert sorted(t for t, _ in sched.calls) == ["t1", "t2"]
        for who in (b, c):
            got = ask_targets(store, jobs, sched.ask, who, clock=lambda: 1005.0)
            assert got == got_a  # the same statuses, from the snapshot
        assert len(sched.calls) == 2  # nobody else asked
        assert all(r.owner == "a" for r in polls.read(store, ["t1", "t2"]).values())
    finally:
        store.close()


def test_a_job_the_snapshot_does_not_hold_yet_is_left_to_the_poller(tmp_path):
    store = StateStore(tmp_path / "h")
    try:
        sched, jobs = Scheduler(), fleet()
        ask_targets(store, jobs, sched.ask, Poller(10.0, owner="a"), clock=lambda: 1000.0)
        r, h = jobs["t1"][0]
        jobs["t1"][0] = (r, Handle("stub", "t1", r.job_id, "t1-new", 2))  # resubmitted since
        got = ask_targets(store, jobs, sched.ask, Poller(10.0, owner="b"), clock=lambda: 1001.0)
        assert got["t1"][0] is None and all(isinstance(s, Status) for s in got["t1"][1:])
        assert len(sched.calls) == 2
    finally:
        store.close()


def test_a_dead_poller_costs_extra_calls_for_one_lease_then_is_replaced(tmp_path):
    store = StateStore(tmp_path / "h")
    try:
        sched, jobs = Scheduler(), fleet()
        a, b = Poller(10.0, owner="a"), Poller(10.0, owner="b")
        ask_targets(store, jobs, sched.ask, a, clock=lambda: 1000.0)  # a polls once, then dies (-9)
        stale = 1000.0 + b.fresh_s + 0.5
        assert stale < 1000.0 + a.lease_s
        got = ask_targets(store, jobs, sched.ask, b, clock=lambda: stale)
        assert len(sched.calls) == 4 and all(isinstance(s, Status) for s in got["t1"] + got["t2"])  # asked itself
        assert all(r.owner == "a" and r.polled_at == 1000.0 for r in polls.read(store, ["t1", "t2"]).values())
        after = 1000.0 + a.lease_s + 1
        ask_targets(store, jobs, sched.ask, b, clock=lambda: after)
        assert len(sched.calls) == 6
        assert all(r.owner == "b" and r.polled_at == after for r in polls.read(store, ["t1", "t2"]).values())
        ask_targets(store, jobs, sched.ask, a, clock=lambda: after + 1)  # a comes back: b's snapshot is read
        assert len(sched.calls) == 6
    finally:
        store.close()


def test_watchers_that_start_together_leave_a_target_to_its_new_poller(tmp_path):
    store = StateStore(tmp_path / "h")
    try:
        sched, jobs = Scheduler(), fleet()
        assert polls.take(store, ["t1", "t2"], "a", 1000.0, 30.0) == {"t1", "t2"}  # a's first poll under way
        got = ask_targets(store, jobs, sched.ask, Poller(10.0, owner="b"), clock=lambda: 1000.1)
        assert got == {"t1": [None] * 3, "t2": [None] * 3} and sched.calls == []
        got = ask_targets(store, jobs, sched.ask, Poller(10.0, owner="b"), clock=lambda: 1031.0)  # a never published
        assert len(sched.calls) == 2 and all(r.owner == "b" for r in polls.read(store, ["t1", "t2"]).values())
    finally:
        store.close()


def test_a_poller_whose_status_call_fails_gives_its_lease_up_at_once(tmp_path):
    store = StateStore(tmp_path / "h")
    try:
        sched, jobs = Scheduler(), fleet()
        sched.down.add("t1")
        got = ask_targets(store, jobs, sched.ask, Poller(10.0, owner="a"), clock=lambda: 1000.0)
        assert isinstance(got["t1"], LauncherError) and isinstance(got["t2"][0], Status)
        sched.down.clear()
        got = ask_targets(store, jobs, sched.ask, Poller(10.0, owner="b"), clock=lambda: 1001.0)
        assert isinstance(got["t1"][0], Status)  # b took t1 over and asked; t2 came from a's snapshot
        assert [t for t, _ in sched.calls] == ["t1", "t2", "t1"]
    finally:
        store.close()


def test_without_a_poller_or_for_a_role_acting_on_its_own_jobs_every_target_is_asked(tmp_path):
    store = StateStore(tmp_path / "h")
    try:
        sched, jobs = Scheduler(), fleet()
        ask_targets(store, jobs, sched.ask, Poller(10.0, owner="a"), clock=lambda: 1000.0)
        ask_targets(store, jobs, sched.ask, None, clock=lambda: 1001.0)
        assert len(sched.calls) == 4
        member = SimpleNamespace(db=SimpleNamespace(acts_on_all=False))
        ask_targets(member, jobs, sched.ask, Poller(10.0, owner="m"), clock=lambda: 1002.0)
        assert len(sched.calls) == 6
    finally:
        store.close()


def test_the_lease_is_taken_by_one_watcher_at_a_time(tmp_path):
    store = StateStore(tmp_path / "h")
    try:
        assert polls.take(store, ["t1"], "a", 1000.0, 30.0) == {"t1"}
        assert polls.take(store, ["t1"], "b", 1010.0, 30.0) == set()
        assert polls.take(store, ["t1"], "a", 1020.0, 30.0) == {"t1"}  # renewed to 1050
        assert polls.take(store, ["t1"], "b", 1049.0, 30.0) == set()
        assert polls.take(store, ["t1"], "b", 1051.0, 30.0) == {"t1"}
        polls.publish(store, "a", {"t1": {"k": Status(JobState.RUNNING)}}, 1052.0)  # a lost it: not written
        assert polls.read(store, ["t1"])["t1"].polled_at is None
    finally:
        store.close()


def test_a_lease_taken_between_the_look_and_the_take_is_left_to_its_new_poller(tmp_path, monkeypatch):
    store = StateStore(tmp_path / "h")
    try:
        sched, jobs = Scheduler(), fleet()
        real, looked = polls.read, []

        def read(store_, targets):  # watcher a takes both leases right after b's first look
            out = real(store_, targets)
            if not looked:
                looked.append(targets)
                polls.take(store_, list(targets), "a", 1000.0, 30.0)
            return out

        monkeypatch.setattr(polls, "read", read)
        got = ask_targets(store, jobs, sched.ask, Poller(10.0, owner="b"), clock=lambda: 1000.0)
        assert sched.calls == [] and got == {"t1": [None] * 3, "t2": [None] * 3}
    finally:
        store.close()
