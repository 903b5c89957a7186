"""Watchers that add up on a team's PostgreSQL store (issue 29, item 4): the writes of one job
lock that job's row and take the writers' lock shared (``StateStore.tx(jobs=...)``), so writes
of different jobs run side by side while two writes of one job still run one after the other,
each seeing what the previous one wrote; a whole-lock writer (a sweep's slot accounting, gc)
still has the store to itself. And the claim, the fence of exactly-once, stays exactly as
strong: many processes racing for one job's claim, one wins.

On the real PostgreSQL server (tests.fixtures.postgres). Who waits is read from the server
(``pg_stat_activity``: a session waiting on a lock), never from a clock."""

from __future__ import annotations

import json
import multiprocessing
import threading

import psycopg
import pytest

from launcher.state.store import StateStore
from tests.fixtures.polling import poll

pytestmark = pytest.mark.postgres


@pytest.fixture
def stores(tmp_path, pg_url, monkeypatch):
    """Two stores (two sessions) on one database, with jobs a and b; closed at the end."""
    monkeypatch.setenv("LAUNCHER_STATE_BUSY_TIMEOUT", "60")
    opened: dict = {}

    def store(name: str) -> StateStore:
        if name not in opened:
            opened[name] = StateStore(tmp_path / name, url=pg_url)
        return opened[name]

    first = store("one")
    for job in ("a", "b"):
        first.begin_job(job, job, "local", "local", None, "run: echo\n")
    yield store
    for s in opened.values():
        s.close()


def lock_waiters(url: str) -> int:
    """How many sessions of URL's database wait on a lock now."""
    with psycopg.connect(url, autocommit=True) as c:
        return c.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                         "AND wait_event_type = 'Lock'").fetchone()[0]


class Holder:
    """A transaction of STORE held open (``tx(jobs=JOBS)``, or the whole lock with JOBS None) in a
    thread of its own, after writing meta key KEY of job JOB, until ``done()``."""

    def __init__(self, store: StateStore, jobs, job: str = "a", key: str = "held"):
        self.inside, self.leave = threading.Event(), threading.Event()
        self.error = None

        def run():
            try:
                with store.tx(jobs=jobs) as db:
                    row = db.execute("SELECT meta FROM jobs WHERE job_id=?", (job,)).fetchone()
                    meta = {**json.loads(row["meta"]), key: True}
                    db.execute("UPDATE jobs SET meta=? WHERE job_id=?", (json.dumps(meta), job))
                    self.inside.set()
                    self.leave.wait(120)
            except BaseException as e:  # noqa: BLE001 (reported by done())
                self.error = e
                self.inside.set()

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()
        assert self.inside.wait(60) and self.error is None, self.error

    def done(self) -> None:
        self.leave.set()
        self.thread.join(60)
        assert self.error is None, self.error


def in_thread(fn) -> tuple:
    """Run FN in a thread: (the thread, {"error"/"done": ...})."""
    out: dict = {}

    def run():
        try:
            fn()
            out["done"] = True
        except BaseException as e:  # noqa: BLE001
            out["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, out


def waits_until_released(url: str, held: Holder, write, what: str) -> None:
    """WRITE, run in a thread while HELD's transaction is open, waits on a lock (the server says so)
    and has not finished; once HELD commits, it finishes."""
    t, out = in_thread(write)
    try:
        poll(what, lambda: lock_waiters(url) >= 1, timeout=60)
        assert not out, out
    finally:
        held.done()
    t.join(60)
    assert out == {"done": True}, out


def test_writes_of_different_jobs_do_not_wait_for_each_other(stores, pg_url):
    a, b = stores("one"), stores("two")
    held = Holder(a, jobs=["a"])
    try:
        b.patch_meta("b", other=1)  # returns while job a's transaction is open
        b.update_attempt("b", 1, state="RUNNING")
        assert b.claim("b", ttl=60) is not None
        assert lock_waiters(pg_url) == 0
    finally:
        held.done()
    assert a.get_job("b").meta["other"] == 1


def test_two_writes_of_one_job_wait_and_the_second_sees_the_first(stores, pg_url):
    a, b = stores("one"), stores("two")
    held = Holder(a, jobs=["a"], key="first")
    waits_until_released(pg_url, held, lambda: b.patch_meta("a", second=True),
                         "the second write waits for the job's row")
    meta = b.get_job("a").meta
    assert meta["first"] is True and meta["second"] is True, meta  # neither write lost the other's key


def test_a_whole_lock_writer_has_the_store_to_itself(stores, pg_url):
    a, b = stores("one"), stores("two")
    whole = Holder(a, jobs=None)  # e.g. a sweep's slot accounting: no one else writes meanwhile
    waits_until_released(pg_url, whole, lambda: b.patch_meta("b", x=1),  # another job: waits all the same
                         "a job's write waits for the whole lock")

    def whole_write():
        with b.tx() as db:
            db.execute("UPDATE jobs SET updated = updated WHERE job_id = 'b'")

    shared = Holder(a, jobs=["a"])  # and the other way round: the whole lock waits for a job's write
    waits_until_released(pg_url, shared, whole_write, "the whole lock waits for a job's write")


def _race(url: str, home: str, job: str, start, out) -> None:
    s = StateStore(home, url=url)
    try:
        start.wait(60)
        c = s.claim(job, ttl=60)
        out.put(c.owner if c is not None else None)
    finally:
        s.close()


def test_one_of_many_processes_racing_for_a_claim_wins(stores, pg_url, tmp_path):
    ctx = multiprocessing.get_context("spawn")
    for round_ in range(3):
        job = f"race-{round_}"
        stores("one").begin_job(job, job, "local", "local", None, "run: echo\n")
        start, out = ctx.Event(), ctx.Queue()
        procs = [ctx.Process(target=_race, args=(pg_url, str(tmp_path / f"p{k}"), job, start, out)) for k in range(4)]
        for p in procs:
            p.start()
        start.set()
        got = [out.get(timeout=120) for _ in procs]
        for p in procs:
            p.join(60)
        winners = [o for o in got if o is not None]
        assert len(winners) == 1, got
        assert stores("one").claim_holder(job)[0] == winners[0]


def test_a_store_from_before_the_shared_lock_gets_it_when_opened(tmp_path, pg_server, pg_url):
    db = pg_url.rsplit("/", 1)[1]
    s = StateStore(tmp_path / "old", url=pg_url)
    s.begin_job("old-1", "n", "local", "local", None, "run: echo\n")
    s.close()
    # what a launcher of security version 1 left: the whole lock's function only
    pg_server.sql("DROP FUNCTION launcher_write_share(double precision, double precision, double precision); "
                  "UPDATE launcher_schema SET security = 1", db=db)
    s = StateStore(tmp_path / "new", url=pg_url)  # migrates, under the migration lock
    try:
        s.patch_meta("old-1", kept=True)  # a job's write: takes the lock shared
        assert s.get_job("old-1").meta["kept"] is True
    finally:
        s.close()
    assert pg_server.sql("SELECT count(*) FROM pg_proc WHERE proname = 'launcher_write_share'", db=db) == "1"
