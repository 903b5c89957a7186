"""Deadline-aware spot policies replayed over real availability traces (issue 21).

    python bench/deadline_replay.py --traces DIR --windows FILE.json [--multi-region]
           [--work 48] [--deadlines 52,60,70] [--overheads 0.02,0.05,0.1,0.2]
           [--ckpt-gb 50] [--transfer-gbps 0] [--skynomad-config auto|v100|h100] --json

Traces (neither set is shipped; ``bench/deadline_traces.py`` says how to get and lay them out):

* single region: a directory in the ``skypilot-org/spot-traces`` layout (searched recursively
  for ``<zone>_<instance>_<n>.json``; ``data``: instances obtainable per tick, ``> 0`` =
  available); windows ``[{"env": "us-west-2a_v100_1", "start": TICK}, ...]``; flat prices,
  on-demand $3.06/h and spot $0.9731/h (p3.2xlarge);
* ``--multi-region``: a directory of the SkyNomad artifact's converted traces, one folder per
  zone with its ``full.json`` (``data``: ``1`` = preempted; ``prices``: spot $/h per tick;
  ``metadata.price_info.on_demand_price``); windows ``[{"start": TICK}, ...]``; every zone is
  offered in every run.

The simulator is the "Can't Be Late" paper's, with SkyNomad's egress (``--ckpt-gb``):

* a tick is the trace's gap; the policy decides at each tick boundary what to hold for it;
* each tick is billed in full at the price of the instance held (the tick the job finishes in
  too);
* a preemption takes effect at a tick boundary (the tick before it ran in full); a spot
  request where none is available gets nothing (and releases what was held);
* changing the instance (type or zone) starts a restart overhead, billed at the new
  instance's price, with no progress; the first start pays it too;
* **egress** (``--ckpt-gb G``, default 50; ``0`` = no egress, the rules before it): a start in
  a region other than that of the zone where the job last made progress moves the checkpoint
  and is billed ``G x`` the price per GB (``egress_usd_per_gb``: $0 within a region, $0.01 between
  us-east-1 and us-east-2, $0.02 otherwise; a zone's region is its name without the zone
  suffix). The first start moves nothing. ``--transfer-gbps R`` (default 0: off, as in every
  published sweep) adds the transfer's time, ``G x 8 / R`` seconds, to such a start's overhead;
* the finish time is exact (tick start + overhead left + work left) and is what ``misses``
  counts against the deadline. A run still going at its deadline is finished on on-demand
  (counted as a miss) so its cost stays comparable.

``mean_cost`` and ``p90_cost`` are normalized to the on-demand-only cost of the same work:
``work x`` the cheapest on-demand price (``od`` itself pays its restart on top, so it is a
little above 1); egress is part of the cost. ``od_hours`` and ``spot_hours`` are billed hours,
``egress_usd`` and ``region_moves`` (starts billed egress) means per run.

Policies (all in the same run): ``od``; ``greedy`` (spot while it is there, on-demand
otherwise, no safety net); ``up``: Uniform Progress as the paper's code defines it
(``rc_cr_threshold``: hysteresis, the 2x-overhead and 1x-overhead rules on tick-rounded times,
the strong guarantee); ``up_eager`` (multi-region): SkyNomad's ``multi_region_rc_cr_threshold
_eager_failover`` with its simulator's latched safety net; ``skynomad`` (multi-region): SkyNomad's
own policy (``bench/deadline_skynomad.py``: the arm and settings its paper's panel for that
kind of set runs, ``--skynomad-config``; its probes are billed, 60 s of spot each, and counted
in its cost); ``optimal`` (multi-region; also
single-region with ``--optimal-single``): the offline optimum, an exact dynamic program over
(tick, holding, time lost, region of the checkpoint) (``optimal_cost``); ``launcher``: ``launcher.plan.deadline``.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from launcher.plan import deadline as dl  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from deadline_skynomad import SkyNomad  # noqa: E402

SINGLE_OD, SINGLE_SPOT = 3.06, 0.9731     # p3.2xlarge, $/h
EPS = 1e-9
NONE, SPOT, OD = 0, 1, 2


class ReplayError(ValueError):
    pass


# ---- worlds ---------------------------------------------------------------------------------

@dataclass
class World:
    """Every zone of one run: availability and spot price per tick, on-demand price."""
    names: list            # zone names
    gap_h: float
    avail: list            # per zone: list of bool, the whole trace
    spot: list             # per zone: list of $/h per tick (or a float when flat)
    od: list               # per zone: on-demand $/h

    def __post_init__(self):
        self.regions = [dl_region(n) for n in self.names]
        self._epochs = None

    def up(self, z: int, idx: int) -> bool:
        a = self.avail[z]
        return 0 <= idx < len(a) and a[idx]

    def spot_price(self, z: int, idx: int) -> float:
        s = self.spot[z]
        if isinstance(s, float):
            return s
        return s[min(idx, len(s) - 1)]

    def region(self, z: int) -> str:
        return self.regions[z]

    def epoch(self, idx: int) -> int:
        """A number that changes exactly when some zone's availability or spot price does:
        ticks with the same epoch offer the same (``Launcher`` builds its offers once per
        epoch). Past the end of every zone's trace nothing changes any more."""
        if self._epochs is None:
            n = max(len(a) for a in self.avail)
            zs = range(len(self.names))
            epochs, e, prev = [], 0, None
            for i in range(n + 1):
                now = tuple((self.up(z, i), self.spot_price(z, i)) for z in zs)
                if prev is not None and now != prev:
                    e += 1
                epochs.append(e)
                prev = now
            self._epochs = epochs
        return self._epochs[min(idx, len(self._epochs) - 1)]


