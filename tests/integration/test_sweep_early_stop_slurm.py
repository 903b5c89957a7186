"""Early stopping on the real Slurm test cluster: `launcher watch` reads what each element of a
sweep (one job array) reports with `jobside.report`, stops the right elements at each rung with
the reason (`scancel <array>_<index>`, state STOPPED), lets the others complete, and never
resubmits a stopped element; three watchers at once record each judgement and each stop once.

The metrics are deterministic and each element waits at every rung until the test opens a gate
file, so every element has reached a rung before a watcher judges it: the outcome does not
depend on which element happened to get there first."""

from __future__ import annotations

import json
import textwrap

import pytest

from launcher.checkpoint.metrics import read_metrics
from tests.fixtures.polling import poll

from .launcher_cli import LauncherCLI, start_watcher, stop_watchers

pytestmark = pytest.mark.slurm

# loss of element i: A[i] up to step 15, then B[i]. Rung 10 (keep 0.5 of 4): 1 and 3 go on, 0 and 2
# stop. Rung 20 (keep 1 of 2): element 3 (0.05) goes on, element 1 (0.15) stops. Element 3 completes.
PROGRAM = textwrap.dedent("""
    import os, sys, time
    sys.path.insert(0, os.environ["LAUNCHER_JOB_PYZ"])
    from launcher import jobside
    A, B = [0.4, 0.1, 0.3, 0.2], [0.4, 0.15, 0.3, 0.05]
    i, gates = int(os.environ["LAUNCHER_SWEEP_INDEX"]), sys.argv[1]
    for step in range(1, 26):
        jobside.report(step, loss=A[i] if step <= 15 else B[i], step_seen=step)
        if step in (10, 20):
            while not os.path.exists(os.path.join(gates, "go-%d" % step)):
                time.sleep(0.2)
    print("FINISHED", i, flush=True)
""")


def launch_gated_sweep(cluster, tmp_path, name: str, program: str, sweep: dict):
    """Launch PROGRAM (given its gate folder as argv[1]) as sweep NAME with SWEEP on the test
    cluster, its folder on storage every node sees: (cli, folder, sweep id, array job id)."""
    tmp = cluster.shared_dir / f"sweep{name}-{tmp_path.name}"
    tmp.mkdir()
    cli = LauncherCLI(tmp, cluster)
    (tmp / "prog.py").write_text(program)
    spec = cli.spec(name, {"run": ["python3", "-I", "-S", str(tmp / "prog.py"), str(tmp)], "workdir": str(tmp),
                           "resources": {"time_limit": "10m"}, "checkpoint": {"root": str(tmp / "ck")},
                           "sweep": sweep})
    sweep_id = cli.run("launch", spec, "--target", "testcl").stdout.split(":")[0].strip()
    array = cli.status(f"{sweep_id}-e0")["attempts"][0]["native_id"].split("_")[0]
    return cli, tmp, sweep_id, array


def _reached(tmp, step: int, elements) -> bool:
    return all(max(read_metrics(str(tmp / "ck" / f"element-{i:04d}")) or [0]) >= step for i in elements)


def _events(cli, job: str, kind: str) -> list:
    return [e for e in cli.status(job)["events"] if e["kind"] == kind]


def _queued(cluster) -> list:
    return cluster.run("squeue", "-h", "-r", "-o", "%i", check=False).stdout.split()


