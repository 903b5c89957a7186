"""`launcher plan` as a user runs it: a real subprocess, a config, the example catalog."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
LAUNCHER = str(Path(sys.executable).parent / "launcher")


def setup(tmp_path, targets, spot_rate=3.0, **resources):
    cfg = {
        "catalog_dir": str(ROOT / "examples" / "catalog"),
        "price_files": [str(ROOT / "examples" / "prices" / "slurm.yaml")],
        "preemption_rates": {"spot": {"aws": spot_rate}},
        "targets": {
            "aws-od": {"backend": "skypilot", "infra": "aws/us-east-1"},
            "aws-spot": {"backend": "skypilot", "infra": "aws/us-east-1", "use_spot": True},
            "lambda": {"backend": "skypilot", "infra": "lambda"},
            "cluster-a": {"backend": "slurm", "gpu_hour_usd": 1.10},
        },
    }
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg))
    res = {"nodes": 1, "gpus_per_node": 8, "accelerator": "H100", "time_limit": "10h", **resources}
    (tmp_path / "train.yaml").write_text(yaml.safe_dump(
        {"name": "train", "run": "python train.py", "resources": res, "targets": targets}))
    env = dict(os.environ, LAUNCHER_CONFIG=str(tmp_path / "config.yaml"), LAUNCHER_HOME=str(tmp_path / "home"))
    return env


def run(tmp_path, env, *args):
    return subprocess.run([LAUNCHER, "plan", str(tmp_path / "train.yaml"), *args], env=env,
                          capture_output=True, text=True, timeout=120)


def test_table_ranks_on_demand_above_a_cheaper_but_often_preempted_spot_offer(tmp_path):
    env = setup(tmp_path, ["aws-spot", "aws-od"])
    p = run(tmp_path, env)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    ranked = [ln for ln in lines if ln.strip()[:2].strip().isdigit()]
    assert "aws-od" in ranked[0] and "on-demand" in ranked[0]
    spot_lines = [ln for ln in ranked if "aws-spot" in ln]
    assert spot_lines and all("interruptions" in ln and "cheaper per hour than #1" in ln for ln in spot_lines)
    # with calm spot markets the same spot offers come first
    calm = run(tmp_path, setup(tmp_path, ["aws-spot", "aws-od"], spot_rate=0.01))
    first = [ln for ln in calm.stdout.splitlines() if ln.strip().startswith("1 ")][0]
    assert "aws-spot" in first and "use1-az1" in first


def test_json_has_the_same_rows_as_the_table(tmp_path):
    env = setup(tmp_path, ["aws-spot", "aws-od", "lambda", "cluster-a"])
    table = run(tmp_path, env)
    data = json.loads(run(tmp_path, env, "--json").stdout)
    ranked_json = [r for r in data["rows"] if r["rank"] is not None]
    ranked_table = [ln.split() for ln in table.stdout.splitlines() if ln.strip()[:2].strip().isdigit()]
    assert len(ranked_json) == len(ranked_table) > 0
    for r, cells in zip(ranked_json, ranked_table):
        assert cells[0] == str(r["rank"]) and cells[1] == r["target"]
        assert f"{r['expected_total_usd']:,.2f}" in cells
    assert data["assumptions"]["work_hours"] == 10.0
    excluded = [r for r in data["rows"] if r["rank"] is None]
    assert excluded and all(r["excluded"] for r in excluded)
    assert "excluded (%d):" % len(excluded) in table.stdout


def test_budget_exclusions_are_listed_with_their_reason(tmp_path):
    env = setup(tmp_path, ["aws-od", "lambda"])
    spec = yaml.safe_load((tmp_path / "train.yaml").read_text())
    spec["cost"] = {"max_hourly_usd": 50}
    (tmp_path / "train.yaml").write_text(yaml.safe_dump(spec))
    p = run(tmp_path, env)
    assert p.returncode == 0
    assert "aws-od: aws/us-east-1/use1-az1 p5.48xlarge: $98.32/h for 1 node(s) is over cost.max_hourly_usd $50" \
        in p.stdout
    assert [ln for ln in p.stdout.splitlines() if ln.strip().startswith("1 ")][0].split()[1] == "lambda"


def test_nothing_fits_exits_non_zero(tmp_path):
    env = setup(tmp_path, ["aws-od"], accelerator="B200")
    p = run(tmp_path, env)
    assert p.returncode == 1 and "no offer can run this job" in p.stdout
    assert "no offer for 8 x B200 in the aws catalog" in p.stdout


def test_bad_flags_and_specs_are_clear_errors(tmp_path):
    env = setup(tmp_path, ["aws-od"])
    p = run(tmp_path, env, "--work", "36")
    assert p.returncode == 2 and "--work" in p.stderr and "expected a duration with a unit" in p.stderr
    (tmp_path / "bad.yaml").write_text("name: x\nrun: y\nresources: {gpus: 8}\n")
    p = subprocess.run([LAUNCHER, "plan", str(tmp_path / "bad.yaml")], env=env, capture_output=True, text=True)
    assert p.returncode == 2 and "resources.gpus: unknown key" in p.stderr and "line 3" in p.stderr


def test_plan_imports_no_cloud_sdk_or_ssh_library(tmp_path):
    env = setup(tmp_path, ["aws-spot", "aws-od", "cluster-a"])
    code = (
        "import sys\n"
        "from launcher.cli import main\n"
        "before = set(sys.modules)\n"
        "try:\n"
        f"    main(['plan', {str(tmp_path / 'train.yaml')!r}], standalone_mode=False)\n"
        "finally:\n"
        "    new = sorted(m for m in set(sys.modules) - before\n"
        "                 if m.split('.')[0] in ('sky', 'paramiko', 'boto3', 'botocore'))\n"
        "    print('HEAVY', new)\n")
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "HEAVY []" in p.stdout and "aws-spot" in p.stdout


def test_rates_say_where_they_came_from_and_watched_preemptions_move_the_plan(tmp_path):
    """What `launcher watch` recorded in the state store (LAUNCHER_HOME) is read by `launcher plan`."""
    import time

    from launcher.plan.observed import record
    from launcher.state.store import StateStore

    env = setup(tmp_path, ["aws-spot", "aws-od"], spot_rate=0.05)
    data = json.loads(run(tmp_path, env, "--json").stdout)
    ranked = [r for r in data["rows"] if r["rank"] is not None]
    assert ranked[0]["target"] == "aws-spot" and ranked[0]["zone"] == "use1-az1"
    assert {r["rate_source"] for r in ranked if r["spot"]} == {"catalog"}       # the config's table
    assert {r["rate_source"] for r in ranked if not r["spot"]} == {"prior"}     # built-in default
    store = StateStore(Path(env["LAUNCHER_HOME"]))
    try:
        for attempt in range(1, 5):  # the zone kept preempting the job: four times in two node-hours
            record(store, ("aws", "us-east-1", "use1-az1", "p5.48xlarge", True), 0.5, 1, "preempted",
                   time.time(), job_id="j", attempt=attempt)
    finally:
        store.close()
    data = json.loads(run(tmp_path, env, "--json").stdout)
    ranked = [r for r in data["rows"] if r["rank"] is not None]
    assert (ranked[0]["zone"], ranked[0]["rate_source"]) == ("use1-az2", "catalog")
    seen = [r for r in ranked if r["zone"] == "use1-az1" and r["spot"]][0]
    assert seen["rate_source"] == "observed" and seen["rate_evidence"]["interruptions"] == pytest.approx(4, rel=1e-3)
    table = run(tmp_path, env).stdout
    assert "observed (4 in 2 node-h)" in table
