"""Faults inside a sweep on the real Slurm test cluster (issue 13 acceptance): a node crash
during one element resumes only that element, from its own latest commit, with the
uninterrupted result; a preempted element loses at most one step. Three elements run at
once, each on a node of its own (2 CPUs each), with `launcher watch --once` polled as a
user's watch would run."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.polling import poll

from .launcher_cli import LauncherCLI, committed_steps

pytestmark = pytest.mark.slurm

TRAIN = Path(__file__).resolve().parents[2] / "examples" / "train.py"
RESUMED = r"train: resumed from \S*element-0001/step-(\d+)\S* at step (\d+)"


def _reference(steps: int, tmp: Path) -> str:
    """The uninterrupted run's result (no checkpoints at all)."""
    subprocess.run([sys.executable, str(TRAIN), "--steps", str(steps), "--result", str(tmp / "ref.json")],
                   capture_output=True, check=True, env={"PATH": "/usr/bin:/bin"})
    return json.loads((tmp / "ref.json").read_text())["sha256"]


def _sweep(cluster, tmp_path, name: str, steps: int, every: int, sleep: float):
    """A launched 3-element sweep of the trainer, one element per node; (cli, tmp, sweep id)."""
    tmp = cluster.shared_dir / f"sweepc-{tmp_path.name}"  # seen by every node
    tmp.mkdir()
    cli = LauncherCLI(tmp, cluster)
    spec = cli.spec(name, {"workdir": str(tmp), "checkpoint": {"root": str(tmp / "ck")},
                           "run": f'exec python3 {TRAIN} --steps {steps} --every {every} --sleep {sleep} '
                                  f'--result {tmp}/result-"$LAUNCHER_SWEEP_INDEX".json',
                           "resources": {"time_limit": "10m", "nodes": 1, "cpus_per_node": 2},
                           "recovery": {"app_error": 3},
                           "sweep": {"grid": {"x": [0, 1, 2]}, "max_parallel": 3}})
    p = cli.run("launch", spec, "--target", "testcl")
    sweep_id = p.stdout.split(":")[0].strip()
    assert sweep_id, p.stdout
    return cli, tmp, sweep_id


def _running_nodes(cli, cluster, sweep_id) -> list[str]:
    """The node of each element, once all three run (on three distinct nodes)."""
    def nodes():
        s = cli.status(sweep_id)
        if s["counts"].get("RUNNING") != 3:
            return None
        got = [cluster.job(cli.status(f"{sweep_id}-e{i}")["attempts"][-1]["native_id"]).get("NodeList")
               for i in range(3)]
        return got if all(got) else None

    got = poll("three elements running", nodes, timeout=120, interval=1)
    assert len(set(got)) == 3, got
    return got


def _finish(cli, sweep_id) -> dict:
    def finished():
        cli.run("watch", "--once")
        s = cli.status(sweep_id)
        return s if s["counts"].get("COMPLETED") == 3 else None

    return poll("every element completed", finished, timeout=300, interval=2,
                detail=lambda: cli.run("status", sweep_id).stdout)


def _untouched(cli, tmp, sweep_id, ref, i) -> None:
    st = cli.status(f"{sweep_id}-e{i}")
    assert [a["state"] for a in st["attempts"]] == ["COMPLETED"], st["attempts"]
    log = cli.run("logs", sweep_id, "--element", i).stdout
    assert "resumed from" not in log and "preemption notice" not in log, log
    assert json.loads((tmp / f"result-{i}.json").read_text())["sha256"] == ref


