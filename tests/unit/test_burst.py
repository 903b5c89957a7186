from launcher.recovery.burst import should_burst
from launcher.core.status import JobState


def test_a_job_pending_past_burst_after_bursts():
    d = should_burst(JobState.PENDING, pending_since=100.0, now=100.0 + 1801, after=1800)
    assert d.go and "past burst.after=1800s" in d.reason


def test_a_job_still_within_its_wait_does_not():
    assert not should_burst(JobState.PENDING, 100.0, 100.0 + 60, 1800).go


def test_a_predicted_long_wait_bursts_early():
    d = should_burst(JobState.PENDING, 100.0, 160.0, 1800, predicted_wait=3600)
    assert d.go and "predicted start" in d.reason


def test_running_jobs_and_specs_without_burst_never_burst():
    assert not should_burst(JobState.RUNNING, 0, 10**6, 60).go
    assert not should_burst(JobState.PENDING, 0, 10**6, None).go
