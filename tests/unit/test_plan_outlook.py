"""`launcher plan` under cost.deadline: each candidate's slack, cost spread and probability of
meeting the deadline (launcher.plan.outlook, against the planner's model and a Monte Carlo of
it), the fallback the policy keeps reachable, the egress pairs priced at a cloud's highest
rate, and the command's text and JSON."""

from __future__ import annotations

import json
import math
import os
import random
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from launcher.backend.sections import parse_spec
from launcher.plan import Offer, PlanParams, rank
from launcher.plan import outlook as ol
from launcher.plan.egress import unknown_pairs
from launcher.plan.model import expected_run, optimal_interval
from launcher.plan.text import render_plan

ROOT = Path(__file__).resolve().parents[2]
C, D = 5 / 60, 10 / 60

# (work h, checkpoint h, rate /h, downtime h, notice fraction, emergency checkpoint h)
CASES = [(40, C, 0.1, D, 0.0, None),          # spot, no notice used (GCP's 30 s)
         (40, C, 0.5, D, 0.9, 2 / 60),        # many interruptions, most noticed
         (10, C, 2.0, D, 0.0, None),          # preempted twice an hour
         (40, C, 2e-4, D, 0.0, None),         # on-demand: almost never interrupted
         (40, C, 0.01, D, 0.0, None),         # a few percent chance of one
         (48, 0.1, 0.05, 0.2, 0.9, 0.05)]     # a few, noticed: a near-constant loss each


def simulate(work, tau, C, lam, D, p, Ce, rng):
    """The model's run, drawn: intervals of tau (the last shorter), a checkpoint of C after
    each; an interruption at an exponential time costs D and the work since the last
    commit, unless noticed (probability p), which saves it up to Ce before (all of it while
    the checkpoint is written)."""
    Ce = C if Ce is None else Ce
    t, done = 0.0, 0.0
    while done < work - 1e-12:
        seg = min(tau, work - done)
        T = rng.expovariate(lam)
        if T >= seg + C:
            t, done = t + seg + C, done + seg
            continue
        t += T + D
        if rng.random() < p:
            done += seg if T >= seg + Ce else max(T - Ce, 0.0)
    return t


def law_of(work, C, lam, D, p, Ce):
    tau = optimal_interval(C, lam, D, p, Ce, work)
    est = expected_run(work, C, lam, D, p, Ce)
    sd = ol.run_sd(work, tau, C, lam, D, p, Ce)
    return tau, est, sd, ol.run_law(work, tau, C, lam, D, p, Ce, est.run_hours, sd, est.interruptions)


# ---- the model -------------------------------------------------------------------------------

@pytest.mark.parametrize("work, C, lam, D, p, Ce", CASES)
def test_the_cycles_mean_is_the_planners_expected_run(work, C, lam, D, p, Ce):
    tau = optimal_interval(C, lam, D, p, Ce, work)
    m = ol.cycle_moments(tau, C, lam, D, p, Ce)
    assert work * m.L / m.Y == pytest.approx(expected_run(work, C, lam, D, p, Ce).run_hours, rel=1e-9)


def test_the_exponentials_partial_moments_are_exact_for_small_and_large_rates():
    for lam in (1e-7, 2e-4, 0.3, 5.0, 80.0):
        for x in (0.01, 1.0, 28.8):
            z = lam * x
            # closed forms, in a form without cancellation for each k
            want = [-math.expm1(-z), (-math.expm1(-z) - z * math.exp(-z)) / lam]
            got = [ol._g(0, x, lam), ol._g(1, x, lam)]
            assert got == pytest.approx(want, rel=1e-9)
            # k = 2 against the series written out: lam x^3 / 3 for a tiny rate
            if z < 1e-5:
                assert ol._g(2, x, lam) == pytest.approx(lam * x ** 3 / 3, rel=1e-4)
    # continuous where the series hands over to the complement
    for k in (0, 1, 2):
        b = k + 8
        assert ol._gamma_lower(k, b - 1e-9) == pytest.approx(ol._gamma_lower(k, b + 1e-9), rel=1e-9)


