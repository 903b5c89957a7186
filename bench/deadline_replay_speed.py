"""How fast ``bench/deadline_replay.py`` replays runs: every policy over the same windows and
grid, and the launcher's policy twice, side by side in one process: with its offers built and
sorted once per (world epoch, checkpoint's region) and reused (what the replay does) and
``--plain``-ly, built anew every tick (the oracle). Their results must be identical; it says so.
With ``--optimum N`` (multi-region), also the offline optimum over the first N windows, the whole
grid: ``optimal_cost`` (live columns only) against ``optimal_cost_plain`` (every column).

    python bench/deadline_replay_speed.py --traces DIR --windows FILE.json [--multi-region]
           [--count 10] [--rounds 2] [--ckpt-gb 50] [--optimum 2]

Prints per policy the runs, the seconds per 1,000 runs (wall and CPU, the best of ``--rounds``
rounds, the two launcher versions interleaved) and the load average; never passes or fails
on a time (target: 1,000 multi-region runs in under 10 s).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import deadline_replay as rp  # noqa: E402

DEADLINES, OVERHEADS, WORK = (52, 60, 70), (0.02, 0.05, 0.1, 0.2), 48.0


def replay(make, runs, gb):
    """(wall s, CPU s, outcomes) of one policy over every run and variant of the grid."""
    pol = make()
    out = []
    t0, c0 = time.perf_counter(), time.process_time()
    for D in DEADLINES:
        for d in OVERHEADS:
            for world, start in runs:
                r = rp.simulate(pol, world, start, WORK, D, d, gb)
                out.append((r.cost, r.finish, r.od_h, r.spot_h, r.egress, r.moves))
    return time.perf_counter() - t0, time.process_time() - c0, out


def optimum(runs, gb) -> bool:
    """Time optimal_cost and optimal_cost_plain over RUNS and the grid, variant by variant in
    turn; print the CPU seconds of each and whether every result is the same."""
    cpu = {"optimal_cost": 0.0, "optimal_cost_plain": 0.0}
    same = True
    for D in DEADLINES:
        for d in OVERHEADS:
            for world, start in runs:
                got = []
                for name, fn in (("optimal_cost", rp.optimal_cost), ("optimal_cost_plain", rp.optimal_cost_plain)):
                    c0 = time.process_time()
                    got.append(fn(world, start, WORK, D, d, gb))
                    cpu[name] += time.process_time() - c0
                same = same and got[0] == got[1]
    n = len(runs) * len(DEADLINES) * len(OVERHEADS)
    print(f"optimum, {n} runs: optimal_cost {cpu['optimal_cost']:.1f} s CPU, optimal_cost_plain "
          f"{cpu['optimal_cost_plain']:.1f} s CPU; {'identical results' if same else 'RESULTS DIFFER'}; "
          f"load average {os.getloadavg()[0]:.2f}")
    return same


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--traces", required=True, type=Path)
    ap.add_argument("--windows", required=True, type=Path)
    ap.add_argument("--multi-region", action="store_true")
    ap.add_argument("--count", type=int, default=10, help="windows used (the first COUNT)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--ckpt-gb", type=float, default=50.0)
    ap.add_argument("--optimum", type=int, default=0, help="also time the optimum over this many windows")
    a = ap.parse_args(argv)
    wins = rp.parse_windows(a.windows, a.multi_region)[:a.count]
    if a.multi_region:
        world = rp.load_multi(a.traces)
        runs = [(world, w["start"]) for w in wins]
        others = [rp.OnDemand, rp.Greedy, rp.UniformProgress, rp.UniformProgressEager]
        multi = True
    else:
        worlds = rp.load_single(a.traces)
        runs = [(worlds[w["env"]], w["start"]) for w in wins]
        others = [rp.OnDemand, rp.Greedy, rp.UniformProgress]
        multi = False
    for w, _ in runs:
        w.epoch(0)   # each world's epochs (made once), before any clock starts
    cases = [(p.name, p) for p in others] + [
        ("launcher", lambda: rp.Launcher(multi=multi)),
        ("launcher --plain", lambda: rp.Launcher(multi=multi, plain=True))]
    best, outcomes = {}, {}
    for _ in range(a.rounds):
        for name, make in cases:
            wall, cpu, out = replay(make, runs, a.ckpt_gb)
            w0, c0 = best.get(name, (float("inf"), float("inf")))
            best[name] = (min(w0, wall), min(c0, cpu))
            outcomes[name] = out
    n = len(runs) * len(DEADLINES) * len(OVERHEADS)
    print(f"{n} runs per policy ({len(runs)} windows x {len(DEADLINES) * len(OVERHEADS)} variants), "
          f"ckpt {a.ckpt_gb:g} GB, best of {a.rounds}; load average {os.getloadavg()[0]:.2f} "
          f"on {os.cpu_count()} CPUs")
    print(f"{'policy':18} {'s/1000 wall':>12} {'s/1000 CPU':>11}")
    for name, _ in cases:
        wall, cpu = best[name]
        print(f"{name:18} {wall / n * 1000:12.2f} {cpu / n * 1000:11.2f}")
    same = outcomes["launcher"] == outcomes["launcher --plain"]
    print(f"launcher and launcher --plain: {'identical results' if same else 'RESULTS DIFFER'}")
    if a.optimum and a.multi_region:
        same = optimum(runs[:a.optimum], a.ckpt_gb) and same
    print(json.dumps({k: {"wall_s_per_1000": round(v[0] / n * 1000, 3), "cpu_s_per_1000": round(v[1] / n * 1000, 3)}
                      for k, v in best.items()}))
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
