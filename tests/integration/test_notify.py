"""Notifications (``notify:``) from `launcher watch`, against a real HTTP receiver on 127.0.0.1
that fails its first answers: three watcher processes at once send each event exactly once
(0 duplicates) and every one lands; the webhook URL, which carries a token, is never written
to the state store, the watchers' output or the job scripts; a slow webhook does not hold a
watch pass up.

The operator's rule: a webhook naming a variable off the allow-list is refused by `validate`
and `launch`, and a watcher never reads it (a database password in its environment never
reaches `launcher status`); a receiver that trickles its answer is cut off at the delivery's
deadline; a watcher SIGKILLed mid-POST makes at most the POSTs the docs promise (each try
counted before it is sent, never more than ``max_tries``)."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.fixtures.polling import poll
from tests.fixtures.webhook import start_webhook, stop_webhook

from .launcher_cli import LauncherCLI, job_id_of, start_watcher, stop_watchers, wait_all_closed

TOKEN = "tok-3f9a1c2b7d4e5f60a1b2c3d4e5f6a7b8"  # the secret part of the webhook's URL
SECRET = "Pw9-quartz-lamp-77"  # a database password in the watchers' environment


@pytest.fixture
def hook():
    h = start_webhook(fail_first=5)
    yield h
    stop_webhook(h)


def notify_spec(cli: LauncherCLI, name: str, code: int, **extra) -> Path:
    return cli.spec(name, {"run": f"{sys.executable} -c 'import sys, time; time.sleep(0.5); sys.exit({code})'",
                           "recovery": {"app_error": 0},
                           "notify": {"on": ["completed", "failed", "gave_up", "deadline_at_risk"],
                                      "webhook": "${LAUNCHER_NOTIFY_TEAM_WEBHOOK}", "timeout": 2}, **extra})


def test_three_watchers_send_each_event_exactly_once_through_a_failing_webhook(cli, hook):
    cli.env["LAUNCHER_CLAIM_TTL"] = "5"
    cli.env["LAUNCHER_NOTIFY_TEAM_WEBHOOK"] = f"{hook.url}/hooks/team?token={TOKEN}"
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

    slow = start_webhook(hold=True)  # holds its reply until released
    try:
        cli = LauncherCLI(tmp_path)
        job = cli.launch(cli.spec("slow", {"run": "true", "notify": {"webhook": f"{slow.url}/x", "timeout": 40}}),
                         "local")
        monkeypatch.setenv("LAUNCHER_HOME", str(cli.home))
        monkeypatch.setenv("LAUNCHER_CONFIG", str(cli.config))
        app = App()
        poll("job closed", lambda: watch.cycle(app) is not None and not app.store.get_job(job).state
             in ("PENDING", "RUNNING", "SUBMITTING"), timeout=60, interval=0.3)
        watch.cycle(app)  # decides (if not yet), wakes the deliverer, returns
        # returned while the server still holds its reply: the answer is not recorded yet
        assert [n.state for n in notify.Outbox(app.store).of_job(job)] != ["delivered"]
        slow.release()
        poll("delivered", lambda: len(slow.delivered()) == 1, timeout=60, interval=0.2)
        # the deliverer records the answer once the slow server's reply is read: after the
        # server counted the request
        poll("recorded delivered", lambda: [n.state for n in notify.Outbox(app.store).of_job(job)] == ["delivered"],
             timeout=60, interval=0.2, detail=lambda: str([n.state for n in notify.Outbox(app.store).of_job(job)]))
        assert len(slow.delivered()) == 1
    finally:
        slow.release()
        stop_webhook(slow)


def _events(cli: LauncherCLI, job: str, kind: str) -> list[dict]:
    return [e for e in cli.status(job)["events"] if e["kind"] == kind]


def test_a_webhook_naming_a_variable_off_the_allow_list_never_shows_its_value(cli):
    # the watchers' environment holds a database password, and an allowed variable that holds no URL
    cli.env["WAREHOUSE_DB"] = SECRET
    cli.env["LAUNCHER_NOTIFY_BROKEN"] = f"postgresql://etl:{SECRET}@db.internal/prod"
    wide = {"LAUNCHER_ALLOW_NOTIFY_VARS": "*"}  # a member whose own launch environment allows any name

    def job(name, var):
        spec = cli.spec(name, {"run": "true", "notify": {"on": ["completed"], "webhook": f"${{{var}}}", "timeout": 2}})
        return job_id_of(cli.run("launch", spec, "--target", "local", env=wide))

    off, broken = job("off", "WAREHOUSE_DB"), job("broken", "LAUNCHER_NOTIFY_BROKEN")
    p = start_watcher(cli, 0, interval=0.2)  # the team's watcher: the default list, LAUNCHER_NOTIFY_*
    try:
        for j in (off, broken):
            poll(f"{j}: a failed try recorded", lambda j=j: _events(cli, j, "notify_failed"), timeout=120,
                 interval=0.5, detail=lambda: (cli.tmp / "watch0.log").read_text())
    finally:
        stop_watchers([p])
    for j in (off, broken):
        for out in (cli.run("status", j).stdout, cli.run("status", j, "--json").stdout, cli.run("status").stdout):
            assert SECRET not in out, out
    for f in [cli.home / "state.db", *cli.tmp.glob("watch*.log")]:
        assert SECRET.encode() not in f.read_bytes(), f
    [e] = _events(cli, off, "notify_failed")  # not read, and not tried again: the name is refused for good
    assert e["state"] == "undeliverable" and "WAREHOUSE_DB" in e["error"] and "LAUNCHER_ALLOW_NOTIFY_VARS" in e["error"]
    e = _events(cli, broken, "notify_failed")[0]
    assert "LAUNCHER_NOTIFY_BROKEN" in e["error"] and "not an http" in e["error"], e


def test_validate_and_launch_refuse_an_unlisted_variable_and_a_link_local_target_naming_the_field(cli):
    unlisted = cli.spec("unlisted", {"run": "true", "notify": {"webhook": "${WAREHOUSE_DB}"}})
    for args in (("validate", unlisted), ("launch", unlisted, "--target", "local")):
        p = cli.run(*args, check=False)
        out = p.stdout + p.stderr
        assert p.returncode != 0 and "notify.webhook" in out and "LAUNCHER_ALLOW_NOTIFY_VARS" in out, out
    assert json.loads(cli.run("status", "--json").stdout) == []  # nothing recorded
    assert cli.run("validate", unlisted, env={"LAUNCHER_ALLOW_NOTIFY_VARS": "WAREHOUSE_*"}).returncode == 0
    meta = cli.spec("meta", {"run": "true", "notify": {"webhook": "http://169.254.169.254/latest/meta-data"}})
    p = cli.run("validate", meta, check=False)
    assert p.returncode != 0 and "notify.webhook" in p.stderr and "LAUNCHER_ALLOW_LINK_LOCAL_WEBHOOKS" in p.stderr
    assert cli.run("validate", meta, env={"LAUNCHER_ALLOW_LINK_LOCAL_WEBHOOKS": "1"}).returncode == 0
    local_file = cli.spec("file", {"run": "true", "notify": {"webhook": "file:///etc/passwd"}})
    p = cli.run("validate", local_file, check=False)
    assert p.returncode != 0 and "notify.webhook" in p.stderr and "passwd" not in p.stderr + p.stdout


def test_a_receiver_that_trickles_its_answer_is_cut_off_at_the_delivery_deadline(tmp_path):
    from launcher.recovery import notify
    from launcher.state.outbox import Outbox
    from launcher.state.store import StateStore

    slow = start_webhook(trickle=0.25)  # a byte of its answer every 0.25 s: each socket read is quick
    fast = start_webhook()
    store = StateStore(tmp_path)
    ob = Outbox(store)
    ob.decide("j-slow", "completed", send=True, final=True, sink={"url": f"{slow.url}/x", "timeout": 2},
              payload={"text": "slow"}, now=0)
    ob.decide("j-fast", "completed", send=True, final=True, sink={"url": f"{fast.url}/x", "timeout": 2},
              payload={"text": "fast"}, now=0.5)
    got: list = []

    def one_round():
        own = StateStore(tmp_path)
        got.append(dict(notify.deliver_due(own, now=1.0)))
        own.close()

    t = threading.Thread(target=one_round, daemon=True)
    t.start()
    try:
        poll("the round of deliveries ended", lambda: got, timeout=120, interval=0.2,
             detail=lambda: f"{slow.trickled} bytes trickled")
        poll("the slow receiver saw the watcher hang up", slow.hung_up.is_set, timeout=120, interval=0.2)
        [slow_row] = ob.of_job("j-slow")
        [fast_row] = ob.of_job("j-fast")
        assert slow_row.state == "pending" and "deadline of 2 s" in slow_row.last_error, slow_row
        assert fast_row.state == "delivered" and len(fast.delivered()) == 1  # the slow one held nothing up
    finally:
        stop_webhook(slow)
        stop_webhook(fast)
        store.close()


def _killed_mid_post(cli: LauncherCLI, hook, max_tries: int) -> str:
    """A job whose notification's first POST the receiver holds while its watcher is SIGKILLed;
    the try is recorded before the POST. Then another watcher runs until nothing is left."""
    from launcher.state.outbox import Outbox
    from launcher.state.store import StateStore

    cli.env["LAUNCHER_NOTIFY_TEAM_WEBHOOK"] = f"{hook.url}/hooks/team"
    job = cli.launch(cli.spec("held", {"run": "true", "notify": {
        "on": ["completed"], "webhook": "${LAUNCHER_NOTIFY_TEAM_WEBHOOK}", "timeout": 10, "max_tries": max_tries}}),
        "local")
    p = start_watcher(cli, 0, interval=0.2)
    try:
        poll("the watcher's POST reached the receiver", hook.posts, timeout=120, interval=0.1,
             detail=lambda: (cli.tmp / "watch0.log").read_text())
        os.killpg(p.pid, signal.SIGKILL)
        p.wait(timeout=30)
    finally:
        stop_watchers([p])
    store = StateStore(cli.home)
    try:
        assert [(n.state, n.tries) for n in Outbox(store).of_job(job)] == [("pending", 1)]  # counted before sent
    finally:
        store.close()
    hook.release()  # the held request is answered to nobody
    q = start_watcher(cli, 1, interval=0.2)
    try:
        q.wait(timeout=180)  # ends by itself once the interrupted try's lease expired and the row is settled
    finally:
        stop_watchers([q])
    return job


def test_a_watcher_killed_mid_post_is_resent_once_with_the_same_event_id(cli):
    hook = start_webhook(hold=True)
    try:
        job = _killed_mid_post(cli, hook, max_tries=8)
        posts = hook.posts()
        # at least once: the interrupted try may have landed, so it is sent again, marked, same id
        assert [(h.event_id, h.try_no) for h in posts] == [(f"{job}:completed", "1"), (f"{job}:completed", "2")]
        [failed] = _events(cli, job, "notify_failed")
        assert "try 1 was interrupted" in failed["error"] and failed["state"] == "pending"
        [ok] = _events(cli, job, "notified")
        assert ok["tries"] == 2
    finally:
        stop_webhook(hook)


def test_a_watcher_killed_mid_post_on_the_last_try_causes_no_further_post(cli):
    hook = start_webhook(hold=True)
    try:
        job = _killed_mid_post(cli, hook, max_tries=1)
        assert len(hook.posts()) == 1  # max_tries: 1 is at most once, whoever dies mid-POST
        [failed] = _events(cli, job, "notify_failed")
        assert failed["state"] == "undeliverable" and "may have landed" in failed["error"]
        assert _events(cli, job, "notified") == []
    finally:
        stop_webhook(hook)
