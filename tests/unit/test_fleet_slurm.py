"""The pure pieces of bench/fleet_slurm.py: the wrapper's poll records, the observations, the
gap across a fault, the poller at a moment and the verdict's reading of squeue."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from fleet_slurm import gap_across, latest_in_slurm, observations, parse_call, poller_at  # noqa: E402


def test_a_poll_record_names_the_watcher_and_each_job_with_its_states():
    c = parse_call("10.5 11.0 4242 0\nlauncher:a-1:1=FAILED\nlauncher:a-1:2=PENDING\nlauncher:b-2:1=COMPLETED\n"
                   "junk=RUNNING\n")
    assert c == {"t0": 10.5, "t1": 11.0, "pid": 4242, "rc": 0,
                 "jobs": {"a-1": ["FAILED", "PENDING"], "b-2": ["COMPLETED"]}}
    assert parse_call("") is None
    assert parse_call("10.5 11.0") is None  # cut short


def test_observations_keep_answered_polls_in_the_window_and_the_first_completion():
    calls = [{"t1": 5.0, "rc": 0, "jobs": {"a": ["PENDING"]}},
             {"t1": 7.0, "rc": 1, "jobs": {"a": ["PENDING"], "b": ["PENDING"]}},  # failed: not an answer
             {"t1": 9.0, "rc": 0, "jobs": {"a": ["PENDING"], "b": ["COMPLETED"]}},
             {"t1": 12.0, "rc": 0, "jobs": {"b": ["COMPLETED"]}},
             {"t1": 30.0, "rc": 0, "jobs": {"a": ["PENDING"]}}]  # after the end
    seen, done = observations(calls, 0.0, 20.0)
    assert seen == {"a": [5.0, 9.0], "b": [9.0, 12.0]}
    assert done == {"b": 9.0}


@pytest.mark.parametrize("times,moment,finish,want", [
    ([2.0, 6.0, 11.0, 18.0], 5.0, None, 7.0),  # 2 (the last poll before) -> 6: 4; 6 -> 11: 5; 11 -> 18: 7
    ([2.0, 4.0], 5.0, None, 16.0),  # never again after the moment: 4 -> the end (20)
    ([], 5.0, None, 20.0),  # never observed: the whole window
    ([2.0, 9.0, 19.0], 5.0, 9.0, 7.0),  # seen completed at 9: nothing after counts
    ([2.0, 4.0], 5.0, 3.0, 0.0),  # completed before the moment
    ([2.0, 5.0, 8.0], 5.0, None, 12.0),  # a poll at the moment is the last one before it
])
def test_the_gap_across_a_fault_starts_at_the_last_observation_before_it(times, moment, finish, want):
    assert gap_across(times, moment, 0.0, 20.0, finish) == pytest.approx(want)


def test_the_poller_is_the_last_watcher_that_polled():
    calls = [{"pid": 1, "t1": 1.0}, {"pid": 2, "t1": 3.0}, {"pid": 3, "t1": 4.0}, {"pid": 1, "t1": 9.0}]
    assert poller_at(calls, 5.0, {1, 2, 3}) == 3
    assert poller_at(calls, 5.0, {1, 2}) == 2
    assert poller_at(calls, 0.5, {1, 2, 3}) is None


def test_squeue_gives_each_job_its_newest_attempt_not_cancelled_and_every_token():
    text = ("11|launcher:a-1:1|FAILED\n12|launcher:a-1:2|PENDING\n13|launcher:b-2:1|COMPLETING\n"
            "14|launcher:b-2:1|CANCELLED\n15|other|RUNNING\n16|launcher:c-3:1|COMPLETED\n")
    latest, tokens = latest_in_slurm(text)
    assert latest == {"a-1": ("12", "PENDING"), "b-2": ("13", "RUNNING"), "c-3": ("16", "COMPLETED")}
    assert tokens == ["launcher:a-1:1", "launcher:a-1:2", "launcher:b-2:1", "launcher:b-2:1", "launcher:c-3:1"]
