"""Trace-driven comparison of placement policies for a checkpointed job on spot capacity.

    .venv/bin/python bench/simulate_policy.py [--seeds 20] [--work 24] [--nodes 2] [--jobs 8] [--grid]

Policies (each decides at the start and again after every interruption):

* ``launcher``: what ``launcher watch`` and the planner do. Every ended attempt is recorded
  in a real state store through ``launcher.plan.observed`` (``observation_of`` + ``record``,
  the code path ``observe_attempt`` uses), and the next placement is
  ``launcher.plan.rank`` over every offer at the current prices with the rates
  ``observed.load`` + ``apply_observations`` give (priors: 0.1/h spot, 2e-4/h on-demand),
  checkpointing at the interval the plan reports. The region that just preempted the job
  cools down for ``recovery.placement_cooldown`` (30 min, the default), as watch does.
* ``launcher, placement_cooldown 0``: the same with the cool-down switched off in the spec.
* ``EAGER_NEXT_REGION``: SkyPilot's managed-job default recovery
  (``EagerFailoverStrategyExecutor``): the optimizer's cheapest offer; the recovery launch
  after a preemption blocks the whole region it was preempted in (falling back to no
  block when nothing else is left); later launches are unblocked. No memory.
* ``cheapest-first (same zone)``: the lowest current $/h every time (FAILOVER recovery).
* ``on-demand-only``: the cheapest on-demand offer.
* ``clairvoyant``: a reference nobody can run: ranks with every zone's true current rate
  (it sees which regime each zone is in). It bounds what learning rates can buy here.

Two scenarios: one job with an empty state store, and ``--jobs`` jobs run back to back on
the same trace (a sweep, one element at a time) sharing one store, so later jobs start
with what earlier ones saw. Baselines behave the same in both (they keep no memory).

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

The target (issue 13): >= 20% cheaper than EAGER_NEXT_REGION on heavy traces, never more
than 1% worse on calm traces. The numbers printed are whatever the simulation gives;
nothing is tuned per seed, and the world is the same for every policy. The clairvoyant
row shows how much any rate-learning placement can save in this world.
"""

from __future__ import annotations

import argparse
import bisect
import math
import random
import statistics
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from launcher.plan import Offer, PlanParams, apply_observations, rank  # noqa: E402
from launcher.plan.chase import DEFAULT_HALF_LIFE_HOURS, DEFAULT_PRIOR_EVENTS  # noqa: E402
from launcher.plan.model import expected_run  # noqa: E402
from launcher.plan.observed import load, observation_of, record  # noqa: E402
from launcher.specload import parse_spec  # noqa: E402
from launcher.state import StateStore  # noqa: E402

C = 5 / 60          # checkpoint cost, hours
D = 10 / 60         # restart (provision + start + load), hours, billed
ON_DEMAND = 50.0    # $/h per node, the reference price
PRIOR_SPOT = 0.1
PRIOR_OD = 2e-4
HORIZON = 4000.0
COOLDOWN = 0.5      # recovery.placement_cooldown default (1800 s), hours
EPOCH = 1.7e9       # simulated hour 0 as a Unix time (state store timestamps)
BASELINE = "EAGER_NEXT_REGION"


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
    regimes: list = None  # per offer: [(start, end, per-node rate)], for the clairvoyant reference


TRACE_KINDS = {
    #          calm rate     calm mean dwell  storm rate   storm mean dwell
    "calm": ((0.005, 0.03), 300.0, (0.2, 0.5), 3.0),
    "heavy": ((0.05, 0.30), 24.0, (1.0, 4.0), 8.0),
}


