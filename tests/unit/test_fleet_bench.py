"""bench/fleet.py's pure pieces (issue 29 item 7): percentiles, the longest unobserved stretch of
each job, which jobs the churn changes, the verdict's double submits and lost jobs, and the keys
of its JSON line. The bench itself runs in tests/integration/test_fleet_bench.py."""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import numpy
import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import fleet  # noqa: E402


# ---- percentiles
@pytest.mark.parametrize("values", [[1.0], [3, 1, 2], [5, 1, 4, 2, 3, 9, 7], list(range(101)), [0.5, 0.25, 10.0, 2.0]])
@pytest.mark.parametrize("q", [0, 1, 25, 50, 90, 99, 100])
def test_percentile_is_numpys_linear_one(values, q):
    assert fleet.percentile(values, q) == pytest.approx(float(numpy.percentile(values, q)))


def test_percentile_of_nothing_is_none_and_q_is_checked():
    assert fleet.percentile([], 50) is None
    with pytest.raises(ValueError):
        fleet.percentile([1, 2], 101)


def test_p50_is_the_median():
    assert fleet.percentile([4, 1, 3, 2], 50) == 2.5
    assert fleet.percentile([7, 1, 3], 50) == 3


# ---- the longest time each job went unobserved
def test_gap_counts_the_first_stretch_between_observations_and_the_tail():
    gaps = fleet.max_gaps({"a": [12.0, 15.0, 16.0]}, ["a"], start=10.0, end=30.0)
    assert gaps == {"a": pytest.approx(14.0)}  # 16 -> 30: never seen again
    gaps = fleet.max_gaps({"a": [14.0, 15.0, 29.0]}, ["a"], start=10.0, end=30.0)
    assert gaps == {"a": pytest.approx(14.0)}  # 15 -> 29
    gaps = fleet.max_gaps({"a": [11.0, 19.0, 21.0]}, ["a"], start=5.0, end=22.0)
    assert gaps == {"a": pytest.approx(8.0)}  # 11 -> 19; the first stretch 6, the tail 1


def test_a_job_never_observed_went_unobserved_the_whole_window():
    assert fleet.max_gaps({}, ["a"], start=0.0, end=7.5) == {"a": 7.5}


def test_observations_outside_the_window_do_not_count():
    gaps = fleet.max_gaps({"a": [1.0, 5.0, 50.0]}, ["a"], start=4.0, end=10.0)
    assert gaps == {"a": pytest.approx(5.0)}  # only 5.0 is inside: 4->5, 5->10


def test_a_completed_job_needs_no_observation_after_its_end_was_seen():
    seen = {"a": [2.0, 4.0], "b": [2.0, 4.0]}
    gaps = fleet.max_gaps(seen, ["a", "b"], start=0.0, end=20.0, done={"a": 3.0, "b": 5.0})
    assert gaps["a"] == pytest.approx(2.0)  # its end (3.0) seen at 4.0: nothing after counts
    assert gaps["b"] == pytest.approx(16.0)  # ended at 5.0 but never seen ended: 4 -> 20


def test_a_job_that_ended_unseen_counts_up_to_its_end():
    assert fleet.max_gaps({}, ["a"], start=0.0, end=20.0, done={"a": 6.0}) == {"a": 6.0}


# ---- churn
def test_churn_picks_the_fraction_half_to_end_the_rest_to_preempt():
    running = list(range(1000))
    end, preempt = fleet.pick_churn(running, 0.01, random.Random(1))
    assert (len(end), len(preempt)) == (5, 5)
    assert not set(end) & set(preempt) and set(end) | set(preempt) <= set(running)
    end, preempt = fleet.pick_churn(running[:30], 0.1, random.Random(1))
    assert (len(end), len(preempt)) == (1, 2)  # 3 picked: 1 ends, 2 preempted


def test_churn_is_seeded_and_bounded():
    running = [f"j{i}" for i in range(200)]
    assert fleet.pick_churn(running, 0.2, random.Random(7)) == fleet.pick_churn(running, 0.2, random.Random(7))
    assert fleet.pick_churn(running, 0.0, random.Random(7)) == ([], [])
    end, preempt = fleet.pick_churn(running, 1.0, random.Random(7))
    assert sorted(end + preempt) == sorted(running)
    assert fleet.pick_churn([], 0.5, random.Random(7)) == ([], [])
    with pytest.raises(ValueError):
        fleet.pick_churn(running, 1.5, random.Random(7))