def test_a_node_crash_during_one_element_resumes_only_that_element_from_its_own_commit(clean_queue, tmp_path):
    cluster = clean_queue
    cli, tmp, sweep_id = _sweep(cluster, tmp_path, "swcrash", 40, 2, 0.3)
    ref = _reference(40, tmp)
    nodes = _running_nodes(cli, cluster, sweep_id)
    root1 = tmp / "ck" / "element-0001"
    before = poll("element 1 committed step 6", lambda: [s for s in committed_steps(cli, root1) if s >= 6],
                  timeout=120, interval=0.5)[-1]
    cluster.kill_node(nodes[1])  # element 1's node dies; 0 and 2 run on

    def restarted():
        cli.run("watch", "--once")
        return len(cli.status(f"{sweep_id}-e1")["attempts"]) >= 2

    poll("element 1 has a second attempt", restarted, timeout=120, interval=1,
         detail=lambda: cli.run("status", f"{sweep_id}-e1").stdout)
    s = _finish(cli, sweep_id)
    assert s["counts"] == {"COMPLETED": 3}, s
    st = cli.status(f"{sweep_id}-e1")
    assert [a["state"] for a in st["attempts"]] == ["NODE_FAIL", "COMPLETED"], st["attempts"]
    # Slurm requeued the array task itself: the element's second attempt is the same array task
    assert st["attempts"][0]["native_id"] == st["attempts"][1]["native_id"], st["attempts"]
    comments = cluster.run("squeue", "-h", "-t", "all", "-o", "%k").stdout.split()
    assert not any(c.startswith(f"launcher:{sweep_id}-e") for c in comments), comments  # nothing resubmitted
    log = cli.run("logs", sweep_id, "--element", 1).stdout
    resumed = [(int(a), int(b)) for a, b in re.findall(RESUMED, log)]
    assert resumed and resumed[0][0] == resumed[0][1] >= before, (before, log)
    second = log.split("start 2 of")[1].splitlines()[0] if "start 2 of" in log else ""
    assert f"on {nodes[1]}" not in second, log
    assert json.loads((tmp / "result-1.json").read_text())["sha256"] == ref
    for i in (0, 2):
        _untouched(cli, tmp, sweep_id, ref, i)
    text = cli.run("status", sweep_id).stdout  # the sweep's table says which element ran twice, and why
    assert "element 1 attempts: 1 NODE_FAIL, 2 COMPLETED" in text.splitlines(), text
    assert "element 0 attempts" not in text and "element 2 attempts" not in text, text


def test_a_preempted_element_loses_at_most_one_step_and_the_others_run_on(clean_queue, tmp_path):
    cluster = clean_queue
    cli, tmp, sweep_id = _sweep(cluster, tmp_path, "swpre", 30, 1000, 0.4)
    ref = _reference(30, tmp)
    nodes = _running_nodes(cli, cluster, sweep_id)
    log_of = lambda: cli.run("logs", sweep_id, "--element", 1).stdout  # noqa: E731
    poll("element 1 at step 3", lambda: re.search(r"^step [3-9]", log_of(), re.M), timeout=60, interval=0.3)
    # a high-priority job on element 1's node only: Slurm preempts that element alone
    cluster.run("sbatch", "-p", "high", "-w", nodes[1], "-N", "1", "-c", "2", "-t", "5", "-o", "/dev/null",
                "--wrap", "sleep 2")
    s = _finish(cli, sweep_id)
    assert s["counts"] == {"COMPLETED": 3}, s
    st = cli.status(f"{sweep_id}-e1")
    assert [a["state"] for a in st["attempts"]] == ["PREEMPTED", "COMPLETED"], st["attempts"]
    log = log_of()
    first_run = log.split("start 2 of")[0]
    last_step_before = max(int(x) for x in re.findall(r"^step (\d+) ", first_run, re.M))
    assert "preemption notice: saved step" in first_run, log
    resumed = [int(b) for _, b in re.findall(RESUMED, log)]
    assert resumed and resumed[0] >= last_step_before - 1, (resumed, last_step_before, log)
    assert json.loads((tmp / "result-1.json").read_text())["sha256"] == ref
    for i in (0, 2):
        _untouched(cli, tmp, sweep_id, ref, i)
    text = cli.run("status", sweep_id).stdout
    assert "element 1 attempts: 1 PREEMPTED, 2 COMPLETED" in text.splitlines(), text
