"""Time accounting of `launcher report` on synthetic attempt histories (pure)."""

from __future__ import annotations

import pytest

from launcher.plan.model import daly, young
from launcher.report import CATEGORIES, AttemptIn, History, Save, account
from tests.fixtures.histories import random_history


def totals(acc):
    return {k: round(v, 6) for k, v in acc.totals.items()}


def check_sum(acc):
    assert sum(acc.totals.values()) == pytest.approx(acc.wall_s, abs=1e-6)
    assert all(v >= 0 for v in acc.totals.values()), acc.totals
    for s in acc.segments:
        assert s.end > s.start
    # the segments tile the wall time: sorted, they are consecutive
    segs = sorted(acc.segments, key=lambda s: s.start)
    assert segs[0].start == pytest.approx(acc.t0) and segs[-1].end == pytest.approx(acc.t_end)
    for a, b in zip(segs, segs[1:]):
        assert b.start == pytest.approx(a.end)


def test_one_completed_attempt():
    a = AttemptIn(1, "COMPLETED", queued=1000, started=1010, ended=1050, program_start=1012,
                  saves=[Save(1020, 1021, 10, True), Save(1031, 1033, 20, True)], resume_step=-1)
    acc = account(History("j", t0=1000, now=5000, attempts=[a]))
    check_sum(acc)
    assert totals(acc) == {"queue_wait": 10, "provisioning": 2, "useful_compute": 35, "checkpoint_overhead": 3, "capture_stall": 0,
                           "lost_work": 0, "in_job_restart": 0, "restart_overhead": 0}
    assert acc.wall_s == 50 and acc.goodput_pct == pytest.approx(70.0) and not acc.open
    assert acc.interval["achieved_s"] == 10 and acc.interval["failures"] == 0
    assert acc.interval["young_s"] is None and "no failure" in acc.interval["reason"]


def preempt_crash_complete():
    return [
        # preempted at 30 by the scheduler; the program saved on the notice until 31.5
        AttemptIn(1, "PREEMPTED", queued=0, started=5, ended=30, program_start=6, resume_step=-1, generation=1,
                  saves=[Save(16, 17, 10, True), Save(27, 28, 20, True), Save(31, 31.5, 23, True, preempt=True)],
                  preempt_notice=30.2),
        # requeued in place; its node died at ~66 (last heartbeat 65.2); Slurm noticed at 80
        AttemptIn(2, "NODE_FAIL", queued=30, started=40, ended=80, program_start=41, resume_step=23, generation=2,
                  saves=[Save(51, 52, 33, True), Save(62, 63, 43, True)], heartbeat=65.2, heartbeat_interval=1.0),
        AttemptIn(3, "COMPLETED", queued=80, started=90, ended=110, program_start=92, resume_step=43, generation=3,
                  saves=[Save(102, 103, 53, True)]),
    ]


def test_preemption_with_notice_and_a_node_crash():
    acc = account(History("j", t0=0, now=1e9, attempts=preempt_crash_complete(), gpus=1))
    check_sum(acc)
    assert totals(acc) == {"queue_wait": 5, "provisioning": 1, "useful_compute": 60, "checkpoint_overhead": 5.5, "capture_stall": 0,
                           "lost_work": 3.2, "in_job_restart": 0, "restart_overhead": 35.3}
    a1, a2, a3 = acc.attempts
    # the preempted program saved on the notice: its run lasts until that save, nothing is lost
    assert a1.ended == 31.5 and a1.seconds["lost_work"] == 0 and a1.last_commit_step == 23
    # the crash: lost from the last used commit to one heartbeat after the last beat; the rest
    # (until the scheduler noticed) is restart overhead
    assert a2.failure_at == pytest.approx(66.2) and a2.seconds["lost_work"] == pytest.approx(3.2)
    assert a2.seconds["restart_overhead"] == pytest.approx(8.5 + 1 + 13.8)
    assert a3.seconds["restart_overhead"] == 12 and not a3.failed
    assert [a.failed for a in acc.attempts] == [True, True, False]
    assert acc.goodput_pct == pytest.approx(60 / 110 * 100)


