"""StateStore.batch(): several writes committed as one transaction; each write inside is a
savepoint, so a failed write is undone alone, exactly as its own transaction would be."""

from __future__ import annotations

import sqlite3

import pytest

from launcher.provenance.record import load_record, save_record
from launcher.state.store import StateStore
from tests.fixtures.stores import other_connection


@pytest.fixture
def store(tmp_path, state_engine):
    s = StateStore(tmp_path / "home")  # on both engines (tests.fixtures.stores)
    yield s
    s.close()


def _other(store) -> sqlite3.Connection:
    return other_connection(store)


def _job(store, job_id="j-1"):
    store.begin_job(job_id, "n", "t", "b", None, "name: n\n")


def test_writes_in_a_batch_become_visible_together_at_its_end(store):
    _job(store)
    other = _other(store)
    with store.batch():
        store.record_attempt("j-1", 1, "t", "{}", "11")
        store.record_event("j-1", "submitted", native_id="11")
        assert other.execute("SELECT count(*) FROM attempts").fetchone()[0] == 0  # not committed yet
        assert other.execute("SELECT count(*) FROM events").fetchone()[0] == 0
    assert other.execute("SELECT count(*) FROM attempts").fetchone()[0] == 1
    assert [e["kind"] for e in store.events("j-1")] == ["submitted"]
    assert store.get_job("j-1").state == "PENDING"


def test_a_failed_write_inside_a_batch_is_undone_alone(store):
    _job(store)
    with store.batch():
        store.record_event("j-1", "first")
        with pytest.raises(RuntimeError):
            with store.tx() as db:
                db.execute("INSERT INTO events(job_id,ts,kind,detail) VALUES('j-1', 0, 'half', '{}')")
                raise RuntimeError("boom")
        store.record_event("j-1", "second")
    assert [e["kind"] for e in store.events("j-1")] == ["first", "second"]


def test_an_error_leaving_the_batch_rolls_every_write_back(store):
    _job(store)
    with pytest.raises(RuntimeError):
        with store.batch():
            store.record_event("j-1", "first")
            store.record_attempt("j-1", 1, "t", "{}", "11")
            raise RuntimeError("boom")
    assert store.events("j-1") == [] and store.attempts("j-1") == []
    assert store.get_job("j-1").state == "SUBMITTING"
    store.record_event("j-1", "after")  # the store is usable again
    assert [e["kind"] for e in store.events("j-1")] == ["after"]


def test_nested_batches_join_the_outer_one(store):
    _job(store)
    other = _other(store)
    with store.batch():
        with store.batch():
            store.record_event("j-1", "inner")
        assert other.execute("SELECT count(*) FROM events").fetchone()[0] == 0
    assert other.execute("SELECT count(*) FROM events").fetchone()[0] == 1


def test_the_provenance_table_is_created_inside_a_batch_without_committing_it(store):
    _job(store)
    with pytest.raises(RuntimeError):
        with store.batch():
            save_record(store, "j-1", {"run": "j-1"}, None)  # first use creates the table
            raise RuntimeError("boom")
    assert load_record(store, "j-1") is None  # rolled back with the batch, not committed early
    with store.batch():
        save_record(store, "j-1", {"run": "j-1"}, None)
    assert load_record(store, "j-1")["run"] == "j-1"
