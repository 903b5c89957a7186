"""The recovery decision is a pure function: these tests move history and clock by hand."""

from launcher.recovery.policy import Budgets, Done, Event, FailureClass, GiveUp, PastFailure, Retry, decide
from launcher.backend.sections import spec_from_text
from launcher.core.status import JobState

B = Budgets(preemption=3, node_failure=2, timeout=5, out_of_memory=0, app_error=1, no_capacity=3)


def ev(state, attempt=1, resume=None, committed=None, **kw):
    return Event(attempt=attempt, state=state, resume_step=resume, committed_step=committed, **kw)


def test_completed_and_cancelled_are_done():
    assert isinstance(decide([], ev(JobState.COMPLETED), B), Done)
    assert isinstance(decide([], ev(JobState.CANCELLED), B), Done)


def test_preemption_is_retried_within_its_own_budget():
    hist = [PastFailure(i, FailureClass.PREEMPTED, i * 10, i * 10 + 10) for i in (1, 2)]
    d = decide(hist, ev(JobState.PREEMPTED, 3, 30, 40), B)
    assert isinstance(d, Retry) and d.failure is FailureClass.PREEMPTED and "3 of 3" in d.reason
    hist.append(PastFailure(3, FailureClass.PREEMPTED, 30, 40))
    d = decide(hist, ev(JobState.PREEMPTED, 4, 40, 50), B)
    assert isinstance(d, GiveUp) and "PREEMPTED budget exhausted" in d.reason


def test_budgets_are_per_class():
    hist = [PastFailure(1, FailureClass.PREEMPTED, None, 10), PastFailure(2, FailureClass.PREEMPTED, 10, 20)]
    d = decide(hist, ev(JobState.NODE_FAIL, 3, 20, 30), B)
    assert isinstance(d, Retry) and "1 of 2" in d.reason


def test_out_of_memory_with_zero_budget_gives_up_at_once():
    d = decide([], ev(JobState.OUT_OF_MEMORY, 1, None, 10), B)
    assert isinstance(d, GiveUp) and "OUT_OF_MEMORY" in d.reason


def test_timeout_continues_only_after_progress():
    assert isinstance(decide([], ev(JobState.TIMEOUT, 1, None, 100), B), Retry)
    d = decide([], ev(JobState.TIMEOUT, 2, 100, 100), B)
    assert isinstance(d, GiveUp) and "without committing" in d.reason


def test_two_restarts_from_the_same_step_without_a_commit_stop_the_job():
    b = Budgets(node_failure=10)
    hist = [PastFailure(1, FailureClass.NODE_FAIL, None, 50)]
    assert isinstance(decide(hist, ev(JobState.NODE_FAIL, 2, 50, 50), b), Retry)  # first stall: retry
    hist.append(PastFailure(2, FailureClass.NODE_FAIL, 50, 50))
    d = decide(hist, ev(JobState.NODE_FAIL, 3, 50, 50), b)
    assert isinstance(d, GiveUp) and "no progress" in d.reason and "step 50" in d.reason


def test_a_new_commit_resets_the_stall():
    b = Budgets(node_failure=10)
    hist = [PastFailure(1, FailureClass.NODE_FAIL, None, 50), PastFailure(2, FailureClass.NODE_FAIL, 50, 50)]
    assert isinstance(decide(hist, ev(JobState.NODE_FAIL, 3, 50, 60), b), Retry)


def test_control_plane_errors_back_off_and_never_count():
    d1 = decide([], ev(JobState.UNKNOWN, control_plane_errors=1, reason="ssh reset"), B)
    d3 = decide([], ev(JobState.UNKNOWN, control_plane_errors=3), B)
    assert isinstance(d1, Retry) and not d1.counts_as_failure and d1.failure is FailureClass.CONTROL_PLANE
    assert d3.delay_s == 4 * d1.delay_s


def test_no_capacity_waits_longer_each_time_then_gives_up():
    hist = []
    delays = []
    for i in range(1, 4):
        d = decide(hist, ev(JobState.NO_CAPACITY, i), B)
        assert isinstance(d, Retry)
        delays.append(d.delay_s)
        hist.append(PastFailure(i, FailureClass.NO_CAPACITY, None, None))
    assert delays == sorted(delays) and delays[0] < delays[-1]
    assert isinstance(decide(hist, ev(JobState.NO_CAPACITY, 4), B), GiveUp)


def test_the_dollar_budget_stops_retries():
    b = Budgets(max_total_usd=100.0)
    d = decide([], ev(JobState.PREEMPTED, 1, None, 10, spent_usd=100.5), b)
    assert isinstance(d, GiveUp) and "cost budget" in d.reason


def test_budgets_come_from_the_spec():
    spec = spec_from_text("name: x\nrun: y\nrecovery: {preemption: 7, app_error: 0}\ncost: {max_total_usd: 9}\n")
    b = Budgets.from_spec(spec)
    assert (b.preemption, b.app_error, b.max_total_usd) == (7, 0, 9)


def test_budgets_without_a_recovery_section_are_the_specs_defaults():
    assert Budgets() == Budgets.from_spec(spec_from_text("name: x\nrun: y\n"))


def test_attempt_cost_is_hourly_price_times_time_held():
    from launcher.backend.protocols import Handle
    from launcher.launching.tracking import attempt_cost
    from launcher.core.status import Status

    h = Handle("skypilot", "t", "j", "c", 1, extra={"hourly_usd": 12.0})
    running = Status(JobState.RUNNING, start_time=1000.0)
    assert attempt_cost(h, running, now=1000.0 + 1800) == 6.0
    ended = Status(JobState.PREEMPTED, start_time=1000.0, end_time=1000.0 + 900, extra={"hourly_usd": 8.0})
    assert attempt_cost(h, ended, now=99999.0) == 2.0  # the backend's actual price wins
    assert attempt_cost(Handle("slurm", "t", "j", "1"), running) is None  # no price configured
