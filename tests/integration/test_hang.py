"""recovery.hang on the local target, with `launcher watch` beside the job: a program that
reports steps and then sleeps for ever is found hung within `hang` plus one watch interval, its
stacks are stored in the job folder (the job side's faulthandler: the program's own frames), and
it is recovered: resubmitted on the hang budget, or rerun in its allocation with recovery.in_job."""

from __future__ import annotations

import json
import signal
import sys
import textwrap
from pathlib import Path

import pytest

from launcher.recovery.hangs import report_times

from .launcher_cli import start_watcher, stop_watchers

HANG_S = 3
INTERVAL_S = 0.5
PASS_S = 1.0  # a pass's own time (status, reads, the stack dump) on this 2-core machine

PROGRAM = textwrap.dedent("""
    import os, sys, time
    sys.path.insert(0, os.environ["LAUNCHER_JOB_PYZ"])
    from launcher import jobside
    steps, hang_at = int(sys.argv[1]), int(sys.argv[2])
    gen = int(os.environ["LAUNCHER_GENERATION"])
    start = jobside.resume_step() + 1
    print("started gen %d at step %d" % (gen, start), flush=True)

    def hang_forever_in_user_code():
        print("hanging at step %d" % step, flush=True)
        while True:
            time.sleep(3600)

    for step in range(start, steps + 1):
        time.sleep(0.2)
        if step % 2 == 0:
            with jobside.save(step) as d:
                open(os.path.join(d, "s"), "w").write(str(step))
        jobside.report(step, loss=1.0 / (step + 1))
        if step == hang_at and gen == 1:
            hang_forever_in_user_code()
    print("DONE gen %d" % gen, flush=True)
""")


def hang_spec(cli, name: str, base=None, resources=None, **recovery):
    base = base or cli.tmp
    prog = base / "prog.py"
    prog.write_text(PROGRAM)
    root = base / f"ckpt-{name}"
    body = {"run": [sys.executable, "-I", "-S", str(prog), "12", "6"], "checkpoint": {"root": str(root)},
            "recovery": {"hang": f"{HANG_S}s", "hang_restarts": 1, "app_error": 0, **recovery},
            **({"resources": resources} if resources else {})}
    return cli.spec(name, body), root


def check_hang(cli, job: str, root: Path, attempts: list, recovery: str, timeout: float = 180) -> dict:
    st = cli.wait_state(job, ["COMPLETED", "FAILED", "GAVE_UP", "CANCELLED"], timeout=timeout, interval=0.5)
    assert st["state"] == "COMPLETED", st
    assert [a["state"] for a in st["attempts"]] == attempts, st["attempts"]
    found = [e for e in st["events"] if e["kind"] == "hang_detected"]
    assert len(found) == 1, st["events"]
    ev = found[0]
    assert ev["step"] == 6 and ev["generation"] == 1 and ev["recovery"].startswith(recovery), ev
    # found within hang + one interval (plus a pass's own time), from the last report's own time
    last_at = report_times((root / ".launcher/metrics/g1.jsonl").read_bytes())[-1][1]
    assert HANG_S <= ev["age_s"] <= HANG_S + INTERVAL_S + PASS_S, ev
    assert ev["ts"] - last_at >= HANG_S
    # the stacks, beside the attempt record in the job folder: the program's own frames
    stacks = Path(ev["stacks"])
    assert ev["stacks_by"] == "faulthandler" and stacks.is_dir(), ev
    dumps = list(stacks.glob("*.faulthandler.txt"))
    assert len(dumps) == 1 and "hang_forever_in_user_code" in dumps[0].read_text(), dumps
    assert st["attempts"][0]["hang"]["stacks"] == str(stacks)
    text = cli.run("status", job).stdout
    assert f"stacks in {stacks}" in text, text
    log = cli.output(job)  # the last attempt's on Slurm, every attempt's on local
    assert log.count("DONE gen") == 1 and "hanging at step 6" not in log.split("started gen 2")[-1], log
    return st


