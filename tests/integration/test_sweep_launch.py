"""`launcher launch` of a sweep on the real Slurm test cluster: one job array, one job row
per element; `status SWEEP` counts and lists the elements; cancel and logs act per element."""

from __future__ import annotations

import json
import time

import pytest

from .launcher_cli import LauncherCLI, poll

pytestmark = pytest.mark.slurm

REPORT = ("import json, os, sys, time; time.sleep(float(sys.argv[1])); print('SWEEP-REPORT ' + json.dumps("
          "{'params': json.loads(os.environ['LAUNCHER_PARAMS']), 'index': os.environ['LAUNCHER_SWEEP_INDEX'], "
          "'sweep': os.environ['LAUNCHER_SWEEP_ID']}), flush=True)")


def _cli(cluster, tmp_path) -> tuple[LauncherCLI, object]:
    tmp = cluster.shared_dir / f"sweepl-{tmp_path.name}"  # seen by every node
    tmp.mkdir()
    return LauncherCLI(tmp, cluster), tmp


def _sweep_spec(cli, tmp, sleep: float, grid: dict, max_parallel: int):
    return cli.spec("sw", {"run": ["python3", "-c", REPORT, str(sleep)], "workdir": str(tmp),
                           "resources": {"time_limit": "5m"}, "checkpoint": {"root": str(tmp / "ck")},
                           "sweep": {"grid": grid, "max_parallel": max_parallel}})


def _launch(cli, spec) -> str:
    p = cli.run("launch", spec, "--target", "testcl")
    sweep_id = p.stdout.split(":")[0].strip()
    assert sweep_id, p.stdout
    return sweep_id


def test_a_six_element_grid_launches_as_one_array_and_every_element_completes(clean_queue, tmp_path):
    cluster = clean_queue
    cli, tmp = _cli(cluster, tmp_path)
    spec = _sweep_spec(cli, tmp, 1, {"lr": [0.1, 0.2, 0.3], "batch": [32, 64]}, 2)
    sweep_id = _launch(cli, spec)
    rows = [r for r in json.loads(cli.run("status", "--json").stdout)]
    assert sorted((r["job_id"], r["sweep"], r["element"]) for r in rows) == \
        sorted((f"{sweep_id}-e{i}", sweep_id, i) for i in range(6)), rows
    tasks = cluster.run("squeue", "-h", "-r", "-o", "%i", check=False).stdout.split()
    arrays = {t.split("_")[0] for t in tasks}
    assert len(arrays) <= 1 and all("_" in t for t in tasks), tasks  # one sbatch: tasks of one array

    def done():
        s = cli.status(sweep_id)
        return s if s["counts"].get("COMPLETED") == 6 else None

    s = poll("all six elements completed", done, timeout=300, interval=2)
    assert s["sweep"] == sweep_id and s["size"] == 6 and [e["index"] for e in s["elements"]] == list(range(6))
    text = cli.run("status", sweep_id).stdout
    assert f"sweep {sweep_id}: 6 elements: 6 COMPLETED" in text, text
    for e in s["elements"]:
        log = cli.run("logs", sweep_id, "--element", e["index"]).stdout
        lines = [json.loads(l[len("SWEEP-REPORT "):]) for l in log.splitlines() if l.startswith("SWEEP-REPORT ")]
        assert lines == [{"params": e["params"], "index": str(e["index"]), "sweep": sweep_id}], log


def test_cancelling_one_element_leaves_the_others_running_and_cancel_sweep_ends_the_rest(clean_queue, tmp_path):
    cluster = clean_queue
    cli, tmp = _cli(cluster, tmp_path)
    spec = _sweep_spec(cli, tmp, 120, {"x": [0, 1, 2]}, 3)
    sweep_id = _launch(cli, spec)
    poll("three elements running", lambda: cli.status(sweep_id)["counts"].get("RUNNING") == 3, timeout=120)
    out = cli.run("cancel", sweep_id, "--element", 1).stdout
    assert f"{sweep_id}-e1: closed as CANCELLED" in out, out
    time.sleep(2)
    s = cli.status(sweep_id)
    assert [e["state"] for e in s["elements"]] == ["RUNNING", "CANCELLED", "RUNNING"], s
    out = cli.run("cancel", sweep_id).stdout
    s = cli.status(sweep_id)
    assert [e["state"] for e in s["elements"]] == ["CANCELLED"] * 3, (s, out)
    assert not cluster.run("squeue", "-h", check=False).stdout.strip()
