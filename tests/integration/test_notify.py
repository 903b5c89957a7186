"""Notifications (``notify:``) from `launcher watch`, against a real HTTP receiver on 127.0.0.1
that fails its first answers: three watcher processes at once send each event exactly once
(0 duplicates) and every one lands; the webhook URL, which carries a token, is never written
to the state store, the watchers' output or the job scripts; a slow webhook does not hold a
watch pass up."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from tests.fixtures.polling import poll
from tests.fixtures.webhook import start_webhook, stop_webhook

from .launcher_cli import LauncherCLI, start_watcher, stop_watchers, wait_all_closed

TOKEN = "tok-3f9a1c2b7d4e5f60a1b2c3d4e5f6a7b8"  # the secret part of the webhook's URL


@pytest.fixture
def hook():
    h = start_webhook(fail_first=5)
    yield h
    stop_webhook(h)


def notify_spec(cli: LauncherCLI, name: str, code: int, **extra) -> Path:
    return cli.spec(name, {"run": f"{sys.executable} -c 'import sys, time; time.sleep(0.5); sys.exit({code})'",
                           "recovery": {"app_error": 0},
                           "notify": {"on": ["completed", "failed", "gave_up", "deadline_at_risk"],
                                      "webhook": "${TEAM_WEBHOOK}", "timeout": 2}, **extra})


def test_three_watchers_send_each_event_exactly_once_through_a_failing_webhook(cli, hook):
    cli.env["LAUNCHER_CLAIM_TTL"] = "5"
    cli.env["TEAM_WEBHOOK"] = f"{hook.url}/hooks/team?token={TOKEN}"
    ok = [cli.launch(notify_spec(cli, f"ok{i}", 0), "local") for i in range(3)]
    bad = [cli.launch(notify_spec(cli, f"bad{i}", 3), "local") for i in range(2)]
    jobs = ok + bad
    procs = [start_watcher(cli, i, interval=0.2) for i in range(3)]
    try:
        wait_all_closed(cli, jobs, timeout=120, interval=0.5)
        # the receiver fails its first 5 answers: retried with backoff (2 s, 4 s ...) until each lands
        poll("every notification delivered", lambda: {h.event_id for h in hook.delivered()} >=
             {f"{j}:completed" for j in ok} | {f"{j}:gave_up" for j in bad}, timeout=120, interval=0.5,
             detail=lambda: "\n".join(f"{h.status} {h.event_id}" for h in hook.hits))
        time.sleep(3)  # a duplicate would come now, from a watcher that lost a race
        # once nothing is open and nothing waits in the outbox, every watcher ends by itself
        for p in procs:
            p.wait(timeout=60)
    finally:
        stop_watchers(procs)
    ids = [h.event_id for h in hook.delivered()]
    assert len(ids) == len(set(ids)) == len(jobs), ids  # 0 duplicates
    assert len(hook.failed()) == 5
    for h in hook.delivered():
        job, _, event = h.event_id.partition(":")
        assert h.path == f"/hooks/team?token={TOKEN}"
        assert job in h.body["text"] and event.replace("_", " ") in h.body["text"], h.body  # Slack's shape
    # the token is a secret: only its variable's name is kept
    for f in [cli.home / "state.db", *cli.tmp.glob("watch*.log"), *(cli.home / "jobs").rglob("*")]:
        if f.is_file():
            assert TOKEN.encode() not in f.read_bytes(), f
    st = cli.status(ok[0])
    assert st["state"] == "COMPLETED"


def test_a_literal_webhook_with_a_token_is_refused_naming_the_variable_way(cli):
    spec = cli.spec("leak", {"run": "true", "notify": {"webhook": "https://hooks.slack.com/services/T0/B0/XYZ"}})
    p = cli.run("validate", spec, check=False)
    assert p.returncode != 0
    assert "carries a token" in p.stderr + p.stdout and "${" in p.stderr + p.stdout
    assert "XYZ" not in p.stderr + p.stdout


def test_a_slow_webhook_does_not_hold_a_watch_pass_up(tmp_path, monkeypatch):
    from launcher.api.context import App
    from launcher.recovery import notify, watch

    slow = start_webhook(delay=4.0)
    try:
        cli = LauncherCLI(tmp_path)
        job = cli.launch(cli.spec("slow", {"run": "true", "notify": {"webhook": f"{slow.url}/x", "timeout": 8}}),
                         "local")
        monkeypatch.setenv("LAUNCHER_HOME", str(cli.home))
        monkeypatch.setenv("LAUNCHER_CONFIG", str(cli.config))
        app = App()
        poll("job closed", lambda: watch.cycle(app) is not None and not app.store.get_job(job).state
             in ("PENDING", "RUNNING", "SUBMITTING"), timeout=60, interval=0.3)
        t0 = time.monotonic()
        watch.cycle(app)  # decides (if not yet), wakes the deliverer, returns
        assert time.monotonic() - t0 < 2.0
        poll("delivered", lambda: len(slow.delivered()) == 1, timeout=30, interval=0.2)
        # the deliverer records the answer once the slow server's reply is read: after the
        # server counted the request
        poll("recorded delivered", lambda: [n.state for n in notify.Outbox(app.store).of_job(job)] == ["delivered"],
             timeout=30, interval=0.2, detail=lambda: str([n.state for n in notify.Outbox(app.store).of_job(job)]))
        assert len(slow.delivered()) == 1
    finally:
        stop_webhook(slow)
