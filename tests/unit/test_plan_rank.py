"""rank(spec, offers, params): closed forms, budgets, and the reasons it gives."""

import math

import pytest

from launcher.plan import Offer, PlanParams, rank
from launcher.backend.sections import parse_spec

C = 5 / 60
D_CLOUD = 10 / 60


def spec(**kw):
    data = {"name": "t", "run": "true",
            "resources": {"nodes": 1, "gpus_per_node": 8, "accelerator": "H100", "time_limit": "10h"}}
    for k, v in kw.items():
        if isinstance(v, dict) and isinstance(data.get(k), dict):
            data[k] = {**data[k], **v}
        else:
            data[k] = v
    return parse_spec(data)


def offer(price, rate=0.0, spot=False, zone="z1", **kw):
    base = dict(backend="skypilot", target=f"t-{zone}", cloud="aws", region="us-east-1", zone=zone,
                instance_type="p5.48xlarge", accelerator="H100", accelerator_count=8, vcpus=192.0,
                memory_gib=2048.0, spot=spot, hourly_usd=price, preemption_rate=rate)
    base.update(kw)
    return Offer(**base)


def independent_goodput(tau, C, lam, D):
    """Renewal goodput without notice, written out here from the textbook form."""
    w = tau + C
    return tau * math.exp(-lam * w) / ((1 - math.exp(-lam * w)) * (1 / lam + D))


def test_without_preemption_rank_is_price_times_work_times_nodes():
    s = spec(resources={"nodes": 3})
    offers = [offer(7.0, zone="a"), offer(3.0, zone="b"), offer(5.0, zone="c")]
    res = rank(s, offers)
    assert [r.offer.zone for r in res.ranked] == ["b", "c", "a"]
    for r in res.ranked:
        assert r.total_usd == pytest.approx(r.offer.hourly_usd * 3 * 10.0, rel=1e-12)
        assert r.run_hours == 10.0 and math.isinf(r.interval_hours)


def test_a_spot_offer_preempted_often_ranks_below_on_demand_and_says_why():
    s = spec()
    od, sp = offer(10.0, rate=0.0, zone="od"), offer(6.0, rate=2.0, spot=True, zone="spot")
    res = rank(s, [sp, od])
    assert [r.offer.zone for r in res.ranked] == ["od", "spot"]
    spot_row = res.ranked[1]
    assert "interruptions" in spot_row.why and "cheaper per hour than #1" in spot_row.why
    # the expected cost follows the renewal formula at the interval the row reports
    g = independent_goodput(spot_row.interval_hours, C, 2.0, D_CLOUD)
    assert spot_row.total_usd == pytest.approx(6.0 * 10.0 / g, rel=1e-9)
    assert spot_row.total_usd > res.ranked[0].total_usd


def test_the_same_spot_offer_wins_when_preemptions_are_rare():
    res = rank(spec(), [offer(6.0, rate=0.01, spot=True, zone="spot"), offer(10.0, zone="od")])
    assert res.best.offer.zone == "spot"


def test_gang_of_nodes_is_interrupted_nodes_times_as_often():
    one = rank(spec(), [offer(6.0, rate=0.2, spot=True)]).best
    four = rank(spec(resources={"nodes": 4}), [offer(6.0, rate=0.2, spot=True)]).best
    assert four.job_rate == pytest.approx(4 * one.job_rate)
    assert four.job_hourly_usd == pytest.approx(4 * one.job_hourly_usd)
    assert four.run_hours > one.run_hours


def test_notice_long_enough_for_an_emergency_checkpoint_saves_time():
    s = spec()
    params = PlanParams(emergency_checkpoint_hours=1 / 60)  # 1-minute emergency save
    with_notice = rank(s, [offer(6.0, rate=0.5, spot=True, notice_seconds=120)], params).best
    too_short = rank(s, [offer(6.0, rate=0.5, spot=True, notice_seconds=30)], params).best
    assert with_notice.notice_fraction == pytest.approx(0.9) and too_short.notice_fraction == 0
    assert with_notice.run_hours < too_short.run_hours
    assert "notice < " in too_short.why


def test_no_notice_is_used_when_the_job_does_not_checkpoint_on_a_signal():
    s = spec(recovery={"checkpoint_on_signal": False})
    row = rank(s, [offer(6.0, rate=0.5, spot=True, notice_seconds=120)],
               PlanParams(emergency_checkpoint_hours=1 / 60)).best
    assert row.notice_fraction == 0


def test_a_fixed_checkpoint_interval_in_the_spec_is_used():
    row = rank(spec(checkpoint={"interval": "30m"}), [offer(6.0, rate=0.5, spot=True)]).best
    assert row.interval_hours == 0.5
    assert row.run_hours == pytest.approx(10.0 / independent_goodput(0.5, C, 0.5, D_CLOUD), rel=1e-9)