def test_without_heartbeat_a_crash_is_lost_until_the_scheduler_noticed():
    atts = preempt_crash_complete()
    atts[1].heartbeat = None
    acc = account(History("j", t0=0, now=1e9, attempts=atts))
    check_sum(acc)
    assert acc.attempts[1].seconds["lost_work"] == 80 - 63


def test_heartbeat_within_one_interval_of_the_end_changes_nothing():
    atts = preempt_crash_complete()
    atts[1].heartbeat = 79.5
    acc = account(History("j", t0=0, now=1e9, attempts=atts))
    assert acc.attempts[1].seconds["lost_work"] == 80 - 63 and acc.attempts[1].failure_at == 80


def test_only_the_commit_the_next_generation_resumed_from_counts():
    # attempt 1 committed step 20 at 30, but attempt 2 resumed from step 10 (20 was torn or a
    # stale fork): the work after step 10 was lost, the save of 20 included
    atts = [AttemptIn(1, "FAILED", queued=0, started=0, ended=40, program_start=0, resume_step=-1,
                      saves=[Save(10, 11, 10, True), Save(29, 30, 20, True)]),
            AttemptIn(2, "COMPLETED", queued=40, started=40, ended=60, program_start=41, resume_step=10)]
    acc = account(History("j", t0=0, now=1e9, attempts=atts))
    check_sum(acc)
    a1 = acc.attempts[0]
    assert a1.last_commit_step == 10 and a1.seconds["lost_work"] == 29
    assert a1.seconds["checkpoint_overhead"] == 1 and a1.seconds["useful_compute"] == 10


def test_an_attempt_that_committed_nothing_loses_its_whole_run():
    atts = [AttemptIn(1, "OUT_OF_MEMORY", queued=0, started=2, ended=30, program_start=3, resume_step=-1,
                      saves=[Save(20, 25, 5, False)]),
            AttemptIn(2, "COMPLETED", queued=31, started=32, ended=50, program_start=33, resume_step=-1)]
    acc = account(History("j", t0=0, now=1e9, attempts=atts))
    check_sum(acc)
    assert acc.attempts[0].seconds["lost_work"] == 27 and acc.attempts[0].seconds["checkpoint_overhead"] == 0
    assert acc.totals["restart_overhead"] == 3  # 30 -> 33: resubmission, allocation, startup


def test_a_fresh_restart_means_every_earlier_commit_was_lost():
    atts = [AttemptIn(1, "FAILED", queued=0, started=0, ended=20, program_start=0, resume_step=-1,
                      saves=[Save(5, 6, 5, True)]),
            AttemptIn(2, "COMPLETED", queued=20, started=20, ended=30, program_start=20, resume_step=-1)]
    acc = account(History("j", t0=0, now=1e9, attempts=atts))
    assert acc.attempts[0].seconds["lost_work"] == 20 and acc.attempts[0].last_commit_step is None


def test_an_open_job_runs_until_now_and_has_lost_nothing_yet():
    atts = [AttemptIn(1, "RUNNING", queued=0, started=3, ended=None, program_start=4, resume_step=-1,
                      saves=[Save(10, 11, 1, True)])]
    acc = account(History("j", t0=0, now=100, attempts=atts))
    check_sum(acc)
    assert acc.open and acc.t_end == 100 and acc.totals["lost_work"] == 0
    assert acc.totals["useful_compute"] == 95


def test_a_pending_job_is_all_queue_wait():
    acc = account(History("j", t0=0, now=42, attempts=[AttemptIn(1, "PENDING", queued=0)]))
    check_sum(acc)
    assert acc.totals["queue_wait"] == 42 and acc.open


def test_a_superseded_attempt_without_an_end_ends_when_the_next_one_queued():
    atts = [AttemptIn(1, "RUNNING", queued=0, started=1, ended=None, program_start=1, resume_step=-1,
                      saves=[Save(5, 6, 1, True)]),
            AttemptIn(2, "COMPLETED", queued=20, started=25, ended=40, program_start=26, resume_step=1)]
    acc = account(History("j", t0=0, now=1e9, attempts=atts))
    check_sum(acc)
    assert acc.attempts[0].failed and acc.attempts[0].ended == 20 and acc.attempts[0].seconds["lost_work"] == 14


