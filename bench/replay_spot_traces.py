"""Placement policies replayed over real spot availability traces (skypilot-org/spot-traces).

    git clone https://github.com/skypilot-org/spot-traces ~/spot-traces   # not shipped: no licence
    .venv/bin/python bench/replay_spot_traces.py --traces ~/spot-traces [--work 24] [--step 6]

(``--traces`` defaults to ``$LAUNCHER_SPOT_TRACES``.) The world is ``bench/trace_world.py``: a
zone can be had while its trace counts an instance, a running job is preempted when the count
drops to 0, flat AWS prices. The replay loop and the policies are ``bench/simulate_policy.py``'s:

* ``launcher``: the real planner (``launcher.plan.rank``) over the zones at the product's own
  AWS spot prior (``launcher.plan.rates``, 0.05/h), every ended attempt recorded through
  ``launcher.plan.observed`` (``observation_of`` + ``record``, what ``launcher watch`` does)
  and read back with ``load`` + ``apply_observations``; a refused launch is a ``no_capacity``
  row; the region that preempted the job cools down 30 min (``recovery.placement_cooldown``).
* ``launcher, placement_cooldown 0``: the same without the cool-down; ``launcher, told of every
  refusal``: also records each zone that refused inside a launch that went on to the next
  candidate (SkyPilot does not report those today: this row prices that information).
* ``EAGER_NEXT_REGION``: SkyPilot's default managed-job recovery
  (sky/jobs/recovery_strategy.py ``EagerFailoverStrategyExecutor``): cheapest first; after a
  preemption, relaunch with the region it ran in blocked, and when nothing else launches,
  again with nothing blocked (one walk: the other regions, then that one). Spot only, as
  SkyPilot never falls back to on-demand by itself (only an ``any_of`` that lists it).
* ``cheapest-first (same zone)``: SkyPilot's FAILOVER.
* ``clairvoyant``: a bound nobody can run: at each launch it knows how long every zone will
  stay up and takes the cheapest that lasts (the longest-lasting when none outlasts the job).

Each policy runs the same job from every start time (``--step`` hours apart across the
traces), with an empty state store each time. Prices are equal across zones (the traces have
none), so "cheapest" is the trace set's zone order, us-east-1 first, as SkyPilot's catalog
sorts regions. Windows overlap, so the standard errors are batch means over blocks of
``--block`` consecutive windows. Calm windows: EAGER_NEXT_REGION saw at most one preemption.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from launcher.plan.rates import preemption_rate  # noqa: E402
from simulate_policy import (BASELINE, CheapestFirst, EagerNextRegion, Launcher,  # noqa: E402
                             OnDemandOnly, Policy, offers_at, run)
from spot_traces import default_root, find_sets, load_set  # noqa: E402
from trace_world import build  # noqa: E402

CLAIRVOYANT = "clairvoyant (knows when zones drop)"


class TraceLauncher(Launcher):
    """The launcher with the product's own prior for the offer's cloud (not the synthetic 0.1/h)."""

    def candidates(self, tr, offers, t):
        from launcher.plan import apply_observations
        from launcher.plan.observed import load
        from simulate_policy import EPOCH

        return apply_observations(offers_at(tr, offers, t, lambda i, o: preemption_rate(o.cloud, o.spot)),
                                  load(self.store, EPOCH + t * 3600))


class Clairvoyant(Policy):
    """Knows every zone's future: the cheapest zone that stays up for the rest of the job, else
    the one that stays up longest; it waits rather than launch where the capacity ends before one
    checkpoint is committed (waiting is free). A reference, not an optimum; it checkpoints like
    everyone else."""

    name = CLAIRVOYANT

    def choose(self, tr, offers, t, remaining, last, preempted):
        need = t + tr.D + remaining * (1 + tr.C / self.tau) + 1e-6
        useful = t + tr.D + min(self.tau, remaining) + tr.C
        up = {k: tr.next_event(k, t) for k in range(len(offers)) if tr.has_capacity(k, t)}
        ok = [k for k, u in up.items() if u >= useful]
        return sorted(ok, key=lambda k: (up[k] < need, tr.price_at(k, t), -up[k], k)), self.tau


def policies(nodes: int, on_demand: bool) -> list[Policy]:
    out = [TraceLauncher(nodes), TraceLauncher(nodes, cooldown_hours=0.0, name="launcher, placement_cooldown 0"),
           TraceLauncher(nodes, name="launcher, told of every refusal", every_refusal=True),
           EagerNextRegion(), CheapestFirst(), Clairvoyant()]
    return out + ([OnDemandOnly()] if on_demand else [])


def replay(world, pols, work: float, interval: float, step: float, days=(0.0, math.inf)) -> dict:
    """{policy name: [result per window]}, windows starting every STEP hours within DAYS (from,
    to); windows where any policy ran out of trace are dropped."""
    for p in pols:
        p.tau = interval
        if isinstance(p, Launcher):
            p._spec = None
    out = {p.name: [] for p in pols}
    t0 = days[0] * 24
    while t0 + work < world.horizon and t0 < days[1] * 24:
        rs = {}
        for p in pols:
            p.reset()
            rs[p.name] = run(p, world, world.offers, work, world.nodes, t0)
        if all(math.isfinite(r["cost"]) for r in rs.values()):
            for k, r in rs.items():
                out[k].append({**r, "t0": t0})
        t0 += step
    for p in pols:
        if isinstance(p, Launcher):
            p.close()
    return out


def stream(world, pols, work: float, interval: float) -> dict:
    """{policy name: [result per job]}: jobs back to back from hour 0 until the traces end, each
    policy keeping what it learned (the launcher: one state store, as ``launcher watch`` keeps;
    SkyPilot keeps nothing between managed jobs)."""
    out = {}
    for p in pols:
        p.tau = interval
        if isinstance(p, Launcher):
            p._spec = None
        p.reset()
        t, jobs = 0.0, []
        while True:
            r = run(p, world, world.offers, work, world.nodes, t)
            if not math.isfinite(r["cost"]):
                break
            jobs.append(r)
            t = r["end"]
        out[p.name] = jobs
        if isinstance(p, Launcher):
            p.close()
    return out


def stream_table(res: dict, label: str, block: int) -> list[str]:
    bm = statistics.mean(r["cost"] for r in res[BASELINE])
    lines = [f"\n{label}, jobs back to back (one memory): $ per job", f"{'policy':<36} {'jobs':>5} {'mean $':>8} "
             f"{'s.e.':>6} {'vs EAGER':>9} {'restarts':>8}"]
    for name, rs in res.items():
        cost = [r["cost"] for r in rs]
        lines.append(f"{name:<36} {len(rs):>5} {statistics.mean(cost):>8.2f} {batch_se(cost, block):>6.2f} "
                     f"{100 * (1 - statistics.mean(cost) / bm):>+8.1f}% "
                     f"{statistics.mean(r['restarts'] for r in rs):>8.2f}")
    return lines


def floor_cost(world, work: float, interval: float) -> float:
    """What the job costs on the cheapest spot offer with no preemption at all: one start, checkpoints."""
    return world.nodes * min(o.base for o in world.offers if o.spot) * (work * (1 + world.C / interval) + world.D)


def batch_se(xs: list[float], block: int) -> float:
    """Standard error of the mean from means of consecutive blocks (neighbours are correlated)."""
    means = [statistics.mean(xs[i:i + block]) for i in range(0, len(xs) - block + 1, block)]
    return statistics.stdev(means) / math.sqrt(len(means)) if len(means) > 1 else float("nan")


def table(res: dict, idx: list[int], title: str, block: int) -> list[str]:
    base = [res[BASELINE][k]["cost"] for k in idx]
    lines = [f"\n{title}: {len(idx)} windows", f"{'policy':<36} {'mean $':>8} {'s.e.':>6} {'vs EAGER':>9} "
             f"{'s.e.':>6} {'restarts':>8} {'wall h':>7}"]
    if not idx:
        return lines
    bm = statistics.mean(base)
    for name, rs in res.items():
        cost = [rs[k]["cost"] for k in idx]
        save = [100 * (1 - c / b) for c, b in zip(cost, base)]
        lines.append(f"{name:<36} {statistics.mean(cost):>8.2f} {batch_se(cost, block):>6.2f} "
                     f"{100 * (1 - statistics.mean(cost) / bm):>+8.1f}% {batch_se(save, block):>5.1f}% "
                     f"{statistics.mean(rs[k]['restarts'] for k in idx):>8.2f} "
                     f"{statistics.mean(rs[k]['hours'] for k in idx):>7.1f}")
    return lines


def report(res: dict, label: str, block: int) -> list[str]:
    n = len(res[BASELINE])
    calm = [k for k in range(n) if res[BASELINE][k]["restarts"] <= 1]
    heavy = [k for k in range(n) if res[BASELINE][k]["restarts"] > 1]
    return (table(res, list(range(n)), f"{label}, every window", block)
            + table(res, heavy, f"{label}, heavy (EAGER preempted 2+ times)", block)
            + table(res, calm, f"{label}, calm (EAGER preempted at most once)", block))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--traces", default=default_root(), help="a spot-traces checkout or one set directory")
    ap.add_argument("--sets", default="aws-02-15-2023,aws-10-26-2022", help="set directory names, comma-separated")
    ap.add_argument("--instance", default="v100_1")
    ap.add_argument("--nodes", type=int, default=1, help="gang size (the 16-node set counts up to 16 a zone)")
    ap.add_argument("--work", type=float, default=24.0, help="hours of work the job needs")
    ap.add_argument("--interval", type=float, default=30.0, help="checkpoint every this many minutes of work")
    ap.add_argument("--checkpoint-cost", type=float, default=1.0, help="minutes a checkpoint takes")
    ap.add_argument("--restart", type=float, default=6.0, help="minutes to provision and restore, billed")
    ap.add_argument("--refused", type=float, default=2.0, help="minutes a refused launch takes")
    ap.add_argument("--step", type=float, default=6.0, help="hours between window starts")
    ap.add_argument("--block", type=int, default=8, help="windows per batch for the standard errors")
    ap.add_argument("--days", default="0:", help="FROM:TO, windows starting in these days of each set "
                    "(e.g. 0:22 to tune on, 22: to report on)")
    ap.add_argument("--stream", action="store_true", help="also run jobs back to back, one memory per policy")
    ap.add_argument("--on-demand", action="store_true", help="offer on-demand in every region too")
    args = ap.parse_args()
    if not args.traces:
        sys.exit("no traces: pass --traces DIR or set $LAUNCHER_SPOT_TRACES (a skypilot-org/spot-traces checkout)")
    wanted = set(args.sets.split(",")) if args.sets else None
    dirs = [d for d in find_sets(args.traces) if wanted is None or d.name in wanted or "all" in wanted]
    if not dirs:
        sys.exit(f"{args.traces}: none of the sets {args.sets} found")
    print(f"job: {args.nodes} x {args.instance}, windows starting in days {args.days}, {args.work:g} h of work, checkpoint {args.checkpoint_cost:g} min every "
          f"{args.interval:g} min, restart {args.restart:g} min, refused launch {args.refused:g} min; "
          f"a window every {args.step:g} h")
    lines = []
    for d in dirs:
        ts = load_set(d)
        zones = ts.of(args.instance)
        if not zones:
            print(f"{d}: no {args.instance} traces (has {', '.join(ts.instances())}); skipped")
            continue
        w = build(zones, args.nodes, args.checkpoint_cost / 60, args.restart / 60, args.refused / 60, args.on_demand)
        lo, _, hi = args.days.partition(":")
        res = replay(w, policies(args.nodes, args.on_demand), args.work, args.interval / 60, args.step,
                     (float(lo or 0), float(hi or math.inf)))
        label = f"{ts.name} {args.instance} ({len(zones)} zones, {w.horizon / 24:.0f} days)"
        lines += report(res, label, args.block)
        lines.append(f"never preempted, on the cheapest zone: ${floor_cost(w, args.work, args.interval / 60):.2f}")
        if args.stream:
            lines += stream_table(stream(w, policies(args.nodes, args.on_demand), args.work, args.interval / 60), label,
                                  max(args.block // 2, 2))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
