"""Fault injection on the real test cluster: node death, preemption, time limits,
crash loops, a killed `launcher watch`, and a zombie writer. Every job runs the
deterministic example trainer (examples/train.py) through the checkpoint contract,
and its final result must equal an uninterrupted run's bit for bit."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.fixtures.polling import poll

from .launcher_cli import committed_steps

pytestmark = pytest.mark.slurm

ROOT = Path(__file__).resolve().parents[2]
TRAIN = ROOT / "examples" / "train.py"


def reference(steps: int, tmp: Path) -> str:
    """The uninterrupted run's result (no checkpoints at all)."""
    subprocess.run([sys.executable, str(TRAIN), "--steps", str(steps), "--result", str(tmp / "ref.json")],
                   capture_output=True, text=True, check=True, env={"PATH": "/usr/bin:/bin"})
    return json.loads((tmp / "ref.json").read_text())["sha256"]


def train_spec(cli, cluster, name, steps, every, sleep, **extra):
    root = cluster.shared_dir / f"ckpt-{name}-{time.time_ns()}"
    result = cluster.shared_dir / f"result-{name}-{time.time_ns()}.json"
    body = {"run": f"python3 {TRAIN} --steps {steps} --every {every} --sleep {sleep} --result {result}",
            "checkpoint": {"root": str(root)}, "resources": {"nodes": 1, "time_limit": "10m"}}
    for k, v in extra.items():
        body[k] = {**body.get(k, {}), **v} if isinstance(v, dict) else v
    return cli.spec(name, body), root, result


def wait_commit(cli, root, at_least=1, timeout=90):
    def latest():
        steps = committed_steps(cli, root)
        return steps[-1] if steps and steps[-1] >= at_least else None

    return poll(f"a commit >= {at_least} under {root}", latest, timeout=timeout, interval=0.5)


def node_of(cli, job):
    st = cli.wait_state(job, "RUNNING")
    native = st["attempts"][-1]["native_id"]
    return native


def resumed_steps(log: str) -> list[int]:
    return [int(m) for m in re.findall(r"train: resumed from \S+ at step (\d+)", log)]


def test_node_killed_mid_run_resumes_elsewhere_from_the_latest_commit(cli, clean_queue, tmp_path):
    # the first start would train 120 s (2 s a step; the resumed one 0.2 s): the kill lands after
    # the commit at step 8 while the job still runs, with room for status round trips and
    # `launcher checkpoints` calls (seconds each on a machine busy with the other test tiers: at 15
    # and then 30 s of training, CI saw the run end first). LAUNCHER_ATTEMPT is the generation.
    ref = reference(60, tmp_path)
    sleep = '"$([ "${LAUNCHER_ATTEMPT:-1}" = 1 ] && echo 2.0 || echo 0.2)"'
    spec, root, result = train_spec(cli, clean_queue, "nodekill", 60, 4, sleep)
    job = cli.launch(spec)
    native = node_of(cli, job)
    latest = wait_commit(cli, root, at_least=8)
    assert latest < 60, f"the run ended (its commit at step {latest}) before the node could be killed"
    node = clean_queue.job(native)["NodeList"]
    clean_queue.kill_node(node)
    st = cli.wait_state(job, "COMPLETED", timeout=240, interval=1)
    assert json.loads(result.read_text())["sha256"] == ref
    assert [a["state"] for a in st["attempts"]][:2] == ["NODE_FAIL", "COMPLETED"], st["attempts"]
    log = cli.output(job)
    resumed = resumed_steps(log)
    assert resumed and resumed[0] >= 8, log
    assert f"on {node}" not in log.split("start 2 of")[1].splitlines()[0]