@pytest.mark.parametrize("work, C, lam, D, p, Ce", CASES)
def test_the_runs_law_agrees_with_a_monte_carlo_of_the_model(work, C, lam, D, p, Ce):
    tau, est, sd, law = law_of(work, C, lam, D, p, Ce)
    rng = random.Random(7)
    xs = sorted(simulate(work, tau, C, lam, D, p, Ce, rng) for _ in range(12000))
    n = len(xs)
    assert statistics.fmean(xs) == pytest.approx(est.run_hours, rel=0.01)
    assert sd == pytest.approx(statistics.pstdev(xs), rel=0.15)   # the renewal CLT's, few cycles or many
    for q in (0.1, 0.5, 0.9):
        assert law.quantile(q) == pytest.approx(xs[int(q * n)], rel=0.02)
    for k in (-0.5, 0.0, 1.0, 3.0):
        t = est.run_hours + k * max(sd, 0.1)
        assert law.cdf(t) == pytest.approx(sum(x <= t for x in xs) / n, abs=0.08)


def test_an_on_demand_run_is_uninterrupted_almost_surely_and_said_so():
    tau, est, sd, law = law_of(40, C, 2e-4, D, 0.0, None)
    base = 40 * (tau + C) / tau
    assert law.base == pytest.approx(base) and law.p_none == pytest.approx(math.exp(-est.interruptions))
    assert law.quantile(0.1) == law.quantile(0.9) == pytest.approx(base)
    # with less slack than an interrupted interval costs, the deadline hangs on no interruption
    assert law.cdf(base + 1.0) == pytest.approx(law.p_none, abs=2e-4)
    assert law.cdf(base - 0.01) == 0.0


def test_nothing_interrupts_a_run_of_this_machine():
    law = ol.run_law(10, math.inf, C, 0.0, D, 0.0, None, 10.0, 0.0, 0.0)
    v = ol.outlook(12.0, 0.0, 0.0, law, 10.0, 0.0, 0.0)
    assert (v.slack_h, v.p_meet, v.cost_p10_usd, v.cost_p90_usd) == (2.0, 1.0, 0.0, 0.0)
    late = ol.outlook(9.5, 0.0, 0.0, law, 10.0, 0.0, 2.0)
    assert late.slack_h == -0.5 and late.p_meet == 0.0 and late.cost_usd == 20.0
    # the start and the queue wait count against the deadline too
    assert ol.outlook(12.0, 0.5, 1.6, law, 10.0, 0.0, 0.0).p_meet == 0.0
    assert ol.outlook(12.0, 0.5, 1.5, law, 10.0, 0.0, 0.0).p_meet == 1.0


# ---- rank ------------------------------------------------------------------------------------

def spec(**cost):
    return parse_spec({"name": "t", "run": "true", "cost": cost,
                       "resources": {"gpus_per_node": 8, "accelerator": "H100", "expected_runtime": "40h"}})


def offer(price, rate, spot, zone, **kw):
    base = dict(backend="skypilot", target=f"t-{zone}", cloud="aws", region="us-east-1", zone=zone,
                instance_type="p5.48xlarge", accelerator="H100", accelerator_count=8, vcpus=192.0,
                memory_gib=2048.0, spot=spot, hourly_usd=price, preemption_rate=rate)
    base.update(kw)
    return Offer(**base)


OFFERS = [offer(40.0, 0.1, True, "spot"), offer(98.0, 2e-4, False, "od"), offer(110.0, 2e-4, False, "od2"),
          offer(1.0, 0.0, False, "q", backend="slurm", kind="queue", queue_wait_hours=25.0, region=None)]


def test_each_ranked_row_has_its_slack_spread_and_chance_from_the_same_model():
    res = rank(spec(deadline="60h"), OFFERS)
    assert [r.offer.zone for r in res.ranked] == ["spot", "od", "od2"]
    assert "cost.deadline" in res.excluded[0].excluded           # the queue: 25 h + 40 h > 60 h
    for r in res.ranked:
        v = r.outlook
        assert v.slack_h == pytest.approx(60.0 - (D + r.queue_hours + r.run_hours))
        assert v.cost_usd == pytest.approx(r.total_usd)
        assert v.cost_p10_usd <= v.cost_usd <= v.cost_p90_usd or v.cost_p10_usd == v.cost_p90_usd
        assert 0.0 < v.p_meet <= 1.0
    spot = res.ranked[0].outlook
    assert spot.cost_p90_usd - spot.cost_p10_usd > 0.05 * spot.cost_usd   # spot's spread is real
    od = res.ranked[1].outlook
    assert od.cost_p10_usd == od.cost_p90_usd                               # on-demand: uninterrupted
    assert res.deadline["hours_left"] == 60.0
    assert res.deadline["fallback"]["where"] == "aws/us-east-1/od" and res.deadline["fallback"]["rank"] == 2


