"""Issue 30, honest clocks: an attempt the launcher itself ends (here a cancel) is ended in
every view at once. `launcher report --no-refresh` (what `serve` reads: the store, never the
scheduler) shows a wall time that stops growing, with no `launcher status` call in between.
Real processes: `launcher launch`, `cancel` and `report` on the local target."""

from __future__ import annotations

import json
import sqlite3
import time

from tests.fixtures.polling import poll

from .launcher_cli import LauncherCLI


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
