"""Recording a submission in ONE transaction (``StateStore.record_submission``): the attempt,
the job row, its events and other tables' rows (the provenance record) become visible together
or not at all; ``launch.record_launched`` never lets provenance fail a launch; the provenance
text is the draft's, filled with the submission (``jsonrows.Template``)."""

from __future__ import annotations

import json
import sqlite3

import pytest

from launcher.backend.protocols import Handle
from launcher.core.jsonrows import Template
from launcher.launching.launch import record_launched
from launcher.provenance.record import (INSERT_RECORD, SUBMISSION_KEYS, DUMP_OPTIONS, Captured, complete_launch,
                                        ensure_table, load_record, store_writes, to_bytes)
from launcher.spec.model import JobSpec
from launcher.state.store import StateStore


@pytest.fixture
def store(tmp_path):
    s = StateStore(tmp_path / "home")
    ensure_table(s)
    yield s
    s.close()


def _job(store, job_id="j-1"):
    store.begin_job(job_id, "n", "t", "b", None, "name: n\n", meta={"seed": 3})
    return job_id


def test_the_attempt_the_job_row_events_and_extra_rows_are_written_together(store, monkeypatch):
    monkeypatch.setenv("RECORD_SUB_TOKEN", "Secret-Value-123456789")
    job = _job(store)
    store.record_submission(job, 1, "t", '{"native_id": "42"}', "42",
                            events=[("submitted", {"native_id": "42", "key": "Secret-Value-123456789"}),
                                    ("resumes", {"run": "old", "step": 7})],
                            also=[(INSERT_RECORD, (job, 1.0, "/x/RUN.json", '{"run": "j-1"}'))])
    row = store.get_job(job)
    assert (row.state, row.handle, row.meta) == ("PENDING", '{"native_id": "42"}', {"seed": 3})
    assert [(a.attempt, a.native_id, a.state) for a in store.attempts(job)] == [(1, "42", "PENDING")]
    events = store.events(job)
    assert [e["kind"] for e in events] == ["submitted", "resumes"]
    assert events[0]["key"] != "Secret-Value-123456789" and "Secret-Value" not in json.dumps(events)
    assert load_record(store, job)["run"] == "j-1"


def test_a_failing_extra_row_leaves_nothing_of_the_submission(store):
    job = _job(store)
    with pytest.raises(Exception):
        store.record_submission(job, 1, "t", "{}", "42", events=[("submitted", {})],
                                also=[("INSERT INTO no_such_table VALUES(?)", (1,))])
    other = sqlite3.connect(str(store.path))
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


@pytest.mark.parametrize("values", [{"native_id": "4242", "attempt": 2}, {"native_id": None, "attempt": None},
                                    {"native_id": "é\n\"x", "attempt": 1}])
def test_a_filled_template_is_exactly_the_plain_dump(values):
    doc = {"run": "j", "native_id": None, "attempt": None, "spec": {"text": "a\nb", "list": [1, {"x": "ü"}]}}
    template = Template.of(doc, SUBMISSION_KEYS, **DUMP_OPTIONS)
    assert template.fill(values) == json.dumps({**doc, **values}, **DUMP_OPTIONS)


def test_a_doc_holding_the_marker_text_is_dumped_plainly(app):
    doc = {"run": "j", "native_id": None, "attempt": None, "odd": "\x00varying 0\x00"}
    assert Template.of(doc, SUBMISSION_KEYS, **DUMP_OPTIONS) is None
    done = complete_launch(app, Captured(doc), JobSpec(name="j", run="true"), "local", "j",
                           Handle("b", "t", "j", "9", 1))
    assert done.text == to_bytes({**doc, "native_id": "9", "attempt": 1}).decode()


def test_a_record_dumped_by_sections_is_exactly_the_plain_dump_launch_after_launch(app, tmp_path, monkeypatch):
    from launcher.provenance.record import dump_record, draft_launch

    monkeypatch.chdir(tmp_path)
    spec = JobSpec(name="j", run="true", env={"A": "é\n\u2028"})
    texts = []
    for job_id in ("j-1", "j-2", "j-3"):  # the second and third reuse the kept sections' text
        draft = draft_launch(app, job_id=job_id, spec=spec, spec_text="name: j\nrun: 'true'\n", spec_path=None,
                             target_name="local", seed=7)
        assert draft.doc is not None and draft.template is not None
        assert dump_record(draft.doc) == json.dumps(draft.doc, **DUMP_OPTIONS)
        done = complete_launch(app, draft, spec, "local", job_id, Handle("local", "local", job_id, "99", 1))
        assert done.text == to_bytes(done.doc).decode()
        texts.append(done.text)
    assert len(set(texts)) == 3
    odd = {"a": {}, "b": [], "c": [1, {"d": "x\ny"}], "e": None, "f": object()}
    assert dump_record(odd) == json.dumps(odd, **DUMP_OPTIONS) and dump_record({}) == "{}"


def test_a_record_that_cannot_be_kept_by_save_launch_leaves_its_error_event(store, monkeypatch, capsys):
    """The sweep path (``save_launch``): a provenance row that cannot be written is replaced
    by a ``provenance_error`` event naming why, and a warning."""
    from launcher.provenance import record

    job = _job(store)
    monkeypatch.setattr(record, "INSERT_RECORD", "INSERT INTO no_such_table VALUES(?,?,?,?)")
    assert record.save_launch(store, job, Captured({"run": job}, text="{}\n"), seed=3) is None
    (event,) = store.events(job)
    assert event["kind"] == "provenance_error" and "no_such_table" in event["error"]
    assert "could not record the provenance" in capsys.readouterr().err