def test_a_hung_run_is_found_its_stacks_stored_and_the_job_resubmitted_local(cli):
    spec, root = hang_spec(cli, "hang-local")
    job = cli.launch(spec, "local")
    watcher = start_watcher(cli, 0, interval=INTERVAL_S)
    try:
        st = check_hang(cli, job, root, ["FAILED", "COMPLETED"], "resubmission")
    finally:
        stop_watchers([watcher])
    assert st["attempts"][0]["exit_code"] == 128 + signal.SIGKILL and st["attempts"][0]["hang"]["killed"] is True
    assert st["attempts"][1]["resume_step"] == 6  # from the last commit before the hang
    retry = [e for e in st["events"] if e["kind"] == "resubmitted"]
    assert len(retry) == 1 and "HANG" in json.dumps(retry[0]) and "hang_restarts" in json.dumps(retry[0]), retry


def test_a_hung_run_is_rerun_in_its_allocation_with_in_job_local(cli):
    spec, root = hang_spec(cli, "hang-injob", in_job={"kind": "allocation", "max_restarts": 2, "window": "1h"})
    job = cli.launch(spec, "local")
    watcher = start_watcher(cli, 0, interval=INTERVAL_S)
    try:
        st = check_hang(cli, job, root, ["COMPLETED"], "in-job rerun")
    finally:
        stop_watchers([watcher])
    reruns = [e for e in st["events"] if e["kind"] == "in_job_restart"]
    assert [(e["restart"], e["exit"]) for e in reruns] == [(1, 128 + signal.SIGKILL)], st["events"]
    assert not [e for e in st["events"] if e["kind"] in ("resubmitted", "retry_scheduled", "gave_up")]


def test_a_hung_run_with_no_known_process_is_cancelled_and_resubmitted_local(cli):
    """recovery.signal: USR2 owns SIGUSR2, so the job side registers no stack file: no process of the
    run is known, nothing is dumped or killed. The watch cancels the attempt through the backend
    instead (never recording it killed) and resubmits it on the hang budget."""
    spec, root = hang_spec(cli, "hang-usr2", signal="USR2")
    job = cli.launch(spec, "local")
    watcher = start_watcher(cli, 0, interval=INTERVAL_S)
    try:
        st = cli.wait_state(job, ["COMPLETED", "FAILED", "GAVE_UP", "CANCELLED"], timeout=180, interval=0.5)
    finally:
        stop_watchers([watcher])
    assert st["state"] == "COMPLETED", st
    assert [a["state"] for a in st["attempts"]] == ["CANCELLED", "COMPLETED"], st["attempts"]
    hung = st["attempts"][0]["hang"]
    assert hung["killed"] is False and hung["cancelled"] is True and hung["stacks"] == "", hung
    assert "recovery.signal is USR2" in hung["no_stacks"], hung
    (ev,) = [e for e in st["events"] if e["kind"] == "hang_detected"]
    assert ev["step"] == 6 and ev["recovery"].startswith("cancel through its backend"), ev
    assert len([e for e in st["events"] if e["kind"] == "hang_cancelled"]) == 1, st["events"]
    retry = [e for e in st["events"] if e["kind"] == "resubmitted"]
    assert len(retry) == 1 and "HANG" in json.dumps(retry[0]) and "hang_restarts" in json.dumps(retry[0]), retry
    assert st["attempts"][1]["resume_step"] == 6
    assert "cancelled through its backend" in cli.run("status", job).stdout


# ---- the same on the netns Slurm cluster
@pytest.mark.slurm
def test_a_hung_run_is_found_its_stacks_stored_and_the_job_resubmitted_slurm(cli, clean_queue):
    base = clean_queue.shared_dir / f"hang-{cli.tmp.name}"
    base.mkdir()
    spec, root = hang_spec(cli, "hang-slurm", base=base, resources={"nodes": 1, "time_limit": "10m"})
    job = cli.launch(spec)
    watcher = start_watcher(cli, 0, interval=INTERVAL_S)
    try:
        st = check_hang(cli, job, root, ["FAILED", "COMPLETED"], "resubmission", timeout=300)
    finally:
        stop_watchers([watcher])
    assert st["attempts"][1]["resume_step"] == 6
    assert clean_queue.job(st["attempts"][0]["native_id"])["Restarts"] == "0"  # resubmitted, not requeued
