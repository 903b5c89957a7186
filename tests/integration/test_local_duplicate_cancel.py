"""Issue 28, HIGH 1: on the local target, a watcher frozen past its claim inside the backend's
submit (fault point ``local_before_start``: the script is written, no process started yet)
lets another watcher submit the same attempt; when the frozen one resumes it starts a
duplicate, cannot record it (its claim lapsed) and cancels it (``settle_unrecorded``). That
cancel must reach the duplicate only: the real attempt, submitted and recorded by the other
watcher, runs to its own end and recovery goes on from there. Three variants: the attempt
exits 0, the attempt fails (its successor must follow), and a sweep element's start.

Real processes throughout: `launcher watch` and `launcher launch` on the local target."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.fixtures.polling import poll

from .launcher_cli import LAUNCHER

TTL_S = 2.0
POINT = "local_before_start"

PROGRAM = textwrap.dedent("""
    import os, sys, time
    job, index = os.environ["LAUNCHER_JOB_ID"], os.environ.get("LAUNCHER_SWEEP_INDEX", "")
    attempt = int(os.environ["LAUNCHER_ATTEMPT"])
    with open(os.environ["STARTS"], "a") as f:
        f.write("%s %d %s\\n" % (job, attempt, os.environ.get("LAUNCHER_SELF_ID", "?")))
    hold = os.environ.get("HOLD_" + index) or os.environ.get("HOLD_" + str(attempt)) or "0.2"
    time.sleep(float(hold))
    sys.exit(1 if attempt < int(os.environ.get("FAIL_BELOW", "0")) else 0)
""")


def _setup(cli, env: dict, sweep: dict = None) -> Path:
    cli.env["LAUNCHER_CLAIM_TTL"] = f"{TTL_S:g}"
    prog = cli.tmp / "prog.py"
    prog.write_text(PROGRAM)
    starts = cli.tmp / "starts"
    starts.touch()
    body = {"run": f"{sys.executable} {prog}", "env": {"STARTS": str(starts), **env},
            "recovery": {"app_error": 3}}
    if sweep:
        body["sweep"] = sweep
    return cli.spec("dup", body)


def _starts(cli) -> list:
    return [ln.split() for ln in (cli.tmp / "starts").read_text().splitlines() if ln.strip()]


def _frozen_watcher(cli) -> tuple:
    """A `launcher watch` loop that stops itself (SIGSTOP) at its first local submission,
    inside the backend's submit; (its Popen, the faults log)."""
    log = cli.tmp / "faults.log"
    log.touch()
    env = {**cli.env, "LAUNCHER_FAULTS": f"{POINT}=pause", "LAUNCHER_FAULTS_LOG": str(log)}
    out = open(cli.tmp / "frozen.log", "ab")
    p = subprocess.Popen([LAUNCHER, "watch", "--exit-when-idle", "--interval", "0.3"], env=env, stdout=out,
                         stderr=subprocess.STDOUT, cwd=str(cli.tmp), start_new_session=True)
    out.close()
    poll(f"the frozen watcher reached {POINT} (faults log {log})", lambda: log.read_text().strip(), timeout=180,
         interval=0.1, detail=lambda: (cli.tmp / "frozen.log").read_text()[-2000:])
    return p, log


def _stop(p) -> None:
    if p.poll() is None:
        os.killpg(p.pid, signal.SIGCONT)
        os.killpg(p.pid, signal.SIGTERM)
        p.wait(timeout=60)


def _recorded(cli, job: str, attempt: int):
    row = cli.status(job)
    return next((a for a in row["attempts"] if a["attempt"] == attempt), None)


def _the_other_watcher_submits(cli, job: str, attempt: int) -> str:
    """After the frozen watcher's claim lapsed: `watch --once` until ATTEMPT of JOB is
    recorded (submitted by this other watcher); its native id."""
    import time

    time.sleep(TTL_S + 1.5)

    def recorded():
        cli.run("watch", "--once", check=False)
        a = _recorded(cli, job, attempt)
        return a and a["native_id"]

    return poll(f"attempt {attempt} of {job} submitted by the other watcher", recorded, timeout=180, interval=0.3)


def _duplicate_cancelled(cli, job: str, attempt: int, real: str) -> str:
    """The frozen watcher, continued, starts its duplicate and cancels it: its native id."""
    def cancelled():
        events = [e for e in cli.status(job)["events"] if e["kind"] == "duplicate_cancelled"]
        return events and events[0]

    e = poll(f"the frozen watcher cancelled its duplicate of {job} attempt {attempt}", cancelled, timeout=180,
             interval=0.3, detail=lambda: (cli.tmp / "frozen.log").read_text()[-2000:])
    assert e["attempt"] == attempt and str(e["native_id"]) != real, e
    return str(e["native_id"])


