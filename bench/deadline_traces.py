"""Get and lay out the traces ``bench/deadline_replay.py`` replays, and make window files.

Neither trace set is shipped with the launcher.

* **Single region**: ``skypilot-org/spot-traces`` (the data of "Can't Be Late", NSDI '24; no
  licence, so never copied here). The issue's set is the AWS 2022 two-week one::

      git clone https://github.com/skypilot-org/spot-traces ~/spot-traces
      --traces ~/spot-traces/availability/1-node/aws-10-26-2022     # us-west-2a/2b x k80/v100 x 1/8

* **Multi-region with prices**: ``andylizf/skynomad-artifact`` (Apache-2.0)::

      git clone https://github.com/andylizf/skynomad-artifact ~/skynomad
      # H100, 13 GCP zones, 600 s ticks, per-zone prices: ships converted, as a tarball
      tar -xzf ~/skynomad/data/converted_multi_region_aligned_h100_16_merged.tar.gz -C ~/traces
      --traces ~/traces/converted_multi_region_aligned_h100_16_merged
      # V100, 9 AWS zones, 195 s ticks: built from its CSVs and price series. The artifact's own
      # artifact/prepare_data.sh does it (needs pandas); this file does the same without:
      python bench/deadline_traces.py v100 ~/skynomad ~/traces/converted_multi_region_aligned
      --traces ~/traces/converted_multi_region_aligned

  ``v100`` writes only each zone's ``full.json`` (the replay takes windows from it), with the
  artifact's ``create_aligned_traces.py`` conventions: the zones' common time span, ``data``
  inverted to 1 = preempted, ``prices`` the zone's series from ``data/v100_spot_prices.json``,
  ``metadata.price_info`` with on-demand $3.06/h.

Synthetic: ``python bench/deadline_traces.py synthetic OUT [--ticks N --seed N]`` writes a made-up
set in both layouts (``OUT/single/<zone>_v100_1.json`` and ``OUT/multi/<zone>_v100_1/full.json``):
per zone a two-state Markov chain of availability (its own mean up and down spells) and its
own spot price level with small steps. ``tests/fixtures/deadline_traces`` is one of these.

Windows: ``python bench/deadline_traces.py windows --traces DIR [--multi-region] --seed N
--count N --span-h 70 --out FILE.json`` draws random starts that leave ``--span-h`` hours of
trace; ``--split train|test`` keeps starts in the first or the second half of each trace (so
a policy can be tuned on one half and checked on the other).
"""

from __future__ import annotations

import argparse
import csv
import json
import random
import sys
from datetime import datetime
from pathlib import Path

V100_ON_DEMAND = 3.06
V100_SPOT_REF = 0.918


def _read_csv(path: Path):
    with path.open() as f:
        rows = [(datetime.fromisoformat(r["date"]), int(r["availability"])) for r in csv.DictReader(f)]
    return rows


def v100(artifact: Path, out: Path) -> list[Path]:
    src = artifact / "data" / "real" / "availability" / "2023-02-15" / "processed"
    prices = json.loads((artifact / "data" / "v100_spot_prices.json").read_text())
    frames = {p.stem: _read_csv(p) for p in sorted(src.glob("*.csv"))}
    if not frames:
        raise SystemExit(f"{src}: no CSVs (is {artifact} a skynomad-artifact checkout?)")
    start = max(rows[0][0] for rows in frames.values())
    end = min(rows[-1][0] for rows in frames.values())
    first = next(iter(frames.values()))
    gap = int((first[1][0] - first[0][0]).total_seconds())
    written = []
    for name, rows in frames.items():
        data = [0 if a else 1 for ts, a in rows if start <= ts <= end]
        doc = {"metadata": {"gap_seconds": gap, "start_time": start.isoformat(),
                            "price_info": {"zone": name.rsplit("_", 2)[0], "device": "v100_1",
                                           "instance_type": "p3.2xlarge",
                                           "on_demand_price": V100_ON_DEMAND, "price": V100_SPOT_REF}},
               "data": data}
        if name in prices:
            doc["prices"] = prices[name][:len(data)]
        d = out / name
        d.mkdir(parents=True, exist_ok=True)
        (d / "full.json").write_text(json.dumps(doc))
        written.append(d / "full.json")
    return written


