"""The planner's short memory: a burst of preemptions raises a zone's rate at once, and the
rise fades within hours, while a stray preemption after a long calm run moves nothing."""

import pytest

from launcher.plan import Observation, Offer, apply_observations
from launcher.plan.chase import Evidence, chased_rate, posterior_rate

KEY = ("aws", "us-east-1", "use1-az1", "p5.48xlarge", True)


def offer(rate=0.1):
    return Offer(backend="skypilot", target="aws", cloud="aws", region="us-east-1", zone="use1-az1",
                 instance_type="p5.48xlarge", accelerator="H100", accelerator_count=8, vcpus=None,
                 memory_gib=None, spot=True, hourly_usd=20.0, preemption_rate=rate)


def test_the_rate_is_the_larger_of_the_long_and_the_short_memory():
    long, recent = Evidence(node_hours=20.0, events=2.0), Evidence(node_hours=1.0, events=2.0)
    assert chased_rate(0.1, long, None) == pytest.approx(posterior_rate(0.1, 20.0, 2.0))     # 3 / 30
    # two preemptions in the last node-hour: (0.25 + 2) / (2.5 + 1), not the day's 0.1/h
    assert chased_rate(0.1, long, recent) == pytest.approx(2.25 / 3.5)
    # calm recent exposure never lowers what the long memory says
    assert chased_rate(0.1, long, Evidence(node_hours=5.0, events=0.0)) == pytest.approx(0.1)


def test_a_burst_of_preemptions_raises_the_rate_and_the_rise_fades_within_hours():
    twenty_calm_hours_ago = Observation(KEY, node_hours=20.0, events=0, age_hours=24.0)
    burst = [Observation(KEY, node_hours=0.5, events=1, age_hours=a) for a in (0.5, 0.0)]
    long_only = apply_observations([offer()], [twenty_calm_hours_ago, *burst], recent_half_life_hours=0)[0]
    now = apply_observations([offer()], [twenty_calm_hours_ago, *burst])[0]
    assert long_only.preemption_rate < 0.15                  # the day's memory barely notices
    assert now.preemption_rate > 0.5                         # the short memory sees the storm
    assert now.rate_source == "observed"
    later = [Observation(o.key, o.node_hours, o.events, age_hours=o.age_hours + 12.0)
             for o in (twenty_calm_hours_ago, *burst)]
    half_a_day_on = apply_observations([offer()], later)[0]
    assert half_a_day_on.preemption_rate == pytest.approx(
        apply_observations([offer()], later, recent_half_life_hours=0)[0].preemption_rate)


def test_one_preemption_after_a_long_calm_run_stays_near_the_prior():
    seen = [Observation(KEY, node_hours=30.0, events=1)]
    got = apply_observations([offer()], seen)[0].preemption_rate
    assert got == pytest.approx(posterior_rate(0.1, 30.0, 1))   # 2 / 40: the long memory decides


def test_on_demand_keeps_its_tiny_rate_after_one_hardware_failure():
    od = Offer(backend="skypilot", target="aws", cloud="aws", region="us-east-1", zone="use1-az1",
               instance_type="p5.48xlarge", accelerator="H100", accelerator_count=8, vcpus=None,
               memory_gib=None, spot=False, hourly_usd=98.0, preemption_rate=2e-4)
    got = apply_observations([od], [Observation(od.key, node_hours=2.0, events=1)])[0].preemption_rate
    assert got < 2e-3
