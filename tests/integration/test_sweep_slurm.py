"""A sweep on the real Slurm test cluster: ONE job array, every element with its own
parameters (hostile ones arrive literally), its own seed and its own checkpoint root.

The sweep is rendered and submitted through the Slurm backend itself (``launcher launch``
does not take sweeps yet: that wiring comes with the backend-boundary restructuring)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from launcher.backend.protocols import JobRef
from launcher.backend.config import Target
from launcher.backend.sections import parse_spec
from launcher.spec.sweep_elements import element_seed, elements
from launcher.spec.validation import validate_model
from launcher_backends.slurm import SlurmBackend
from launcher_backends.slurm.options import SlurmOptions
from tests.fixtures.polling import poll

pytestmark = pytest.mark.slurm

REPORT = ("import json, os, sys, time; t0 = time.time(); time.sleep(float(sys.argv[1])); "
          "print('SWEEP-REPORT ' + json.dumps({'env': {k: v for k, v in os.environ.items() if k.startswith("
          "('LAUNCHER_SWEEP', 'LAUNCHER_PARAM', 'LAUNCHER_SEED', 'LAUNCHER_CKPT_ROOT'))}, "
          "'array': os.environ.get('SLURM_ARRAY_JOB_ID'), 'task': os.environ.get('SLURM_ARRAY_TASK_ID'), "
          "'job': os.environ.get('SLURM_JOB_ID'), "
          "'start': t0, 'end': time.time()}), flush=True)")
HOSTILE = ["$(touch PWNED_subst)", "`touch PWNED_bt`; touch PWNED_semi", "it's \"quoted\" ' ; touch PWNED_q ; '",
           "first\nsecond\n$(touch PWNED_nl)"]


def _backend(cluster) -> SlurmBackend:
    opts = {"slurm_conf": str(cluster.conf), "partition": "batch", "facts_ttl": 0}
    return SlurmBackend(Target("testcl", "slurm", validate_model(SlurmOptions, opts, "config.yaml")))


def _wait_gone(cluster, handle, timeout: float) -> None:
    """Until Slurm no longer lists the array (every element ended)."""
    def queued() -> str:
        return cluster.run("squeue", "-h", "-j", handle.native_id, check=False).stdout.strip()

    poll(f"array {handle.native_id} gone from the queue", lambda: not queued(), timeout=timeout, interval=1,
         detail=queued)


def _wait_for_reports(cluster, handle, n: int, timeout: float = 300) -> dict[int, dict]:
    """Every element's report, read from its own log (slurm-<array>_<index>.out), once the array is gone."""
    job_dir = Path(handle.extra["job_dir"])
    _wait_gone(cluster, handle, timeout)
    reports = {}
    for i in range(n):
        log = job_dir / f"slurm-{handle.native_id}_{i}.out"
        assert log.exists(), f"no log for element {i}: {sorted(p.name for p in job_dir.iterdir())}"
        text = log.read_text(errors="replace")
        lines = [line for line in text.splitlines() if line.startswith("SWEEP-REPORT ")]
        assert len(lines) == 1, f"element {i}:\n{text}"
        assert "Traceback" not in text and "launcher: run exited with 0" in text, f"element {i}:\n{text}"
        reports[i] = json.loads(lines[0][len("SWEEP-REPORT "):])
    return reports


def _launch(cluster, tmp: Path, sweep: dict, sleep: float, **extra):
    spec = parse_spec({"name": "sweep", "run": ["python3", "-c", REPORT, str(sleep)], "workdir": str(tmp),
                       "resources": {"time_limit": "5m"}, "sweep": sweep, **extra}, "sweep.yaml")
    backend = _backend(cluster)
    facts = backend.probe()
    assert facts.get("max_array_size") == 1001  # probed from the cluster's own scontrol show config
    req = backend.render(spec, facts, JobRef("sweep-1", 1, job_dir=str(tmp / "jobs" / "sweep-1"), seed=1234))
    return spec, backend.submit(req)