def test_a_program_that_never_started_spent_its_allocation_starting():
    atts = [AttemptIn(1, "NODE_FAIL", queued=0, started=10, ended=15, program_start=None),
            AttemptIn(2, "COMPLETED", queued=15, started=16, ended=30, program_start=17, resume_step=-1)]
    acc = account(History("j", t0=0, now=1e9, attempts=atts))
    check_sum(acc)
    assert totals(acc) == {"queue_wait": 10, "provisioning": 5, "useful_compute": 13, "checkpoint_overhead": 0, "capture_stall": 0,
                           "lost_work": 0, "in_job_restart": 0, "restart_overhead": 2}


def test_without_job_side_records_the_allocation_is_the_run():
    atts = [AttemptIn(1, "FAILED", queued=0, started=4, ended=20),
            AttemptIn(2, "COMPLETED", queued=21, started=22, ended=40)]
    acc = account(History("j", t0=0, now=1e9, attempts=atts, jobside=False))
    check_sum(acc)
    assert totals(acc) == {"queue_wait": 4, "provisioning": 0, "useful_compute": 18, "checkpoint_overhead": 0, "capture_stall": 0,
                           "lost_work": 16, "in_job_restart": 0, "restart_overhead": 2}


def test_cost_per_attempt_and_per_useful_gpu_hour():
    atts = preempt_crash_complete()
    for a in atts:
        a.price_per_hour, a.price_source = 7.2, "test"
    atts[2].price_per_hour, atts[2].cost_usd = None, 0.5  # no price: the recorded cost is used
    acc = account(History("j", t0=0, now=1e9, attempts=atts, gpus=2))
    per = {p["attempt"]: p for p in acc.cost["per_attempt"]}
    # billed for the scheduler's run (5-30), not until the notice's save ended (31.5)
    assert per[1]["usd"] == pytest.approx(7.2 * (30 - 5) / 3600) and per[1]["source"] == "test"
    assert per[2]["usd"] == pytest.approx(7.2 * (80 - 40) / 3600)
    assert per[3]["usd"] == 0.5 and per[3]["source"] == "recorded"
    total = per[1]["usd"] + per[2]["usd"] + 0.5
    assert acc.cost["total_usd"] == pytest.approx(total) and acc.cost["complete"]
    assert acc.cost["usd_per_useful_gpu_hour"] == pytest.approx(total / (60 / 3600 * 2))


def test_the_bill_is_the_schedulers_run_and_job_side_records_past_its_end_move_only_categories():
    """Slurm's times are whole seconds: a run that ended at 110.6 has End=110, and its last save
    (110.4) is past it. The categories reach the save (the attempt lasts until its last sign of
    life); the paid time is what the scheduler recorded, 100-110, as a site bills it. Found by
    tests/integration/test_useful_training_slurm.py: billing to the job-side records made effective
    MFU 1.04% lower than the recomputation from the scheduler's times over four short runs."""
    a = AttemptIn(1, "PREEMPTED", queued=99, started=100, ended=110, program_start=101, resume_step=-1,
                  saves=[Save(105, 105.2, 10, True), Save(110.2, 110.4, 12, True, preempt=True)])
    b = AttemptIn(2, "COMPLETED", queued=111, started=112, ended=120, program_start=112.5, resume_step=12)
    acc = account(History("j", t0=99, now=1e9, attempts=[a, b]))
    check_sum(acc)
    assert acc.attempts[0].ended == pytest.approx(110.4) and acc.attempts[0].billable_s == 10
    assert acc.attempts[1].billable_s == 8
    # no end from the scheduler (an attempt superseded without one): from its start to the next one's queueing
    c = AttemptIn(1, "RUNNING", queued=0, started=2, program_start=3, resume_step=-1)
    d = AttemptIn(2, "COMPLETED", queued=9, started=10, ended=20, program_start=11, resume_step=-1)
    assert account(History("j", t0=0, now=1e9, attempts=[c, d])).attempts[0].billable_s == 7