def _settle(cli, jobs) -> dict:
    def closed():
        cli.run("watch", "--once", check=False)
        rows = {j: cli.status(j) for j in jobs}
        return all(not r["open"] for r in rows.values()) and rows

    return poll(f"{jobs} closed", closed, timeout=240, interval=0.5)


def _resubmission_case(cli, fail_below: int) -> tuple:
    """Attempt 1 fails; attempt 2 is submitted by the other watcher while the frozen one
    waits in submit; the duplicate is cancelled while the real attempt 2 still runs."""
    spec = _setup(cli, {"FAIL_BELOW": str(fail_below), "HOLD_2": "6"})
    job = cli.launch(spec, "local")
    frozen, _ = _frozen_watcher(cli)  # it resubmits attempt 2 after attempt 1 failed: frozen in submit
    try:
        real = _the_other_watcher_submits(cli, job, 2)
        poll("the real attempt 2 ran user code", lambda: [s for s in _starts(cli) if s[1] == "2"], timeout=120,
             interval=0.1)
        os.killpg(frozen.pid, signal.SIGCONT)
        dup = _duplicate_cancelled(cli, job, 2, real)
    finally:
        _stop(frozen)
    return job, real, dup


def test_cancelling_the_duplicate_of_an_attempt_that_exits_0_leaves_it_completed(cli):
    job, real, dup = _resubmission_case(cli, fail_below=2)
    row = _settle(cli, [job])[job]
    a2 = _recorded(cli, job, 2)
    assert a2["native_id"] == real and a2["state"] == "COMPLETED" and a2["exit_code"] == 0, (a2, dup)
    assert row["state"] == "COMPLETED", row
    assert [s[1] for s in _starts(cli)] == ["1", "2"], _starts(cli)  # the duplicate ran no user code
    assert _starts(cli)[1][2] == real


def test_cancelling_the_duplicate_of_a_failing_attempt_leaves_it_failed_and_its_successor_runs(cli):
    job, real, dup = _resubmission_case(cli, fail_below=3)
    row = _settle(cli, [job])[job]
    a2, a3 = _recorded(cli, job, 2), _recorded(cli, job, 3)
    assert a2["native_id"] == real and a2["state"] == "FAILED" and a2["exit_code"] == 1, (a2, dup)
    assert a3 is not None and a3["state"] == "COMPLETED", row["attempts"]
    assert row["state"] == "COMPLETED", row
    assert [s[1] for s in _starts(cli)] == ["1", "2", "3"], _starts(cli)


def test_cancelling_the_duplicate_of_a_sweep_elements_start_leaves_the_element_running(cli):
    """Element 1 of a local sweep (one at a time) is started by the frozen watcher's fill
    when element 0 ends; the other watcher takes the lost start back and starts it itself."""
    spec = _setup(cli, {"HOLD_0": "1", "HOLD_1": "6"}, sweep={"grid": {"lr": [1, 2]}, "max_parallel": 1})
    p = cli.run("launch", spec, "--target", "local")
    sweep = json.loads(cli.run("status", "--json").stdout)[0]["job_id"].rsplit("-e", 1)[0]
    e1 = f"{sweep}-e1"
    assert p.returncode == 0
    frozen, _ = _frozen_watcher(cli)  # element 0 ended: its fill starts element 1, frozen in submit
    try:
        real = _the_other_watcher_submits(cli, e1, 1)
        poll("element 1 ran user code", lambda: [s for s in _starts(cli) if s[0] == e1], timeout=120, interval=0.1)
        os.killpg(frozen.pid, signal.SIGCONT)
        dup = _duplicate_cancelled(cli, e1, 1, real)
    finally:
        _stop(frozen)
    rows = _settle(cli, [f"{sweep}-e0", e1])
    a1 = _recorded(cli, e1, 1)
    assert a1["native_id"] == real and a1["state"] == "COMPLETED" and a1["exit_code"] == 0, (a1, dup)
    assert rows[e1]["state"] == "COMPLETED" and rows[f"{sweep}-e0"]["state"] == "COMPLETED", rows
    assert sorted(s[0] for s in _starts(cli)) == [f"{sweep}-e0", e1], _starts(cli)