def egress_usd_per_gb(src: str, dst: str) -> float:
    """SkyNomad's price of moving a checkpoint from region SRC to region DST, $/GB
    (``sky_spot.migration_model.get_transfer_cost_usd`` for the regions of these traces)."""
    if src == dst:
        return 0.0
    if {src, dst} == {"us-east-1", "us-east-2"}:
        return 0.01
    return 0.02


def dl_region(zone: str) -> str:
    import re
    m = re.match(r"^(.+\d+)-[a-z]$", zone)        # GCP us-central1-a
    if m:
        return m.group(1)
    m = re.match(r"^(.+-\d+)[a-z]$", zone)        # AWS us-west-2a
    return m.group(1) if m else zone


def load_single(traces: Path) -> dict:
    """``{env: World}`` for every ``<zone>_<instance>_<n>.json`` under ``traces``."""
    import re
    name = re.compile(r"^([a-z0-9-]+?)_([A-Za-z0-9.-]+_\d+)\.json$")
    out = {}
    for f in sorted(traces.rglob("*.json")):
        if not name.match(f.name):
            continue
        doc = json.loads(f.read_text())
        gap = float(doc["metadata"]["gap_seconds"])
        zone = name.match(f.name).group(1)
        out.setdefault(f.stem, World([zone], gap / 3600, [[v > 0 for v in doc["data"]]],
                                     [SINGLE_SPOT], [SINGLE_OD]))
    if not out:
        raise ReplayError(f"{traces}: no <zone>_<instance>_<n>.json trace files")
    return out


def load_multi(traces: Path) -> World:
    """One World of every zone folder under ``traces`` that holds a ``full.json``."""
    names, avail, spot, od, gaps = [], [], [], [], set()
    for f in sorted(traces.glob("*/full.json")):
        doc = json.loads(f.read_text())
        meta = doc["metadata"]
        gaps.add(float(meta["gap_seconds"]))
        n = len(doc["data"])
        price = meta["price_info"]
        prices = doc.get("prices")
        names.append(meta.get("zone") or price.get("zone") or f.parent.name.split("_")[0])
        avail.append([not v for v in doc["data"]])
        spot.append([float(x) for x in prices[:n]] if prices else float(price["price"]))
        od.append(float(price["on_demand_price"]))
    if not names:
        raise ReplayError(f"{traces}: no <zone>/full.json traces")
    if len(gaps) != 1:
        raise ReplayError(f"{traces}: zones have different gap_seconds {sorted(gaps)}")
    return World(names, gaps.pop() / 3600, avail, spot, od)


# ---- the simulator --------------------------------------------------------------------------

class Run:
    """One job replayed from one window. Policies read its fields; ``act`` returns
    ``(NONE | SPOT | OD, zone)``."""

    def __init__(self, world: World, start: int, work: float, deadline: float, overhead: float,
                 ckpt_gb: float = 0.0, transfer_gbps: float = 0.0):
        self.w, self.start = world, start
        self.gb = ckpt_gb
        self.transfer_h = ckpt_gb * 8 / transfer_gbps / 3600 if transfer_gbps > 0 else 0.0
        self.src = None                   # region of the zone where the job last made progress
        self.egress = 0.0                 # $ billed for moving the checkpoint
        self.moves = 0                    # starts billed egress
        self.probe_usd = 0.0              # $ a policy paid to probe zones (``skynomad``), in ``cost``
        self.W, self.D, self.d, self.g = work, deadline, overhead, world.gap_h
        self.k = 0
        self.t = 0.0
        self.p = 0.0                      # work done
        self.kind, self.zone = NONE, -1   # held now (after this tick's preemption)
        self.last_kind, self.last_zone = NONE, -1   # held during the previous tick
        self.o = 0.0                      # overhead left of the held instance
        self.cost = self.od_h = self.spot_h = 0.0
        self.finish = None
        self.od_cheapest = min(range(len(world.od)), key=lambda z: (world.od[z], z))

    @property
    def idx(self) -> int:
        return self.start + self.k

    def up(self, z: int) -> bool:
        return self.w.up(z, self.start + self.k)

    def move_usd(self, z: int) -> float:
        """Egress a start in zone Z would be billed now."""
        if self.src is None or self.gb <= 0:
            return 0.0
        return self.gb * egress_usd_per_gb(self.src, self.w.regions[z])

    def move_h(self, z: int) -> float:
        """Transfer time a start in zone Z would add to its overhead now."""
        if self.src is None or self.transfer_h <= 0 or self.w.regions[z] == self.src:
            return 0.0
        return self.transfer_h


