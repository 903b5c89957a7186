"""One job row whose meta is not JSON no longer stops the watch of every job (issue 20, §9):
before the fix the listing of open jobs raised JSONDecodeError, so `launcher watch` exited 70
and recovered nothing. Now that job gets one watch_error event naming what is wrong and the
watch goes on with the others; `status JOB` of it is a one-line state-store error."""

from __future__ import annotations

import sqlite3

import pytest

from launcher.backend.sections import spec_from_text
from launcher.core.errors import StateStoreError
from launcher.launching.launch import launch
from launcher.recovery import watch


def _launch(app, text):
    return launch(app, spec_from_text(text), text, None, "local")


@pytest.mark.parametrize("meta", ["{broken", "[1, 2]"])
def test_a_job_with_broken_meta_is_reported_and_the_others_are_watched(app, launcher_env, meta):
    good = _launch(app, "name: good\nrun: sleep 2\n").job_id
    bad = _launch(app, "name: bad\nrun: sleep 2\n").job_id
    db = sqlite3.connect(launcher_env["home"] / "state.db")
    db.execute("UPDATE jobs SET meta=? WHERE job_id=?", (meta, bad))
    db.commit()
    db.close()
    outcomes = {o.job_id: o for o in watch.cycle(app)}
    assert good in outcomes, outcomes
    assert outcomes[bad].action == "unreadable" and "meta" in outcomes[bad].reason
    errors = [e for e in app.store.events(bad) if e["kind"] == "watch_error"]
    assert len(errors) == 1 and ("not a JSON object" in errors[0]["error"] or "not valid JSON" in errors[0]["error"])
    watch.cycle(app)  # the same error is recorded once, not once per pass
    assert len([e for e in app.store.events(bad) if e["kind"] == "watch_error"]) == 1
    with pytest.raises(StateStoreError, match=bad):
        app.store.get_job(bad)
    assert [j.job_id for j in app.store.list_jobs()] == [good]


def test_the_job_listing_names_a_row_it_cannot_show(app, launcher_env):
    from launcher.api.status_view import gather_jobs
    from launcher.state.store import StateStore

    s = StateStore(launcher_env["home"])
    s.begin_job("fine-abc123", "fine", "local", "local", None, "name: fine\n")
    s.begin_job("bad-abc123", "bad", "local", "local", None, "name: bad\n")
    s.db.execute("UPDATE jobs SET state='FAILED', meta='{x' WHERE job_id='bad-abc123'")
    s.db.execute("UPDATE jobs SET state='FAILED' WHERE job_id='fine-abc123'")
    s.close()
    notes = []
    rows = gather_jobs(app, note=notes.append)
    assert [r.job_id for r in rows] == ["fine-abc123"]
    assert len(notes) == 1 and notes[0].startswith("bad-abc123: not shown: its meta is not valid JSON"), notes