# zone: (mean ticks up, mean ticks down, spot $/h level)
SYNTHETIC_ZONES = {"us-east-1a": (30, 6, 1.20), "us-east-2a": (12, 4, 0.95), "us-west-2a": (60, 20, 1.05)}


def synthetic(out: Path, ticks: int = 600, seed: int = 0, gap: int = 600) -> list[Path]:
    rng = random.Random(seed)
    written = []
    for zone, (mean_up, mean_down, level) in SYNTHETIC_ZONES.items():
        up, avail, prices, price = True, [], [], level
        for _ in range(ticks):
            avail.append(1 if up else 0)
            if rng.random() < 1 / (mean_up if up else mean_down):
                up = not up
            if rng.random() < 0.02:
                price = round(min(max(price * rng.choice([0.95, 1.05]), 0.9 * level), 1.4 * level), 4)
            prices.append(price)
        single = out / "single" / f"{zone}_v100_1.json"
        single.parent.mkdir(parents=True, exist_ok=True)
        single.write_text(json.dumps({"metadata": {"gap_seconds": gap}, "data": avail}) + "\n")
        multi = out / "multi" / f"{zone}_v100_1" / "full.json"
        multi.parent.mkdir(parents=True, exist_ok=True)
        multi.write_text(json.dumps({
            "metadata": {"gap_seconds": gap, "zone": zone,
                         "price_info": {"zone": zone, "on_demand_price": V100_ON_DEMAND, "price": level}},
            "data": [1 - a for a in avail], "prices": prices}) + "\n")
        written += [single, multi]
    return written


def _lengths(traces: Path, multi: bool) -> dict:
    """{env or "": (ticks, gap_seconds)}"""
    out = {}
    if multi:
        for f in sorted(traces.glob("*/full.json")):
            doc = json.loads(f.read_text())
            n, gap = len(doc["data"]), doc["metadata"]["gap_seconds"]
            out[""] = (min(n, out.get("", (n, gap))[0]), gap)
        return out
    for f in sorted(traces.rglob("*_*_*.json")):
        doc = json.loads(f.read_text())
        out[f.stem] = (len(doc["data"]), doc["metadata"]["gap_seconds"])
    return out


def windows(traces: Path, multi: bool, count: int, span_h: float, seed: int, split: str | None):
    rng = random.Random(seed)
    lens = _lengths(traces, multi)
    envs = sorted(lens)
    out = []
    for i in range(count):
        env = envs[i % len(envs)]
        n, gap = lens[env]
        last = n - int(span_h * 3600 / gap) - 1
        lo, hi = 0, last
        if split == "train":
            hi = min(last, n // 2 - int(span_h * 3600 / gap) - 1)
        elif split == "test":
            lo = n // 2
        if hi < lo:
            raise SystemExit(f"{traces} {env}: too short for {span_h} h windows in the {split} half")
        w = {"start": rng.randint(lo, hi)}
        if not multi:
            w = {"env": env, **w}
        out.append(w)
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description="lay out deadline-replay traces; make window files")
    sub = ap.add_subparsers(dest="cmd", required=True)
    v = sub.add_parser("v100", help="build the SkyNomad V100 9-zone full.json set from its artifact")
    v.add_argument("artifact", type=Path)
    v.add_argument("out", type=Path)
    y = sub.add_parser("synthetic", help="a made-up set in both layouts (Markov availability, prices)")
    y.add_argument("out", type=Path)
    y.add_argument("--ticks", type=int, default=600)
    y.add_argument("--seed", type=int, default=0)
    w = sub.add_parser("windows", help="random windows, optionally in the train or test half")
    w.add_argument("--traces", required=True, type=Path)
    w.add_argument("--multi-region", action="store_true")
    w.add_argument("--count", type=int, default=100)
    w.add_argument("--span-h", type=float, default=70.0)
    w.add_argument("--seed", type=int, default=0)
    w.add_argument("--split", choices=["train", "test"])
    w.add_argument("--out", type=Path)
    a = ap.parse_args(argv)
    if a.cmd == "v100":
        for p in v100(a.artifact, a.out):
            print(p)
        return 0
    if a.cmd == "synthetic":
        for p in synthetic(a.out, a.ticks, a.seed):
            print(p)
        return 0
    ws = windows(a.traces, a.multi_region, a.count, a.span_h, a.seed, a.split)
    text = json.dumps(ws)
    if a.out:
        a.out.write_text(text + "\n")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