def simulate(policy, world: World, start: int, work: float, deadline: float, overhead: float,
             ckpt_gb: float = 0.0, transfer_gbps: float = 0.0) -> Run:
    r = Run(world, start, work, deadline, overhead, ckpt_gb, transfer_gbps)
    policy.reset(r)
    g, W, D, d = r.g, work, deadline, overhead
    avail, spot, od, regions = world.avail, world.spot, world.od, world.regions
    while True:
        idx = start + r.k
        t = r.t = r.k * g
        if r.kind == SPOT:
            a = avail[r.zone]
            if not (idx < len(a) and a[idx]):
                r.kind, r.zone, r.o = NONE, -1, 0.0
        if t >= D - EPS:                       # a miss: finish on on-demand, comparably billed
            kind, zone = (r.kind, r.zone) if r.kind == OD else (OD, r.od_cheapest)
        else:
            kind, zone = policy.act(r)
        if kind == SPOT:
            a = avail[zone]
            if not (idx < len(a) and a[idx]):
                kind, zone = NONE, -1
        if kind != r.kind or zone != r.zone:
            r.o = overhead if kind != NONE else 0.0
            if kind != NONE and r.src is not None and regions[zone] != r.src:
                if ckpt_gb > 0:
                    usd = ckpt_gb * egress_usd_per_gb(r.src, regions[zone])
                    r.cost += usd
                    r.egress += usd
                    r.moves += 1
                r.o += r.transfer_h
            r.kind, r.zone = kind, zone
        r.last_kind, r.last_zone = kind, zone
        r.k += 1
        if kind == NONE:
            continue
        if kind == SPOT:
            s = spot[zone]
            r.cost += (s if isinstance(s, float) else s[min(idx, len(s) - 1)]) * g
            r.spot_h += g
        else:
            r.cost += od[zone] * g
            r.od_h += g
        eff = g - r.o
        if eff > 0:
            r.src = regions[zone]
            need = W - r.p
            if eff >= need - EPS:
                r.finish = t + r.o + need
                r.p = W
                return r
            r.p += eff
            r.o = 0.0
        else:
            r.o -= g


# ---- policies -------------------------------------------------------------------------------

class Policy:
    name = "?"

    def reset(self, r: Run) -> None:
        pass

    def act(self, r: Run):
        raise NotImplementedError


class OnDemand(Policy):
    name = "od"

    def act(self, r):
        return OD, r.od_cheapest


def _cheapest_up(r: Run):
    best, bp = -1, math.inf
    for z in range(len(r.w.avail)):
        if r.up(z):
            p = r.w.spot_price(z, r.idx)
            if p < bp:
                best, bp = z, p
    return best


class Greedy(Policy):
    """Spot while it is there (the cheapest zone up; stays on a held zone while it lasts),
    on-demand otherwise. No safety net."""
    name = "greedy"

    def act(self, r):
        if r.kind == SPOT:
            return SPOT, r.zone
        z = _cheapest_up(r)
        if z >= 0:
            return SPOT, z
        if r.kind == OD:
            return OD, r.zone
        return OD, r.od_cheapest


def _ceil_ticks(x: float, g: float) -> float:
    return math.ceil(x / g - 1e-9) * g


def _floor_ticks(x: float, g: float) -> float:
    return math.floor(x / g + 1e-9) * g


class UniformProgress(Policy):
    """The paper's ``rc_cr_threshold`` (its ``_step``), then its base class's strong guarantee
    and spot-unavailable override, in one zone (zone 0)."""
    name = "up"

    def act(self, r):
        g, W, D, d = r.g, r.W, r.D, r.d
        t, p = r.t, r.p
        left = W - p
        has_spot = r.up(0)
        cur = r.kind                               # after the preemption (paper: env.cluster_type)
        last = r.last_kind                         # held during the last tick
        remaining_time = _floor_ticks(D - t, g)
        req = SPOT if has_spot else NONE
        if p - t * W / D < 0:                      # behind the line
            req = SPOT if has_spot else OD
        if cur == OD and (not has_spot or (t + 2 * d) * W / D - p >= 0):
            req = OD                               # hysteresis: stay until 2d ahead
        total = _ceil_ticks(left + d, g)
        total2 = _ceil_ticks(left + 2 * d, g)
        if total2 >= remaining_time and cur in (NONE, OD):
            req = OD
        if total >= remaining_time:
            req = SPOT if (cur == SPOT and r.o < 1e-3 / 3600) else OD
            if d == 0 and has_spot:
                req = SPOT
        # Strategy._apply_strong_guarantee
        if total >= remaining_time:
            req = SPOT if (last == SPOT and r.o < 1e-3 / 3600) else OD
        # Strategy.step: spot requested where there is none
        if req == SPOT and not has_spot:
            req = OD if total >= remaining_time else NONE
        return req, 0