@pytest.mark.timeout(900)  # a first start of up to 112 s, then the preemption's requeue
def test_preemption_checkpoints_on_signal_and_loses_at_most_one_step(cli, clean_queue, tmp_path):
    # the first start would train 112 s (2.5 s a step; the restart 0.2 s): the preempting job is
    # launched (a CLI round trip, slow beside the other tiers) while it runs (with 1 s a step a CI
    # run saw all 45 steps end before the preemption landed)
    ref = reference(45, tmp_path)
    sleep = '"$([ "${SLURM_RESTART_COUNT:-0}" = 0 ] && echo 2.5 || echo 0.2)"'
    spec, root, result = train_spec(cli, clean_queue, "preempt", 45, 1000, sleep,
                                    resources={"cpus_per_node": 2, "nodes": 1})
    job = cli.launch(spec)
    cli.wait_state(job, "RUNNING")
    poll(f"{job} at step 3", lambda: re.search(r"^step [3-9]", cli.output(job), re.M), timeout=60, interval=0.3)
    # every node: the only way to run it is to preempt ours
    high = cli.spec("hipri", {"run": "sleep 2", "resources": {"nodes": 4, "time_limit": "5m"},
                              "slurm": {"partition": "high"}})
    cli.launch(high)
    st = cli.wait_state(job, "COMPLETED", timeout=360, interval=1)
    assert st["attempts"][0]["state"] == "PREEMPTED"
    log = cli.output(job)
    first_run = log.split("start 2 of")[0]
    last_step_before = max(int(x) for x in re.findall(r"^step (\d+) ", first_run, re.M))
    (resumed,) = resumed_steps(log)[:1]
    assert resumed >= last_step_before - 1, (resumed, last_step_before)
    assert "preemption notice: saved step" in first_run
    assert json.loads(result.read_text())["sha256"] == ref


@pytest.mark.timeout(1200)  # two or three 2-minute attempts and their queueing: 270 s beside the other tiers in CI
def test_timeout_with_progress_requeues_itself_and_finishes(cli, clean_queue, tmp_path):
    # the notice comes 75 s into each 2-minute attempt (grace 45 s): on a loaded machine a
    # program may take 15 s to start, and a notice before its handler is set kills it (with a
    # 1-minute limit the notice came at 15 s, and a CI run on 2 busy cores saw exactly that)
    ref = reference(150, tmp_path)
    spec, root, result = train_spec(cli, clean_queue, "longer", 150, 10, 1.0,
                                    resources={"time_limit": "2m"}, recovery={"grace": "45s"})
    job = cli.launch(spec)
    st = cli.wait_state(job, ("COMPLETED", "TIMEOUT", "ATTEMPT_FAILED"), timeout=540, interval=2)
    log = cli.output(job)
    assert st["state"] == "COMPLETED", log
    assert len(st["attempts"]) >= 2 and "requeueing" in log and "committed on notice" in log
    assert json.loads(result.read_text())["sha256"] == ref


def test_a_step_signalled_alone_that_saves_and_exits_75_is_requeued_and_finishes(cli, clean_queue, tmp_path):
    # Slurm signals the step and not the job script (here `scancel --signal=TERM`; in the wild a
    # run cut off on another node cancelling its step on reconnecting): the program saves and
    # exits 75, "restart me", and the job script requeues the job in place, no watch running
    # the first start would train 60 s (1 s a step; the restart 0.2 s): with 0.25 s a step a CI
    # run saw the whole job end while `launcher status` calls waited for RUNNING on a busy machine
    ref = reference(60, tmp_path)
    sleep = '"$([ "${SLURM_RESTART_COUNT:-0}" = 0 ] && echo 1.0 || echo 0.2)"'
    spec, root, result = train_spec(cli, clean_queue, "stepsig", 60, 4, sleep)
    job = cli.launch(spec)
    native = node_of(cli, job)
    wait_commit(cli, root, at_least=8)
    clean_queue.run("scancel", "--signal=TERM", native)
    st = cli.wait_state(job, "COMPLETED", timeout=240, interval=1)
    log = cli.output(job)
    assert "asked to be restarted (exit 75" in log and "preemption notice: saved step" in log, log
    assert len(st["attempts"]) == 2 and resumed_steps(log)[0] >= 8, (st["attempts"], log)
    assert json.loads(result.read_text())["sha256"] == ref


def test_a_cancelled_job_that_saves_and_exits_75_stays_cancelled(cli, clean_queue, tmp_path):
    # the same program under a plain scancel: the job script is signalled too, and a Slurm
    # requeue would bring back even a cancelled job, so it must not ask for one
    spec, root, result = train_spec(cli, clean_queue, "cancel75", 200, 4, 0.25)
    job = cli.launch(spec)
    native = node_of(cli, job)
    wait_commit(cli, root, at_least=8)
    clean_queue.run("scancel", native)
    poll(f"{native} gone from the queue", lambda: clean_queue.job(native).get("JobState") in {"CANCELLED", None},
         timeout=60, interval=0.5)
    time.sleep(8)   # longer than the test cluster's requeue delay: a requeued job would be back
    j = clean_queue.job(native)
    assert j.get("JobState") in {"CANCELLED", None} and j.get("Restarts", "0") == "0", j
    log = cli.output(job)
    assert "preemption notice: saved step" in log and "requeueing" not in log, log
    assert not result.exists()


