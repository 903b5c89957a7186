"""A world for ``bench/simulate_policy.py``'s replay built from real availability traces
(``bench/spot_traces.py``), instead of the synthetic one (``bench/simulate_world.py``).

Model (the one of "Can't Be Late", NSDI'24, which collected these traces):

* a zone's spot capacity is obtainable at hour t iff its trace holds at least ``nodes``
  instances at the tick containing t (``data[t // gap] >= nodes``); a launch there
  otherwise is refused, costing ``refused_hours`` and nothing billed;
* a running gang in a zone is preempted at the first tick boundary after its launch where
  the zone's count drops below ``nodes``: the trace records that the instance could no
  longer be had, which is what a reclaim looks like from outside. No notice is used;
* on-demand offers (``on_demand=True``) are always obtainable and never preempted;
* prices are flat per offer (``PRICES``: AWS list prices, spot at the catalog's ratio);
* the job's overheads are the world's: ``C`` (checkpoint), ``D`` (restart: provision and
  restore, billed, no progress), as in the synthetic world.

Hour 0 is the start of the traces; a job still running when the shortest trace ends gives
up (``horizon``) and its window is dropped from the comparison for every policy.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from simulate_world import SimOffer

# instance part of the file name -> (AWS instance type, accelerator, GPUs, on-demand $/h, spot $/h).
# On-demand: AWS list prices (us-east-1, us-east-2 and us-west-2 charge the same). Spot: the
# SkyPilot catalog's p3.2xlarge row (use1-az1: $0.918 against $3.06, 30%); the same ratio for
# the others and for every zone, since these traces carry no prices.
PRICES = {
    "v100_1": ("p3.2xlarge", "V100", 1, 3.06, 0.918),
    "v100_8": ("p3.16xlarge", "V100", 8, 24.48, 7.344),
    "k80_1": ("p2.xlarge", "K80", 1, 0.90, 0.27),
    "k80_8": ("p2.8xlarge", "K80", 8, 7.20, 2.16),
}


@dataclass
class TraceWorld:
    name: str
    offers: list                 # SimOffer per offer; spot zones first, in trace-set order
    avail: list                  # per offer: the trace's counts (None: on-demand, always there)
    gap_hours: float
    nodes: int
    C: float
    D: float
    refused_hours: float
    horizon: float
    drops: list = field(default_factory=list)   # per offer: sorted hours where capacity ends

    def __post_init__(self):
        self.drops = [_drops(a, self.gap_hours, self.nodes) if a is not None else [] for a in self.avail]

    def price_at(self, i: int, t: float) -> float:
        return self.offers[i].base

    def has_capacity(self, i: int, t: float) -> bool:
        a = self.avail[i]
        if a is None:
            return True
        k = int(t / self.gap_hours)
        return k < len(a) and a[k] >= self.nodes

    def cost_between(self, i: int, a: float, b: float) -> float:
        return self.offers[i].base * (b - a)

    def next_event(self, i: int, t: float) -> float:
        """When a gang running in offer I at hour T loses its capacity (inf: never)."""
        d = self.drops[i]
        k = bisect.bisect_right(d, t)
        return d[k] if k < len(d) else float("inf")

    def drops_between(self, a: float, b: float) -> int:
        """Capacity losses across every spot zone in [a, b): how stormy a window is."""
        return sum(bisect.bisect_left(d, b) - bisect.bisect_left(d, a) for d in self.drops)


def _drops(data, gap: float, nodes: int) -> list[float]:
    return [k * gap for k in range(1, len(data)) if data[k] < nodes <= data[k - 1]] + [len(data) * gap]


def build(zones, nodes: int = 1, C: float = 1 / 60, D: float = 6 / 60, refused_hours: float = 2 / 60,
          on_demand: bool = False, prices=None) -> TraceWorld:
    """The world of one instance type's zones (``spot_traces.ZoneTrace``s of one set)."""
    zones = list(zones)
    inst = {z.instance for z in zones}
    gaps = {z.gap_seconds for z in zones}
    if len(inst) != 1 or len(gaps) != 1:
        raise ValueError(f"one instance type and tick per world, got {sorted(inst)} and {sorted(gaps)}")
    key = inst.pop()
    table = prices or PRICES
    if key not in table:
        raise ValueError(f"no prices for instance {key!r}: expected one of {', '.join(sorted(table))}")
    itype, accel, gpus, od, spot = table[key]
    offers = [SimOffer(f"aws:{z.zone}", "aws", z.region, z.zone, True, spot, itype, accel, gpus) for z in zones]
    avail = [z.data for z in zones]
    if on_demand:
        for region in sorted({z.region for z in zones}):
            offers.append(SimOffer(f"aws:{region}:on-demand", "aws", region, "", False, od, itype, accel, gpus))
            avail.append(None)
    gap = gaps.pop() / 3600.0
    horizon = min(len(z.data) for z in zones) * gap
    return TraceWorld(f"{key}", offers, avail, gap, nodes, C, D, refused_hours, horizon)
