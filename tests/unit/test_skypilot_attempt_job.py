"""Which cluster job the launcher follows when one attempt was launched twice onto its cluster
(states.attempt_job): the copy holding the start claim, never the copy that stood down."""

from __future__ import annotations

from dataclasses import replace

import pytest

from launcher.core.status import JobState
from launcher_backends.skypilot.client import ClusterJob
from launcher_backends.skypilot.states import attempt_job
from tests.unit.test_skypilot_backend import make

T = "launcher-j-1"


def job(job_id, status, start=None, name=T):
    return ClusterJob(job_id, name, status, submitted_at=0.0, start_at=start)


@pytest.mark.parametrize("jobs, expected", [
    # one job of the attempt: that one, whatever its state
    ([job(1, "FAILED", 1.0)], 1),
    # the second launch queued behind the holder, then standing down once the holder is done
    ([job(1, "RUNNING", 1.0), job(2, "PENDING")], 1),
    ([job(1, "SUCCEEDED", 1.0), job(2, "RUNNING", 9.0)], 1),
    ([job(1, "SUCCEEDED", 1.0), job(2, "FAILED", 9.0)], 1),
    # the second launch started first and holds the claim; the recorded one stood down
    ([job(1, "FAILED", 2.0), job(2, "RUNNING", 1.0)], 2),
    ([job(1, "FAILED", 2.0), job(2, "SUCCEEDED", 1.0)], 2),
    # both ran side by side into the claim: the one still running is the holder
    ([job(1, "RUNNING", 1.0), job(2, "FAILED", 1.5)], 1),
    # the holder failed on its own, the copy stood down: the attempt failed, first start first
    ([job(1, "FAILED", 1.0), job(2, "FAILED", 5.0)], 1),
    ([job(1, "FAILED", 5.0), job(2, "FAILED", 1.0)], 2),
    # another attempt's jobs on the cluster are not this attempt's
    ([job(1, "RUNNING", 1.0, name="launcher-j-2"), job(2, "FAILED", 2.0)], 2),
    ([job(1, "RUNNING", 1.0, name="launcher-j-2")], None),
])
def test_the_attempt_is_the_copy_that_holds_its_start(jobs, expected):
    got = attempt_job(jobs, T)
    assert (got.job_id if got else None) == expected


def test_a_copy_that_stood_down_is_not_read_as_the_attempts_failure_and_logs_follow_the_holder(tmp_path):
    """A second launch of the attempt onto its cluster, which stands down (exit 3, FAILED)
    while the first runs: before, status followed the newest job of that name, read FAILED
    and started a resubmission beside the running copy."""
    backend, fake, req = make(tmp_path)
    h = backend.submit(req)
    fake.launch(req.text, h.native_id, secrets={})  # the same attempt again, onto the same cluster
    jobs = fake.cluster_jobs[h.native_id]
    assert [j.name for j in jobs] == [h.extra["task_name"]] * 2
    jobs[1] = replace(jobs[1], status="FAILED", start_at=5.0, end_at=6.0)
    jobs[0] = replace(jobs[0], start_at=1.0)
    assert backend.status([h])[0].state == JobState.RUNNING
    assert backend._cluster_job_id(fake, h) == 1
    jobs[0] = replace(jobs[0], status="SUCCEEDED", end_at=9.0)
    assert backend.status([h])[0].state == JobState.COMPLETED
