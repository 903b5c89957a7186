"""Who wrote each event, and whose a SQLite store's jobs are (launcher.state.actors), on real
SQLite stores: the OS user fills ``events.actor`` of every event, whichever write made it; a store
of schema 5 gains the column in place; a cancel names who ran it."""

from __future__ import annotations

import sqlite3

import pytest

from launcher.state.actors import actor, event_dict, file_owner, store_owner, trigger_sql
from launcher.state.readonly import ReadOnlyStore
from launcher.state.store import StateStore
from launcher.state.watchers import user_name
from tests.fixtures.polling import poll


@pytest.fixture
def store(tmp_path):
    s = StateStore(tmp_path / "h")
    try:
        yield s
    finally:
        s.close()


def test_a_user_name_is_data_in_the_trigger_never_sql():
    db = sqlite3.connect(":memory:")
    db.row_factory = sqlite3.Row
    db.execute("CREATE TABLE events(id INTEGER PRIMARY KEY AUTOINCREMENT, job_id TEXT, ts REAL, kind TEXT, "
               "detail TEXT NOT NULL DEFAULT '{}', actor TEXT)")
    db.execute(trigger_sql("o'brien'); DROP TABLE events; --"))
    db.execute("INSERT INTO events(job_id, ts, kind) VALUES('j', 1, 'x')")
    db.execute("INSERT INTO events(job_id, ts, kind, actor) VALUES('j', 2, 'y', 'named')")  # one it names is kept
    rows = db.execute("SELECT * FROM events ORDER BY id").fetchall()
    assert [r["actor"] for r in rows] == ["o'brien'); DROP TABLE events; --", "named"]
    assert event_dict(rows[0]) == {"ts": 1, "kind": "x", "actor": "o'brien'); DROP TABLE events; --"}


def test_every_event_of_a_sqlite_store_names_this_processs_user_whichever_write_made_it(store):
    store.begin_job("j", "n", "local", "local", None, "run: x\n")
    store.record_submission("j", 1, "local", "{}", "1", events=[("submitted", {"attempt": 1})])
    store.record_event("j", "note", why="x")
    store.close_job("j", "CANCELLED", "cancelled by someone", event="cancelled", detail={})
    events = store.events("j")
    assert [e["kind"] for e in events] == ["submitted", "note", "cancelled"]
    assert {e["actor"] for e in events} == {user_name()} == {actor(store)}
    assert store.last_event("j")["actor"] == user_name()
    assert store_owner(store) == file_owner(store.path)


def test_a_store_of_schema_5_gains_the_column_and_its_old_events_name_no_one(tmp_path):
    StateStore(tmp_path / "h").close()
    db = sqlite3.connect(tmp_path / "h" / "state.db")
    db.execute("ALTER TABLE events DROP COLUMN actor")
    db.execute("INSERT INTO events(job_id, ts, kind, detail) VALUES('old', 1, 'submitted', '{}')")
    db.execute("PRAGMA user_version=5")
    db.commit()
    db.close()
    ro = ReadOnlyStore(tmp_path / "h")  # a view reads an older store as it is, never migrating it
    try:
        assert ro.events("old") == [{"ts": 1.0, "kind": "submitted"}]
    finally:
        ro.close()
    s = StateStore(tmp_path / "h")
    try:
        assert s.db.execute("PRAGMA user_version").fetchone()[0] == 8
        s.record_event("old", "later")
        assert s.events("old") == [{"ts": 1.0, "kind": "submitted"},
                                   {"ts": s.events("old")[1]["ts"], "kind": "later", "actor": user_name()}]
    finally:
        s.close()


def test_a_cancel_names_who_ran_it_in_the_reason_the_event_and_status(launcher_env, tmp_path):
    from launcher.api.facade import Launcher
    from launcher.api.status_view import job_lines

    spec = tmp_path / "l.yaml"
    spec.write_text("name: l\nrun: sleep 300\n")
    with Launcher() as lx:
        job = lx.launch(str(spec), target="local")
        poll("running", lambda: lx.status(job.job_id).state == "RUNNING", timeout=60, interval=0.2)
        lx.cancel(job.job_id)
        d = lx.status(job.job_id)
        owner = file_owner(lx.app.store.path)  # a SQLite store's jobs are its file's owner's
    who = user_name()
    assert (d.state, d.job.reason) == ("CANCELLED", f"cancelled by {who}")
    cancelled = [e for e in d.events if e["kind"] == "cancelled"]
    assert len(cancelled) == 1 and cancelled[0]["by"] == cancelled[0]["actor"] == who
    assert any(line.startswith(f"  event cancelled by {who}: ") for line in job_lines(d))
    assert d.to_dict()["owner"] == owner and d.to_dict()["refreshed"] is True
