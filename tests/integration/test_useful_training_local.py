"""Issue 30's targets, measured on the local target: a job that checkpoints every 5 steps and
reports its model FLOPs runs under `launcher watch --interval 1`, and the test interrupts it
four times (SIGKILL, a preemption notice answered with a save and exit 75, SIGKILL, notice)
before it completes. From its own records (each fault's moment, the program's step log with
timestamps, when the local scheduler's exit file appeared, each run's start and end) the test
checks `launcher report JOB --json` (tests/integration/useful_training.py):

- the categories add up to the wall time within 1 s;
- each detection clock is within one watch interval of the truth (plus what a pass of the
  watcher measurably took on this machine);
- effective MFU is within 1% of a recomputation from the step log and the runs' times.

No `launcher status` runs while the schedule does: the watcher alone notices each end."""

from __future__ import annotations

import json
import os
import signal
import subprocess

import pytest

from tests.fixtures.polling import poll

from .launcher_cli import start_watcher, stop_watchers
from .useful_training import PEAK_TFLOPS, Truth, WatcherPasses, check_report, kill, preempt, program_run, read_log

INTERVAL = 1.0  # the watcher's --interval
STEPS, EVERY, STEP_S = 60, 5, 0.1
# (generation, step it holds at, fault): each kill loses the steps since the last commit (3, 2)
SCHEDULE = ((1, 13, "kill"), (2, 23, "preempt"), (3, 37, "kill"), (4, 48, "preempt"))


def _run_times(home, job: str, attempt: dict) -> tuple[float, float]:
    """(start, end) of ATTEMPT's run as the local target's own scheduler, its supervisor process,
    wrote them: its start marker, written before it starts the job, and its exit file, written
    when the job ended (the first moment any status call could see that it had)."""
    d = home / "jobs" / job
    n, pid = attempt["attempt"], attempt["native_id"]
    return (d / f"attempt-{n}.{pid}.started").stat().st_mtime, (d / f"exit-{n}.{pid}").stat().st_mtime


@pytest.mark.timeout(420)
def test_a_fault_schedule_on_local_is_measured_right(cli):
    log = cli.tmp / "steps.jsonl"
    run = program_run(cli.tmp / "prog.py", log, STEPS, EVERY, STEP_S, [(g, s) for g, s, _ in SCHEDULE])
    spec = cli.spec("useful", {"run": run, "checkpoint": {"root": str(cli.tmp / "ckpt")},
                               "recovery": {"app_error": 5, "preemption": 5},
                               "resources": {"peak_tflops": PEAK_TFLOPS}})
    job = cli.launch(spec, "local")
    faults = []
    with WatcherPasses(cli.home / "state.db") as passes:
        watcher = start_watcher(cli, 0, interval=INTERVAL)
        try:
            for gen, step, kind in SCHEDULE:
                if kind == "kill":
                    faults.append(kill(log, gen, step))
                else:
                    faults.append(preempt(log, gen, step, lambda pid: os.kill(pid, signal.SIGUSR1)))
            poll("the last generation done", lambda: any(e["event"] == "done" for e in read_log(log)), timeout=180,
                 interval=0.2)
            watcher.wait(timeout=120)  # --exit-when-idle: it closed the job
        finally:
            stop_watchers([watcher])
    assert watcher.returncode == 0, (cli.tmp / "watch0.log").read_text()

    st = cli.status(job)
    assert st["state"] == "COMPLETED", st
    assert [a["state"] for a in st["attempts"]] == ["FAILED", "PREEMPTED", "FAILED", "PREEMPTED", "COMPLETED"], \
        st["attempts"]
    runs = [_run_times(cli.home, job, a) for a in st["attempts"]]
    for f, (_, end) in zip(faults, runs):
        f.visible = end
    truth = Truth(read_log(log), faults, runs, submitted=st["attempts"][0]["submitted"])
    rep = json.loads(cli.run("report", job, "--json").stdout)
    # a pass records an end it saw before it returns, and the next pass starts at most one
    # interval after the one before it began: so the watcher notices an end at most one interval
    # plus one pass after it became visible. The pass's own length is measured (the heartbeat
    # row every pass writes, sampled by the test): tens of ms on a quiet machine, more under CI load.
    slack = passes.longest_s + 0.05  # + the watcher's wait for its next pass overshooting a little under load
    m = check_report(rep, truth, INTERVAL, slack, resolution=0.0)
    print(f"local: watcher passes sampled {len(passes.passes)}, longest {passes.longest_s:.3f} s; "
          f"figures {json.dumps(m, default=str)}")
    assert all(c["noticed_by"] == "launcher" for c in rep["clocks"]), rep["clocks"]
