"""cost.deadline as a duration or an absolute time, cost.total_steps, and the refusal at launch
of a deadline that not even on-demand can meet (issue 21)."""

from __future__ import annotations

import time
from datetime import datetime, timezone

import pytest
from pydantic import ValidationError

from launcher.plan import deadline as dl
from launcher.plan.offers import Offer as PlanOffer
from launcher.plan.ranking import rank
from launcher.spec.model import Cost, JobSpec
from launcher.report.deadline import attempt_kind, summarize


def test_a_deadline_is_a_duration_from_submission_or_an_absolute_time():
    assert Cost(deadline="70h").deadline_at(1000.0) == 1000.0 + 70 * 3600
    c = Cost(deadline="2026-12-10T18:00Z")
    assert c.deadline == datetime(2026, 12, 10, 18, tzinfo=timezone.utc)
    assert c.deadline_at(0.0) == c.deadline_at(1e9) == datetime(2026, 12, 10, 18, tzinfo=timezone.utc).timestamp()
    assert Cost(deadline="2026-12-10T19:00:00+01:00").deadline == c.deadline
    # it survives the store's round trip (the spec is kept as text, dumped as JSON)
    assert Cost.model_validate(c.model_dump(mode="json")) == c
    assert Cost(deadline="1h", total_steps=500).total_steps == 500
    assert Cost().deadline_at(5.0) is None


@pytest.mark.parametrize("bad,says", [("2026-12-10T18:00", "time zone"), ("2026-13-10T18:00Z", "ISO date"),
                                      ("0s", "zero duration"), (70, "bare number")])
def test_a_bad_deadline_is_refused_saying_why(bad, says):
    with pytest.raises(ValidationError, match=says):
        Cost(deadline=bad)


def test_total_steps_must_be_positive():
    with pytest.raises(ValidationError):
        Cost(total_steps=0)


def test_the_transfer_rate_of_a_move_is_positive_and_optional():
    assert Cost().transfer_gbps is None and Cost(transfer_gbps=0.5).transfer_gbps == 0.5
    for bad in (0, -1):
        with pytest.raises(ValidationError):
            Cost(transfer_gbps=bad)


def _offer(spot, price, target="t", region="r", kind="", wait=0.0, restart=0.1):
    return PlanOffer(backend="b", target=target, cloud="c", region=region, zone=None, instance_type="vm",
                     accelerator=None, accelerator_count=0, vcpus=None, memory_gib=None, spot=spot,
                     hourly_usd=price, preemption_rate=0.0, queue_wait_hours=wait, kind=kind, restart_hours=restart)


def test_the_policy_offers_of_planner_offers():
    assert dl.offer_of(_offer(True, 1.0), nodes=2) == dl.Offer("t/r", dl.SPOT, 2.0)
    assert dl.offer_of(_offer(False, 3.0)).kind == dl.ON_DEMAND
    q = dl.offer_of(_offer(False, 0.0, target="hpc", region=None, kind="queue", wait=2.0))
    assert (q.where, q.kind, q.wait_h) == ("hpc", dl.QUEUE, 2.0)
    assert dl.offer_of(_offer(False, 0.0, kind="local")) is None


def test_a_deadline_not_even_on_demand_meets_is_refused_with_the_numbers():
    od = dl.Offer("t/r", dl.ON_DEMAND, 3.0)
    assert dl.refusal(work_h=10, deadline_h=10.5, overhead_h=0.2, offers=[od]) is None
    why = dl.refusal(work_h=10, deadline_h=10.1, overhead_h=0.2, offers=[od, dl.Offer("s", dl.SPOT, 1.0)])
    assert "10.1 h away" in why and "needs 10.2 h" in why and "10 h of work" in why and "0.2 h restart" in why
    slurm = dl.Offer("hpc", dl.QUEUE, 0.0, wait_h=5.0)
    assert "queue wait" in dl.refusal(work_h=10, deadline_h=12, overhead_h=0.2, offers=[slurm])
    assert "offer only spot" in dl.refusal(work_h=1, deadline_h=12, overhead_h=0.2, offers=[dl.Offer("s", dl.SPOT, 1.0)])


def test_the_planner_counts_an_absolute_deadline_from_now():
    soon = datetime.fromtimestamp(time.time() + 2 * 3600, timezone.utc).isoformat()
    spec = JobSpec(name="j", run="true", resources={"expected_runtime": "3h"}, cost={"deadline": soon})
    res = rank(spec, [_offer(False, 3.0)])
    assert res.best is None and "cost.deadline" in res.excluded[0].excluded
    later = datetime.fromtimestamp(time.time() + 5 * 3600, timezone.utc).isoformat()
    assert rank(spec.model_copy(update={"cost": Cost(deadline=later)}), [_offer(False, 3.0)]).best is not None


def test_the_report_sums_hours_per_kind_against_on_demand_only():
    assert attempt_kind(2, None, {"2": "on_demand:od/east"}, {}, "spot") == "on_demand"
    assert attempt_kind(1, '{"extra": {"use_spot": true}}', {}, {}, "x") == "spot"
    assert attempt_kind(1, "{}", {}, {"hpc": dl.QUEUE}, "hpc") == "queue"
    # a placement an earlier version stored spelt the queue kind "slurm"
    assert attempt_kind(3, None, {"3": "slurm:hpc"}, {}, "spot") == "queue"
    d = summarize(deadline_at=7200.0, submitted=0.0, finished=5400.0, work_h=1.0, od_price=3.0,
                  per_attempt=[{"kind": "spot", "billable_s": 3600, "usd": 1.0},
                               {"kind": "on_demand", "billable_s": 1800, "usd": 1.5},
                               {"kind": "queue", "billable_s": 900, "usd": 0.0}])
    assert (d["spot_hours"], d["on_demand_hours"], d["met"], d["margin_h"]) == (1.0, 0.5, True, 0.5)
    assert d["queue_hours"] == 0.25 and d["hours"]["queue"] == 0.25
    assert d["on_demand_only_usd"] == 3.0 and d["total_usd"] == 2.5 and abs(d["vs_on_demand_only"] - 2.5 / 3) < 1e-9