def test_watch_stops_the_worst_elements_at_each_rung_and_the_best_completes(clean_queue, tmp_path):
    cluster = clean_queue
    cli, tmp, sweep_id, array = launch_gated_sweep(cluster, tmp_path, "es", PROGRAM, {
        "grid": {"x": [0, 1, 2, 3]}, "max_parallel": 4,
        "early_stop": {"metric": "loss", "mode": "min", "keep": 0.5, "rungs": [10, 20]}})

    # rung 10: every element reported step 10 and waits at its gate
    poll("every element at rung 10", lambda: _reached(tmp, 10, range(4)), timeout=240, interval=1)
    out = cli.run("watch", "--once").stdout
    for i in (0, 2):
        assert f"{sweep_id}-e{i}: stopped (rung 10: loss " in out, out
    s = cli.status(sweep_id)
    assert [(e["state"], e["rung"]) for e in s["elements"]] == [
        ("STOPPED", 10), ("RUNNING", None), ("STOPPED", 10), ("RUNNING", None)], s
    assert s["elements"][0]["reason"] == "rung 10: loss 0.4 ranks 4 of 4 (lowest first; the best 2 go on): stopped"
    assert s["metric"] == "loss" and [e["metric"] for e in s["elements"]] == [0.4, 0.1, 0.3, 0.2], s
    # the step each reported its metrics at; none committed a checkpoint (status SWEEP's step is the committed one)
    assert [(e["metric_step"], e["step"]) for e in s["elements"]] == [(10, None)] * 4, s
    poll("the stopped elements left the queue",
         lambda: not {f"{array}_0", f"{array}_2"} & set(_queued(cluster)), timeout=60, interval=1,
         detail=lambda: str(_queued(cluster)))
    ended = dict(line.split() for line in cluster.run("squeue", "-h", "-r", "-t", "all", "-o", "%i %T",
                                                      check=False).stdout.splitlines() if line.strip())
    assert (ended.get(f"{array}_0"), ended.get(f"{array}_2")) == ("CANCELLED", "CANCELLED"), ended

    # rung 20, decided by three watchers at once
    (tmp / "go-10").touch()
    poll("elements 1 and 3 at rung 20", lambda: _reached(tmp, 20, (1, 3)), timeout=120, interval=1)
    watchers = [start_watcher(cli, n, interval=0.5) for n in range(3)]
    try:
        cli.wait_state(f"{sweep_id}-e1", "STOPPED", timeout=120)
        assert cli.status(f"{sweep_id}-e3")["state"] == "RUNNING"
        (tmp / "go-20").touch()
        cli.wait_state(f"{sweep_id}-e3", "COMPLETED", timeout=180)
        for p in watchers:  # each ends by itself once no job is open
            p.wait(timeout=60)
    finally:
        stop_watchers(watchers)
    logs = "\n".join((tmp / f"watch{n}.log").read_text() for n in range(3))
    assert logs.count("no open jobs left") == 3, logs

    s = cli.status(sweep_id)
    assert s["counts"] == {"COMPLETED": 1, "STOPPED": 3}, s
    assert [(e["state"], e["rung"]) for e in s["elements"]] == [
        ("STOPPED", 10), ("STOPPED", 20), ("STOPPED", 10), ("COMPLETED", None)], s
    assert s["elements"][1]["reason"].startswith("rung 20: loss 0.15 ranks 2 of 2"), s
    assert s["elements"][3]["metric_step"] == 25 and s["elements"][3]["metrics"] == {"loss": 0.05, "step_seen": 25}, s
    # each judgement and each stop recorded once; a stopped element was never submitted again
    judged = {i: [e["rung"] for e in _events(cli, f"{sweep_id}-e{i}", "early_stop")] for i in range(4)}
    assert judged == {0: [10], 1: [10, 20], 2: [10], 3: [10, 20]}, judged
    for i in (0, 1, 2):
        job = cli.status(f"{sweep_id}-e{i}")
        assert len(_events(cli, f"{sweep_id}-e{i}", "early_stopped")) == 1, job["events"]
        assert [(a["attempt"], a["state"]) for a in job["attempts"]] == [(1, "CANCELLED")], job
    comments = cluster.run("squeue", "-h", "-t", "all", "-o", "%k", check=False).stdout.split()
    assert not [c for c in comments if c.startswith(f"launcher:{sweep_id}-e")], comments  # no resubmission
    log3 = cli.run("logs", sweep_id, "--element", 3).stdout
    assert "FINISHED 3" in log3, log3
    for i in (0, 1, 2):
        assert "FINISHED" not in cli.run("logs", sweep_id, "--element", i).stdout
    text = cli.run("status", sweep_id).stdout
    assert f"sweep {sweep_id}: 4 elements: 1 COMPLETED, 3 STOPPED" in text, text
    assert "element 1 stopped: rung 20: loss 0.15 ranks 2 of 2" in text, text
    assert json.loads(cli.run("status", sweep_id, "--json").stdout) == s