class UniformProgressEager(Policy):
    """SkyNomad's ``multi_region_rc_cr_threshold_eager_failover`` under its simulator's safety
    net (``MultiTraceEnv.maybe_trigger_safety_net``: at ``ceil(left + d) >= floor(time left)``
    it latches on on-demand for good). Spot zones are tried cheapest first, the region of the
    last running zone last; on-demand goes where the job last ran (else zone 0)."""
    name = "up_eager"

    def reset(self, r):
        self.latched = False
        self.last_active = None      # _last_active_region
        self.leader = None           # region of the instance that made the last tick's progress
        self.hyst_exit = False

    def _request(self, r, cur, has_spot):
        g, W, D, d, t, p = r.g, r.W, r.D, r.d, r.t, r.p
        left = W - p
        remaining_time = _floor_ticks(D - t, g)
        self.hyst_exit = False
        req = SPOT if has_spot else NONE
        if p - t * W / D < 0:
            req = SPOT if has_spot else OD
        cond2 = (t + 2 * d) * W / D - p
        if cur == OD and (not has_spot or cond2 >= 0):
            req = OD
        total = _ceil_ticks(left + d, g)
        total2 = _ceil_ticks(left + 2 * d, g)
        if total2 > remaining_time and cur in (NONE, OD):
            req = OD
        if total >= remaining_time:
            req = SPOT if (cur == SPOT and r.o < 1e-3 / 3600) else OD
            if d == 0 and has_spot:
                req = SPOT
        if cur == OD and has_spot and req == OD and cond2 < 0:
            req = SPOT
            self.hyst_exit = True
        return req

    def _cheapest_od(self, r):
        # the simulator's safety net: completion on on-demand plus the move from the leader
        left = r.W - r.p
        return min(range(len(r.w.od)), key=lambda z: (r.w.od[z] * left + r.move_usd(z), z))

    def act(self, r):
        if r.last_kind != NONE:
            self.leader = r.last_zone
        g, D = r.g, r.D
        left = r.W - r.p
        # the simulator's safety net, before the strategy
        if self.latched:
            if r.kind != NONE:
                return r.kind, r.zone
            return OD, self._cheapest_od(r)
        if _ceil_ticks(left + r.d, g) >= _floor_ticks(D - r.t, g):
            self.latched = True
            if r.kind == NONE:
                return OD, self._cheapest_od(r)
            return OD, r.zone
        cur, last_region = r.kind, (r.zone if r.kind != NONE else None)
        if last_region is not None:
            self.last_active = last_region
        req = self._request(r, cur, True)
        if last_region is not None:
            if req == NONE:
                return NONE, -1
            if req == cur:
                self.hyst_exit = False
                return cur, r.zone
        if req == SPOT:
            for z in self._order(r):
                if r.up(z):
                    return SPOT, z
            if self.hyst_exit:
                return NONE, -1
            req = self._request(r, NONE, False)
            if req != OD:
                return NONE, -1
        if req == OD:
            z = last_region if last_region is not None else (self.leader if self.leader is not None else 0)
            return OD, z
        return NONE, -1

    def _order(self, r):
        w, idx = r.w, r.idx
        zones = sorted(range(len(w.avail)), key=lambda z: w.spot_price(z, min(idx, len(w.avail[z]) - 1)))
        if self.last_active is None:
            return zones
        reg = w.region(self.last_active)
        return [z for z in zones if w.region(z) != reg] + [z for z in zones if w.region(z) == reg]


class Launcher(Policy):
    """``launcher.plan.deadline.decide`` (the product's policy), fed what ``watch`` would
    know at each tick: every zone's availability and price, on-demand per zone."""
    name = "launcher"

    def __init__(self, params=None, multi=False, plain=False):
        self.params = params
        self.multi = multi
        self.plain = plain       # build every tick's offers anew: the oracle of the reuse in ``act``
        self._offers = {}
        self._world = self._gb = self._transfer_h = None
        self._seen = {}

    def _offer(self, z, kind, price, up, move_usd=0.0, move_h=0.0):
        key = (self.names[z], kind, price, up, move_usd, move_h)
        o = self._offers.get(key)
        if o is None:
            o = self._offers[key] = dl.Offer(self.names[z], kind, price, up, move_usd=move_usd, move_h=move_h)
        return o

    def reset(self, r):
        w = r.w
        self.names = w.names
        self.params_ = self.params or (dl.MULTI if self.multi else dl.SINGLE)
        self.by_name = {n: z for z, n in enumerate(w.names)}
        self.held = {(k, z): dl.Placement(dk, n) for z, n in enumerate(w.names)
                     for k, dk in ((SPOT, dl.SPOT), (OD, dl.ON_DEMAND))}
        if w is not self._world or r.gb != self._gb or r.transfer_h != self._transfer_h:
            # (offers, Seen) by (epoch, checkpoint's region): the same in every run of this
            # world, checkpoint size and transfer rate
            self._world, self._gb, self._transfer_h, self._seen = w, r.gb, r.transfer_h, {}

    def offers(self, r) -> tuple:
        """Every zone's spot offer (price, availability) and on-demand offer at this tick, with
        what a start there would cost to move the checkpoint."""
        w, idx = r.w, r.idx
        zs = range(len(w.avail))
        mu = [r.move_usd(z) for z in zs]
        mh = [r.move_h(z) for z in zs]
        return tuple(self._offer(z, dl.SPOT, w.spot_price(z, idx), r.up(z), mu[z], mh[z]) for z in zs) + \
            tuple(self._offer(z, dl.ON_DEMAND, w.od[z], True, mu[z], mh[z]) for z in range(len(w.od)))

    def act(self, r):
        if self.plain:
            offers, seen = self.offers(r), None
        else:
            # the offers change only with a zone's availability or price (the world's epoch)
            # and with the checkpoint's region (its egress): built and sorted once for each
            key = (r.w.epoch(r.idx), r.src)
            got = self._seen.get(key)
            if got is None:
                offers = self.offers(r)
                got = self._seen[key] = (offers, dl.Seen.of(offers))
            offers, seen = got
        cur = self.held[(r.kind, r.zone)] if r.kind != NONE else dl.NOWHERE
        s = dl.Situation(r.t, r.p, r.W, r.D, r.d, cur, r.o, offers, r.g, seen)
        p = dl.decide(s, self.params_).placement
        if p.kind == dl.SPOT:
            return SPOT, self.by_name[p.where]
        if p.kind == dl.ON_DEMAND:
            return OD, self.by_name[p.where]
        return NONE, -1


# ---- the offline optimum --------------------------------------------------------------------

def _unit_s(*xs_h) -> int:
    g = 0
    for x in xs_h:
        g = math.gcd(g, int(round(x * 3600)))
    return max(g, 1)