def test_a_tight_deadline_lowers_the_chance_and_names_the_fallback_with_most_slack():
    # 44 h left: spot (expected ~46.6 h) is excluded; on-demand has 3.6 h of slack
    res = rank(spec(deadline="44h"), OFFERS)
    assert [r.offer.zone for r in res.ranked] == ["od", "od2"]
    assert res.ranked[0].outlook.slack_h == pytest.approx(44 - D - res.ranked[0].run_hours)
    assert res.ranked[0].outlook.p_meet > 0.99
    # slack counts the mean run, rare long interruptions included; the chance counts how
    # often the run is uninterrupted: a slack a little below 0 can still be met 99% of the time
    close = rank(spec(deadline="44h"), OFFERS, PlanParams(work_hours=43.7))
    assert all(r.outlook.slack_h < 0 for r in close.ranked) and close.ranked[0].outlook.p_meet > 0.99
    # the fallback: the cheapest row whose slack is >= 0, dearer than one that does not fit
    fits = rank(spec(deadline="44h"), [OFFERS[1], offer(110.0, 1e-5, False, "steady")], PlanParams(work_hours=43.7))
    assert [r.offer.zone for r in fits.ranked] == ["od", "steady"]
    assert fits.ranked[0].outlook.slack_h < 0 <= fits.ranked[1].outlook.slack_h
    assert fits.deadline["fallback"]["where"] == "aws/us-east-1/steady"
    # and when none fits, the one with the most slack
    none = rank(spec(deadline="44h"), [OFFERS[1], offer(110.0, 1e-4, False, "steady")], PlanParams(work_hours=43.7))
    assert none.ranked[0].outlook.slack_h < none.ranked[1].outlook.slack_h < 0
    assert none.deadline["fallback"]["where"] == "aws/us-east-1/steady"


def test_without_a_deadline_nothing_is_added():
    res = rank(spec(), OFFERS)
    assert res.deadline is None and all(r.outlook is None for r in res.rows)
    assert res.to_json()["deadline"] is None and all(r["deadline"] is None for r in res.to_json()["rows"])
    assert "slack" not in render_plan(res) and "P(meet)" not in render_plan(res)


# ---- egress pairs no table knows --------------------------------------------------------------

def test_unknown_egress_pairs_are_listed_once_each_way_at_the_rate_they_are_priced_at():
    offers = [offer(1, 0.1, True, "a", cloud="gcp", region="us-east4"),
              offer(1, 0.1, True, "b", cloud="gcp", region="us-east4"),
              offer(1, 0.1, True, "c", cloud="gcp", region="europe-west1"),
              offer(1, 0.0, False, "d", cloud="gcp", region="us-central1"),
              offer(1, 0.0, False, "q", backend="slurm", cloud="cl", region="r", kind="queue"),
              offer(0, 0.0, False, "l", backend="local", cloud="local", region=None, kind="local")]
    asked = []

    def rate_of(backend, cloud, src, dst):
        asked.append((cloud, src, dst))
        if src.startswith("us") and dst.startswith("us"):
            return 0.02, "table", False
        return 0.15, "highest", True

    got = unknown_pairs(offers, rate_of)
    assert [u["pair"] for u in got] == ["gcp:europe-west1->us-central1", "gcp:europe-west1->us-east4",
                                       "gcp:us-central1->europe-west1", "gcp:us-east4->europe-west1"]
    assert all(u["usd_per_gb"] == 0.15 and u["source"] == "highest" for u in got)
    assert len(asked) == 6 and all(c == "gcp" for c, _, _ in asked)   # queue and local never asked
    assert unknown_pairs(offers[:2], rate_of) == []


# ---- the text and the command -----------------------------------------------------------------

def test_the_table_shows_slack_chance_and_spread_and_the_notes_below():
    res = rank(spec(deadline="60h"), OFFERS).with_egress_unknown(
        [{"pair": f"gcp:r{i}->s", "usd_per_gb": 0.15, "source": "x"} for i in range(8)])
    text = render_plan(res)
    head = text.splitlines()[1]
    assert "$ p10-p90" in head and "slack" in head and "P(meet)" in head
    spot_line = text.splitlines()[2]
    v = res.ranked[0].outlook
    assert f"{v.slack_h:+.1f}h" in spot_line and f"{v.cost_p10_usd:,.2f}-{v.cost_p90_usd:,.2f}" in spot_line
    assert "deadline: 60.0 h left" in text
    assert "keeps #2 t-od: aws/us-east-1/od (on-demand" in text
    assert "egress price unknown for 8 region pair(s)" in text and "gcp $0.15/GB" in text
    assert "gcp:r5->s" in text and "gcp:r6->s" not in text and "2 more (--json lists them)" in text


