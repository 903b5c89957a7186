"""Issue 30, honest clocks: an attempt the launcher itself ends (here a cancel) is ended in
every view at once. `launcher report --no-refresh` (what `serve` reads: the store, never the
scheduler) shows a wall time that stops growing, with no `launcher status` call in between.
Real processes: `launcher launch`, `cancel` and `report` on the local target."""

from __future__ import annotations

import datetime
import json
import os
import shutil
import signal
import sqlite3
import sys
import time
from pathlib import Path
from typing import Optional

import pytest

from tests.fixtures.polling import poll

from .launcher_cli import LauncherCLI, committed_steps


def test_a_cancelled_attempt_is_ended_in_the_report_without_a_status_call(tmp_path):
    cli = LauncherCLI(tmp_path)
    started = tmp_path / "started"
    job = cli.launch(cli.spec("sleeper", {"run": f"touch {started}; sleep 600"}), "local")
    poll("the job started", started.exists, timeout=120, interval=0.2)
    cli.run("cancel", job)

    db = sqlite3.connect(cli.home / "state.db")
    try:
        (state, begun, ended), = db.execute("SELECT state, started, ended FROM attempts WHERE job_id=?",
                                            (job,)).fetchall()
    finally:
        db.close()
    assert state == "CANCELLED" and ended is not None and begun is not None and ended >= begun, (state, begun, ended)

    first = json.loads(cli.run("report", job, "--no-refresh", "--json").stdout)
    time.sleep(2)  # long enough for a running attempt's clock to show
    second = json.loads(cli.run("report", job, "--no-refresh", "--json").stdout)
    assert first["wall_s"] == second["wall_s"], (first["wall_s"], second["wall_s"])


# ---- an interruption's clocks, against the events the test itself caused --------------------
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
WAIT_BEFORE_WATCH = 3.0  # s between the kill and the watcher's pass: the detection clock's truth


def _train_pid(result: Path) -> Optional[int]:
    """The pid of the examples/train.py process writing RESULT (found by its command line)."""
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                argv = (d / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"train.py" in b" ".join(argv) and str(result).encode() in argv:
                return int(d.name)
    return None


def _iso(v: str) -> float:
    return datetime.datetime.fromisoformat(v.replace("Z", "+00:00")).timestamp()


def test_a_killed_and_resumed_job_reports_each_clock_of_its_interruption(tmp_path):
    cli = LauncherCLI(tmp_path)
    shutil.copy(EXAMPLES / "train.py", tmp_path / "train.py")
    root, result = tmp_path / "ckpt", tmp_path / "result.json"
    job = cli.launch(cli.spec("clocks", {
        "workdir": str(tmp_path), "checkpoint": {"root": str(root)}, "recovery": {"app_error": 3},
        "run": [sys.executable, "train.py", "--steps", "60", "--every", "10", "--sleep", "0.1",
                "--result", str(result)]}), "local")
    poll("step 20 committed", lambda: max(committed_steps(cli, root), default=0) >= 20, timeout=120, interval=0.2)
    pid = _train_pid(result)
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    killed = time.time()
    time.sleep(WAIT_BEFORE_WATCH)  # no status call meanwhile: nobody notices
    watch_from = time.time()
    cli.run("watch", "--once")
    watch_to = time.time()
    poll("the replacement completed", lambda: result.exists(), timeout=180, interval=0.5)
    cli.wait_state(job, {"COMPLETED"}, timeout=60)

    d = json.loads(cli.run("report", job, "--json").stdout)
    (c,) = d["clocks"]
    assert (c["attempt"], c["state"], c["replacement"], c["noticed_by"]) == (1, "FAILED", 2, "launcher"), c
    assert c["unknown"] == {} and c["unsplit_s"] == 0, c
    # detection: from the kill to the watcher's pass that recorded it
    assert c["failure_at"] == pytest.approx(killed, abs=0.5)
    assert watch_from - killed - 0.5 <= c["detection_s"] <= watch_to - killed + 0.5, (c, watch_from - killed)
    assert 0 <= c["cleanup_s"] <= watch_to - watch_from
    # lost work: from the end of the last commit of generation 1 (its own record) to the kill
    g1 = json.loads((root / ".launcher" / "attempts" / "g1.json").read_text())
    last = max((s for s in g1["saves"] if s["committed"]), key=lambda s: s["step"])
    assert c["lost_work_s"] == pytest.approx(killed - _iso(last["end"]), abs=0.5)
    # reallocation and restore: the replacement's submission -> its program's start -> restored
    g2 = json.loads((root / ".launcher" / "attempts" / "g2.json").read_text())
    assert g2["resume_step"] == last["step"] and g2["restored"]["step"] == last["step"]
    assert c["reallocation_s"] == pytest.approx(_iso(g2["started"]) - c["resubmitted_at"], abs=0.05)
    assert c["restore_s"] == pytest.approx(_iso(g2["restored"]["at"]) - _iso(g2["started"]), abs=0.05)
    assert watch_from - 0.5 <= c["resubmitted_at"] <= watch_to
    # they add up to the wall time with the other categories
    restart = sum(c[f"{k}_s"] for k in ("detection", "cleanup", "reallocation", "restore"))
    assert restart == pytest.approx(d["categories"]["restart_overhead"], abs=1e-6)
    assert c["lost_work_s"] == pytest.approx(d["categories"]["lost_work"], abs=1e-6)
    assert d["sum_s"] == pytest.approx(d["wall_s"], abs=1e-6)
    assert all(a["started"] is not None for a in d["attempts"])
    text = cli.run("report", job).stdout
    assert "detection " in text and "(noticed by the launcher)" in text and "started -" not in text


def test_a_failed_job_without_checkpoints_ran_and_lost_its_run(tmp_path):
    cli = LauncherCLI(tmp_path)
    job = cli.launch(cli.spec("fails", {"run": "sleep 2; exit 3"}), "local")
    time.sleep(4)  # it ended before any status call saw it running
    d = json.loads(cli.run("report", job, "--json").stdout)
    (a,) = d["attempts"]
    assert a["state"] == "FAILED" and a["started"] is not None, a
    assert d["categories"]["queue_wait"] < 1.0 and d["categories"]["lost_work"] >= 1.5, d["categories"]
    (c,) = d["clocks"]
    assert c["lost_work_s"] == d["categories"]["lost_work"] and c["reallocation_s"] is None
