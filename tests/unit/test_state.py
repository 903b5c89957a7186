import json
import sqlite3

import pytest

from launcher.state.store import StateStore

both_engines = pytest.mark.usefixtures("state_engine")  # tests.fixtures.stores


@both_engines
def test_forget_removes_every_trace_of_a_failed_submission(tmp_path):
    s = StateStore(tmp_path)
    s.begin_job("j1", "n", "local", "local", None, "name: n\n")
    s.record_event("j1", "x")
    s.forget_job("j1")
    assert s.list_jobs() == [] and s.events("j1") == []


@both_engines
def test_attempts_and_prefix_lookup(tmp_path):
    s = StateStore(tmp_path)
    s.begin_job("train-abc123", "train", "local", "local", None, "name: train\n")
    s.record_attempt("train-abc123", 1, "local", "{}", "42")
    s.update_attempt("train-abc123", 1, state="COMPLETED", exit_code=0)
    assert s.get_job("train-ab").job_id == "train-abc123"
    (a,) = s.attempts("train-abc123")
    assert a.state == "COMPLETED" and a.native_id == "42"


def test_database_is_in_wal_mode(tmp_path):
    StateStore(tmp_path)
    mode = sqlite3.connect(tmp_path / "state.db").execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "wal"


@both_engines
def test_events_redact_secret_looking_values(tmp_path, monkeypatch):
    monkeypatch.setenv("MY_API_TOKEN", "tok-9f8e7d6c5b4a")
    s = StateStore(tmp_path)
    s.begin_job("j", "n", "local", "local", None, "")
    s.record_event("j", "x", note="value tok-9f8e7d6c5b4a here", password="hunter22")
    ev = s.events("j")[0]
    assert "tok-9f8e7d6c5b4a" not in str(ev) and "hunter22" not in str(ev)


@both_engines
def test_read_modify_write_transactions_of_many_threads_never_lose_an_update(tmp_path):
    """Writers are serialised (SQLite: BEGIN IMMEDIATE; PostgreSQL: the writers' advisory lock):
    each transaction reads what the previous one wrote."""
    import threading

    StateStore(tmp_path).begin_job("j", "n", "local", "local", None, "", meta={"n": 0})
    barrier = threading.Barrier(4)

    def bump():
        s = StateStore(tmp_path)
        barrier.wait()
        for _ in range(25):
            with s.tx() as db:
                n = json.loads(db.execute("SELECT meta FROM jobs WHERE job_id=?", ("j",)).fetchone()[0])["n"]
                db.execute("UPDATE jobs SET meta=? WHERE job_id=?", (json.dumps({"n": n + 1}), "j"))
        s.close()

    threads = [threading.Thread(target=bump) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert StateStore(tmp_path).get_job("j").meta == {"n": 100}


@both_engines
def test_a_writer_that_waits_past_the_busy_timeout_is_told_the_store_is_locked(tmp_path, monkeypatch):
    from launcher.core.errors import StateStoreError

    monkeypatch.setenv("LAUNCHER_STATE_BUSY_TIMEOUT", "1")
    holder, waiter = StateStore(tmp_path), StateStore(tmp_path)
    holder.begin_job("j", "n", "local", "local", None, "")
    with holder.tx():
        with pytest.raises(StateStoreError, match="locked by another"):
            waiter.record_event("j", "x")
    waiter.record_event("j", "y")  # the lock released: the store is usable again
    assert [e["kind"] for e in waiter.events("j")] == ["y"]


def test_a_resubmission_records_its_recovery_state_with_its_attempt_and_never_over_a_cancel(tmp_path):
    s = StateStore(tmp_path)
    s.begin_job("j", "n", "local", "local", None, "name: n\n", meta={"recovery": {"attempt": 1}, "kept": 1})
    s.record_submission("j", 1, "local", '{"n": 1}', "1", state="RUNNING")
    changes = {"recovery": {"attempt": 2, "restarts": {"preemption": 1}}}
    assert s.record_submission("j", 2, "local", '{"n": 2}', "2", recovery=changes, job_reason="preempted")
    row = s.get_job("j")
    assert row.meta["recovery"] == changes["recovery"] and row.meta["kept"] == 1  # other keys kept
    assert (row.reason, row.state, [a.attempt for a in s.attempts("j")]) == ("preempted", "PENDING", [1, 2])

    s.close_job("j", "CANCELLED", "cancelled by user")  # cancel wins over the next resubmission
    assert not s.record_submission("j", 3, "local", '{"n": 3}', "3", recovery={"recovery": {"attempt": 3}},
                                   job_reason="preempted again")
    row = s.get_job("j")
    assert (row.state, row.reason, row.meta["recovery"]["attempt"]) == ("CANCELLED", "cancelled by user", 2)
    s.close()
