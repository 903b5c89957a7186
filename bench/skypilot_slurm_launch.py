"""How long real SkyPilot 0.14.1 takes to launch onto the project's Slurm test cluster through
its Slurm support (offline; tests/fixtures/skypilot_slurm.py), next to a raw sbatch of the
same one-line job, and how long SkyPilot takes to notice a killed allocation. Starts a
throw-away cluster, user, sshd and API server, and always removes them.

    .venv/bin/python bench/skypilot_slurm_launch.py [--runs 3]

Per launch (`sky launch -y -c NAME task.yaml`, a fresh SkyPilot cluster each time; the
first one also builds SkyPilot's wheel on the server and fills the nodes' uv cache):
  total      the CLI command, start to exit (job finished; includes ~2.5 s of CLI start-up)
  provision  SkyPilot's "Provisioning took" (sbatch of the holder job until nodes are up)
  runtime    setup_runtime_on_cluster (uv + Python 3.10 venv + SkyPilot wheel on the node)
  skylet     start_skylet_on_head_node
Then the cluster's allocation is scancel'ed and `sky status --refresh NAME` is timed until
SkyPilot no longer lists the cluster (what `launcher watch` relies on to see NODE_FAIL).
Baseline: `sbatch --wait` of the same command. Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.fixtures.skypilot_slurm import SkyPilotSlurmUnavailable, start_skypilot_slurm  # noqa: E402
from tests.fixtures.slurm import preflight, start_cluster, stop_cluster  # noqa: E402

TASK = """name: bench
resources:
  infra: {infra}
  cpus: 1+
  memory: 0.5+
run: echo ready on $(hostname)
"""


def _stage(log: str, name: str):
    t = re.findall(r"^\S (\d\d-\d\d \d\d:\d\d:\d\d\.\d+) .*-{5,}(Start|End): +" + name, log, re.M)
    if len(t) < 2:
        return None
    from datetime import datetime

    a, b = (datetime.strptime(x[0], "%m-%d %H:%M:%S.%f") for x in t[:2])
    return (b - a).total_seconds()


def sky_launch(sp, name: str, task: Path) -> dict:
    t0 = time.monotonic()
    p = sp.sky("launch", "-y", "-c", name, task, timeout=900)
    total = time.monotonic() - t0
    if p.returncode != 0:
        raise RuntimeError(f"sky launch {name} failed:\n{p.stdout[-2000:]}{p.stderr[-1000:]}")
    logs = sorted((sp.sky_home / "sky_logs").glob("sky-*/provision.log"), key=lambda f: f.stat().st_mtime)
    text = logs[-1].read_text(errors="replace") if logs else ""
    m = re.search(r"Provisioning '\S+' took ([\d.]+) seconds", text)
    return {"total": total, "provision": float(m.group(1)) if m else None,
            "runtime": _stage(text, "setup_runtime_on_cluster"), "skylet": _stage(text, "start_skylet_on_head_node")}


def notice_kill(sp, name: str) -> float:
    alloc = sp.allocation_of(name)
    if alloc is None:
        raise RuntimeError(f"no running allocation for {name}: {sp.allocations()}")
    t0 = time.monotonic()
    sp.cluster.run("scancel", alloc["id"])
    while True:
        p = sp.sky("status", "--refresh", name, timeout=300)
        if not re.search(rf"^{re.escape(name)}\s", p.stdout, re.M):
            return time.monotonic() - t0
        if time.monotonic() - t0 > 300:
            raise RuntimeError(f"SkyPilot still lists {name} 300 s after its allocation was cancelled")


def sbatch_wait(cluster) -> float:
    t0 = time.monotonic()
    cluster.run("sbatch", "--wait", "-o", "/dev/null", "--wrap", "echo ready on $(hostname)", timeout=300)
    return time.monotonic() - t0


def fmt(v) -> str:
    return "-" if v is None else f"{v:.1f}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args(argv)
    problem = preflight()
    if problem:
        print(f"cannot start the test cluster: {problem}", file=sys.stderr)
        return 2
    cluster = start_cluster(4)
    sp = None
    try:
        try:
            sp = start_skypilot_slurm(cluster)
        except SkyPilotSlurmUnavailable as e:
            print(f"SkyPilot cannot be set up: {e}", file=sys.stderr)
            return 2
        print("set up (s):", ", ".join(f"{k} {v}" for k, v in sp.timings.items()))
        task = sp.root / "bench.yaml"
        task.write_text(TASK.format(infra=sp.infra))
        rows = []
        for i in range(a.runs):
            name = f"bench{i}"
            row = sky_launch(sp, name, task)
            row["notice"] = notice_kill(sp, name)
            row["sbatch"] = sbatch_wait(cluster)
            rows.append(row)
            print(f"run {i}: " + "  ".join(f"{k} {fmt(v)}" for k, v in row.items()), flush=True)
        keys = ["total", "provision", "runtime", "skylet", "notice", "sbatch"]
        print(f"\n{'run':>5} " + " ".join(f"{k:>10}" for k in keys))
        for i, row in enumerate(rows):
            print(f"{('cold' if i == 0 else 'warm'):>5} " + " ".join(f"{fmt(row[k]):>10}" for k in keys))
        warm = rows[1:] or rows
        print(f"{'warm~':>5} " + " ".join(
            f"{fmt(statistics.median([r[k] for r in warm if r[k] is not None]) if any(r[k] is not None for r in warm) else None):>10}"
            for k in keys))
        print("\ntotal: `sky launch` CLI until the job finished; notice: scancel of the allocation until "
              "`sky status --refresh` drops the cluster; sbatch: `sbatch --wait` of the same command")
    finally:
        if sp is not None:
            for p in sp.stop():
                print(f"teardown: {p}", file=sys.stderr)
        stop_cluster(cluster)
    return 0


if __name__ == "__main__":
    sys.exit(main())