def test_twelve_element_grid_with_max_parallel_3_is_one_array_job(clean_queue, tmp_path):
    cluster = clean_queue
    tmp = cluster.shared_dir / f"sweep-{tmp_path.name}"  # seen by every node
    tmp.mkdir()
    sweep = {"grid": {"lr": [1.0e-4, 3.0e-4, 1.0e-3], "batch": [32, 64], "amp": [True, False]}, "max_parallel": 3}
    spec, handle = _launch(cluster, tmp, sweep, sleep=3, checkpoint={"root": str(tmp / "ck")})
    assert handle.native_id.isdigit()  # one sbatch, one job id for the whole sweep
    tasks = cluster.run("squeue", "-h", "-r", "-j", handle.native_id, "-o", "%i").stdout.split()
    assert tasks and all(t.startswith(f"{handle.native_id}_") for t in tasks), tasks
    reports = _wait_for_reports(cluster, handle, 12)
    for e in elements(spec.sweep):
        r = reports[e.index]
        assert (r["array"], r["task"]) == (handle.native_id, str(e.index))
        env = r["env"]
        assert json.loads(env["LAUNCHER_PARAMS"]) == e.params
        assert env["LAUNCHER_PARAM_LR"] == repr(e.params["lr"]) and env["LAUNCHER_PARAM_BATCH"] == str(e.params["batch"])
        assert env["LAUNCHER_PARAM_AMP"] == ("true" if e.params["amp"] else "false")
        assert (env["LAUNCHER_SWEEP_ID"], env["LAUNCHER_SWEEP_INDEX"], env["LAUNCHER_SWEEP_SIZE"]) == \
            ("sweep-1", str(e.index), "12")
        assert env["LAUNCHER_SEED"] == str(element_seed(1234, e.index))
        assert env["LAUNCHER_CKPT_ROOT"] == str(tmp / "ck" / f"element-{e.index:04d}")
        assert (tmp / "ck" / f"element-{e.index:04d}" / "GENERATIONS.json").exists()  # its own fencing
    # why an element names itself <array>_<index>: one task's own job id IS the array's id
    assert [r["job"] for r in reports.values()].count(handle.native_id) == 1
    # never more than 3 elements ran at once (each run's own start and end, on the shared clock)
    spans = sorted((r["start"], r["end"]) for r in reports.values())
    most = max(sum(1 for s, e in spans if s <= t < e) for t, _ in spans)
    assert 1 <= most <= 3, spans


def test_hostile_parameter_values_arrive_literally_in_a_four_element_array(clean_queue, tmp_path):
    cluster = clean_queue
    tmp = cluster.shared_dir / f"sweep-{tmp_path.name}"
    tmp.mkdir()
    points = [{"tag": v, "n": i} for i, v in enumerate(HOSTILE)]
    spec, handle = _launch(cluster, tmp, {"points": points, "max_parallel": 4}, sleep=0)
    reports = _wait_for_reports(cluster, handle, 4)
    for i, point in enumerate(points):
        env = reports[i]["env"]
        assert env["LAUNCHER_PARAM_TAG"] == point["tag"], (i, env)
        assert json.loads(env["LAUNCHER_PARAMS"]) == point
    assert not list(tmp.rglob("PWNED*")) and not list(cluster.shared_dir.glob("PWNED*"))


def test_a_notice_to_one_element_requeues_only_that_element_which_resumes_its_own_commit(clean_queue, tmp_path):
    """The self-healing script works per element: the preemption notice sent to element 1 makes
    it checkpoint under ITS root and requeue ITSELF (<array>_1); elements 0 and 2 never restart,
    and all three end with the uninterrupted run's result."""
    import re
    import subprocess
    import sys

    cluster = clean_queue
    tmp = cluster.shared_dir / f"sweep-{tmp_path.name}"
    tmp.mkdir()
    train = Path(__file__).resolve().parents[2] / "examples" / "train.py"
    subprocess.run([sys.executable, str(train), "--steps", "30", "--result", str(tmp / "ref.json")],
                   capture_output=True, check=True, env={"PATH": "/usr/bin:/bin"})
    ref = json.loads((tmp / "ref.json").read_text())["sha256"]
    spec = parse_spec({"name": "sweep", "workdir": str(tmp),
                       "run": f'exec python3 {train} --steps 30 --every 1000 --sleep 0.4 '
                              f'--result {tmp}/result-"$LAUNCHER_SWEEP_INDEX".json',
                       "checkpoint": {"root": str(tmp / "ck")}, "resources": {"time_limit": "10m"},
                       "sweep": {"grid": {"x": [0, 1, 2]}, "max_parallel": 3}}, "sweep.yaml")
    backend = _backend(cluster)
    req = backend.render(spec, backend.probe(), JobRef("sweep-1", 1, job_dir=str(tmp / "jobs" / "sweep-1")))
    handle = backend.submit(req)
    logs = {i: Path(handle.extra["job_dir"]) / f"slurm-{handle.native_id}_{i}.out" for i in range(3)}
    poll("element 1 at step 3", lambda: logs[1].exists() and re.search(r"^step [3-9]", logs[1].read_text(), re.M),
         timeout=120, interval=0.3)
    cluster.run("scancel", "--signal=USR1", "--batch", f"{handle.native_id}_1")
    _wait_gone(cluster, handle, 300)
    texts = {i: p.read_text(errors="replace") for i, p in logs.items()}
    assert "preemption notice: saved step" in texts[1] and "requeueing" in texts[1], texts[1]
    assert "start 2 of" in texts[1] and re.search(r"train: resumed from \S+element-0001/step-\d+", texts[1]), texts[1]
    for i in (0, 2):
        assert "start 2 of" not in texts[i] and "requeueing" not in texts[i], texts[i]
    for i in range(3):
        assert json.loads((tmp / f"result-{i}.json").read_text())["sha256"] == ref, texts[i]