def make_trace(kind: str, seed: int, offers: list[SimOffer], nodes: int) -> Trace:
    rng = random.Random(f"{kind}/{seed}")
    (c_lo, c_hi), calm_dwell, (s_lo, s_hi), storm_dwell = TRACE_KINDS[kind]
    hours = int(HORIZON) + 2
    prices, cums, events, shares, regimes = [], [], [], [], []
    for o in offers:
        if o.spot:
            x, series = 0.0, []
            for _ in range(hours):
                x = 0.95 * x + rng.gauss(0.0, 0.03)
                series.append(o.base * math.exp(x))
            calm_rate, storm_rate = rng.uniform(c_lo, c_hi), rng.uniform(s_lo, s_hi)
            t, ev, stormy = 0.0, [], rng.random() < storm_dwell / (storm_dwell + calm_dwell)
            storm_time, reg = 0.0, []
            while t < HORIZON:
                dwell = rng.expovariate(1.0 / (storm_dwell if stormy else calm_dwell))
                reg.append((t, t + dwell, storm_rate if stormy else calm_rate))
                rate = (storm_rate if stormy else calm_rate) * nodes
                e = t + rng.expovariate(rate)
                while e < t + dwell:
                    ev.append(e)
                    e += rng.expovariate(rate)
                storm_time += dwell if stormy else 0.0
                t += dwell
                stormy = not stormy
            shares.append(storm_time / t)
            regimes.append(reg)
        else:
            series = [o.base] * hours
            t, ev = 0.0, []
            while t < HORIZON:
                t += rng.expovariate(PRIOR_OD * nodes)
                ev.append(t)
            shares.append(0.0)
            regimes.append([(0.0, math.inf, PRIOR_OD)])
        cum = [0.0]
        for p in series:
            cum.append(cum[-1] + p)
        prices.append(series)
        cums.append(cum)
        events.append(ev)
    return Trace(kind, seed, prices, cums, events, shares, regimes)


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

    def reset(self):
        """A new trace: forget everything (the launcher: a new, empty state store)."""

    def observe(self, offer: SimOffer, node_hours: float, interrupted: bool, t: float):
        """An attempt on OFFER ended at hour T (what `launcher watch` sees)."""

    def choose(self, tr, offers, t, remaining, last, preempted):  # -> (index, interval)
        raise NotImplementedError


def sim_key(o: SimOffer) -> tuple:
    return (o.cloud, o.region, o.zone, "8xH100", o.spot)


class Launcher(Policy):
    """What `launcher watch` + the planner do: every ended attempt goes into a real state
    store through ``launcher.plan.observed`` (the same code path as watch), the next placement
    ranks ``observed.load`` + ``apply_observations`` posteriors, checkpoints at the plan's
    interval, and the region that just preempted the job cools down for
    ``recovery.placement_cooldown`` (30 min by default, as watch does)."""

    def __init__(self, nodes, prior_events=DEFAULT_PRIOR_EVENTS, half_life=DEFAULT_HALF_LIFE_HOURS,
                 cooldown_hours=COOLDOWN, name="launcher"):
        self.nodes = nodes
        self.prior_events = prior_events
        self.half_life = half_life
        self.cooldown = cooldown_hours
        self.name = name
        self.spec = parse_spec({"name": "sim", "run": "true",
                                "resources": {"nodes": nodes, "gpus_per_node": 8, "accelerator": "H100"}})
        self._dir = None
        self.store = None
        self.blocked: dict = {}

    def reset(self):
        self.close()
        self._dir = tempfile.TemporaryDirectory(prefix="simulate-policy-")
        self.store = StateStore(Path(self._dir.name))
        self.blocked = {}

    def close(self):
        if self.store is not None:
            self.store.close()
            self._dir.cleanup()
            self.store = self._dir = None

    def observe(self, offer, node_hours, interrupted, t):
        seen = observation_of(sim_key(offer), "PREEMPTED" if interrupted else "COMPLETED",
                              EPOCH + (t - node_hours / self.nodes) * 3600, EPOCH + t * 3600, self.nodes,
                              EPOCH + t * 3600)
        if seen is not None:
            record(self.store, seen.key, seen.node_hours, seen.events, seen.kind, seen.ts)
        if interrupted and self.cooldown > 0:
            self.blocked[(offer.cloud, offer.region)] = t + self.cooldown

    def choose(self, tr, offers, t, remaining, last, preempted):
        cands = [Offer(backend="skypilot", target=o.name, cloud=o.cloud, region=o.region, zone=o.zone,
                       instance_type="8xH100", accelerator="H100", accelerator_count=8, vcpus=None,
                       memory_gib=None, spot=o.spot, hourly_usd=price_at(tr, i, t), preemption_rate=prior(o))
                 for i, o in enumerate(offers)]
        cands = apply_observations(cands, load(self.store, EPOCH + t * 3600), self.prior_events, self.half_life)
        open_ = [c for c, o in zip(cands, offers) if self.blocked.get((o.cloud, o.region), -1) <= t]
        params = PlanParams(work_hours=remaining, checkpoint_cost_hours=C, restart_hours={"skypilot": D})
        best = rank(self.spec, open_ or cands, params).best
        idx = [o.name for o in offers].index(best.offer.target)
        tau = best.interval_hours
        return idx, (remaining if math.isinf(tau) else tau)


