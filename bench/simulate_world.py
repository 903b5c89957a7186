"""The world ``bench/simulate_policy.py`` replays: spot zones whose interruption hazard changes
over time, launches refused for capacity, and prices that differ and wander.

Everything here is drawn from fixed seeds before any policy runs, so every policy meets the
same preemptions, the same full zones and the same prices:

* Market: 8 spot zones in 6 regions of 2 clouds priced 30-45% of on-demand ($50/h per node),
  each price wandering hourly (log AR(1), about +-10%), and 2 on-demand offers ($50/h and $55/h).
* Interruptions per spot zone: a two-state Markov-modulated Poisson process (calm and storm
  regimes, exponential dwell times), per-zone rates drawn from the trace kind's ranges,
  independently of price (``TRACE_KINDS``). On-demand: 2e-4/h per node (hardware). A gang of
  N nodes is interrupted at N times the per-node rate. No preemption notice.
* Capacity: each zone's every hour is "full" (launches there are refused) with probability
  ``CAPACITY_FULL`` of its regime at that hour (storms are capacity crunches: a zone that
  reclaims instances also refuses new ones). Drawn from its own random stream, so adding
  capacity left the interruption traces exactly as they were before it existed.
* Costs: every (re)start takes ``D`` (10 min) billed before work resumes and can itself be
  interrupted; a checkpoint takes ``C`` (5 min); work since the last checkpoint is lost on an
  interruption; a refused launch takes ``REFUSED`` (4 min) and bills nothing.
"""

from __future__ import annotations

import bisect
import math
import random
from dataclasses import dataclass

C = 5 / 60          # checkpoint cost, hours
D = 10 / 60         # restart (provision + start + load), hours, billed
REFUSED = 4 / 60    # a launch refused for capacity: time lost, nothing billed
ON_DEMAND = 50.0    # $/h per node, the reference price
PRIOR_SPOT = 0.1    # what every policy assumes per spot node-hour before it sees anything
PRIOR_OD = 2e-4
HORIZON = 4000.0

TRACE_KINDS = {
    #          calm rate     calm mean dwell  storm rate   storm mean dwell
    "calm": ((0.005, 0.03), 300.0, (0.2, 0.5), 3.0),
    "heavy": ((0.05, 0.30), 24.0, (1.0, 4.0), 8.0),
}
CAPACITY_FULL = {"calm": 0.02, "storm": 0.5, "on-demand": 0.01}  # chance an hour of a zone is full


@dataclass(frozen=True)
class SimOffer:
    name: str
    cloud: str
    region: str
    zone: str
    spot: bool
    base: float
    instance_type: str = "8xH100"
    accelerator: str = "H100"
    gpus: int = 8


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
    prices: list       # per offer: hourly prices
    cum: list          # per offer: cumulative cost at each whole hour
    events: list       # per offer: sorted job-level interruption times
    storm_share: list  # per offer: fraction of time in storm (for the report)
    regimes: list      # per offer: [(start, end, per-node rate, stormy)] (the clairvoyant reference reads it)
    full: list         # per offer: per hour, True when launches there are refused
    C: float = C               # the job's checkpoint cost, restart overhead, a refused launch (hours)
    D: float = D
    refused_hours: float = REFUSED
    horizon: float = HORIZON - 200  # a job still running after this hour gives up (cost inf)

    # What the replay (bench/simulate_policy.py) asks of a world; bench/trace_world.py has the same.
    def price_at(self, i: int, t: float) -> float:
        return price_at(self, i, t)

    def has_capacity(self, i: int, t: float) -> bool:
        return has_capacity(self, i, t)

    def cost_between(self, i: int, a: float, b: float) -> float:
        return cost_between(self, i, a, b)

    def next_event(self, i: int, t: float) -> float:
        return next_event(self, i, t)


def _zone_events(rng, kind: str, nodes: int):
    (c_lo, c_hi), calm_dwell, (s_lo, s_hi), storm_dwell = TRACE_KINDS[kind]
    calm_rate, storm_rate = rng.uniform(c_lo, c_hi), rng.uniform(s_lo, s_hi)
    t, ev, stormy = 0.0, [], rng.random() < storm_dwell / (storm_dwell + calm_dwell)
    storm_time, reg = 0.0, []
    while t < HORIZON:
        dwell = rng.expovariate(1.0 / (storm_dwell if stormy else calm_dwell))
        reg.append((t, t + dwell, storm_rate if stormy else calm_rate, stormy))
        rate = (storm_rate if stormy else calm_rate) * nodes
        e = t + rng.expovariate(rate)
        while e < t + dwell:
            ev.append(e)
            e += rng.expovariate(rate)
        storm_time += dwell if stormy else 0.0
        t += dwell
        stormy = not stormy
    return ev, storm_time / t, reg


def make_trace(kind: str, seed: int, offers: list[SimOffer], nodes: int, refusals: bool = True) -> Trace:
    """One trace; REFUSALS false: no zone ever refuses a launch (the world before capacity existed)."""
    rng = random.Random(f"{kind}/{seed}")
    cap_rng = random.Random(f"{kind}/{seed}/capacity")
    hours = int(HORIZON) + 2
    tr = Trace(kind, seed, [], [], [], [], [], [])
    for o in offers:
        if o.spot:
            x, series = 0.0, []
            for _ in range(hours):
                x = 0.95 * x + rng.gauss(0.0, 0.03)
                series.append(o.base * math.exp(x))
            ev, share, reg = _zone_events(rng, kind, nodes)
            full = [cap_rng.random() < CAPACITY_FULL["storm" if stormy else "calm"]
                    for stormy in _hourly_storm(reg, hours)]
        else:
            series, ev, t = [o.base] * hours, [], 0.0
            while t < HORIZON:
                t += rng.expovariate(PRIOR_OD * nodes)
                ev.append(t)
            share, reg = 0.0, [(0.0, math.inf, PRIOR_OD, False)]
            full = [cap_rng.random() < CAPACITY_FULL["on-demand"] for _ in range(hours)]
        full = full if refusals else [False] * hours
        cum = [0.0]
        for p in series:
            cum.append(cum[-1] + p)
        for lst, v in ((tr.prices, series), (tr.cum, cum), (tr.events, ev), (tr.storm_share, share),
                       (tr.regimes, reg), (tr.full, full)):
            lst.append(v)
    return tr


def _hourly_storm(reg, hours: int) -> list[bool]:
    """Whether the zone is in a storm at the middle of each hour."""
    out, k = [], 0
    for h in range(hours):
        while k + 1 < len(reg) and reg[k + 1][0] <= h + 0.5:
            k += 1
        out.append(reg[k][3])
    return out


def _regime_at(reg, t: float):
    k = bisect.bisect_right([r[0] for r in reg], t) - 1
    return reg[max(k, 0)]


def true_rate(tr: Trace, i: int, t: float) -> float:
    return _regime_at(tr.regimes[i], t)[2]


def price_at(tr: Trace, i: int, t: float) -> float:
    return tr.prices[i][int(t)]


def has_capacity(tr: Trace, i: int, t: float) -> bool:
    return not tr.full[i][int(t)]


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
