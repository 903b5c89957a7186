"""The checkpoint/preemption model against closed forms and an independent Monte Carlo."""

import math
import random

import pytest

from launcher.plan import model

C = 5 / 60     # 5-minute checkpoint
D = 10 / 60    # 10-minute restart


def segments_time(work, tau, C, lam, D):
    """Classic result: each segment of tau work + C checkpoint takes (1/lam + D)(e^{lam (tau+C)} - 1)."""
    return (work / tau) * (1 / lam + D) * math.expm1(lam * (tau + C))


@pytest.mark.parametrize("M", [0.5, 2.0, 8.0, 100.0])
def test_expected_run_without_notice_is_the_classic_segment_formula(M):
    lam = 1 / M
    tau = 0.5
    est = model.expected_run(10 * tau, C, lam, D, interval=tau)
    assert est.run_hours == pytest.approx(segments_time(10 * tau, tau, C, lam, D), rel=1e-12)


@pytest.mark.parametrize("M", [0.05, 0.3, 2.0, 24.0, 5000.0])
def test_optimal_interval_satisfies_the_first_order_condition(M):
    # d/dtau [tau / (e^{lam(tau+C)} - 1)] = 0  <=>  1 - e^{-lam (tau + C)} = lam tau
    lam = 1 / M
    tau = model.optimal_interval(C, lam)
    assert -math.expm1(-lam * (tau + C)) == pytest.approx(lam * tau, rel=1e-9)


def test_optimum_is_youngs_for_cheap_checkpoints_and_daly_is_closer():
    M = 1000.0
    tau = model.optimal_interval(C, 1 / M)
    assert tau == pytest.approx(model.young(C, M), rel=0.01)
    assert abs(model.daly(C, M) - tau) < abs(model.young(C, M) - tau)


def test_optimal_interval_does_not_depend_on_restart_time_without_notice():
    assert model.optimal_interval(C, 0.5, 0.0) == model.optimal_interval(C, 0.5, 2.0)


@pytest.mark.parametrize("p", [0.0, 0.5, 0.9])
def test_the_interval_found_is_a_maximum_of_goodput(p):
    lam, Ce = 0.5, 1 / 60
    tau = model.optimal_interval(C, lam, D, p, Ce)
    g = model.goodput(tau, C, lam, D, p, Ce)
    for f in (0.8, 0.95, 1.05, 1.25):
        assert model.goodput(tau * f, C, lam, D, p, Ce) <= g + 1e-12


def test_notice_raises_goodput_and_lengthens_the_interval():
    lam, Ce = 0.5, 1 / 60
    g0 = model.goodput(model.optimal_interval(C, lam, D), C, lam, D)
    tau9 = model.optimal_interval(C, lam, D, 0.9, Ce)
    g9 = model.goodput(tau9, C, lam, D, 0.9, Ce)
    assert g9 > g0
    assert tau9 > model.optimal_interval(C, lam, D)


def test_no_interruptions_means_no_checkpoint_overhead():
    est = model.expected_run(24.0, C, 0.0, D)
    assert est.run_hours == 24.0 and math.isinf(est.interval_hours) and est.interruptions == 0


def test_goodput_tends_to_the_checkpoint_share_as_interruptions_vanish():
    assert model.goodput(2.0, C, 1e-9, D) == pytest.approx(2.0 / (2.0 + C), rel=1e-6)


def test_interval_is_capped_at_the_work_left():
    est = model.expected_run(0.5, C, 1e-4, D)
    assert est.interval_hours == 0.5


def test_hopeless_offer_never_finishes():
    est = model.expected_run(10.0, 1.0, 50.0, D)  # one-hour checkpoints, interrupted every 72 s
    assert math.isinf(est.run_hours)


def simulate(tau, C, lam, D, p, Ce, horizon, rng):
    """Event-driven simulation of the model in the module docstring: saved work / wall time."""
    t = saved = 0.0
    nxt = rng.expovariate(lam)
    while t < horizon:
        end = t + tau + C
        if nxt >= end:
            t, saved = end, saved + tau
            continue
        T = nxt - t
        if rng.random() < p and T > Ce:
            saved += min(T - Ce, tau)
        t = nxt + D
        nxt = t + rng.expovariate(lam)
    return saved / t


@pytest.mark.parametrize("lam,p,Ce", [(0.5, 0.0, None), (2.0, 0.0, None), (0.5, 0.8, 1.5 / 60)])
def test_goodput_agrees_with_monte_carlo(lam, p, Ce):
    tau = model.optimal_interval(C, lam, D, p, Ce)
    runs = [simulate(tau, C, lam, D, p, Ce if Ce else C, 4000.0, random.Random(seed)) for seed in range(6)]
    mean = sum(runs) / len(runs)
    se = (sum((x - mean) ** 2 for x in runs) / (len(runs) - 1)) ** 0.5 / len(runs) ** 0.5
    assert abs(mean - model.goodput(tau, C, lam, D, p, Ce)) < max(4 * se, 0.004)