class EagerNextRegion(Policy):
    """SkyPilot's managed-job default recovery, EAGER_NEXT_REGION
    (sky/jobs/recovery_strategy.py, EagerFailoverStrategyExecutor): the optimizer takes the
    cheapest offer; after a preemption the recovery launch blocks the region it was preempted
    in (every zone of it) and takes the cheapest of the rest, falling back to no block when
    nothing else is left; the launch after that is unblocked again (plain cheapest-first).
    SkyPilot keeps no memory of earlier preemptions."""

    def __init__(self, nodes):
        self.nodes = nodes
        self.name = BASELINE

    def choose(self, tr, offers, t, remaining, last, preempted):
        blocked = (offers[last].cloud, offers[last].region) if (preempted and last is not None) else None
        pool = [i for i, o in enumerate(offers) if (o.cloud, o.region) != blocked] or list(range(len(offers)))
        i = min(pool, key=lambda k: (price_at(tr, k, t), k))
        return i, model_interval(prior(offers[i]), self.nodes, remaining)


class CheapestFirst(Policy):
    """SkyPilot's FAILOVER recovery: relaunch the cheapest, wherever it was preempted."""

    name = "cheapest-first (same zone)"

    def __init__(self, nodes):
        self.nodes = nodes

    def choose(self, tr, offers, t, remaining, last, preempted):
        i = min(range(len(offers)), key=lambda k: (price_at(tr, k, t), k))
        return i, model_interval(prior(offers[i]), self.nodes, remaining)


class OnDemandOnly(Policy):
    name = "on-demand-only"

    def __init__(self, nodes):
        self.nodes = nodes

    def choose(self, tr, offers, t, remaining, last, preempted):
        i = min((k for k, o in enumerate(offers) if not o.spot), key=lambda k: (price_at(tr, k, t), k))
        return i, model_interval(prior(offers[i]), self.nodes, remaining)


class Clairvoyant(Launcher):
    """Reference, not a policy anyone can run: ranks with each zone's true current rate
    (it sees which regime every zone is in), so it bounds what learning rates can buy."""

    def __init__(self, nodes):
        super().__init__(nodes, name="clairvoyant (knows current rates)", cooldown_hours=0.0)

    def choose(self, tr, offers, t, remaining, last, preempted):
        cands = [Offer(backend="skypilot", target=o.name, cloud=o.cloud, region=o.region, zone=o.zone,
                       instance_type="8xH100", accelerator="H100", accelerator_count=8, vcpus=None,
                       memory_gib=None, spot=o.spot, hourly_usd=price_at(tr, i, t),
                       preemption_rate=true_rate(tr, i, t)) for i, o in enumerate(offers)]
        params = PlanParams(work_hours=remaining, checkpoint_cost_hours=C, restart_hours={"skypilot": D})
        best = rank(self.spec, cands, params).best
        tau = best.interval_hours
        return [o.name for o in offers].index(best.offer.target), (remaining if math.isinf(tau) else tau)