def test_crash_loop_without_progress_is_stopped_by_watch_with_its_reason(cli, clean_queue):
    spec = cli.spec("crashy", {"run": "echo crashing; exit 1", "checkpoint": {"root": str(clean_queue.shared_dir / "ck-crashy")},
                               "recovery": {"app_error": 5}, "resources": {"time_limit": "5m"}})
    job = cli.launch(spec)

    def gave_up():
        cli.run("watch", "--once")
        st = cli.status(job)
        return st if any(e["kind"] == "gave_up" for e in st["events"]) else None

    st = poll(f"{job}: watch gave up", gave_up, timeout=180, interval=1)
    gave = [e for e in st["events"] if e["kind"] == "gave_up"]
    assert gave and "no progress" in gave[0]["reason"], st["events"]
    assert len(st["attempts"]) == 3 and "gave up: no progress" in st["reason"]
    assert "gave up" in cli.run("status", job).stdout


def test_killed_watch_never_submits_a_job_twice(cli, clean_queue, monkeypatch):
    import os

    from launcher.api.context import App
    from launcher.recovery import watch

    spec = cli.spec("flaky", {"run": "exit 1", "recovery": {"app_error": 3}, "resources": {"time_limit": "5m"}})
    job = cli.launch(spec)
    cli.wait_state(job, "ATTEMPT_FAILED")  # open: the attempt failed, recovery decides
    monkeypatch.setenv("LAUNCHER_HOME", str(cli.home))
    monkeypatch.setenv("LAUNCHER_CONFIG", str(cli.config))
    monkeypatch.setenv("SLURM_CONF", str(clean_queue.conf))
    app = App()
    real = app.store.record_submission

    def killed(*a, **k):  # the watch dies right after sbatch returned, before it wrote anything
        raise KeyboardInterrupt("watch killed mid-recovery")

    monkeypatch.setattr(app.store, "record_submission", killed)
    with pytest.raises(KeyboardInterrupt):
        watch.cycle(app)
    app.close()
    monkeypatch.setattr(app.store, "record_submission", real)
    app2 = App()
    outcomes = watch.cycle(app2)
    app2.close()
    assert [o.action for o in outcomes if o.job_id == job] == ["resubmitted"]
    comments = clean_queue.run("squeue", "-h", "-t", "all", "-o", "%k").stdout.split()
    assert comments.count(f"launcher:{job}:2") == 1, comments
    st = cli.status(job)
    assert [a["attempt"] for a in st["attempts"]] == [1, 2]
    assert any(e.get("found_existing") for e in st["events"] if e["kind"] == "resubmitted")
    del os


def test_zombie_attempt_after_a_network_cut_never_wins(cli, clean_queue, tmp_path):
    """Cut the node's link: Slurm requeues the job elsewhere while the old attempt keeps
    running (and writing). Nothing it writes after the new generation started is chosen,
    and its late commits are refused."""
    ref = reference(200, tmp_path)
    spec, root, result = train_spec(cli, clean_queue, "zombie", 200, 2, 0.3)
    job = cli.launch(spec)
    native = node_of(cli, job)
    wait_commit(cli, root, at_least=6)
    node = clean_queue.job(native)["NodeList"]
    clean_queue.cut_node(node)
    try:
        clean_queue.wait(native, lambda j: j.get("Restarts", "0") != "0" and j.get("JobState") == "RUNNING",
                         timeout=120)

        def gen2():
            hist = json.loads((root / "GENERATIONS.json").read_text())["history"]
            return [h for h in hist if h["generation"] == 2]

        fork = clean_queue.wait_for("generation 2 to start", gen2, timeout=60)[0]["resume_step"]
        time.sleep(4)  # both attempts write side by side for a while
    finally:
        clean_queue.heal_node(node)
    st = cli.wait_state(job, "COMPLETED", timeout=240, interval=1)
    assert json.loads(result.read_text())["sha256"] == ref
    entries = json.loads(cli.run("checkpoints", root, "--json").stdout)
    zombie_late = [e for e in entries if e["generation"] == 1 and e["step"] > fork]
    assert all(e["state"] != "committed" or "stale" in e["reason"] for e in zombie_late), zombie_late
    assert all(e["state"] == "stale" for e in zombie_late if (Path(e["path"]) / "COMMIT.json").exists())
    log = cli.output(job)
    assert "superseded" in log.lower(), log[-3000:]
    assert st["attempts"][0]["state"] in ("NODE_FAIL", "REQUEUED")
