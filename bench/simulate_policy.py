"""Trace-driven comparison of placement policies for a checkpointed job on spot capacity.

    .venv/bin/python bench/simulate_policy.py [--seeds 20] [--work 24] [--nodes 2]

Policies (each decides at the start and again after every interruption):

* ``launcher``: ``launcher.plan.rank`` over every offer at the current prices, with
  preemption rates learned from what this job has seen so far
  (``launcher.plan.chase.apply_observations``, priors: 0.1/h spot, 2e-4/h on-demand),
  checkpointing at the interval the plan reports.
* ``cheapest-first (next region)``: the lowest current $/h, which is what SkyPilot's
  optimizer picks; after a preemption it avoids the zone it was just preempted in
  (SkyPilot's default EAGER_NEXT_REGION recovery), then goes back to cheapest-first.
* ``cheapest-first (same zone)``: the lowest current $/h every time (FAILOVER recovery).
* ``on-demand-only``: the cheapest on-demand offer.

Every policy checkpoints at the model's optimal interval for the rate it believes: the
baselines use the prior for the offer they chose (a careful user's setting), so the
comparison isolates placement, not checkpoint discipline.

The world (fixed seeds, generated before any policy runs, identical for all policies):

* 8 spot zones priced 30-45% of on-demand, each with an hourly spot price that wanders
  (log AR(1), about +-10%), and 2 on-demand offers ($50/h and $55/h per node).
* Interruptions per spot zone: a two-state Markov-modulated Poisson process (calm and
  storm regimes), with per-zone parameters drawn at random from the trace type's ranges,
  independently of price. ``calm`` traces: calm 0.005-0.03/h, storms rare (every ~300 h,
  ~3 h long, 0.2-0.5/h). ``heavy`` traces: calm 0.05-0.3/h, storms every ~24 h lasting
  ~8 h at 1-4/h per node. On-demand: 2e-4/h per node. A gang of N nodes is interrupted
  at N times the per-node rate. Interruptions also hit during the restart (the model the
  launcher uses assumes they do not), and there is no preemption notice.
* Every (re)start costs 10 min billed before work resumes; a checkpoint costs 5 min; work
  since the last checkpoint is lost on an interruption; the final checkpoint is written too.

The target (issue 6): >= 20% cheaper than cheapest-first on heavy traces at no worse
completion time, never worse on calm traces. The numbers below are whatever the
simulation gives; nothing is tuned per seed.
"""

from __future__ import annotations

import argparse
import bisect
import math
import random
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from launcher.plan import Observation, Offer, PlanParams, apply_observations, rank  # noqa: E402
from launcher.plan.chase import DEFAULT_HALF_LIFE_HOURS, DEFAULT_PRIOR_EVENTS  # noqa: E402
from launcher.plan.model import expected_run  # noqa: E402
from launcher.spec import parse_spec  # noqa: E402

C = 5 / 60          # checkpoint cost, hours
D = 10 / 60         # restart (provision + start + load), hours, billed
ON_DEMAND = 50.0    # $/h per node, the reference price
PRIOR_SPOT = 0.1
PRIOR_OD = 2e-4
HORIZON = 4000.0


@dataclass(frozen=True)
class SimOffer:
    name: str
    cloud: str
    region: str
    zone: str
    spot: bool
    base: float


def market() -> list[SimOffer]:
    zones = [("aws", "us-east-1", "use1-az1", 0.42), ("aws", "us-east-1", "use1-az2", 0.45),
             ("aws", "us-west-2", "usw2-az1", 0.36), ("aws", "us-west-2", "usw2-az2", 0.40),
             ("gcp", "us-central1", "us-central1-a", 0.30), ("gcp", "us-east4", "us-east4-a", 0.33),
             ("gcp", "europe-west4", "europe-west4-b", 0.38), ("aws", "eu-west-1", "euw1-az1", 0.44)]
    out = [SimOffer(f"{c}:{z}", c, r, z, True, ON_DEMAND * f) for c, r, z, f in zones]
    out.append(SimOffer("aws:on-demand", "aws", "us-east-1", "use1-az1", False, ON_DEMAND))
    out.append(SimOffer("gcp:on-demand", "gcp", "us-central1", "us-central1-a", False, ON_DEMAND * 1.1))
    return out