@dataclass
class _Grid:
    """The optimum's dynamic program, set up (``_grid``): time in units of ``u`` seconds, ``G``
    columns of time lost, ``M`` states, prices and availability per state and tick."""
    np: object
    g_s: int
    W_s: int
    u: int
    G: int
    gu: int
    du: int
    Z: int
    R: int
    OD0: int
    NO0: int
    M: int
    reg: object
    E: object
    held: list
    T: int
    L: int
    price: object
    up: object
    run_up: object
    run_cost: object

    def ring(self):
        """(F, H) over a ring of L + 1 ticks (tick k is final once k - 1, hold and wait, and
        k - L, a start, are done): the cheapest cost to each (tick, state, time lost), nothing
        held at 0 having lost nothing; and the ticks held along that path, encoded as
        on-demand x 1e5 + spot (exact in a float)."""
        F = self.np.full((self.L + 1, self.M, self.G), self.np.inf)
        F[0, 0, 0] = 0.0
        return F, self.np.zeros((self.L + 1, self.M, self.G))

    def ticks_od(self):
        """Per state, what a tick held adds to H: 1e5 on-demand, 1 spot, 0 nothing."""
        out = self.np.ones(self.M)
        out[0] = 0
        out[self.OD0:self.OD0 + self.R] = 1e5
        out[self.NO0:] = 0
        return out

    def groups(self):
        """The states by the region the checkpoint is in (-1: never ran, then each region)."""
        return [self.np.flatnonzero(self.reg == r) for r in range(-1, self.R)]