def test_max_hourly_budget_excludes_with_the_reason():
    res = rank(spec(resources={"nodes": 2}, cost={"max_hourly_usd": 15}), [offer(10.0), offer(7.0, zone="b")])
    assert [r.offer.zone for r in res.ranked] == ["b"]
    (ex,) = res.excluded
    assert "cost.max_hourly_usd" in ex.excluded and "$20.00/h" in ex.excluded


def test_max_total_budget_counts_expected_preemption_losses():
    # $6/h x 10 h = $60 without preemption, but preempted twice an hour it costs more than $80
    res = rank(spec(cost={"max_total_usd": 80}), [offer(6.0, rate=2.0, spot=True), offer(7.9, zone="b")])
    assert [r.offer.zone for r in res.ranked] == ["b"]
    assert "cost.max_total_usd" in res.excluded[0].excluded


def test_deadline_counts_the_queue_wait():
    s = spec(cost={"deadline": "12h"})
    slurm = offer(1.0, backend="slurm", target="cl", zone=None, queue_wait_hours=3.0)
    res = rank(s, [slurm, offer(9.0, zone="b")])
    assert [r.offer.zone for r in res.ranked] == ["b"]
    assert "cost.deadline" in res.excluded[0].excluded and "13" in res.excluded[0].excluded


def test_queue_wait_adds_time_but_no_cost():
    row = rank(spec(), [offer(2.0, backend="slurm", queue_wait_hours=3.0)]).best
    assert row.expected_hours == pytest.approx(13.0) and row.total_usd == pytest.approx(20.0)


@pytest.mark.parametrize("kw,why", [
    (dict(accelerator="A100-80GB"), "has A100-80GB, spec asks for H100"),
    (dict(accelerator_count=4), "has 4 x H100 per node, spec asks for 8"),
    (dict(accelerator=None, accelerator_count=0), "has no GPUs"),
    (dict(vcpus=32.0), "has 32 vCPUs per node, spec asks for 64"),
    (dict(memory_gib=256.0), "has 256 GiB memory per node, spec asks for 512 GiB"),
])
def test_offers_that_do_not_fit_the_resources_are_excluded_with_the_reason(kw, why):
    s = spec(resources={"cpus_per_node": 64, "memory_per_node": "512GB"})
    res = rank(s, [offer(1.0, **kw)])
    assert res.best is None
    assert why in res.excluded[0].excluded


def test_work_comes_from_params_then_time_limit_then_default():
    s = spec()
    assert rank(s, [offer(1.0)]).assumptions["work_hours"] == 10.0
    assert rank(s, [offer(1.0)], PlanParams(work_hours=3.0)).best.total_usd == pytest.approx(3.0)
    bare = parse_spec({"name": "t", "run": "true"})
    res = rank(bare, [offer(1.0, accelerator=None, accelerator_count=0)], PlanParams(default_work_hours=2.0))
    assert res.best.total_usd == pytest.approx(2.0) and "default" in res.assumptions["work_source"]


def test_candidates_are_the_usable_offers_best_first_and_json_has_every_row():
    offers = [offer(9.0, zone="a"), offer(4.0, zone="b"), offer(1.0, zone="c", accelerator_count=1)]
    res = rank(spec(), offers)
    assert [o.zone for o in res.candidates()] == ["b", "a"]
    rows = res.to_json()["rows"]
    assert [r["zone"] for r in rows] == ["b", "a", "c"]
    assert rows[2]["rank"] is None and "spec asks for 8" in rows[2]["excluded"]
    assert rows[0]["expected_total_usd"] == pytest.approx(40.0)


def test_replanning_mid_job_charges_budgets_with_what_was_used():
    s = spec(cost={"max_total_usd": 100, "deadline": "12h"})
    o = offer(6.0)                                   # $60 and 10 h for the full job
    assert rank(s, [o]).best is not None
    left = PlanParams(work_hours=4.0, spent_usd=80.0, elapsed_hours=7.0)
    res = rank(s, [o], left)                         # $24 more > $20 left; 7 + 4 h < 12 h
    assert res.best is None and "what is left of cost.max_total_usd ($20.00)" in res.excluded[0].excluded
    late = rank(s, [o], PlanParams(work_hours=4.0, spent_usd=10.0, elapsed_hours=9.0))
    assert late.best is None and "cost.deadline" in late.excluded[0].excluded


def test_a_free_offer_that_never_finishes_is_excluded_not_nan():
    row = rank(spec(), [offer(0.0, rate=500.0)]).excluded[0]
    assert "never finishes" in row.excluded and math.isinf(row.total_usd)
