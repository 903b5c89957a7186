"""Issue 29, seed 2111113678 schedule 36: a watcher paused past its claim inside the local
backend's submit started its copy of an attempt before the other watcher's submission of it
started, and was stopped before it could settle that copy. The copy held the attempt's start
claim and ran user code; the recorded submission stood down (exit 3) and looked like a failed
attempt, so the next pass submitted attempt N+1 beside the running copy, and `status` named
the wrong id. The watcher deciding on the stood-down attempt now adopts the copy that holds
the start; a settler that finds its copy started first records it in place of the other.

Real processes on the local target; the store is rewritten only to put the recorded
submission where the race leaves it (the one that stood down)."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.backend.protocols import Handle
from launcher.backend.sections import spec_from_text
from launcher.core.status import JobState
from launcher.jobside.startclaim import holder
from launcher.launching.launch import launch
from launcher.launching.submission import job_ref, job_spec
from launcher.launching.submit import settle_unrecorded
from launcher.recovery import watch
from launcher_backends.local import processes
from tests.fixtures.polling import poll


def _ended(h: Handle) -> bool:
    return not processes.alive(int(h.native_id), h.extra["start_ticks"])


@pytest.fixture
def raced(app, tmp_path):
    """A job whose attempt 1 runs as REAL (it holds the start claim, its program waits for
    ``go``) while the store records DUP, a second submission of attempt 1 that stood down:
    (job id, REAL, DUP, the go file, the file each start that ran user code appends its id to)."""
    ran, go = tmp_path / "ran", tmp_path / "go"
    text = (f"name: raced\nrecovery: {{app_error: 2}}\n"
            f"run: 'echo $LAUNCHER_SELF_ID >> {ran}; while [ ! -e {go} ]; do sleep 0.05; done'\n")
    j = launch(app, spec_from_text(text), text, None, "local")
    real = Handle.from_json(app.store.get_job(j.job_id).handle)
    job = job_ref(app, app.store.get_job(j.job_id), 1)
    poll("the first submission claimed the start", lambda: holder(job.job_dir, 1) == real.native_id,
         timeout=60, interval=0.05)
    backend = app.backend("local")
    dup = backend.submit(backend.render(job_spec(app.store.get_job(j.job_id)), app.facts("local"), job))
    poll("the second submission stood down", lambda: _ended(dup), timeout=60, interval=0.05)
    # the race's outcome: the store holds the submission that stood down
    app.store.update_attempt(j.job_id, 1, native_id=dup.native_id, handle=dup.to_json())
    app.store.update_job(j.job_id, handle=dup.to_json())
    yield j.job_id, real, dup, go, ran
    go.touch()
    poll("the real attempt ended", lambda: _ended(real), timeout=60, interval=0.05)


def test_watch_adopts_the_submission_that_holds_the_start_instead_of_submitting_the_next_attempt(app, raced):
    job_id, real, dup, go, ran = raced
    watch.run(app, once=True, echo=lambda s: None)
    attempts = app.store.attempts(job_id)
    assert [(a.attempt, a.native_id) for a in attempts] == [(1, real.native_id)], attempts
    assert "stood down" in attempts[0].reason and dup.native_id in attempts[0].reason
    adopted = [e for e in app.store.events(job_id) if e["kind"] == "adopted"]
    assert adopted and adopted[-1]["native_id"] == real.native_id and adopted[-1]["replaces"] == dup.native_id
    go.touch()
    poll("the real attempt ended", lambda: _ended(real), timeout=60, interval=0.05)
    watch.run(app, once=True, echo=lambda s: None)
    row = app.store.get_job(job_id)
    assert row.state == "COMPLETED", (row.state, row.reason)
    assert [a.native_id for a in app.store.attempts(job_id)] == [real.native_id]
    assert Path(ran).read_text().split() == [real.native_id]  # user code ran once, as the adopted id


def test_a_settler_whose_copy_started_first_records_it_in_place_of_the_one_that_stood_down(app, raced):
    job_id, real, dup, go, ran = raced
    assert settle_unrecorded(app.store, app.backend("local"), job_id, 1, real, wait_s=0) == "took over"
    attempt = app.store.attempts(job_id)[0]
    assert (attempt.native_id, attempt.state) == (real.native_id, "RUNNING")
    st_real, st_dup = app.backend("local").status([real, dup])
    assert st_real.state is JobState.RUNNING and st_dup.state is not JobState.RUNNING
    assert Path(ran).read_text().split() == [real.native_id]