def true_rate(tr: Trace, i: int, t: float) -> float:
    reg = tr.regimes[i]
    k = bisect.bisect_right([r[0] for r in reg], t) - 1
    return reg[max(k, 0)][2]


def run(policy: Policy, tr: Trace, offers: list[SimOffer], work: float, nodes: int, t0: float = 0.0) -> dict:
    """One job of WORK hours submitted at hour T0; the policy keeps what it learned before."""
    t, committed, cost = t0, 0.0, 0.0
    last, preempted, restarts = None, False, 0
    while committed < work - 1e-9:
        if t > HORIZON - 200:
            return {"cost": math.inf, "hours": math.inf, "restarts": restarts, "end": t}
        i, tau = policy.choose(tr, offers, t, work - committed, last, preempted)
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
        policy.observe(offers[i], nodes * (t - start), interrupted, t)
        last, preempted = i, interrupted
        restarts += interrupted
    return {"cost": cost, "hours": t - t0, "restarts": restarts, "end": t}


def run_stream(policy: Policy, tr: Trace, offers, work: float, nodes: int, jobs: int) -> dict:
    """JOBS jobs back to back (a sweep run one element at a time), one memory for all."""
    policy.reset()
    t, total = 0.0, {"cost": 0.0, "hours": 0.0, "restarts": 0}
    for _ in range(jobs):
        r = run(policy, tr, offers, work, nodes, t)
        for k in total:
            total[k] += r[k]
        t = r["end"]
    return total


def compare(policies, kinds, seeds, work, nodes, offers, jobs=1):
    """{(kind, policy name): [result per seed]} plus the mean storm share per kind."""
    out, storms = {}, {}
    for kind in kinds:
        storm = []
        for seed in range(seeds):
            tr = make_trace(kind, seed, offers, nodes)
            storm.append(statistics.mean(s for s, o in zip(tr.storm_share, offers) if o.spot))
            for p in policies:
                out.setdefault((kind, p.name), []).append(run_stream(p, tr, offers, work, nodes, jobs))
        storms[kind] = statistics.mean(storm)
    for p in policies:
        if isinstance(p, Launcher):
            p.close()
    return out, storms


def quantile(xs, q):
    xs = sorted(xs)
    k = (len(xs) - 1) * q
    lo, hi = math.floor(k), math.ceil(k)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def report(res, storms, policies, title):
    print(f"\n== {title}")
    for kind in TRACE_KINDS:
        base = res[(kind, BASELINE)]
        bc = statistics.mean(r["cost"] for r in base)
        bh = statistics.mean(r["hours"] for r in base)
        print(f"\n{kind} traces (spot zones in storm {100 * storms[kind]:.0f}% of the time on average)")
        print(f"{'policy':<34} {'mean $':>9} {'vs base':>8} {'mean h':>7} {'vs base':>8} {'restarts':>8}  "
              f"per-trace $ saving vs {BASELINE}: median [p10, p90] (min, max)")
        for p in policies:
            rs = res[(kind, p.name)]
            mc, mh = statistics.mean(r["cost"] for r in rs), statistics.mean(r["hours"] for r in rs)
            save = [100 * (1 - r["cost"] / b["cost"]) for r, b in zip(rs, base)]
            print(f"{p.name:<34} {mc:>9,.0f} {100 * (mc / bc - 1):>+7.1f}% {mh:>7.1f} {100 * (mh / bh - 1):>+7.1f}% "
                  f"{statistics.mean(r['restarts'] for r in rs):>8.1f}  {statistics.median(save):+5.1f}% "
                  f"[{quantile(save, 0.1):+5.1f}%, {quantile(save, 0.9):+5.1f}%] "
                  f"({min(save):+.1f}%, {max(save):+.1f}%)")


