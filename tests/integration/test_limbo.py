"""Nothing is left in limbo (local target, real processes): a launch killed between the
scheduler's accept and the state write is adopted through its dedupe token (or failed
after a grace period when nothing was started), and `cancel` cancels what really runs
and says what it did."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time

import pytest

from tests.fixtures.polling import poll

from .launcher_cli import LAUNCHER


def killed_launch(cli, when: str) -> str:
    """Run `launch` in a process that dies (os._exit, no cleanup) right after the scheduler
    accepted the job ("after_submit") or right before submitting ("before_submit")."""
    spec = cli.spec("limbo", {"run": f"echo started >> {cli.tmp / 'starts'}; sleep 300"})
    code = textwrap.dedent(f"""
        import os, sys
        from launcher.api.context import App
        from launcher.launching.launch import launch
        from launcher.backend.sections import load_spec
        app = App()
        if {when!r} == "after_submit":
            app.store.record_submission = lambda *a, **k: os._exit(137)
        else:
            app.backend("local").submit = lambda *a, **k: os._exit(137)
        text = open({str(spec)!r}).read()
        launch(app, load_spec({str(spec)!r}), text, {str(spec)!r}, "local")
    """)
    p = subprocess.run([sys.executable, "-c", code], env=cli.env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 137, p.stderr
    (job_dir,) = (cli.home / "jobs").iterdir()  # not `status`: it would reconcile the row already
    return job_dir.name


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_a_launch_killed_after_the_accept_is_adopted_by_status(cli):
    job = killed_launch(cli, "after_submit")
    p = cli.run("status", job, "--json")
    st = json.loads(p.stdout)
    assert "adopted" in p.stderr and st["state"] in ("PENDING", "RUNNING"), (p.stderr, st)
    assert [a["attempt"] for a in st["attempts"]] == [1] and st["attempts"][0]["native_id"]
    assert any(e["kind"] == "adopted" for e in st["events"])
    out = cli.run("cancel", job).stdout
    assert f"cancelled attempt 1 (local id {st['attempts'][0]['native_id']})" in out
    assert not alive(int(st["attempts"][0]["native_id"]))
    assert (cli.tmp / "starts").read_text().count("started") == 1


def test_a_launch_killed_after_the_accept_is_adopted_by_watch(cli):
    job = killed_launch(cli, "after_submit")
    out = cli.run("watch", "--once").stdout
    assert f"{job}: adopted" in out
    assert cli.status(job)["state"] in ("PENDING", "RUNNING")
    cli.run("cancel", job)


def test_a_launch_killed_before_the_accept_fails_after_the_grace_period(cli, monkeypatch):
    from launcher.api.context import App
    from launcher.recovery import policy, watch

    job = killed_launch(cli, "before_submit")
    assert "waiting" in cli.run("watch", "--once").stdout  # within the grace: the launch may still run
    assert cli.status(job)["state"] == "SUBMITTING"
    for k, v in cli.env.items():
        monkeypatch.setenv(k, v)
    app = App()
    try:
        (o,) = watch.reconcile(app, clock=lambda: time.time() + policy.SUBMITTING_GRACE_S + 1)
    finally:
        app.close()
    assert o.action == "failed"
    st = cli.status(job)
    assert st["state"] == "FAILED" and not st["open"] and "nothing ran" in st["reason"]
    assert "no open jobs left" in cli.run("watch", "--exit-when-idle").stdout


def test_cancel_of_a_submitting_row_finds_and_cancels_the_real_job(cli):
    job = killed_launch(cli, "after_submit")
    # the detached supervisor writes its marker (attempt-1.PID.started: named by its own pid)
    # on its own schedule, after the accept
    markers = lambda: [m for m in (cli.home / "jobs" / job).glob("attempt-1.*.started") if m.read_text().strip()]
    (marker,) = poll("supervisor marker", markers, timeout=15)
    pid = int(marker.read_text().split()[0])
    assert marker.name == f"attempt-1.{pid}.started"
    assert alive(pid)
    out = cli.run("cancel", job).stdout
    assert f"cancelled attempt 1 (local id {pid})" in out and "closed as CANCELLED" in out
    poll("process gone", lambda: not alive(pid), timeout=15)
    assert cli.status(job)["state"] == "CANCELLED"


def test_cancel_of_a_finished_job_says_so_and_writes_no_event(cli):
    spec = cli.spec("quick", {"run": "true"})
    job = cli.launch(spec, "local")
    poll("completed", lambda: cli.status(job)["state"] == "COMPLETED", timeout=30)
    before = cli.status(job)["events"]
    p = cli.run("cancel", job)
    assert p.stdout.strip() == f"{job}: had already finished: COMPLETED; nothing to cancel"
    assert cli.status(job)["events"] == before


def test_cancel_of_an_attempt_that_ended_closes_the_job_and_says_nothing_ran(cli):
    spec = cli.spec("pre", {"run": "exit 75", "checkpoint": {"root": str(cli.tmp / "ck")}})
    job = cli.launch(spec, "local")
    poll("preempted", lambda: cli.status(job)["state"] == "PREEMPTED", timeout=30)
    out = cli.run("cancel", job).stdout
    assert "the scheduler had nothing running for it (attempt 1 ended PREEMPTED)" in out
    assert "cancelled attempt" not in out
    st = cli.status(job)
    assert st["state"] == "CANCELLED" and not st["open"]
    assert "no open jobs left" in cli.run("watch", "--exit-when-idle").stdout
    assert [a["attempt"] for a in cli.status(job)["attempts"]] == [1]


def test_cancel_waits_for_a_watcher_holding_the_job_and_then_refuses_without_cancelling(cli, monkeypatch):
    from launcher.api.context import App
    from launcher.recovery.cancel import cancel_job
    from launcher.core.errors import LauncherError
    from launcher.state.store import StateStore

    spec = cli.spec("held", {"run": "sleep 300"})
    job = cli.launch(spec, "local")
    other = StateStore(cli.home)
    assert other.claim(job, ttl=60) is not None  # a watcher is deciding on this job right now
    for k, v in cli.env.items():
        monkeypatch.setenv(k, v)
    app = App()
    try:
        with pytest.raises(LauncherError, match="another launcher"):
            cancel_job(app, job, wait_claim_s=0.5)
        assert cli.status(job)["state"] == "RUNNING"
        other.release(job)
        report = cancel_job(app, job)
        assert report.ok and len(report.cancelled) == 1
    finally:
        app.close()
        other.close()
    assert cli.status(job)["state"] == "CANCELLED"


# ---------------------------------------------------------------- unknown outcomes and in-flight launches
def faulty_launch(cli, faults: str, run: str = None):
    """`launcher launch` with the fault points FAULTS (launcher.core.faults), in the background:
    (its Popen, the job id once its SUBMITTING row's folder exists)."""
    spec = cli.spec("flight", {"run": run or f"echo started >> {cli.tmp / 'starts'}; sleep 300"})
    env = {**cli.env, "LAUNCHER_FAULTS": faults}
    p = subprocess.Popen([LAUNCHER, "launch", str(spec), "--target", "local"], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    poll("the launch's job folder", lambda: (cli.home / "jobs").exists() and any((cli.home / "jobs").iterdir()),
         timeout=30)
    (job_dir,) = (cli.home / "jobs").iterdir()
    return p, job_dir.name


def starts(cli) -> int:
    f = cli.tmp / "starts"
    return f.read_text().count("started") if f.exists() else 0


def test_cancel_during_a_slow_launch_waits_for_it_and_cancels_what_it_submitted(cli):
    p, job = faulty_launch(cli, "between_submit_and_record=sleep:4")
    out = cli.run("cancel", job).stdout  # while the launch holds the scheduler's answer unrecorded
    assert p.wait(timeout=60) == 0, p.stderr
    st = cli.status(job)
    (a,) = st["attempts"]
    assert f"cancelled attempt 1 (local id {a['native_id']})" in out and "closed as CANCELLED" in out, out
    assert st["state"] == "CANCELLED" and not st["open"]
    poll("process gone", lambda: not alive(int(a["native_id"])), timeout=15)
    assert "no open jobs left" in cli.run("watch", "--exit-when-idle").stdout  # nothing reopened it


def test_a_launch_interrupted_after_the_accept_keeps_its_row_and_status_adopts_it(cli):
    p, job = faulty_launch(cli, "between_submit_and_record=interrupt")
    assert p.wait(timeout=60) != 0
    pre = json.loads(cli.run("status", job, "--json").stdout)
    assert pre["state"] in ("PENDING", "RUNNING"), pre
    kinds = [e["kind"] for e in pre["events"]]
    assert "submit_outcome_unknown" in kinds and "adopted" in kinds, kinds
    poll("its one start", lambda: starts(cli) == 1, timeout=15)
    cli.run("cancel", job)
    assert starts(cli) == 1


def test_a_launch_killed_after_the_accept_is_adopted_at_once_by_its_token(cli):
    p, job = faulty_launch(cli, "between_submit_and_record=kill")
    assert p.wait(timeout=60) == -9
    st = cli.status(job)
    assert st["state"] in ("PENDING", "RUNNING") and [a["attempt"] for a in st["attempts"]] == [1], st
    poll("its one start", lambda: starts(cli) == 1, timeout=15)
    out = cli.run("watch", "--once").stdout
    assert "resubmitted" not in out
    cli.run("cancel", job)
    assert starts(cli) == 1


def test_a_launch_paused_before_the_scheduler_call_and_cancelled_meanwhile_submits_nothing(cli):
    import signal

    faults_log = cli.tmp / "faults.log"
    spec = cli.spec("paused", {"run": f"echo started >> {cli.tmp / 'starts'}; sleep 300"})
    env = {**cli.env, "LAUNCHER_FAULTS": "between_lookup_and_submit=pause", "LAUNCHER_FAULTS_LOG": str(faults_log)}
    p = subprocess.Popen([LAUNCHER, "launch", str(spec), "--target", "local"], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        poll("the launch paused", lambda: faults_log.exists() and faults_log.read_text(), timeout=30)
        (job_dir,) = (cli.home / "jobs").iterdir()
        # a paused launch is alive: cancel waits for it (bounded: 1 s here), then closes the job
        out = cli.run("cancel", job_dir.name, env={"LAUNCHER_CANCEL_LAUNCH_WAIT": "1"}).stdout
        assert "closed as CANCELLED" in out, out
    finally:
        p.send_signal(signal.SIGCONT)
    _, err = p.communicate(timeout=60)
    assert p.returncode != 0 and "cancelled before it was submitted" in err, err
    assert starts(cli) == 0 and cli.status(job_dir.name)["state"] == "CANCELLED"