@dataclass
class Trace:
    kind: str
    seed: int
    prices: list      # per offer: hourly prices
    cum: list         # per offer: cumulative cost at each whole hour
    events: list      # per offer: sorted job-level interruption times
    storm_share: list  # per offer: fraction of time in storm (for the report)


TRACE_KINDS = {
    #          calm rate     calm mean dwell  storm rate   storm mean dwell
    "calm": ((0.005, 0.03), 300.0, (0.2, 0.5), 3.0),
    "heavy": ((0.05, 0.30), 24.0, (1.0, 4.0), 8.0),
}


def make_trace(kind: str, seed: int, offers: list[SimOffer], nodes: int) -> Trace:
    rng = random.Random(f"{kind}/{seed}")
    (c_lo, c_hi), calm_dwell, (s_lo, s_hi), storm_dwell = TRACE_KINDS[kind]
    hours = int(HORIZON) + 2
    prices, cums, events, shares = [], [], [], []
    for o in offers:
        if o.spot:
            x, series = 0.0, []
            for _ in range(hours):
                x = 0.95 * x + rng.gauss(0.0, 0.03)
                series.append(o.base * math.exp(x))
            calm_rate, storm_rate = rng.uniform(c_lo, c_hi), rng.uniform(s_lo, s_hi)
            t, ev, stormy = 0.0, [], rng.random() < storm_dwell / (storm_dwell + calm_dwell)
            storm_time = 0.0
            while t < HORIZON:
                dwell = rng.expovariate(1.0 / (storm_dwell if stormy else calm_dwell))
                rate = (storm_rate if stormy else calm_rate) * nodes
                e = t + rng.expovariate(rate)
                while e < t + dwell:
                    ev.append(e)
                    e += rng.expovariate(rate)
                storm_time += dwell if stormy else 0.0
                t += dwell
                stormy = not stormy
            shares.append(storm_time / t)
        else:
            series = [o.base] * hours
            t, ev = 0.0, []
            while t < HORIZON:
                t += rng.expovariate(PRIOR_OD * nodes)
                ev.append(t)
            shares.append(0.0)
        cum = [0.0]
        for p in series:
            cum.append(cum[-1] + p)
        prices.append(series)
        cums.append(cum)
        events.append(ev)
    return Trace(kind, seed, prices, cums, events, shares)


def price_at(tr: Trace, i: int, t: float) -> float:
    return tr.prices[i][int(t)]


def cost_between(tr: Trace, i: int, a: float, b: float) -> float:
    def F(x):
        h = int(x)
        return tr.cum[i][h] + tr.prices[i][h] * (x - h)
    return F(b) - F(a)


def next_event(tr: Trace, i: int, t: float) -> float:
    """The first interruption strictly after t (the one at t, if any, has just happened)."""
    ev = tr.events[i]
    k = bisect.bisect_right(ev, t)
    return ev[k] if k < len(ev) else math.inf


def prior(o: SimOffer) -> float:
    return PRIOR_SPOT if o.spot else PRIOR_OD


def model_interval(rate_per_node: float, nodes: int, remaining: float) -> float:
    tau = expected_run(remaining, C, rate_per_node * nodes, D).interval_hours
    return remaining if math.isinf(tau) else tau


class Policy:
    name = ""

    def choose(self, tr, offers, t, remaining, history, last, preempted):  # -> (index, interval)
        raise NotImplementedError