def summary(res, title):
    out = []
    for kind in TRACE_KINDS:
        lr, br = res[(kind, "launcher")], res[(kind, BASELINE)]
        save = [100 * (1 - a["cost"] / b["cost"]) for a, b in zip(lr, br)]
        lc, bc = statistics.mean(r["cost"] for r in lr), statistics.mean(r["cost"] for r in br)
        out.append(f"{title}, {kind}: launcher vs {BASELINE}: {100 * (1 - lc / bc):+.1f}% cheaper on average, "
                   f"median {statistics.median(save):+.1f}% [p10 {quantile(save, 0.1):+.1f}%, p90 "
                   f"{quantile(save, 0.9):+.1f}%], worst trace {min(save):+.1f}%")
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--work", type=float, default=24.0, help="hours of work the job needs")
    ap.add_argument("--nodes", type=int, default=2)
    ap.add_argument("--jobs", type=int, default=8,
                    help="jobs run back to back in the sweep scenario (one state store for all)")
    ap.add_argument("--grid", action="store_true",
                    help="also show the launcher with other chasing settings (prior strength, half-life)")
    args = ap.parse_args()
    offers = market()
    policies = [Launcher(args.nodes), Launcher(args.nodes, cooldown_hours=0.0, name="launcher, placement_cooldown 0"),
                EagerNextRegion(args.nodes), CheapestFirst(args.nodes), OnDemandOnly(args.nodes),
                Clairvoyant(args.nodes)]
    print(f"job: {args.nodes} node(s) x 8 H100, {args.work:g} h of work, checkpoint {C * 60:.0f} min, "
          f"restart {D * 60:.0f} min; {args.seeds} traces per kind; on-demand ${ON_DEMAND:.0f}/h per node; "
          f"launcher chasing: prior worth {DEFAULT_PRIOR_EVENTS:g} event(s), half-life {DEFAULT_HALF_LIFE_HOURS:g} h, "
          f"cooldown {COOLDOWN * 60:.0f} min")
    lines = []
    res, storms = compare(policies, TRACE_KINDS, args.seeds, args.work, args.nodes, offers, jobs=1)
    report(res, storms, policies, "one job, empty state store")
    lines += summary(res, "one job")
    if args.jobs > 1:
        res, storms = compare(policies, TRACE_KINDS, args.seeds, args.work, args.nodes, offers, jobs=args.jobs)
        report(res, storms, policies, f"{args.jobs} jobs back to back (a sweep, one element at a time), "
                                      f"one state store; totals per trace")
        lines += summary(res, f"{args.jobs}-job sweep")
    print()
    print("\n".join(lines))
    if args.grid:
        grid = [Launcher(args.nodes, pe, hl, name=f"launcher prior={pe:g} half-life={hl:g}h")
                for pe in (0.5, 1.0, 4.0) for hl in (6.0, 24.0, 72.0)]
        gres, _ = compare(grid + [EagerNextRegion(args.nodes)], TRACE_KINDS, args.seeds, args.work,
                          args.nodes, offers)
        print(f"\nsensitivity of the launcher to its chasing settings (one job; $ and hours relative to {BASELINE})")
        print(f"{'settings':<42} " + " ".join(f"{k + ' $':>9} {k + ' h':>9}" for k in TRACE_KINDS))
        for p in grid:
            cells = []
            for kind in TRACE_KINDS:
                b = gres[(kind, BASELINE)]
                r = gres[(kind, p.name)]
                cells.append(f"{100 * (statistics.mean(x['cost'] for x in r) / statistics.mean(x['cost'] for x in b) - 1):>+8.1f}%")
                cells.append(f"{100 * (statistics.mean(x['hours'] for x in r) / statistics.mean(x['hours'] for x in b) - 1):>+8.1f}%")
            print(f"{p.name:<42} " + " ".join(cells))


if __name__ == "__main__":
    main()
