"""A recovery resubmission slower than the claim's TTL keeps the job's claim (``launch.resubmit``
under ``launcher.state.claims``): no other watcher takes the job over while the submission runs,
and the attempt is then recorded under the claim that made it (not refused as ClaimLost)."""

from __future__ import annotations

import time

from launcher.backend.protocols import Handle
from launcher.launching.launch import launch, resubmit
from launcher.spec.model import JobSpec
from launcher.state.store import StateStore


def test_a_resubmission_slower_than_the_ttl_keeps_the_claim_and_is_recorded(app, monkeypatch):
    monkeypatch.setenv("LAUNCHER_CLAIM_TTL", "0.3")
    spec = JobSpec(name="slow", run="sleep 30")
    job_id = launch(app, spec, "name: slow\nrun: sleep 30\n", None, "local").job_id
    backend = app.backend("local")
    backend.cancel(Handle.from_json(app.store.get_job(job_id).handle))
    c = app.store.claim(job_id, ttl=0.3)
    taken: list = []
    real_submit = backend.submit

    def slow_submit(request):  # a scheduler answering after 4 TTLs; another watcher tries meanwhile
        other = StateStore(app.store.home)
        try:
            for _ in range(8):
                time.sleep(0.15)
                taken.append(other.claim(job_id, ttl=0.3, owner="another-watcher") is not None)
        finally:
            other.close()
        return real_submit(request)

    monkeypatch.setattr(backend, "submit", slow_submit)
    h = resubmit(app, app.store.get_job(job_id), "local", 2, "test", owner=c.owner)
    assert taken == [False] * 8
    assert [a.attempt for a in app.store.attempts(job_id)] == [1, 2] and h.attempt == 2
    assert app.store.claim_holder(job_id)[0] == c.owner
    backend.cancel(h)


def test_a_resubmission_whose_outcome_is_unknown_is_noted_with_its_attempt_and_target(app, monkeypatch):
    """The scheduler's answer lost (a stalled controller may take the request in later): the job's
    meta says which attempt, where and when, so a cancel meanwhile goes on looking for it."""
    import pytest

    from launcher.core.errors import SubmitOutcomeUnknown

    spec = JobSpec(name="lost", run="sleep 30")
    job_id = launch(app, spec, "name: lost\nrun: sleep 30\n", None, "local").job_id
    backend = app.backend("local")
    backend.cancel(Handle.from_json(app.store.get_job(job_id).handle))
    c = app.store.claim(job_id)

    def lost(request):
        raise SubmitOutcomeUnknown("sbatch: Socket timed out on send/recv operation")

    monkeypatch.setattr(backend, "submit", lost)
    before = time.time()
    with pytest.raises(SubmitOutcomeUnknown):
        resubmit(app, app.store.get_job(job_id), "local", 2, "test", owner=c.owner)
    unknown = app.store.get_job(job_id).meta["submit_unknown"]
    assert (unknown["attempt"], unknown["target"]) == (2, "local") and unknown["at"] >= before
    assert "Socket timed out" in unknown["reason"]
    assert [a.attempt for a in app.store.attempts(job_id)] == [1]


def test_an_attempt_whose_last_submission_was_lost_is_not_submitted_again_within_the_quiet_time(app, monkeypatch):
    """A second copy would run if the stalled controller then took the first in: the attempt is
    looked up again (found: adopted), and submitted again only once the quiet time has passed."""
    import pytest

    from launcher.core.errors import LauncherError, SubmissionUnsettled
    from launcher.launching import submission

    spec = JobSpec(name="again", run="sleep 30")
    job_id = launch(app, spec, "name: again\nrun: sleep 30\n", None, "local").job_id
    backend = app.backend("local")
    backend.cancel(Handle.from_json(app.store.get_job(job_id).handle))
    app.store.patch_meta(job_id, submit_unknown={"at": time.time() - 5, "reason": "sbatch: Socket timed out",
                                                 "attempt": 2, "target": "local"})
    submits = []
    real_submit = backend.submit
    monkeypatch.setattr(backend, "submit", lambda request: submits.append(request) or real_submit(request))
    c = app.store.claim(job_id)
    with pytest.raises(SubmissionUnsettled, match="attempt 2's last submission ended without"):
        resubmit(app, app.store.get_job(job_id), "local", 2, "test", owner=c.owner)
    assert submits == [] and [a.attempt for a in app.store.attempts(job_id)] == [1]

    # a lookup the scheduler does not answer: noted, the quiet time counts from it
    def unanswered(*a, **k):
        raise LauncherError("squeue: Socket timed out")

    monkeypatch.setattr("launcher.launching.launch.find_submission", unanswered)
    app.store.patch_meta(job_id, submit_unknown={**app.store.get_job(job_id).meta["submit_unknown"],
                                                 "at": time.time() - 3600})
    with pytest.raises(LauncherError, match="Socket timed out"):
        resubmit(app, app.store.get_job(job_id), "local", 2, "test", owner=c.owner)
    meta = app.store.get_job(job_id).meta
    assert time.time() - meta[submission.UNANSWERED] < 5 and submits == []
    assert submission.earlier_unsettled(app.store.get_job(job_id).meta, 2, time.time())
    monkeypatch.setattr("launcher.launching.launch.find_submission", submission.find_submission)

    # the quiet time over: submitted again
    app.store.patch_meta(job_id, **{submission.UNANSWERED: time.time() - 61})
    h = resubmit(app, app.store.get_job(job_id), "local", 2, "test", owner=c.owner)
    assert len(submits) == 1 and [a.attempt for a in app.store.attempts(job_id)] == [1, 2]
    backend.cancel(h)


def test_earlier_unsettled_is_about_that_attempt_and_the_quiet_time_only():
    from launcher.launching.submission import QUIET_S, earlier_unsettled

    meta = {"submit_unknown": {"at": 1000.0, "reason": "r", "attempt": 3}}
    assert earlier_unsettled(meta, 3, 1000.0 + QUIET_S - 1)
    assert not earlier_unsettled(meta, 3, 1000.0 + QUIET_S)
    assert not earlier_unsettled(meta, 4, 1001.0) and not earlier_unsettled({}, 3, 1001.0)
    meta["token_unanswered_at"] = 2000.0  # the scheduler's last unanswered lookup (submission.UNANSWERED)
    assert earlier_unsettled(meta, 3, 2000.0 + QUIET_S - 1) and not earlier_unsettled(meta, 3, 2000.0 + QUIET_S)
