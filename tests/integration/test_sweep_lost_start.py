"""A watcher SIGKILLed while it starts a queued sweep element, between the SUBMITTING write and
the backend's submit (local target, real processes, the real `launcher watch` after it): the
element goes back to the queue once, with a `start_lost` event saying why, and then runs
exactly once."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap

from .launcher_cli import LauncherCLI, job_id_of
from .test_sweep_local import element_program, intervals


def killed_watcher(cli: LauncherCLI) -> subprocess.CompletedProcess:
    """A watcher whose backend submit SIGKILLs its own process: it dies at the first start of
    a queued element, right after marking it SUBMITTING (the hook the limbo test uses for a
    launch, here for a watcher's start)."""
    code = textwrap.dedent("""
        import os, signal, time
        from launcher.api.context import App
        from launcher.recovery import watch
        from launcher_backends.local.backend import LocalBackend
        LocalBackend.submit = lambda *a, **k: os.kill(os.getpid(), signal.SIGKILL)
        app = App()
        for _ in range(600):
            watch.cycle(app)
            time.sleep(0.1)
    """)
    return subprocess.run([sys.executable, "-c", code], env=cli.env, capture_output=True, text=True, timeout=120)


def state_of(cli: LauncherCLI, job: str) -> str:
    """The stored state, read without `status` (which would reconcile the row)."""
    import sqlite3

    db = sqlite3.connect(cli.home / "state.db")
    try:
        return db.execute("SELECT state FROM jobs WHERE job_id=?", (job,)).fetchone()[0]
    finally:
        db.close()


def two_point_sweep(tmp_path, name: str, ttl: str) -> tuple:
    """(cli, sweep id, element 1's job id, the folder its elements record their runs in) of a
    launched 2-element local sweep running one element at a time, with claims lasting TTL s."""
    cli = LauncherCLI(tmp_path)
    cli.env.update(LAUNCHER_CLAIM_TTL=ttl, HOLD="0.5")
    out = cli.tmp / "out"
    out.mkdir()
    spec = cli.spec(name, {"run": f"{sys.executable} {element_program(cli.tmp)}", "env": {"OUT": str(out)},
                           "checkpoint": {"root": str(cli.tmp / "ck")},
                           "sweep": {"points": [{"lr": 0.001}, {"lr": 0.002}], "max_parallel": 1}})
    sweep_id = job_id_of(cli.run("launch", spec, "--target", "local"))
    return cli, sweep_id, f"{sweep_id}-e1", out


def both_ran_once(cli: LauncherCLI, sweep_id: str, e1: str, out) -> dict:
    """Both elements COMPLETED, each run exactly once, element 1 in one attempt: its status."""
    s = json.loads(cli.run("status", sweep_id, "--json").stdout)
    assert s["counts"] == {"COMPLETED": 2}, s
    runs = intervals(out)
    assert sorted(runs) == [0, 1] and all(len(r) == 1 for r in runs.values()), runs  # exactly once
    st = cli.status(e1)
    assert [a["attempt"] for a in st["attempts"]] == [1]
    return st


def test_a_watcher_killed_while_starting_a_queued_element_leaves_it_queued_and_it_runs_once(tmp_path):
    cli, sweep_id, e1, out = two_point_sweep(tmp_path, "lost", ttl="3")  # the dead watcher's claims expire quickly
    p = killed_watcher(cli)  # element 0 completes, then the start of element 1 kills it
    assert p.returncode == -signal.SIGKILL, p.stderr
    assert state_of(cli, e1) == "SUBMITTING"
    assert sorted(intervals(out)) == [0]  # element 1 never ran

    w = cli.run("watch", "--exit-when-idle", "--interval", "0.3", timeout=300)
    assert "no open jobs left" in w.stdout
    st = both_ran_once(cli, sweep_id, e1, out)
    lost = [e for e in st["events"] if e["kind"] == "start_lost"]
    assert len(lost) == 1 and "nothing ran" in lost[0]["reason"], st["events"]
    kinds = [e["kind"] for e in st["events"]]
    assert kinds.index("start_lost") < kinds.index("submitted")


def slow_watcher(cli: LauncherCLI, delay: float) -> subprocess.Popen:
    """A watcher whose backend takes DELAY seconds (several claim TTLs) to accept each start,
    watching until no job is open."""
    code = textwrap.dedent(f"""
        import time
        from launcher.api.context import App
        from launcher.recovery import watch
        from launcher_backends.local.backend import LocalBackend
        real = LocalBackend.submit
        def slow(self, request):
            time.sleep({delay!r})
            return real(self, request)
        LocalBackend.submit = slow
        app = App()
        for _ in range(1200):
            watch.cycle(app)
            if not app.store.open_jobs():
                break
            time.sleep(0.1)
    """)
    return subprocess.Popen([sys.executable, "-c", code], env=cli.env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)


def test_a_start_slower_than_the_claim_ttl_is_not_taken_over_by_another_watcher_and_runs_once(tmp_path):
    from tests.fixtures.polling import poll

    from .launcher_cli import start_watcher, stop_watchers

    cli, sweep_id, e1, out = two_point_sweep(tmp_path, "slow", ttl="1")  # the start below takes 4 TTLs
    slow = slow_watcher(cli, delay=4.0)  # starts element 1 once element 0 completes
    procs = []
    try:
        poll("element 1's start is under way", lambda: state_of(cli, e1) == "SUBMITTING", timeout=60, interval=0.05)
        procs.append(start_watcher(cli, 0, interval=0.2))  # a real watcher looks at it all along
        assert procs[0].wait(timeout=300) == 0, (cli.tmp / "watch0.log").read_text()
        assert slow.wait(timeout=120) == 0, slow.stdout.read()
    finally:
        stop_watchers([slow, *procs])
    assert "no open jobs left" in (cli.tmp / "watch0.log").read_text()
    st = both_ran_once(cli, sweep_id, e1, out)
    assert not [e for e in st["events"] if e["kind"] == "start_lost"], st["events"]
