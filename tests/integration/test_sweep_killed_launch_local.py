"""Issue 28, MEDIUM 5: a local sweep launch killed (-9) just before element 0's supervisor
starts (fault point ``between_lookup_and_submit``) leaves element 0 SUBMITTING with nothing
submitted. `launcher watch` puts it back into the sweep's queue once the launch is known
over and quiet (no job with its token, no trace of a start) and starts it as a slot frees:
it is never closed FAILED ("launch it again", which would run the whole sweep again), and
every element runs exactly once. Real `launcher` processes on the local target."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from tests.fixtures.polling import poll

from .launcher_cli import LAUNCHER


def test_a_sweep_launch_killed_before_element_0_started_gets_it_started_by_watch(cli):
    prog = cli.tmp / "prog.py"
    starts = cli.tmp / "starts"
    starts.touch()
    prog.write_text(textwrap.dedent("""
        import os
        with open(os.environ["STARTS"], "a") as f:
            f.write("%s %s\\n" % (os.environ["LAUNCHER_SWEEP_INDEX"], os.environ["LAUNCHER_ATTEMPT"]))
    """))
    spec = cli.spec("m5", {"run": f"{sys.executable} {prog}", "env": {"STARTS": str(starts)},
                           "sweep": {"grid": {"lr": [1, 2, 3]}, "max_parallel": 2}})
    p = subprocess.run([LAUNCHER, "launch", str(spec), "--target", "local"], capture_output=True, text=True,
                       env={**cli.env, "LAUNCHER_FAULTS": "between_lookup_and_submit=kill"}, timeout=120,
                       cwd=str(cli.tmp))
    assert p.returncode == -9, (p.returncode, p.stdout, p.stderr)
    rows = {r["job_id"]: r for r in json.loads(cli.run("status", "--json").stdout)}
    e0 = next(j for j in rows if j.endswith("-e0"))
    assert rows[e0]["state"] == "SUBMITTING", rows  # the launch died before submitting it
    sweep = e0[:-len("-e0")]

    def all_closed():
        cli.run("watch", "--once", check=False)
        got = {r["job_id"]: r for r in json.loads(cli.run("status", "--json").stdout) if r["job_id"].startswith(sweep)}
        assert got[e0]["state"] != "FAILED", got[e0]  # never "nothing ran; launch it again"
        return all(not r["open"] for r in got.values()) and got

    # the launch is over (its process is gone): after the launcher's quiet period (60 s) element 0
    # goes back into the queue and is started like any queued element
    got = poll("every element of the killed sweep launch closed", all_closed, timeout=300, interval=2)
    assert {j: r["state"] for j, r in got.items()} == {f"{sweep}-e{i}": "COMPLETED" for i in range(3)}, got
    assert sorted(starts.read_text().split("\n")[:-1]) == ["0 1", "1 1", "2 1"]  # each element ran once
    events = [e["kind"] for e in cli.status(e0)["events"]]
    assert "start_lost" in events and "submit_lost" not in events, events
