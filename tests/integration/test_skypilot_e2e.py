"""Opt-in end-to-end tier: the launcher drives real SkyPilot 0.14.1 onto the project's Slurm
test cluster through SkyPilot's own Slurm support (tests/fixtures/skypilot_slurm.py), the
Slurm job that holds the SkyPilot cluster's allocation is killed, and `launcher watch`
relaunches the job on a new SkyPilot cluster, which resumes from the latest committed
checkpoint and finishes with the result of an uninterrupted run.

    .venv/bin/pytest -m skypilot_e2e tests/integration/test_skypilot_e2e.py -p no:cacheprovider -o addopts=''

Set LAUNCHER_SKYPILOT_E2E_REPORT=FILE to get the phase timings as JSON.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from launcher_backends.skypilot.names import cluster_name
from tests.fixtures.polling import poll

from .launcher_cli import LauncherCLI, committed_steps

pytestmark = [pytest.mark.skypilot_e2e, pytest.mark.slurm]

ROOT = Path(__file__).resolve().parents[2]
TRAIN = ROOT / "examples" / "train.py"
STEPS, EVERY, SLEEP = 60, 4, 0.5  # ~30 s of training: the kill lands mid-run
SKY_ENV = ("HOME", "TMPDIR", "SKYPILOT_API_SERVER_LOCAL_PORT", "SKYPILOT_DISABLE_LOCAL_API_SERVER",
           "SKYPILOT_DISABLE_USAGE_COLLECTION")


def reference(steps: int, tmp: Path) -> str:
    out = tmp / "ref.json"
    subprocess.run([sys.executable, str(TRAIN), "--steps", str(steps), "--result", str(out)], capture_output=True,
                   text=True, check=True, env={"PATH": "/usr/bin:/bin"})
    return json.loads(out.read_text())["sha256"]


class Phases:
    def __init__(self):
        self.t0 = self.last = time.monotonic()
        self.rows: dict = {}

    def mark(self, name: str) -> None:
        now = time.monotonic()
        self.rows[name] = round(now - self.last, 1)
        self.last = now

    def total(self) -> float:
        return round(time.monotonic() - self.t0, 1)


def read_log(cli: LauncherCLI, sp, job: str) -> str:
    """`launcher logs JOB`; when it does not return (one loaded CI run: 300 s, unexplained), what
    SkyPilot's API server was doing then is printed before the test fails: its requests and the
    tail of its log."""
    try:
        return cli.output(job)
    except subprocess.TimeoutExpired:
        requests = sp.sky("api", "status", "-a", timeout=120)
        server_log = sp.sky_home / ".sky" / "api_server" / "server.log"
        print("sky api status -a:\n" + requests.stdout + requests.stderr)
        if server_log.exists():
            print("API server log (tail):\n" + "\n".join(server_log.read_text(errors="replace").splitlines()[-80:]))
        raise


@pytest.mark.timeout(1800)
def test_a_killed_skypilot_allocation_is_relaunched_by_watch_and_resumes_from_the_latest_commit(
        skypilot_slurm, clean_queue, tmp_path):
    sp, cluster = skypilot_slurm, clean_queue
    ph = Phases()
    ref = reference(STEPS, tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    shutil.copy(TRAIN, work / "train.py")  # SkyPilot syncs the spec's workdir to the nodes
    stamp = time.time_ns()
    root = cluster.shared_dir / f"ckpt-skye2e-{stamp}"
    result = cluster.shared_dir / f"result-skye2e-{stamp}.json"
    # idle_minutes: SkyPilot's autodown must not take the finished attempt's cluster (and the
    # runtime its log is read through) before the test reads the log: on a loaded CI machine
    # the watch passes after the job's end took more than 5 minutes, and `launcher logs`
    # printed the torn-down node's "No module named 'sky'". The fixture downs every cluster.
    cli = LauncherCLI(tmp_path, cluster, extra_targets={
        "sky-slurm": {"backend": "skypilot", "infra": sp.infra, "idle_minutes": 60}})
    cli.env.update({k: sp.env[k] for k in SKY_ENV})
    spec = cli.spec("skye2e", {
        "workdir": str(work),
        "run": f"python3 train.py --steps {STEPS} --every {EVERY} --sleep {SLEEP} --result {result}",
        "checkpoint": {"root": str(root)},
        "resources": {"nodes": 1, "cpus_per_node": 1, "memory_per_node": "512MB"},
        "recovery": {"node_failure": 2},
    })
    ph.mark("prepare")

    job = cli.launch(spec, "sky-slurm")
    ph.mark("launch_cmd")
    poll("a first committed checkpoint", lambda: committed_steps(cli, root), timeout=420, interval=1.0)
    ph.mark("provision_to_first_commit")
    poll("a commit at step 8", lambda: (committed_steps(cli, root) or [0])[-1] >= 8, timeout=120, interval=0.3)
    # the Slurm job holding attempt 1's SkyPilot cluster (named from the dedupe token: no status round trip)
    alloc = sp.allocation_of(cluster_name("launcher", job, 1))
    assert alloc, sp.allocations()

    cluster.run("scancel", alloc["id"])  # the allocation dies under SkyPilot's feet
    cluster.wait(alloc["id"], lambda j: j.get("JobState") not in ("RUNNING", "COMPLETING"), timeout=120)
    at_kill = committed_steps(cli, root)[-1]
    assert at_kill < STEPS
    ph.mark("kill")

    def watch_until(kind):
        cli.run("watch", "--once", timeout=600)
        st = cli.status(job)
        return st if any(e["kind"] == kind for e in st["events"]) else None

    st = poll("watch to relaunch the job", lambda: watch_until("resubmitted"), timeout=300, interval=2)
    ph.mark("watch_relaunch")
    st = poll("the relaunched job to finish", lambda: watch_until("done"), timeout=600, interval=2)
    ph.mark("second_attempt")

    assert st["state"] == "COMPLETED", json.dumps(st, indent=1)
    assert [a["state"] for a in st["attempts"]] == ["NODE_FAIL", "COMPLETED"], st["attempts"]
    assert st["attempts"][1]["native_id"] != st["attempts"][0]["native_id"]  # a new SkyPilot cluster
    gens = json.loads((root / "GENERATIONS.json").read_text())["history"]
    assert [g["resume_step"] for g in gens if g["generation"] == 2] == [at_kill], gens
    assert st["attempts"][1]["resume_step"] == at_kill
    assert json.loads(result.read_text())["sha256"] == ref
    log = read_log(cli, sp, job)
    assert re.search(rf"train: resumed from \S+ at step {at_kill}\b", log), log[-3000:]
    ph.mark("checks")

    report = {"phases_s": ph.rows, "test_s": ph.total(), "fixture_s": sp.timings, "resumed_at": at_kill}
    print("skypilot e2e timings:", json.dumps(report))
    if os.environ.get("LAUNCHER_SKYPILOT_E2E_REPORT"):
        Path(os.environ["LAUNCHER_SKYPILOT_E2E_REPORT"]).write_text(json.dumps(report, indent=1) + "\n")


# A second submission of one attempt, as a watcher paused past its claim makes it: the same
# attempt rendered and submitted again through the backend (``launch._submit_again``'s submit).
SUBMIT_AGAIN = """
import json, sys
from launcher.api.context import App
from launcher.launching.submission import facts_for, job_ref, job_spec
app = App()
row = app.store.get_job(sys.argv[1])
backend = app.backend(row.target)
spec = job_spec(row)
h = backend.submit(backend.render(spec, facts_for(app, spec, row.target), job_ref(app, row, int(sys.argv[2]))))
print(json.dumps({"cluster": h.native_id, "task": h.extra["task_name"]}))
"""

# The jobs of one SkyPilot cluster, as SkyPilot lists them.
CLUSTER_JOBS = """
import json, sys
from launcher_backends.skypilot.client import SdkClient
jobs = SdkClient().queue([sys.argv[1]])[sys.argv[1]]
print(json.dumps([[j.job_id, j.name, j.status] for j in jobs] if isinstance(jobs, list) else []))
"""


def _py(cli: LauncherCLI, code: str, *args, timeout: float = 600) -> str:
    p = subprocess.run([sys.executable, "-c", code, *map(str, args)], env=cli.env, capture_output=True, text=True,
                       timeout=timeout)
    assert p.returncode == 0, p.stderr[-3000:]
    return p.stdout.strip().splitlines()[-1]


@pytest.mark.timeout(1500)
def test_a_second_launch_of_one_attempt_onto_its_cluster_stands_down_and_status_follows_the_first(
        skypilot_slurm, clean_queue, tmp_path):
    """The attempt's cluster is named from the attempt, so the second `sky launch` queues a
    second job of the same name there. Its run finds the attempt's start claimed on node 0 by
    the first job and stands down (exit 3) before the program; the launcher follows the job
    that holds the attempt and neither reads the stood-down copy as a failure nor resubmits."""
    sp, cluster = skypilot_slurm, clean_queue
    stamp = time.time_ns()
    starts = cluster.shared_dir / f"starts-skydup-{stamp}"
    cli = LauncherCLI(tmp_path, cluster, extra_targets={
        "sky-slurm": {"backend": "skypilot", "infra": sp.infra, "idle_minutes": 60}})
    cli.env.update({k: sp.env[k] for k in SKY_ENV})
    spec = cli.spec("skydup", {
        "run": f'echo "$LAUNCHER_SELF_ID" >> {starts}; sleep 20',
        "resources": {"nodes": 1, "cpus_per_node": 1, "memory_per_node": "512MB"},
        "recovery": {"app_error": 2, "node_failure": 2},
    })
    job = cli.launch(spec, "sky-slurm")
    poll("the first job's start", lambda: starts.exists() and starts.read_text().strip(), timeout=420, interval=1.0)
    again = json.loads(_py(cli, SUBMIT_AGAIN, job, 1))
    assert again["cluster"] == cluster_name("launcher", job, 1)  # the same attempt's cluster

    def both_jobs():
        rows = sorted(r for r in json.loads(_py(cli, CLUSTER_JOBS, again["cluster"], timeout=300))
                      if r[1] == again["task"])  # SkyPilot lists the newest first
        return rows if len(rows) == 2 and rows[1][2] not in ("INIT", "PENDING", "SETTING_UP", "RUNNING") else None

    jobs = poll("the second job of the attempt to end", both_jobs, timeout=600, interval=3)
    assert jobs[1][2] == "FAILED", jobs  # it stood down: exit 3
    st = cli.status(job)
    assert st["state"] in ("RUNNING", "COMPLETED"), json.dumps(st, indent=1)  # the first job's, never the copy's

    def settled():  # done, or resubmitted (the failure this test is about): either ends the wait
        cli.run("watch", "--once", timeout=600)
        now = cli.status(job)
        return now if {e["kind"] for e in now["events"]} & {"done", "resubmitted"} else None

    st = poll("the job to finish", settled, timeout=300, interval=2)
    assert st["state"] == "COMPLETED", json.dumps(st, indent=1)
    assert len(st["attempts"]) == 1 and not [e for e in st["events"] if e["kind"] == "resubmitted"], st
    ids = starts.read_text().split()
    assert len(ids) == 1, ids  # the program started once: the second job ran nothing