# ---- the verdict
def test_double_submits_count_the_copies_beyond_the_first():
    assert fleet.double_submits(["t1", "t2", "t3"]) == 0
    assert fleet.double_submits(["t1", "t2", "t1", "t1", "t2"]) == 3


def test_lost_jobs():
    store = {"ok_run": ("RUNNING", "5"), "ok_done": ("COMPLETED", "6"), "ok_resub": ("PENDING", "9"),
             "not_resubmitted": ("RUNNING", "7"), "closed_wrong": ("GAVE_UP", "8"), "stale_handle": ("RUNNING", "3"),
             "open_but_done": ("RUNNING", "11"), "unknown": ("RUNNING", "12")}
    sched = {"ok_run": (5, "RUNNING"), "ok_done": (6, "COMPLETED"), "ok_resub": (9, "RUNNING"),
             "not_resubmitted": (7, "PREEMPTED"), "closed_wrong": (10, "RUNNING"), "stale_handle": (4, "RUNNING"),
             "open_but_done": (11, "COMPLETED")}
    assert fleet.lost_jobs(store, sched) == sorted(["not_resubmitted", "closed_wrong", "stale_handle",
                                                    "open_but_done", "unknown"])


def test_a_job_the_policy_gave_up_on_for_want_of_progress_is_not_lost():
    no_progress = "gave up: no progress: two restarts resumed from a fresh start with no new commit"
    store = {"guarded": ("GAVE_UP", "7", no_progress), "other_reason": ("GAVE_UP", "8", "gave up: app error"),
             "while_live": ("GAVE_UP", "9", no_progress), "older_handle": ("GAVE_UP", "3", no_progress)}
    sched = {"guarded": (7, "PREEMPTED"), "other_reason": (8, "PREEMPTED"), "while_live": (9, "RUNNING"),
             "older_handle": (4, "PREEMPTED")}
    assert fleet.lost_jobs(store, sched) == ["older_handle", "other_reason", "while_live"]
    assert fleet.gave_up_jobs(store) == 3


# ---- the JSON line
def test_result_line_has_the_fixed_keys_and_figures():
    passes = [(1.0, 0.5), (3.0, 1.5), (2.0, 1.0)]
    gaps = {f"j{i}": float(i) for i in range(101)}
    line = fleet.result_line(3, 101, 2, passes, gaps, calls=18, n_passes=3, claims=10, seconds=5.0, doubles=0,
                             lost=0, standin_cpu=0.01)
    assert set(fleet.KEYS) <= set(line)
    assert fleet.KEYS == ("watchers", "jobs", "targets", "pass_s_p50", "pass_cpu_s_p50", "observe_gap_s_p99",
                          "status_calls_per_target_per_tick", "claims_per_s", "double_submits", "lost")
    assert (line["watchers"], line["jobs"], line["targets"]) == (3, 101, 2)
    assert line["pass_s_p50"] == 2.0 and line["pass_cpu_s_p50"] == 1.0
    assert line["observe_gap_s_p99"] == 99.0 and line["observe_gap_s_max"] == 100.0
    assert line["status_calls_per_target_per_tick"] == 3.0  # 18 calls / (2 targets x 3 ticks)
    assert line["claims_per_s"] == 2.0
    assert (line["double_submits"], line["lost"]) == (0, 0)
    json.dumps(line)


def test_slope_in_microseconds_per_job():
    assert fleet.slope_us(500, 0.10, 1000, 0.15) == pytest.approx(100.0)
    assert fleet.calls_per_target_per_tick(6, 2, 3) == 1.0


def test_each_run_gets_its_own_database_on_the_server():
    assert fleet.with_database("postgresql://u:p@127.0.0.1:5432/postgres", "fleet_1") == \
        "postgresql://u:p@127.0.0.1:5432/fleet_1"
    assert fleet.with_database("postgresql:///postgres?host=/tmp/pg-x/sock&port=5", "fleet_2") == \
        "postgresql:///fleet_2?host=/tmp/pg-x/sock&port=5"


def test_claims_per_second_over_the_run_or_until_the_last_claim_when_the_change_is_made_once():
    reports = [{"last_claim": 105.0}, {"last_claim": 110.0}, {"last_claim": None}]
    assert fleet.claim_span(reports, 100.0, 130.0, once=False) == 30.0
    assert fleet.claim_span(reports, 100.0, 130.0, once=True) == 10.0
    assert fleet.claim_span([{"last_claim": None}], 100.0, 130.0, once=True) == 30.0  # nothing claimed
