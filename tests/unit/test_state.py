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
