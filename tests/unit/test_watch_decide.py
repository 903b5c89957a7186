"""One watch cycle for one job, decided without I/O (``launcher.recovery.decide``), and the
loop that applies it picking up recovery state an older version stored."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from launcher.core.errors import LauncherError
from launcher.recovery.decide import Close, Facts, Note, Resubmit, UnderClaim, on_ended, on_status, settled
from launcher.recovery.policy import LOST_AFTER_S
from launcher.recovery.progress import Progress
from launcher.recovery.state import RecoveryState
from launcher.backend.sections import spec_from_text
from launcher.state.store import AttemptRow, JobRow
from launcher.core.status import JobState, Status
from tests.fixtures.stores import other_connection

# the tests with a store: on SQLite and on PostgreSQL (tests.fixtures.stores)
both_engines = pytest.mark.usefixtures("state_engine")

SPEC = spec_from_text("name: d\nrun: train\nrecovery: {preemption: 3, no_capacity: 3, placement_cooldown: 60s}\n")


def job(meta=None, state="PREEMPTED") -> JobRow:
    return JobRow("j", "d", "sky", "skypilot", None, "name: d\n", 0.0, 0.0, state, "", "{}", None, None, meta or {})


def attempt(n, state, ended=None, handle='{"backend": "skypilot", "target": "sky", "job_id": "j", '
                                       '"native_id": "c1", "extra": {"infra": "aws/us-east-1"}}') -> AttemptRow:
    return AttemptRow("j", n, "sky", f"c{n}", handle, 0.0, state, "", "", None, None, ended, None, None, {})


def test_a_failed_status_query_counts_a_control_plane_error_and_nothing_else():
    n = on_status(RecoveryState(control_plane_errors=2), LauncherError("ssh: timed out"), 10.0)
    assert isinstance(n, Note) and n.action == "control_plane" and n.state.control_plane_errors == 3
    assert n.event == ("control_plane", {"error": "ssh: timed out", "consecutive": 3})


def test_a_running_job_clears_the_error_count_and_the_unknown_clock():
    n = on_status(RecoveryState(control_plane_errors=2, unknown_since=5.0), Status(JobState.RUNNING), 10.0)
    assert n == Note("running", "RUNNING", RecoveryState(), progress=True)


def test_an_unknown_status_starts_a_clock_then_the_job_is_closed_as_lost_under_the_claim():
    first = on_status(RecoveryState(), Status(JobState.UNKNOWN, reason="not in squeue"), 100.0)
    assert first.state.unknown_since == 100.0 and first.event == ("control_plane", {"error": "not in squeue"})
    later = on_status(first.state, Status(JobState.UNKNOWN), 100.0 + LOST_AFTER_S - 1)
    assert later == Note("control_plane", "status unknown", first.state)
    lost = on_status(first.state, Status(JobState.UNKNOWN, reason="gone"), 100.0 + LOST_AFTER_S)
    assert isinstance(lost, UnderClaim) and lost.lost.state == "FAILED" and lost.lost.reason.startswith("lost: ")
    assert lost.lost.why.endswith("(last: gone)")


def test_an_ended_attempt_is_decided_under_the_claim_keeping_the_unknown_clock():
    u = on_status(RecoveryState(control_plane_errors=1, unknown_since=3.0), Status(JobState.PREEMPTED), 9.0)
    assert u == UnderClaim(RecoveryState(unknown_since=3.0))


def test_under_the_claim_a_job_another_watcher_acted_on_is_left_alone():
    assert settled(job(state="GAVE_UP"), [attempt(1, "PREEMPTED")]).action == "claimed"
    assert settled(job(meta={"final": True}), [attempt(1, "PREEMPTED")]).action == "claimed"
    assert "attempt 2 is PENDING" in settled(job(), [attempt(1, "PREEMPTED"), attempt(2, "PENDING")]).reason
    assert settled(job(), [attempt(1, "PREEMPTED")]) is None


def test_a_preempted_attempt_is_resubmitted_and_its_region_cooled_down():
    rs = RecoveryState(retry_at=None, avoid={"gcp/old": 5.0, "aws/kept": 500.0})
    a = on_ended(job(meta=rs.as_meta()), [attempt(1, "PREEMPTED")], Facts(SPEC, Progress()),
                 Status(JobState.PREEMPTED), 100.0)
    assert isinstance(a, Resubmit) and a.attempt == 2 and a.spec is SPEC
    assert a.state.avoid == {"aws/kept": 500.0, "aws/us-east-1": 160.0}  # expired entry dropped
    assert a.avoid == ("aws/kept", "aws/us-east-1")


def test_a_delayed_retry_is_scheduled_once_then_waits_until_due():
    ended = [attempt(1, "NO_CAPACITY")]
    a = on_ended(job(), ended, Facts(SPEC, Progress()), Status(JobState.NO_CAPACITY), 100.0)
    assert a.action == "waiting" and a.event[0] == "retry_scheduled" and a.state.retry_at == 130.0
    due = a.state.as_meta()
    assert on_ended(job(meta=due), ended, Facts(SPEC, Progress()), Status(JobState.NO_CAPACITY), 129.0) == \
        Note("waiting", a.reason)
    r = on_ended(job(meta=due), ended, Facts(SPEC, Progress()), Status(JobState.NO_CAPACITY), 130.0)
    assert isinstance(r, Resubmit) and r.state.retry_at is None


@pytest.mark.parametrize("state, final", [("COMPLETED", "COMPLETED"), ("CANCELLED", "CANCELLED")])
def test_an_attempt_that_finished_closes_the_job(state, final):
    c = on_ended(job(), [attempt(1, state)], Facts(SPEC, Progress()), Status(JobState(state)), 1.0)
    assert isinstance(c, Close) and c.state == final and c.action == "done"


def test_a_budget_spent_gives_up_and_a_newer_run_supersedes():
    three = [attempt(n, "PREEMPTED") for n in (1, 2, 3, 4)]
    g = on_ended(job(), three, Facts(SPEC, Progress(committed_step=9)), Status(JobState.PREEMPTED), 1.0)
    assert isinstance(g, Close) and g.state == "GAVE_UP" and "PREEMPTED budget exhausted" in g.why
    rooted = replace(job(), ckpt_root="/ck")
    s = on_ended(rooted, [attempt(1, "PREEMPTED")], Facts(SPEC, Progress(), (("j", 0.0), ("k", 5.0))),
                 Status(JobState.PREEMPTED), 1.0)
    assert isinstance(s, Close) and s.state == "SUPERSEDED" and "job k" in s.why


def test_an_unreadable_checkpoint_root_decides_nothing():
    n = on_ended(job(), [attempt(1, "PREEMPTED")], Facts(SPEC, Progress(error="hung", unknown=True)),
                 Status(JobState.PREEMPTED), 1.0)
    assert n == Note("waiting", "checkpoint root not readable: hung", event=("storage_timeout", {"error": "hung"}))


# ---- the loop, on a real local job, with recovery state an older version stored
def _write_meta_as_before(app, job_id, **keys):
    db = other_connection(app.store)  # tests.fixtures.stores: SQLite's file, or the PostgreSQL database
    meta = json.loads(db.execute("SELECT meta FROM jobs WHERE job_id=?", (job_id,)).fetchone()[0])
    db.execute("UPDATE jobs SET meta=? WHERE job_id=?", (json.dumps({**meta, **keys}), job_id))
    db.commit()
    db.close()


@both_engines
def test_a_retry_an_older_version_scheduled_is_waited_for_then_submitted(app):
    from launcher.launching.launch import launch
    from launcher.recovery import watch
    from launcher.launching.tracking import wait_for

    text = "name: flaky\nrun: 'exit 1'\nrecovery: {app_error: 2}\n"
    j = launch(app, spec_from_text(text), text, None, "local")
    assert wait_for(app, j.job_id, poll=0.1, timeout=30).state is JobState.FAILED
    _write_meta_as_before(app, j.job_id, retry_at=5000.0, avoid={"x/y": 1.0}, control_plane_errors=2)
    (o,) = watch.cycle(app, clock=lambda: 4000.0)
    assert o.action == "waiting" and len(app.store.attempts(j.job_id)) == 1
    assert app.store.get_job(j.job_id).meta.get("control_plane_errors") is None  # a status came back
    (o,) = watch.cycle(app, clock=lambda: 5000.0)
    assert o.action == "resubmitted" and [a.attempt for a in app.store.attempts(j.job_id)] == [1, 2]
    meta = app.store.get_job(j.job_id).meta
    assert "retry_at" not in meta and "avoid" not in meta and meta["seed"] is not None  # expired: dropped