class Launcher(Policy):
    def __init__(self, nodes, prior_events=DEFAULT_PRIOR_EVENTS, half_life=DEFAULT_HALF_LIFE_HOURS, name="launcher"):
        self.nodes = nodes
        self.prior_events = prior_events
        self.half_life = half_life
        self.name = name
        self.spec = parse_spec({"name": "sim", "run": "true",
                                "resources": {"nodes": nodes, "gpus_per_node": 8, "accelerator": "H100"}})

    def choose(self, tr, offers, t, remaining, history, last, preempted):
        cands = [Offer(backend="skypilot", target=o.name, cloud=o.cloud, region=o.region, zone=o.zone,
                       instance_type="8xH100", accelerator="H100", accelerator_count=8, vcpus=None,
                       memory_gib=None, spot=o.spot, hourly_usd=price_at(tr, i, t), preemption_rate=prior(o))
                 for i, o in enumerate(offers)]
        obs = [Observation(key, nh, ev, age_hours=t - end) for key, nh, ev, end in history]
        cands = apply_observations(cands, obs, self.prior_events, self.half_life)
        params = PlanParams(work_hours=remaining, checkpoint_cost_hours=C, restart_hours={"skypilot": D})
        best = rank(self.spec, cands, params).best
        idx = [o.name for o in offers].index(best.offer.target)
        tau = best.interval_hours
        return idx, (remaining if math.isinf(tau) else tau)


class CheapestFirst(Policy):
    def __init__(self, nodes, next_region: bool):
        self.nodes = nodes
        self.next_region = next_region
        self.name = "cheapest-first (next region)" if next_region else "cheapest-first (same zone)"

    def choose(self, tr, offers, t, remaining, history, last, preempted):
        avoid = offers[last].region if (self.next_region and preempted and last is not None) else None
        pool = [i for i, o in enumerate(offers) if o.region != avoid] or list(range(len(offers)))
        i = min(pool, key=lambda k: (price_at(tr, k, t), k))
        return i, model_interval(prior(offers[i]), self.nodes, remaining)


class OnDemandOnly(Policy):
    name = "on-demand-only"

    def __init__(self, nodes):
        self.nodes = nodes

    def choose(self, tr, offers, t, remaining, history, last, preempted):
        i = min((k for k, o in enumerate(offers) if not o.spot), key=lambda k: (price_at(tr, k, t), k))
        return i, model_interval(prior(offers[i]), self.nodes, remaining)


def run(policy: Policy, tr: Trace, offers: list[SimOffer], work: float, nodes: int) -> dict:
    t = committed = cost = 0.0
    history, last, preempted, restarts = [], None, False, 0
    while committed < work - 1e-9:
        if t > HORIZON - 200:
            return {"cost": math.inf, "hours": math.inf, "restarts": restarts}
        i, tau = policy.choose(tr, offers, t, work - committed, history, last, preempted)
        start = t
        interrupted = False
        up = t + D                       # restart: billed, no progress, can be interrupted too
        if next_event(tr, i, t) < up:
            t = next_event(tr, i, t)
            interrupted = True
        else:
            t = up
            while committed < work - 1e-9:
                seg = min(tau, work - committed)
                end = t + seg + C
                e = next_event(tr, i, t)
                if e < end:
                    t, interrupted = e, True
                    break
                t, committed = end, committed + seg
        cost += nodes * cost_between(tr, i, start, t)
        history.append((tuple([offers[i].cloud, offers[i].region, offers[i].zone, "8xH100", offers[i].spot]),
                        nodes * (t - start), 1 if interrupted else 0, t))
        last, preempted = i, interrupted
        restarts += interrupted
    return {"cost": cost, "hours": t, "restarts": restarts}