def test_no_price_no_cost():
    acc = account(History("j", t0=0, now=1e9, attempts=preempt_crash_complete(), gpus=0))
    assert acc.cost["total_usd"] is None and acc.cost["usd_per_useful_gpu_hour"] is None and acc.cost["reason"]


def test_interval_achieved_vs_young_daly_from_the_plan_model():
    acc = account(History("j", t0=0, now=1e9, attempts=preempt_crash_complete(), planned_interval_s=12))
    iv = acc.interval
    # periodic commits only (not the save on the notice): gaps 27-17, 62-52 -> 10 s
    assert iv["achieved_s"] == 10 and iv["intervals"] == 2 and iv["planned_s"] == 12
    assert iv["checkpoint_cost_s"] == 1 and iv["notice_saves"] == 1
    assert iv["failures"] == 2
    exposure = sum(a.seconds["useful_compute"] + a.seconds["checkpoint_overhead"] + a.seconds["lost_work"]
                   for a in acc.attempts)
    assert iv["mtbf_s"] == pytest.approx(exposure / 2)
    assert iv["young_s"] == pytest.approx(young(1, exposure / 2))
    assert iv["daly_s"] == pytest.approx(daly(1, exposure / 2))
    assert iv["notice_fraction"] == 0.5 and iv["optimal_s"] > 0


@pytest.mark.parametrize("seed", range(200))
def test_categories_always_add_up_to_the_wall_time(seed):
    """Skewed clocks, saves outside their attempt, missing times, overlaps: never a second more or less."""
    acc = account(random_history(seed))
    check_sum(acc)
    assert set(acc.totals) == set(CATEGORIES)


def test_local_tier_saves_are_capture_stall_and_their_drain_is_lag_not_wall_time():
    """Saves committed on a local tier block training only for the local commit (capture stall,
    its own category); the drain to the root runs beside training and shows as drain lag. A
    synchronous fallback to the root (local disk full) stays checkpoint overhead."""
    saves = [Save(1020, 1020.5, 10, True, tier="local", drain_s=4.0),
             Save(1030, 1030.5, 20, True, tier="local", drain_s=6.0),
             Save(1040, 1043, 30, True),  # the local tier was full: synchronous durable save
             Save(1045, 1045.5, 40, True, tier="local")]  # the attempt ended before it drained
    a = AttemptIn(1, "COMPLETED", queued=1000, started=1010, ended=1050, program_start=1010, saves=saves,
                  resume_step=-1)
    acc = account(History("j", t0=1000, now=5000, attempts=[a]))
    check_sum(acc)
    t = totals(acc)
    assert (t["capture_stall"], t["checkpoint_overhead"], t["useful_compute"]) == (1.5, 3, 35.5)
    assert acc.drain_lag == {"saves": 2, "mean_s": 5.0, "max_s": 6.0, "undrained": 1}
    assert acc.to_dict()["drain_lag"]["max_s"] == 6.0
    assert acc.interval["cost_tier"] == "mixed"  # the local tier and its synchronous fallback


def test_the_optimal_interval_uses_the_local_save_cost():
    """Young/Daly from the time training was blocked per save: with a local tier, the local
    commit's, not the drain's."""
    def attempt(n, state, t0, resume):
        return AttemptIn(n, state, queued=t0, started=t0, ended=t0 + 100, program_start=t0, resume_step=resume,
                         saves=[Save(t0 + 10 * k, t0 + 10 * k + 0.5, 10 * k, True, tier="local", drain_s=30.0)
                                for k in range(1, 10)])
    atts = [attempt(1, "NODE_FAIL", 1000, -1), attempt(2, "NODE_FAIL", 1200, 90), attempt(3, "COMPLETED", 1400, 90)]
    acc = account(History("j", t0=1000, now=9000, attempts=atts))
    check_sum(acc)
    iv = acc.interval
    assert iv["checkpoint_cost_s"] == pytest.approx(0.5) and iv["cost_tier"] == "local"
    assert iv["young_s"] == pytest.approx(young(0.5, iv["mtbf_s"]))
