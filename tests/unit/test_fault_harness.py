"""The fault-injection harness's own logic (tests/integration/fault_harness.py): schedules are
drawn from a seeded stream and replay alone, and the invariant checks catch what they are for."""

from __future__ import annotations

from launcher.core.faults import POINTS
from tests.integration.fault_harness import (ACTIONS, CLAIM_TTL_S, DUPLICATE_POINT, SCENARIOS, Result, accepted_ids,
                                            draw, start_violations, summary, uncalled_cancels)


def test_a_schedule_is_a_function_of_its_seed_and_index_alone():
    assert draw(7, 3) == draw(7, 3)
    assert [draw(7, i) for i in range(20)] != [draw(8, i) for i in range(20)]
    s = draw(7, 3)
    assert s.replay() == "LAUNCHER_FAULT_SEED=7 LAUNCHER_FAULT_ONLY=3"
    assert "schedule 3 of seed 7" in s.describe() and s.point in s.describe()


def test_schedules_cover_every_point_action_and_scenario_and_pauses_outlast_the_claim():
    drawn = [draw(11, i, backends=("local", "slurm")) for i in range(400)]
    assert {s.point for s in drawn} == set(POINTS) | {DUPLICATE_POINT}
    assert {s.action for s in drawn} == set(ACTIONS)
    assert {s.scenario for s in drawn} == set(SCENARIOS)
    assert {s.backend for s in drawn} == {"local", "slurm"}
    assert any(s.victim == "launch" for s in drawn) and any(s.victim.startswith("watch") for s in drawn)
    assert all(s.hold_s > CLAIM_TTL_S for s in drawn if s.action == "pause")
    assert all(s.stall_s is None for s in drawn if s.backend == "local")
    assert any(s.stall_s for s in drawn if s.backend == "slurm")
    assert any(s.cancel_at is not None for s in drawn)
    assert {s.fault() for s in drawn if s.action == "kill"} == {f"{p}=kill" for p in POINTS}
    assert all(s.fault().endswith(f"sleep:{s.hold_s:g}") for s in drawn if s.action == "sleep")


def test_the_start_checks_catch_a_second_run_an_unknown_job_and_a_wrong_id():
    listed = {"j1": {"state": "COMPLETED"}, "j2": {"state": "RUNNING"}}
    recorded = {("j1", 1): "100", ("j1", 2): "200", ("j2", 1): "300"}
    fine = [("j1", 1, 11, "100"), ("j1", 2, 12, "200"), ("j2", 1, 13, "300")]
    assert start_violations(fine, listed, recorded) == []
    twice = start_violations(fine + [("j1", 2, 14, "201")], listed, recorded)
    assert any(v.startswith("(1) job j1 attempt 2 ran user code 2 times") for v in twice)
    assert any("ran user code as id 201; status records it as id 200" in v for v in twice)
    unknown = start_violations([("j3", 1, 15, "400"), ("j2", 2, 16, "500")], listed, recorded)
    assert any("job j3 ran user code" in v and "does not list it" in v for v in unknown)
    assert any("job j2 attempt 2 ran user code as id 500; status has no such attempt" in v for v in unknown)


def test_the_summary_counts_schedules_faults_fired_and_violations():
    results = [Result(draw(1, 0), fired=["before_lookup 1 pause"]), Result(draw(1, 1), violations=["(1) x"])]
    text = summary(results)
    assert text.startswith("schedules run: 2; a fault fired in 1; violations: 1 in 1 schedules")


def test_the_frozen_duplicate_is_a_local_watcher_paused_in_submit_past_the_claim():
    drawn = [draw(13, i, backends=("local", "slurm")) for i in range(400)]
    dup = [s for s in drawn if s.point == DUPLICATE_POINT]
    assert 0.15 < len(dup) / sum(1 for s in drawn if s.backend == "local") < 0.45
    assert all(s.backend == "local" and s.action == "pause" and s.hold_s > CLAIM_TTL_S for s in dup)
    assert all(s.victim.startswith("watch") and s.scenario in ("fail_first", "sweep") for s in dup)
    assert {s.scenario for s in dup} == {"fail_first", "sweep"}
    assert all(s.watchers[int(s.victim[5:])] == "loop" for s in dup)


def test_invariant_4_catches_a_cancel_nobody_asked_for_and_a_wrong_end():
    jobs = {"j": {"state": "COMPLETED", "reason": ""}, "s-e0": {"state": "COMPLETED", "reason": ""}}
    attempts = {("j", 1): {"state": "FAILED", "native_id": "10", "reason": "exit 1"},
                ("j", 2): {"state": "COMPLETED", "native_id": "20", "reason": ""}}
    starts = [("j", 1, 1, "10"), ("j", 2, 2, "20")]
    assert uncalled_cancels("fail_first", jobs, attempts, starts) == []
    cancelled = {**attempts, ("j", 2): {"state": "CANCELLED", "native_id": "20", "reason": "cancelled by user"}}
    v = uncalled_cancels("fail_first", {**jobs, "j": {"state": "CANCELLED", "reason": "x"}}, cancelled, starts)
    assert any(x.startswith("(4) job j is CANCELLED") for x in v)
    assert any(x.startswith("(4) job j attempt 2 (id 20) is CANCELLED") for x in v)
    # an attempt that exited 0 recorded FAILED (a duplicate's stand-down taken for it), and the reverse
    wrong = {("j", 1): {"state": "COMPLETED", "native_id": "10"}, ("j", 2): {"state": "FAILED", "native_id": "20"}}
    v = uncalled_cancels("fail_first", jobs, wrong, starts)
    assert len(v) == 2 and "its program exited 1" in v[0] and "its program exited 0" in v[1]
    # a sweep: only element 0's first attempt fails
    sweep = {("s-e0", 1): {"state": "FAILED", "native_id": "5"}, ("s-e1", 1): {"state": "COMPLETED", "native_id": "6"}}
    assert uncalled_cancels("sweep", jobs, sweep, [("s-e0", 1, 1, "5"), ("s-e1", 1, 2, "6")]) == []


def test_invariant_3_accepts_an_id_that_stood_down_for_the_copy_that_started_first_and_no_other():
    attempts = {("e0", 1): {"native_id": "13034"}, ("e0", 2): {"native_id": "13453"}}
    adopted = [{"job_id": "e0", "detail": '{"attempt": 2, "native_id": "13453", "replaces": "13464"}'},
               {"job_id": "e0", "detail": {"attempt": 2, "native_id": "99", "replaces": "98"}},  # 99 not recorded
               {"job_id": "e1", "detail": '{"attempt": 1, "native_id": "5"}'}]  # adopted, nothing replaced
    ok = accepted_ids(attempts, adopted)
    assert ok == {("e0", "13034"), ("e0", "13453"), ("e0", "13464")}
    assert ("e0", "98") not in ok and ("e1", "13464") not in ok
