"""Recording a submission in ONE transaction (``StateStore.record_submission``): the attempt,
the job row, its events and the provenance record become visible together
or not at all; ``launch.record_launched`` never lets provenance fail a launch."""

from __future__ import annotations

import json

import pytest

from launcher.backend.protocols import Handle
from launcher.launching.launch import record_launched
from launcher.provenance.record import Captured, load_record, store_writes
from launcher.state import provenance as provenance_rows
from launcher.state.store import StateStore
from tests.fixtures.stores import other_connection


@pytest.fixture
def store(tmp_path, state_engine):
    s = StateStore(tmp_path / "home")  # on both engines (tests.fixtures.stores)
    yield s
    s.close()


def _job(store, job_id="j-1"):
    store.begin_job(job_id, "n", "t", "b", None, "name: n\n", meta={"seed": 3})
    return job_id


def test_the_attempt_the_job_row_events_and_the_provenance_record_are_written_together(store, monkeypatch):
    monkeypatch.setenv("RECORD_SUB_TOKEN", "Secret-Value-123456789")
    job = _job(store)
    store.record_submission(job, 1, "t", '{"native_id": "42"}', "42",
                            events=[("submitted", {"native_id": "42", "key": "Secret-Value-123456789"}),
                                    ("resumes", {"run": "old", "step": 7})],
                            provenance=("/x/RUN.json", '{"run": "j-1"}'))
    row = store.get_job(job)
    assert (row.state, row.handle, row.meta) == ("PENDING", '{"native_id": "42"}', {"seed": 3})
    assert [(a.attempt, a.native_id, a.state) for a in store.attempts(job)] == [(1, "42", "PENDING")]
    events = store.events(job)
    assert [e["kind"] for e in events] == ["submitted", "resumes"]
    assert events[0]["key"] != "Secret-Value-123456789" and "Secret-Value" not in json.dumps(events)
    assert load_record(store, job)["run"] == "j-1"


def test_a_failing_provenance_row_leaves_nothing_of_the_submission(store, monkeypatch):
    job = _job(store)
    monkeypatch.setattr(provenance_rows, "INSERT", "INSERT INTO no_such_table VALUES(?,?,?,?)")
    with pytest.raises(Exception):
        store.record_submission(job, 1, "t", "{}", "42", events=[("submitted", {})], provenance=(None, "{}"))
    other = other_connection(store)
    assert other.execute("SELECT state FROM jobs WHERE job_id=?", (job,)).fetchone() == ("SUBMITTING",)
    assert other.execute("SELECT count(*) FROM attempts").fetchone() == (0,)
    assert other.execute("SELECT count(*) FROM events").fetchone() == (0,)


def test_a_submission_recorded_after_the_job_was_closed_reopens_it(store):
    job = _job(store)
    store.close_job(job, "FAILED", "SUBMITTING for too long", event="closed")
    store.record_submission(job, 1, "t", "{}", "42")
    row = store.get_job(job)
    assert row.state == "PENDING" and row.meta.get("seed") == 3 and '"final"' not in json.dumps(row.meta)


def test_provenance_that_cannot_be_stored_never_fails_the_launch(store, capsys):
    job = _job(store)
    bad = store_writes(job, Captured({"run": job}, text='{"run": "j-1"}\n'))
    bad = type(bad)((("INSERT INTO no_such_table VALUES(?)", (1,)),), bad.events)
    record_launched(store, job, 1, "t", Handle("b", "t", job, "42", 1), [("submitted", {"native_id": "42"})], bad)
    assert store.get_job(job).state == "PENDING"
    kinds = [e["kind"] for e in store.events(job)]
    assert kinds == ["submitted", "provenance_error"] and load_record(store, job) is None
    assert "could not record the provenance" in capsys.readouterr().err


def test_a_failed_capture_is_recorded_as_its_error(store, capsys):
    job = _job(store)
    record_launched(store, job, 1, "t", Handle("b", "t", job, "42", 1), [],
                    store_writes(job, Captured(None, error="git: boom")))
    (event,) = store.events(job)
    assert (event["kind"], event["error"]) == ("provenance_error", "git: boom")
    assert "git: boom" in capsys.readouterr().err


def test_a_record_that_cannot_be_kept_by_save_launch_leaves_its_error_event(store, monkeypatch, capsys):
    """The sweep path (``save_launch``): a provenance row that cannot be written is replaced
    by a ``provenance_error`` event naming why, and a warning."""
    from launcher.provenance import record

    job = _job(store)
    monkeypatch.setattr(provenance_rows, "INSERT", "INSERT INTO no_such_table VALUES(?,?,?,?)")
    assert record.save_launch(store, job, Captured({"run": job}, text="{}\n"), seed=3) is None
    (event,) = store.events(job)
    assert event["kind"] == "provenance_error" and "no_such_table" in event["error"]
    assert "could not record the provenance" in capsys.readouterr().err