def _grid(world: World, start: int, work: float, deadline: float, overhead: float, ckpt_gb: float):
    """The grid both optima run over, or None when not even the work fits before the deadline."""
    import numpy as np

    g_s, d_s = int(round(world.gap_h * 3600)), int(round(overhead * 3600))
    W_s, D_s = int(round(work * 3600)), int(round(deadline * 3600))
    u = _unit_s(world.gap_h, overhead)
    slack_u = (D_s - W_s) // u
    if slack_u < 0:
        return None
    G, gu, du = slack_u + 1, g_s // u, d_s // u
    Z = len(world.avail)
    egress = ckpt_gb > 0
    names = sorted(set(world.regions)) if egress else ["*"]
    R = len(names)
    zreg = [names.index(world.regions[z]) if egress else 0 for z in range(Z)]
    odz = [min((z for z in range(Z) if zreg[z] == j), key=lambda z: (world.od[z], z)) for j in range(R)]
    # states: 0 nothing (never ran), 1..Z spot in zone z-1, Z+1..Z+R on-demand in region j,
    # Z+R+1..Z+2R nothing with the checkpoint in region j
    OD0, NO0 = Z + 1, Z + R + 1
    M = Z + 2 * R + 1
    reg = np.array([-1] + zreg + list(range(R)) + list(range(R)))
    E = np.array([[ckpt_gb * egress_usd_per_gb(names[i], names[j]) if egress else 0.0 for j in range(R)]
                  for i in range(R)])
    held = list(range(1, NO0))           # states that hold an instance
    T = int(math.ceil(D_s / g_s)) + 1
    L = max(1, -(-d_s // g_s))  # ticks a start takes before it makes progress again
    inf = np.inf
    price = np.zeros((M, T + L))
    up = np.zeros((M, T + L), dtype=bool)
    for k in range(T + L):
        for z in range(Z):
            up[1 + z, k] = world.up(z, start + k)
            price[1 + z, k] = world.spot_price(z, start + k) * world.gap_h
        for j in range(R):
            price[OD0 + j, k] = world.od[odz[j]] * world.gap_h
            up[OD0 + j, k] = True
    # a start at tick k into m holds m for ticks k..k+L-1: must be up all along
    run_up = up[:, :T].copy()
    for j in range(1, L):
        run_up &= up[:, j:T + j]
    run_cost = sum(price[:, j:T + j] for j in range(L))
    return _Grid(np, g_s, W_s, u, G, gu, du, Z, R, OD0, NO0, M, reg, E, held, T, L, price, up, run_up, run_cost)


def optimal_cost(world: World, start: int, work: float, deadline: float, overhead: float,
                 ckpt_gb: float = 0.0):
    """The cheapest schedule that finishes by the deadline, knowing the future: a dynamic
    program over (tick, what is held, time lost so far) in whole seconds, exact under the
    simulator's rules, egress included (``ckpt_gb``). Time lost (waiting, restart overheads) is
    what separates the elapsed time from the work done, so it is the one state besides the
    tick and the holding; it may not pass ``deadline - work``. With egress, holding nothing
    remembers the region the checkpoint is in (where the job last made progress), and
    on-demand is one state per region (its cheapest zone); without, one on-demand state (the
    cheapest zone; the others cost more for the same restart) and one empty state. A start
    that is preempted before its overhead is over, or abandoned during it, is left out:
    waiting instead loses the same time for nothing and leaves the checkpoint where it was.
    (A held start counts as having made progress once its overhead is over: exact whenever
    the overhead is not a whole number of ticks, as in every grid here.) Returns
    ``(cost, od_hours, spot_hours)`` or None if no schedule finishes. The transfer's time
    (``--transfer-gbps``) is not modelled.

    Each tick only touches the columns (time lost) that can hold a live schedule: none has lost
    more than the time elapsed, and one that has lost little enough has finished; the arrays
    are updated in place (``np.copyto``). ``optimal_cost_plain`` updates every column (its
    oracle, ``tests/unit/test_deadline_replay.py``); both give the same result."""
    grid = _grid(world, start, work, deadline, overhead, ckpt_gb)
    if grid is None:
        return None
    np, g_s, W_s, u, G, gu, du = grid.np, grid.g_s, grid.W_s, grid.u, grid.G, grid.gu, grid.du
    Z, R, OD0, NO0, M, reg, E, held = grid.Z, grid.R, grid.OD0, grid.NO0, grid.M, grid.reg, grid.E, grid.held
    T, L, price, up, run_up, run_cost = grid.T, grid.L, grid.price, grid.up, grid.run_up, grid.run_cost
    inf = np.inf
    B, (F, H) = L + 1, grid.ring()
    best = (inf, 0.0, 0)
    ticks_od, groups = grid.ticks_od(), grid.groups()

    def done_below(k_end):
        # columns of a schedule finished by tick k_end: lost <= k_end * g - work
        return max(0, min(G, (k_end * g_s - W_s) // u + 1)) if k_end * g_s >= W_s else 0

    def finish(k_end, lo, c, h):
        # c, h: columns lo.. of tick k_end; the finished ones (below done_below) are taken out
        nonlocal best
        n = min(done_below(k_end) - lo, len(c))
        if n > 0:
            i = int(np.argmin(c[:n]))
            if c[i] < best[0]:
                best = (float(c[i]), float(h[i]), k_end)
            c[:n] = inf

    for k in range(T):
        Fk, Hk = F[k % B], H[k % B]
        # live columns: at most the time elapsed lost, and not yet finished
        lo, hi = done_below(k), min(G, k * gu + 1)
        if lo < hi and np.isfinite(Fk[:, lo:hi]).any():
            # preempted spot holders hold nothing at k (the checkpoint stays in their region)
            for m in range(1, Z + 1):
                if not up[m, k]:
                    _relax_fast(Fk[NO0 + reg[m], lo:hi], Hk[NO0 + reg[m], lo:hi], Fk[m, lo:hi], Hk[m, lo:hi])
                    Fk[m, lo:hi] = inf
            n1 = (k + 1) % B
            # keep holding m for tick k
            for m in held:
                row = Fk[m, lo:hi]
                if np.isfinite(row).any():
                    c, h = row + price[m, k], Hk[m, lo:hi] + ticks_od[m]
                    finish(k + 1, lo, c, h)
                    _relax_fast(F[n1, m, lo:hi], H[n1, m, lo:hi], c, h)
            # from whatever is held (or nothing), by the region the checkpoint is in: release
            # it and wait a tick (lose g), or start m at k (lose d, hold m for L ticks)
            srcs = []
            cols = np.arange(hi - lo)
            for r, members in zip(range(-1, R), groups):
                sub = Fk[members, lo:hi]
                arg = sub.argmin(axis=0)
                c, h = sub[arg, cols], Hk[members, lo:hi][arg, cols]
                if not np.isfinite(c).any():
                    continue
                srcs.append((r, c, h))
                if lo + gu < G:
                    dst = 0 if r < 0 else NO0 + r
                    n = min(hi, G - gu) - lo
                    _relax_fast(F[n1, dst, lo + gu:lo + gu + n], H[n1, dst, lo + gu:lo + gu + n], c[:n], h[:n])
            if lo + du < G and srcs:
                nL = (k + L) % B
                n = min(hi, G - du) - lo
                for j in range(R):
                    # the cheapest way to hold nothing now with the checkpoint then moved to j
                    bc, bh = np.full(n, inf), np.zeros(n)
                    for r, c, h in srcs:
                        _relax_fast(bc, bh, c[:n] + (E[r, j] if r >= 0 else 0.0), h[:n])
                    if not np.isfinite(bc).any():
                        continue
                    for m in held:
                        if reg[m] == j and run_up[m, k]:
                            c, h = bc + run_cost[m, k], bh + ticks_od[m] * L
                            finish(k + L, lo + du, c, h)
                            _relax_fast(F[nL, m, lo + du:lo + du + n], H[nL, m, lo + du:lo + du + n], c, h)
        Fk[:] = inf
        Hk[:] = 0.0
    if not math.isfinite(best[0]):
        return None
    cost, ticks, _ = best
    od_ticks, spot_ticks = divmod(int(round(ticks)), 100000)
    return float(cost), od_ticks * world.gap_h, spot_ticks * world.gap_h


def optimal_cost_plain(world: World, start: int, work: float, deadline: float, overhead: float,
                 ckpt_gb: float = 0.0):
    """``optimal_cost`` updating every column of every state each tick: its oracle."""
    grid = _grid(world, start, work, deadline, overhead, ckpt_gb)
    if grid is None:
        return None
    np, g_s, W_s, u, G, gu, du = grid.np, grid.g_s, grid.W_s, grid.u, grid.G, grid.gu, grid.du
    Z, R, OD0, NO0, M, reg, E, held = grid.Z, grid.R, grid.OD0, grid.NO0, grid.M, grid.reg, grid.E, grid.held
    T, L, price, up, run_up, run_cost = grid.T, grid.L, grid.price, grid.up, grid.run_up, grid.run_cost
    inf = np.inf
    B, (F, H) = L + 1, grid.ring()
    best = (inf, 0.0, 0)
    w_idx = np.arange(G) * u
    ticks_od, groups = grid.ticks_od(), grid.groups()
    cols = np.arange(G)

    def finish(k_end, c, h):
        # progress = elapsed - lost: finished when k_end * g - lost >= work
        nonlocal best
        fin = ((k_end * g_s - w_idx) >= W_s) & np.isfinite(c)
        if fin.any():
            i = int(np.argmin(np.where(fin, c, inf)))
            if c[i] < best[0]:
                best = (float(c[i]), float(h[i]), k_end)
            c = np.where(fin, inf, c)
        return c

    for k in range(T):
        Fk, Hk = F[k % B], H[k % B]
        if np.isfinite(Fk).any():
            # preempted spot holders hold nothing at k (the checkpoint stays in their region)
            for m in range(1, Z + 1):
                if not up[m, k]:
                    _relax(Fk[NO0 + reg[m]], Hk[NO0 + reg[m]], Fk[m], Hk[m])
                    Fk[m] = inf
            n1 = (k + 1) % B
            # keep holding m for tick k
            for m in held:
                if np.isfinite(Fk[m]).any():
                    _relax(F[n1, m], H[n1, m], finish(k + 1, Fk[m] + price[m, k], Hk[m] + ticks_od[m]),
                           Hk[m] + ticks_od[m])
            # from whatever is held (or nothing), by the region the checkpoint is in: release
            # it and wait a tick (lose g), or start m at k (lose d, hold m for L ticks)
            srcs = []
            for r, members in zip(range(-1, R), groups):
                sub = Fk[members]
                arg = sub.argmin(axis=0)
                c, h = sub[arg, cols], Hk[members][arg, cols]
                if not np.isfinite(c).any():
                    continue
                srcs.append((r, c, h))
                if gu < G:
                    wc, wh = np.full(G, inf), np.zeros(G)
                    wc[gu:], wh[gu:] = c[:G - gu], h[:G - gu]
                    dst = 0 if r < 0 else NO0 + r
                    _relax(F[n1, dst], H[n1, dst], wc, wh)
            if du < G and srcs:
                nL = (k + L) % B
                for j in range(R):
                    # the cheapest way to hold nothing now with the checkpoint then moved to j
                    bc, bh = np.full(G, inf), np.zeros(G)
                    for r, c, h in srcs:
                        _relax(bc, bh, c + (E[r, j] if r >= 0 else 0.0), h)
                    sh_c, sh_h = np.full(G, inf), np.zeros(G)
                    sh_c[du:], sh_h[du:] = bc[:G - du], bh[:G - du]
                    if not np.isfinite(sh_c).any():
                        continue
                    for m in held:
                        if reg[m] == j and run_up[m, k]:
                            h = sh_h + ticks_od[m] * L
                            _relax(F[nL, m], H[nL, m], finish(k + L, sh_c + run_cost[m, k], h), h)
        Fk[:] = inf
        Hk[:] = 0.0
    if not math.isfinite(best[0]):
        return None
    cost, ticks, _ = best
    od_ticks, spot_ticks = divmod(int(round(ticks)), 100000)
    return float(cost), od_ticks * world.gap_h, spot_ticks * world.gap_h


def _relax(F, H, c, h):
    better = c < F
    if better.any():
        F[better] = c[better]
        H[better] = h[better]


def _relax_fast(F, H, c, h):
    """``_relax`` in place, without indexing by a mask."""
    import numpy as np
    better = c < F
    np.copyto(F, c, where=better)
    np.copyto(H, h, where=better)


def skynomad(world: World, config: str = "auto") -> SkyNomad:
    """SkyNomad's own policy (``bench/deadline_skynomad.py``) as its artifact runs it on this kind
    of set: ``v100``, the arm and settings of its V100 panel (Figure 9b:
    ``unified_cost_model_rate_ratio --max-prediction-hours 1e9 --virtual-availability``);
    ``h100``, those of its H100 panel (Figure 9a: ``unified_cost_model_risk``, the reference-cost
    progress value, default settings); ``auto``: ``v100`` on AWS zone names, else ``h100``."""
    if config == "auto":
        aws = all(re.match(r"^[a-z]+-[a-z]+-\d+[a-z]$", n) for n in world.names)
        config = "v100" if aws else "h100"
    if config == "v100":
        return SkyNomad(egress_usd_per_gb, max_prediction_h=1e9, virtual=True)
    if config == "h100":
        return SkyNomad(egress_usd_per_gb, value="reference")
    raise ReplayError(f"--skynomad-config: v100, h100 or auto, not {config!r}")


class Optimal(Policy):
    """Not a policy that acts: rows come from ``optimal_cost``."""
    name = "optimal"


# ---- the benchmark --------------------------------------------------------------------------

def _p90(xs):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(math.ceil(0.9 * len(xs))) - 1)] if xs else float("nan")


def run_grid(runs, work, deadlines, overheads, policies, multi, optimal=False, ckpt_gb=0.0, transfer_gbps=0.0):
    """``runs``: list of (World, start). Yields one row per (policy, deadline, overhead)."""
    for D in deadlines:
        for d in overheads:
            for pol in policies:
                costs, misses, odh, sph, eg, mv = [], 0, 0.0, 0.0, 0.0, 0
                for world, start in runs:
                    base = work * min(world.od)
                    r = simulate(pol, world, start, work, D, d, ckpt_gb, transfer_gbps)
                    costs.append(r.cost / base)
                    misses += r.finish > D + 1e-7
                    odh += r.od_h
                    sph += r.spot_h
                    eg += r.egress
                    mv += r.moves
                yield _row(pol.name, D, d, costs, misses, odh, sph, eg, mv)
            if optimal:
                costs, odh, sph = [], 0.0, 0.0
                for world, start in runs:
                    res = optimal_cost(world, start, work, D, d, ckpt_gb)
                    if res is None:
                        continue
                    c, o, s = res
                    costs.append(c / (work * min(world.od)))
                    odh += o
                    sph += s
                yield _row("optimal", D, d, costs, len(runs) - len(costs), odh, sph, None, None)


def _row(name, D, d, costs, misses, odh, sph, egress=0.0, moves=0):
    n = len(costs)
    return {"policy": name, "deadline_h": D, "overhead_h": d, "runs": n,
            "mean_cost": round(statistics.fmean(costs), 5) if costs else None,
            "p90_cost": round(_p90(costs), 5) if costs else None,
            "misses": misses, "od_hours": round(odh / n, 3) if n else None,
            "spot_hours": round(sph / n, 3) if n and sph == sph else None,
            "egress_usd": round(egress / n, 4) if n and egress is not None else None,
            "region_moves": round(moves / n, 3) if n and moves is not None else None}


def parse_windows(path: Path, multi: bool):
    doc = json.loads(path.read_text())
    if not isinstance(doc, list):
        raise ReplayError(f"{path}: expected a JSON list of windows")
    for i, w in enumerate(doc):
        if not isinstance(w, dict) or not isinstance(w.get("start"), int) or (not multi and "env" not in w):
            want = '{"start": TICK}' if multi else '{"env": "<zone>_<instance>_<n>", "start": TICK}'
            raise ReplayError(f"{path}: window {i} is not {want}")
    return doc


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--traces", required=True, type=Path)
    ap.add_argument("--windows", required=True, type=Path)
    ap.add_argument("--multi-region", action="store_true")
    ap.add_argument("--work", type=float, default=48.0)
    ap.add_argument("--deadlines", default="52,60,70")
    ap.add_argument("--overheads", default="0.02,0.05,0.1,0.2")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--policies", default=None, help="comma list (default: all of the mode's)")
    ap.add_argument("--ckpt-gb", type=float, default=50.0,
                    help="checkpoint size moved by a start in another region, GB (0: no egress)")
    ap.add_argument("--skynomad-config", choices=["auto", "v100", "h100"], default="auto",
                    help="SkyNomad's arm and settings: v100 = its V100 panel's (rate-ratio progress "
                         "value, no cap on the lifetime estimate, virtual availability), h100 = its "
                         "H100 panel's (reference-cost progress value, defaults: 2 h cap); auto: v100 "
                         "on AWS zone names, else h100")
    ap.add_argument("--transfer-gbps", type=float, default=0.0,
                    help="add the checkpoint's transfer time to a cross-region start at this rate, "
                         "Gbit/s (0: off)")
    a = ap.parse_args(argv)
    if a.ckpt_gb < 0:
        raise ReplayError(f"--ckpt-gb must be >= 0, not {a.ckpt_gb}")
    if a.transfer_gbps < 0:
        raise ReplayError(f"--transfer-gbps must be >= 0, not {a.transfer_gbps}")
    deadlines = [float(x) for x in a.deadlines.split(",")]
    overheads = [float(x) for x in a.overheads.split(",")]
    wins = parse_windows(a.windows, a.multi_region)
    if a.multi_region:
        world = load_multi(a.traces)
        runs = [(world, w["start"]) for w in wins]
        pols = [OnDemand(), Greedy(), UniformProgress(), UniformProgressEager(),
                skynomad(world, a.skynomad_config), Launcher(multi=True)]
        names = ["od", "greedy", "up", "up_eager", "skynomad", "optimal", "launcher"]
    else:
        worlds = load_single(a.traces)
        missing = sorted({w["env"] for w in wins} - set(worlds))
        if missing:
            raise ReplayError(f"{a.traces}: no trace for env {', '.join(missing)}")
        runs = [(worlds[w["env"]], w["start"]) for w in wins]
        pols = [OnDemand(), Greedy(), UniformProgress(), Launcher()]
        names = ["od", "greedy", "up", "launcher"]
    if a.policies:
        want = a.policies.split(",")
        pols = [p for p in pols if p.name in want]
        names = [n for n in names if n in want]
    if "optimal" in names and a.transfer_gbps > 0:
        raise ReplayError("--transfer-gbps: the optimum does not model the transfer's time; leave "
                          "optimal out of --policies")
    t0, c0 = time.perf_counter(), time.process_time()
    rows = list(run_grid(runs, a.work, deadlines, overheads, pols, a.multi_region,
                         optimal="optimal" in names, ckpt_gb=a.ckpt_gb, transfer_gbps=a.transfer_gbps))
    took, cpu = time.perf_counter() - t0, time.process_time() - c0
    for row in rows:
        if a.json:
            print(json.dumps(row))
    if not a.json:
        print(f"{'policy':10} {'D':>5} {'d':>5} {'runs':>5} {'mean':>8} {'p90':>8} {'miss':>5} "
              f"{'od_h':>7} {'spot_h':>7}")
        for r in rows:
            print(f"{r['policy']:10} {r['deadline_h']:5g} {r['overhead_h']:5g} {r['runs']:5d} "
                  f"{r['mean_cost']:8.4f} {r['p90_cost']:8.4f} {r['misses']:5d} "
                  f"{r['od_hours']:7.2f} {r['spot_hours'] if r['spot_hours'] is not None else float('nan'):7.2f}")
    print(f"replayed {sum(r['runs'] for r in rows)} runs in {took:.2f} s ({cpu:.2f} s of CPU)", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
