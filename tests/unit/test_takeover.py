"""Who owns a checkpoint root (pure): the step each attempt really resumed from, and when
a newer run took the root over. Also the pure rules for SUBMITTING rows and stale jobs."""

from __future__ import annotations

from launcher.recovery.policy import (LOST_AFTER_S, STALE_AFTER_S, Budgets, Event, Retry, Superseded, abandoned,
                                      decide, reconcile_submitting)
from launcher.recovery.takeover import attempt_records, resume_steps, superseded_by
from launcher.core.status import JobState


def rec(gen, job, resume, attempt=None):
    h = {"generation": gen, "job_id": job, "resume_step": resume}
    if attempt is not None:
        h["attempt"] = attempt
    return h


def test_resume_steps_follow_the_job_and_attempt_not_the_generation_number():
    # job A had generations 1-2; B, relaunched by hand on the same root, continues at 3-4
    hist = [rec(1, "A", -1, 1), rec(2, "A", 40, 2), rec(3, "B", 80, 1), rec(4, "B", 120, 2)]
    assert resume_steps("B", [1, 2], hist) == {1: 80, 2: 120}
    assert resume_steps("A", [1, 2], hist) == {1: -1, 2: 40}


def test_records_without_an_attempt_are_matched_in_order_never_below_their_generation():
    hist = [rec(1, "A", -1), rec(2, "A", 10), rec(5, "B", 20), rec(7, "B", 30)]
    assert resume_steps("A", [1, 2], hist) == {1: -1, 2: 10}
    assert resume_steps("B", [1, 2, 3], hist) == {1: 20, 2: 30}


def test_a_scheduler_retry_of_the_same_attempt_keeps_the_latest_start():
    hist = [rec(1, "A", -1, 1), rec(2, "A", 10, 1)]
    assert attempt_records("A", [1], hist)[1]["generation"] == 2


def test_a_later_job_row_on_the_same_root_supersedes():
    why = superseded_by("A", 100.0, [], [("A", 100.0), ("B", 200.0)])
    assert "job B" in why and "later" in why
    assert superseded_by("B", 200.0, [], [("A", 100.0), ("B", 200.0)]) == ""


def test_a_newer_generation_by_someone_else_supersedes_but_our_own_does_not():
    assert superseded_by("A", 0, [rec(1, "A", -1), rec(2, "A", 5)]) == ""
    why = superseded_by("A", 0, [rec(1, "A", -1), rec(2, "X", 5)])
    assert "generation 2 (job X)" in why
    assert "outside the launcher" in superseded_by("A", 0, [rec(1, "A", -1), rec(2, None, 5)])
    assert superseded_by("A", 0, [rec(1, "X", -1)]) == ""  # A never started: an older run's root


def test_decide_closes_a_superseded_job_instead_of_counting_an_app_error():
    ev = Event(attempt=1, state=JobState.FAILED, resume_step=None, committed_step=10, reason="exit code 3",
               superseded_by="job B took the root over")
    assert isinstance(decide([], ev, Budgets()), Superseded)
    ev = Event(attempt=1, state=JobState.FAILED, resume_step=None, committed_step=10, reason="exit code 3")
    assert isinstance(decide([], ev, Budgets()), Retry)


def test_submitting_rows_are_adopted_waited_for_or_failed():
    assert reconcile_submitting(True, 5.0).action == "adopt"
    assert reconcile_submitting(False, 5.0, grace_s=60).action == "wait"
    r = reconcile_submitting(False, 61.0, grace_s=60)
    assert r.action == "fail" and "nothing ran" in r.reason


def test_lost_and_stale_jobs_are_abandoned_not_recovered():
    assert abandoned(JobState.UNKNOWN, 0.0, LOST_AFTER_S - 1) is None
    assert "unknown for 60 min" in abandoned(JobState.UNKNOWN, 0.0, LOST_AFTER_S)
    assert abandoned(JobState.PREEMPTED, 0.0, STALE_AFTER_S - 1) is None
    assert "never recovered" in abandoned(JobState.PREEMPTED, 0.0, STALE_AFTER_S)
    assert abandoned(JobState.RUNNING, 0.0, STALE_AFTER_S * 2) is None
    assert abandoned(JobState.PREEMPTED, None, 1e12) is None