def compare(policies, kinds, seeds, work, nodes, offers):
    """{(kind, policy name): [result per seed]} plus the mean storm share per kind."""
    out, storms = {}, {}
    for kind in kinds:
        storm = []
        for seed in range(seeds):
            tr = make_trace(kind, seed, offers, nodes)
            storm.append(statistics.mean(s for s, o in zip(tr.storm_share, offers) if o.spot))
            for p in policies:
                out.setdefault((kind, p.name), []).append(run(p, tr, offers, work, nodes))
        storms[kind] = statistics.mean(storm)
    return out, storms


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--work", type=float, default=24.0, help="hours of work the job needs")
    ap.add_argument("--nodes", type=int, default=2)
    ap.add_argument("--grid", action="store_true",
                    help="also show the launcher with other chasing settings (prior strength, half-life)")
    args = ap.parse_args()
    offers = market()
    base_name = "cheapest-first (next region)"
    policies = [Launcher(args.nodes), CheapestFirst(args.nodes, True), CheapestFirst(args.nodes, False),
                OnDemandOnly(args.nodes)]
    print(f"job: {args.nodes} node(s) x 8 H100, {args.work:g} h of work, checkpoint {C * 60:.0f} min, "
          f"restart {D * 60:.0f} min; {args.seeds} traces per kind; on-demand ${ON_DEMAND:.0f}/h per node; "
          f"launcher chasing: prior worth {DEFAULT_PRIOR_EVENTS:g} event(s), half-life {DEFAULT_HALF_LIFE_HOURS:g} h")
    res, storms = compare(policies, TRACE_KINDS, args.seeds, args.work, args.nodes, offers)
    for kind in TRACE_KINDS:
        base = res[(kind, base_name)]
        bc = statistics.mean(r["cost"] for r in base)
        bh = statistics.mean(r["hours"] for r in base)
        print(f"\n{kind} traces (spot zones in storm {100 * storms[kind]:.0f}% of the time on average)")
        print(f"{'policy':<30} {'mean $':>10} {'vs cheapest':>11} {'mean h':>8} {'vs cheapest':>11} "
              f"{'p90 h':>7} {'restarts':>8}  per-trace $ ratio to {base_name} (min/median/max)")
        for p in policies:
            rs = res[(kind, p.name)]
            costs, hours = [r["cost"] for r in rs], [r["hours"] for r in rs]
            ratios = [r["cost"] / b["cost"] for r, b in zip(rs, base)]
            mc, mh = statistics.mean(costs), statistics.mean(hours)
            p90 = sorted(hours)[max(0, math.ceil(0.9 * len(hours)) - 1)]
            print(f"{p.name:<30} {mc:>10,.0f} {100 * (mc / bc - 1):>+10.1f}% {mh:>8.1f} "
                  f"{100 * (mh / bh - 1):>+10.1f}% {p90:>7.1f} {statistics.mean(r['restarts'] for r in rs):>8.1f}"
                  f"  {min(ratios):.2f} / {statistics.median(ratios):.2f} / {max(ratios):.2f}")
    print()
    for kind in TRACE_KINDS:
        for other in (base_name, "cheapest-first (same zone)"):
            lr, br = res[(kind, "launcher")], res[(kind, other)]
            lc, bc = statistics.mean(r["cost"] for r in lr), statistics.mean(r["cost"] for r in br)
            lh, bh = statistics.mean(r["hours"] for r in lr), statistics.mean(r["hours"] for r in br)
            worse_cost = sum(a["cost"] > b["cost"] * 1.0001 for a, b in zip(lr, br))
            worse_time = sum(a["hours"] > b["hours"] * 1.0001 for a, b in zip(lr, br))
            print(f"{kind}: launcher vs {other}: {100 * (1 - lc / bc):+.1f}% cheaper, "
                  f"{100 * (1 - lh / bh):+.1f}% faster on average; costs more on {worse_cost}/{len(lr)} "
                  f"traces, takes longer on {worse_time}/{len(lr)}")
    if args.grid:
        grid = [Launcher(args.nodes, pe, hl, name=f"launcher prior={pe:g} half-life={hl:g}h")
                for pe in (0.5, 1.0, 4.0) for hl in (6.0, 24.0, 72.0)]
        gres, _ = compare(grid + [CheapestFirst(args.nodes, True)], TRACE_KINDS, args.seeds, args.work,
                          args.nodes, offers)
        print(f"\nsensitivity of the launcher to its chasing settings ($ and hours relative to {base_name})")
        print(f"{'settings':<42} " + " ".join(f"{k + ' $':>9} {k + ' h':>9}" for k in TRACE_KINDS))
        for p in grid:
            cells = []
            for kind in TRACE_KINDS:
                b = gres[(kind, base_name)]
                r = gres[(kind, p.name)]
                cells.append(f"{100 * (statistics.mean(x['cost'] for x in r) / statistics.mean(x['cost'] for x in b) - 1):>+8.1f}%")
                cells.append(f"{100 * (statistics.mean(x['hours'] for x in r) / statistics.mean(x['hours'] for x in b) - 1):>+8.1f}%")
            print(f"{p.name:<42} " + " ".join(cells))


if __name__ == "__main__":
    main()
