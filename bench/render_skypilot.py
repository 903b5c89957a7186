"""Benchmark: `launcher render` of a SkyPilot target vs. SkyPilot's own validation, both cold.

    .venv/bin/python bench/render_skypilot.py [--runs 5]

Each figure comes from a fresh process, the way a user meets it on a login node:
- `launcher render SPEC --target burst` (CLI subprocess): what the dry run costs;
- SkyPilot validating the same task: `import sky`, `sky.Task.from_yaml`, and an
  optimizer pass (`Optimizer.optimize`, what `sky launch --dryrun` does before it asks),
  against a synthetic catalog with AWS, Lambda and RunPod treated as enabled;
- `python -X importtime -m launcher.cli render ...`: whether SkyPilot was imported at all.

Prints figures only; never passes or fails on a time (the machines are noisy).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SPEC = """\
name: llm-pretrain
workdir: .
image: nvcr.io/nvidia/pytorch:24.01-py3
setup: pip install -r requirements.txt
run: [torchrun, --nnodes=2, --nproc-per-node=8, train.py]
env: {LOG_LEVEL: info}
resources: {nodes: 2, gpus_per_node: 8, accelerator: H100, cpus_per_node: 96, memory_per_node: 1000GB}
checkpoint: {root: s3://ml-ckpt-bucket/runs/llm}
"""
CONFIG = """\
targets:
  burst:
    backend: skypilot
    infra: aws
    use_spot: true
    mount_checkpoint_bucket: false
    fallbacks: [{infra: lambda}, {infra: runpod, use_spot: true}]
"""

SKY_VALIDATE = r"""
import json, sys, time
t0 = time.perf_counter()
import sky
from sky import check as sky_check, optimizer
from sky.utils import common
t1 = time.perf_counter()
task = sky.Task.from_yaml(sys.argv[1])
task.validate_name()
t2 = time.perf_counter()
enabled = [sky.AWS(), sky.Lambda(), sky.RunPod()]  # offline: pretend the catalog clouds are enabled
sky_check.get_cached_enabled_clouds_or_refresh = lambda *a, **k: enabled
sky_check.check_capability = lambda *a, **k: None
dag = sky.Dag()
dag.add(task)
optimizer.Optimizer.optimize(dag, minimize=common.OptimizeTarget.COST, quiet=True)
t3 = time.perf_counter()
best = task.best_resources
print(json.dumps({"import_s": t1 - t0, "from_yaml_s": t2 - t1, "optimize_s": t3 - t2,
                  "best": str(best), "best_hourly_usd": best.get_cost(3600) * task.num_nodes}))
"""


def timed(argv, env, cwd=ROOT):
    t = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=cwd, timeout=600)
    return time.perf_counter() - t, proc


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    from tests.fixtures.skypilot_catalog import write_catalog

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        (tmp / "train.yaml").write_text(SPEC)
        (tmp / "config.yaml").write_text(CONFIG)
        write_catalog(tmp)
        env = {**os.environ, "HOME": str(tmp), "LAUNCHER_CONFIG": str(tmp / "config.yaml"),
               "LAUNCHER_HOME": str(tmp / "state"), "SKYPILOT_DISABLE_USAGE_COLLECTION": "1",
               "SKYPILOT_DISABLE_LOCAL_API_SERVER": "1"}
        render = [sys.executable, "-m", "launcher.cli", "render", str(tmp / "train.yaml"), "--target", "burst"]

        render_s = []
        for _ in range(args.runs):
            dt, proc = timed(render, env)
            if proc.returncode != 0:
                print(proc.stderr, file=sys.stderr)
                return 1
            render_s.append(dt)
        task_path = tmp / "task.yaml"
        task_path.write_text(proc.stdout)

        _, imp = timed([sys.executable, "-X", "importtime", *render[1:]], env)
        mods = [ln.rsplit("|", 1)[-1].strip() for ln in imp.stderr.splitlines() if ln.startswith("import time:")]
        cumulative_us = sum(int(ln.split("|")[0].split(":")[1]) for ln in imp.stderr.splitlines()
                            if ln.startswith("import time:") and ln.split("|")[0].split(":")[1].strip().isdigit())
        sky_mods = [m for m in mods if m == "sky" or m.startswith("sky.")]

        sky_runs = []
        for _ in range(max(1, min(args.runs, 3))):
            dt, proc = timed([sys.executable, "-c", SKY_VALIDATE, str(task_path)], env)
            if proc.returncode != 0:
                print(proc.stderr[-3000:], file=sys.stderr)
                return 1
            sky_runs.append((dt, json.loads(proc.stdout.strip().splitlines()[-1])))

    med = statistics.median
    r_med = med(render_s)
    s_med = med(dt for dt, _ in sky_runs)
    detail = sky_runs[0][1]
    print("SkyPilot target, cold processes (median of runs):")
    print(f"  launcher render (CLI, {len(render_s)} runs):    {r_med * 1000:8.0f} ms"
          f"   (min {min(render_s) * 1000:.0f}, max {max(render_s) * 1000:.0f})")
    print(f"  SkyPilot validate+optimize ({len(sky_runs)} runs): {s_med * 1000:8.0f} ms")
    print(f"      import sky          {med(r['import_s'] for _, r in sky_runs) * 1000:8.0f} ms")
    print(f"      Task.from_yaml      {med(r['from_yaml_s'] for _, r in sky_runs) * 1000:8.1f} ms")
    print(f"      Optimizer.optimize  {med(r['optimize_s'] for _, r in sky_runs) * 1000:8.0f} ms")
    print(f"  ratio SkyPilot / launcher render:            {s_med / r_med:8.1f} x")
    print(f"  optimizer's pick: {detail['best']}  ${detail['best_hourly_usd']:.2f}/h for the job")
    print(f"  launcher render imports: {len(mods)} modules, {cumulative_us / 1000:.0f} ms self time; "
          f"SkyPilot modules imported: {len(sky_mods)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
