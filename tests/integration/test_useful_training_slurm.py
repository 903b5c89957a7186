"""Issue 30's targets, measured on the Slurm test cluster: the job of
test_useful_training_local.py (checkpoints every 5 steps, reports its model FLOPs) runs under
`launcher watch --interval 2`, and the test interrupts it four times: SIGKILL of the program
(the job fails: the watcher notices and resubmits), a preemption notice to the batch shell
(`scancel --signal=USR1 --batch`, as the scheduler gives one before it preempts: the program
saves and exits 75, the job script requeues the job in place), SIGKILL, and a notice again.

Truth the test records itself: each fault's moment, the program's step log, when `scontrol`
first showed each run ended (polled by the test), and each run's start and end from the
scheduler's own completion records (`sacct -c`, whole seconds). `launcher report JOB --json`
must agree (tests/integration/useful_training.py): the categories add up to the wall time
within 1 s, each detection clock is within one watch interval of the truth, effective MFU is
within 1% of the recomputation. No `launcher status` runs while the schedule does."""

from __future__ import annotations

import json
import time
from datetime import datetime

import pytest

from tests.fixtures.polling import poll

from .launcher_cli import LauncherCLI, start_watcher, stop_watchers
from .useful_training import PEAK_TFLOPS, Truth, WatcherPasses, check_report, kill, preempt, program_run, read_log

pytestmark = pytest.mark.slurm

INTERVAL = 2.0  # the watcher's --interval
STEPS, EVERY, STEP_S = 60, 5, 0.1
SCHEDULE = ((1, 13, "kill"), (2, 23, "preempt"), (3, 37, "kill"), (4, 48, "preempt"))
RUNNING = ("RUNNING", "COMPLETING", "CONFIGURING", "SIGNALING")  # a run that has not ended (unless requeued)


def _seen_ended(cluster, job_id: str, restart: int, timeout: float = 60) -> tuple[float, float]:
    """When `scontrol show job` first showed run RESTART of JOB_ID ended (the job failed, or
    Slurm requeued it: its restart count went up; a requeued run's processes may take KillWait
    longer to go, while the job shows COMPLETING), polled every 0.05 s: (the start of the poll
    before the one that saw it, the end of the one that saw it), the moment lies in between."""
    before = time.time()
    deadline = before + timeout
    while True:
        start = time.time()
        job = cluster.job(job_id)
        state = job.get("JobState", "")
        if (state and state not in RUNNING) or int(job.get("Restarts", "0") or 0) > restart:
            return before, time.time()
        assert time.time() < deadline, f"job {job_id}'s run {restart} not seen ended within {timeout:.0f} s: {job}"
        before = start
        time.sleep(0.05)


def _runs(cluster, log: list) -> list:
    """[(start, end)] of every run of the job, in generation order, from the scheduler's
    completion records (jobcomp/filetxt, one line per run; whole seconds, local time)."""
    starts = [e for e in log if e["event"] == "start"]
    ids = list(dict.fromkeys(e["slurm_job"] for e in starts))
    out = cluster.run("sacct", "-c", "-n", "-P", "-j", ",".join(ids), "-o", "JobID,State,Start,End").stdout
    print("sacct -c:\n" + out)
    recs: dict = {}
    for line in out.splitlines():
        jid, state, start, end = line.split("|")[:4]
        recs.setdefault(jid, []).append((datetime.fromisoformat(start).timestamp(),
                                         datetime.fromisoformat(end).timestamp()))
    return [recs[e["slurm_job"]][e["restart"]] for e in starts]


@pytest.mark.timeout(600)
def test_a_fault_schedule_on_slurm_is_measured_right(clean_queue, tmp_path):
    cli = LauncherCLI(tmp_path, clean_queue)
    base = clean_queue.shared_dir / f"useful-{tmp_path.name}"
    base.mkdir()
    log = base / "steps.jsonl"
    run = program_run(base / "prog.py", log, STEPS, EVERY, STEP_S, [(g, s) for g, s, _ in SCHEDULE])
    spec = cli.spec("useful", {"run": run, "checkpoint": {"root": str(base / "ckpt")},
                               "recovery": {"app_error": 5, "preemption": 5},
                               "resources": {"nodes": 1, "time_limit": "10m", "peak_tflops": PEAK_TFLOPS}})
    job = cli.launch(spec)
    faults = []

    def notice(pid):
        (start,) = [e for e in read_log(log) if e["event"] == "start" and e["pid"] == pid]
        clean_queue.run("scancel", "--signal=USR1", "--batch", start["slurm_job"])

    with WatcherPasses(cli.home / "state.db") as passes:
        watcher = start_watcher(cli, 0, interval=INTERVAL)
        try:
            for gen, step, kind in SCHEDULE:
                f = kill(log, gen, step) if kind == "kill" else preempt(log, gen, step, notice)
                (start,) = [e for e in read_log(log) if e["event"] == "start" and e["gen"] == gen]
                f.visible, f.seen = _seen_ended(clean_queue, start["slurm_job"], start["restart"])
                faults.append(f)
            poll("the last generation done", lambda: any(e["event"] == "done" for e in read_log(log)), timeout=240,
                 interval=0.2)
            watcher.wait(timeout=180)  # --exit-when-idle: it closed the job
        finally:
            stop_watchers([watcher])
    assert watcher.returncode == 0, (cli.tmp / "watch0.log").read_text()

    st = cli.status(job)
    steps = read_log(log)
    truth = Truth(steps, faults, _runs(clean_queue, steps), submitted=st["attempts"][0]["submitted"])
    rep = json.loads(cli.run("report", job, "--json").stdout)
    print(cli.run("report", job).stdout)
    # a pass records an end it saw before it returns, and the next pass starts at most one
    # interval after the one before it began: so the watcher notices an end at most one interval
    # plus one pass after it became visible. The pass's own length is measured (the heartbeat
    # row every pass writes, sampled by the test). The test's own view of the end is an scontrol
    # call every 0.05 s: the end became visible between the start of the call before the one that
    # saw it and the end of that one (check_report bounds the noticing on both sides of that).
    slack = passes.longest_s + 0.05  # + the watcher's wait for its next pass overshooting a little under load
    m = check_report(rep, truth, INTERVAL, slack, resolution=1.0)
    print(f"slurm: watcher passes sampled {len(passes.passes)}, longest {passes.longest_s:.3f} s; "
          f"figures {json.dumps(m, default=str)}")
    # each run is over in every view: the two the job script requeued in place (Slurm recorded
    # them PENDING, the state the requeue left the job in) too, with the scheduler's end
    assert st["state"] == "COMPLETED", st
    assert [a["state"] for a in st["attempts"]] == ["FAILED", "REQUEUED", "FAILED", "REQUEUED", "COMPLETED"], \
        st["attempts"]
    assert [a["ended"] for a in st["attempts"]] == [end for _, end in truth.runs], (st["attempts"], truth.runs)
    assert [c["noticed_by"] for c in rep["clocks"]] == ["launcher", "scheduler", "launcher", "scheduler"], rep["clocks"]
