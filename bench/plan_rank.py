"""How long rank() takes for 10,000 offers (target: under 50 ms), and catalog parsing.

    .venv/bin/python bench/plan_rank.py [--offers 10000] [--repeat 7]

Prints figures; never passes or fails on a time. Three cases:

* ``realistic``: rates come from the config's per-cloud defaults (a handful of distinct
  values), which is what ``launcher plan`` sees; the model's per-rate work is cached.
* ``distinct``: every offer has its own preemption rate (after spot chasing, say), with the
  model cache cleared before each run: the worst case for the model.
* ``notice``: like ``distinct``, and every offer's notice is long enough to be used, so
  each optimum is a numerical search rather than the closed form.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from launcher.plan import Offer, PlanParams, rank  # noqa: E402
from launcher.plan import ranking as rank_mod  # noqa: E402
from launcher_backends.skypilot.catalog import read_vms_csv  # noqa: E402
from launcher.backend.sections import parse_spec  # noqa: E402

CLOUDS = [("aws", 0.05, 120), ("gcp", 0.10, 30), ("runpod", 0.20, 5), ("lambda", None, 0), ("azure", 0.05, 30)]


def make_offers(n: int, mode: str, seed: int = 1) -> list[Offer]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        cloud, spot_rate, notice = CLOUDS[i % len(CLOUDS)]
        spot = spot_rate is not None and rng.random() < 0.6
        base = rng.uniform(20, 100)
        if mode == "realistic":
            rate = spot_rate if spot else 2e-4
        else:
            rate = rng.uniform(0.001, 1.0) if spot else rng.uniform(1e-5, 1e-3)
        out.append(Offer(
            backend="skypilot", target=f"{cloud}-{'spot' if spot else 'od'}", cloud=cloud,
            region=f"r{i % 37}", zone=f"z{i % 111}", instance_type=f"it{i % 53}",
            accelerator="H100" if i % 10 else "A100", accelerator_count=8 if i % 7 else 4,
            vcpus=192.0, memory_gib=2048.0, spot=spot, hourly_usd=base * (0.4 if spot else 1.0),
            preemption_rate=rate, notice_seconds=(notice if mode == "notice" else 0.0) if spot else 0.0))
    return out


def time_rank(spec, offers, params, repeat, clear_cache):
    times = []
    for _ in range(repeat):
        if clear_cache:
            rank_mod._estimate.cache_clear()
        t0 = time.perf_counter()
        res = rank(spec, offers, params)
        times.append((time.perf_counter() - t0) * 1000)
    return times, res


def bench_catalog(rows: int) -> tuple[float, int]:
    header = "InstanceType,vCPUs,MemoryGiB,AcceleratorName,AcceleratorCount,GpuInfo,Region,AvailabilityZone,Price,SpotPrice"
    rng = random.Random(2)
    lines = [header]
    zones = [(f"region{r}", f"region{r}-{z}") for r in range(30) for z in "abc"]
    for i in range(rows):
        region, zone = zones[i % len(zones)]
        if i % 10 == 0:
            lines.append(f",,,T4,{1 + i % 4},,{region},{zone},{rng.uniform(0.3, 1.4):.5f},{rng.uniform(0.1, 0.5):.5f}")
        else:
            c = 2 ** (1 + i % 6)
            lines.append(f"n1-standard-{c},{c}.0,{c * 3.75},,,,{region},{zone},{0.0475 * c:.5f},{0.01 * c:.5f}")
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "vms.csv"
        p.write_text("\n".join(lines) + "\n")
        t0 = time.perf_counter()
        parsed = read_vms_csv(p, "gcp")
        return (time.perf_counter() - t0) * 1000, len(parsed)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--offers", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    spec = parse_spec({"name": "bench", "run": "true", "cost": {"max_total_usd": 20000},
                       "resources": {"nodes": 2, "gpus_per_node": 8, "accelerator": "H100", "time_limit": "24h"}})
    params = PlanParams(emergency_checkpoint_hours=1 / 60)
    print(f"rank() of {args.offers} offers, {args.repeat} runs each (ms); python {sys.version.split()[0]}, "
          f"{os.cpu_count()} cpu(s)")
    print(f"{'case':<11} {'min':>8} {'median':>8} {'max':>8}  ranked/excluded")
    for mode, clear in (("realistic", False), ("distinct", True), ("notice", True)):
        offers = make_offers(args.offers, mode)
        if not clear:
            rank(spec, offers, params)  # warm: the first run fills the model cache
        times, res = time_rank(spec, offers, params, args.repeat, clear)
        print(f"{mode:<11} {min(times):8.1f} {statistics.median(times):8.1f} {max(times):8.1f}  "
              f"{len(res.ranked)}/{len(res.excluded)}")
    ms, n = bench_catalog(25_000)
    print(f"catalog: read_vms_csv of a 25,000-row GCP-layout vms.csv: {ms:.0f} ms ({n} offers after GPU/host pairing)")


if __name__ == "__main__":
    main()
