"""`launcher launch` of a sweep on the real Slurm test cluster: one job array, one job row
per element; `status SWEEP` counts and lists the elements; cancel and logs act per element."""

from __future__ import annotations

import json
import re
import time

import pytest

from tests.fixtures.polling import poll

from .launcher_cli import LauncherCLI

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


def _pids_of(*needles: str) -> list[int]:
    import os

    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            cmd = open(f"/proc/{d}/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if cmd.startswith("python3") and all(n in cmd for n in needles):
            out.append(int(d))
    return out


def test_an_element_killed_mid_run_is_resubmitted_alone_by_watch_and_resumes_its_own_commit(clean_queue, tmp_path):
    import os
    import signal
    import subprocess
    import sys
    from pathlib import Path

    from .launcher_cli import committed_steps

    cluster = clean_queue
    cli, tmp = _cli(cluster, tmp_path)
    train = Path(__file__).resolve().parents[2] / "examples" / "train.py"
    subprocess.run([sys.executable, str(train), "--steps", "30", "--result", str(tmp / "ref.json")],
                   capture_output=True, check=True, env={"PATH": "/usr/bin:/bin"})
    ref = json.loads((tmp / "ref.json").read_text())["sha256"]
    spec = cli.spec("swk", {"workdir": str(tmp), "checkpoint": {"root": str(tmp / "ck")},
                            "run": f'exec python3 {train} --steps 30 --every 2 --sleep 0.3 '
                                   f'--result {tmp}/result-"$LAUNCHER_SWEEP_INDEX".json',
                            "resources": {"time_limit": "10m"}, "recovery": {"app_error": 3},
                            "sweep": {"grid": {"x": [0, 1, 2]}, "max_parallel": 3}})
    sweep_id = _launch(cli, spec)
    root1 = tmp / "ck" / "element-0001"
    poll("element 1 committed step 6", lambda: (committed_steps(cli, root1) or [0])[-1] >= 6, timeout=120)
    pids = _pids_of(str(train), f"result-1.json")
    assert len(pids) == 1, pids
    os.kill(pids[0], signal.SIGKILL)  # element 1 crashes; 0 and 2 run on
    poll("element 1 failed", lambda: cli.status(sweep_id)["elements"][1]["state"] == "ATTEMPT_FAILED",
         timeout=60)

    def resubmitted():
        cli.run("watch", "--once")
        return len(cli.status(f"{sweep_id}-e1")["attempts"]) == 2

    poll("watch resubmitted element 1", resubmitted, timeout=60, interval=1)
    comments = cluster.run("squeue", "-h", "-t", "all", "-o", "%k").stdout.split()
    assert comments.count(f"launcher:{sweep_id}-e1:2") == 1, comments
    assert not any(c.startswith(f"launcher:{sweep_id}:") and c != f"launcher:{sweep_id}:1" for c in comments)

    def finished():
        cli.run("watch", "--once")
        s = cli.status(sweep_id)
        return s if s["counts"].get("COMPLETED") == 3 else None

    s = poll("every element completed", finished, timeout=300, interval=2)
    for i in (0, 2):
        assert len(cli.status(f"{sweep_id}-e{i}")["attempts"]) == 1  # untouched
    log = cli.run("logs", sweep_id, "--element", 1).stdout
    assert re.search(r"train: resumed from \S+element-0001/step-\d+", log), log
    for i in range(3):
        assert json.loads((tmp / f"result-{i}.json").read_text())["sha256"] == ref, (i, s)