def test_probabilities_are_rounded_down_never_to_a_certainty():
    from launcher.plan.text import _probability
    assert [_probability(p) for p in (1.0, 0.99999, 0.9977, 0.937, 0.004, 0.0)] == \
        [">0.9999", ">0.9999", "0.997", "0.93", "<0.01", "0.00"]


def test_launcher_plan_json_and_text_for_a_deadline_spec(tmp_path):
    cfg = tmp_path / "config.yaml"
    cfg.write_text(yaml.safe_dump({"catalog_dir": str(ROOT / "examples" / "catalog"), "targets": {
        "aws-spot": {"backend": "skypilot", "infra": "aws", "use_spot": True},
        "gcp-od": {"backend": "skypilot", "infra": "gcp"}}}))
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump({"name": "ft", "run": "python train.py",
                                   "resources": {"gpus_per_node": 8, "accelerator": "H100",
                                                 "expected_runtime": "40h"},
                                   "cost": {"deadline": "60h"}, "targets": ["aws-spot", "gcp-od"]}))
    env = {**os.environ, "LAUNCHER_CONFIG": str(cfg), "LAUNCHER_HOME": str(tmp_path / "home")}
    run = subprocess.run([sys.executable, "-m", "launcher.cli", "plan", str(job), "--json"], env=env,
                         capture_output=True, text=True, check=True)
    doc = json.loads(run.stdout)
    rows = [r for r in doc["rows"] if r["rank"] is not None]
    assert rows and all(set(r["deadline"]) >= {"slack_hours", "p_meet", "cost_p10_usd", "cost_p90_usd",
                                              "cost_mean_usd", "needs_hours"} for r in rows)
    assert doc["deadline"]["hours_left"] == 60.0 and doc["deadline"]["fallback"]["target"] == "gcp-od"
    # the example catalog's regions: aws us-east-1, us-west-2, eu-west-1 and gcp's
    assert isinstance(doc["deadline"]["egress_unknown"], list)
    text = subprocess.run([sys.executable, "-m", "launcher.cli", "plan", str(job)], env=env,
                          capture_output=True, text=True, check=True).stdout
    assert "P(meet)" in text and "deadline: 60.0 h left" in text


def test_this_machine_is_ranked_with_its_outlook_and_said_to_run_as_the_guaranteed_offer():
    cpu = parse_spec({"name": "t", "run": "true", "cost": {"deadline": "60h"},
                      "resources": {"expected_runtime": "40h"}})
    here = offer(0.0, 0.0, False, "here", backend="local", cloud="local", region=None, kind="local",
                 instance_type="this machine", accelerator=None, accelerator_count=0, restart_hours=1 / 60)
    vms = [offer(0.04, 0.05, True, "spot", instance_type="m6i.large", accelerator=None, accelerator_count=0),
           offer(0.10, 2e-4, False, "od", instance_type="m6i.large", accelerator=None, accelerator_count=0)]
    res = rank(cpu, [here, *vms])
    first = res.ranked[0]
    assert first.offer.this_machine and first.outlook.slack_h == pytest.approx(60 - 1 / 60 - 40)
    assert first.outlook.p_meet > 0.9999 and first.outlook.cost_p90_usd == 0.0
    assert res.deadline["this_machine"] == [{"rank": 1, "target": "t-here"}]
    assert res.deadline["fallback"]["where"] == "aws/us-east-1/od"      # never this machine
    text = render_plan(res)
    assert "#1 t-here is this machine, which has no spot: a launch there runs the job on it as the guaranteed" in text
    assert "nothing to fall back on" not in text
    # it cannot meet the deadline (nor can the others): not ranked, and the reason is given
    late = rank(cpu, [here, *vms], PlanParams(work_hours=70.0))
    assert late.ranked == [] and late.deadline["this_machine"] == []
    assert any(r.offer.this_machine and "cost.deadline" in r.excluded for r in late.excluded)
    # it cannot run the spec's GPUs: not ranked, whatever it costs
    gpu = rank(spec(deadline="60h"), [here, *OFFERS])
    assert all(not r.offer.this_machine for r in gpu.ranked) and gpu.deadline["this_machine"] == []
    # alone, with nothing else ranked: no "nothing to fall back on" either
    alone = render_plan(rank(cpu, [here]))
    assert "this machine, which has no spot" in alone and "nothing to fall back on" not in alone
    assert "nothing to fall back on" in render_plan(rank(cpu, vms[:1]))
