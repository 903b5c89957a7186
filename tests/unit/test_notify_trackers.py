"""tracking: and notify: without services: the spec rules (a URL with a token is refused and
never echoed), the env handed to every attempt, the deadline rule, the outbox's decide-once
under several threads, the lease, and an array's per-element tracker variables."""

from __future__ import annotations

import threading

import pytest

from launcher.backend.protocols import JobRef
from launcher.backend.sections import parse_spec
from launcher.core.errors import SpecError
from launcher.provenance.trackers import tracker_env, wandb_run_id, with_tracker_env
from launcher.recovery.notify import backoff, deadline_risk, payload, sink_of
from launcher.spec.integrations import token_in_url
from launcher.state.outbox import Outbox
from launcher.state.store import StateStore


def spec(**extra):
    return parse_spec({"name": "t", "run": "true", **extra})


@pytest.mark.parametrize("url", ["https://hooks.slack.com/services/T000/B000/XXXXXXXX",
                                 "https://example.org/hook?token=abc", "https://u:p@example.org/h",
                                 "https://discord.com/api/webhooks/1/abc",
                                 "https://example.org/h/9f8e7d6c5b4a39281716aa"])
def test_a_webhook_with_a_token_is_refused_without_echoing_it(url):
    assert token_in_url(url)
    with pytest.raises(SpecError) as e:
        spec(notify={"webhook": url})
    assert "carries a token" in str(e.value) and "${" in str(e.value)
    secret = url.split("/")[-1]
    assert url not in str(e.value) and (len(secret) < 4 or secret not in str(e.value))


def test_notify_takes_a_variable_name_or_a_plain_url_and_yaml_on():
    import yaml

    s = spec(notify=yaml.safe_load("on: [failed, completed]\nwebhook: ${TEAM_HOOK}\n"))  # `on` is YAML's true
    assert s.notify.on == ["failed", "completed"] and s.notify.webhook_env == "TEAM_HOOK"
    assert sink_of(s.notify) == {"env": "TEAM_HOOK", "format": "slack", "timeout": 5.0}
    assert spec(notify={"webhook": "http://127.0.0.1:9/hook"}).notify.webhook_env is None
    with pytest.raises(SpecError):
        spec(notify={"webhook": "${X}", "on": ["exploded"]})


def test_tracking_flags_and_the_env_every_attempt_gets():
    s = spec(tracking={"wandb": True, "mlflow": False})
    assert s.tracking.wandb is not None and s.tracking.mlflow is None
    env = tracker_env({"wandb": {"run_id": "j-1", "job_id": "j-1", "group": "sw", "commit": "abc"},
                       "mlflow": {"run_id": "r1", "tracking_uri": "http://127.0.0.1:5000", "experiment_id": "3"}})
    assert env == {"WANDB_RUN_ID": "j-1", "WANDB_RESUME": "allow", "WANDB_RUN_GROUP": "sw",
                   "WANDB_TAGS": "launcher-job:j-1,commit:abc", "MLFLOW_RUN_ID": "r1",
                   "MLFLOW_TRACKING_URI": "http://127.0.0.1:5000", "MLFLOW_EXPERIMENT_ID": "3"}
    assert with_tracker_env(s, {"trackers": {"wandb": {"run_id": "x"}}}).env["WANDB_RUN_ID"] == "x"
    assert with_tracker_env(s, {}) is s
    assert wandb_run_id("a/b:c") == "a-b-c" and len(wandb_run_id("x" * 100)) <= 64
    with pytest.raises(SpecError):
        spec(tracking={"mlflow": {"tracking_uri": "https://u:p@mlflow.example.org"}})


def test_deadline_risk():
    h = 3600.0
    assert deadline_risk(0, None, None, 0, 10 * h) == ""
    assert deadline_risk(0, 10 * h, None, 0, 5 * h) == ""
    assert deadline_risk(0, 10 * h, None, 0, 9.5 * h)  # 90% gone, no estimate
    assert deadline_risk(0, 10 * h, 8 * h, 1 * h, 4 * h)  # 7 h of work left, 6 h to go
    assert deadline_risk(0, 10 * h, 8 * h, 3 * h, 4 * h) == ""
    assert 2 <= backoff(1, lambda: 0) <= backoff(5, lambda: 0) <= backoff(50, lambda: 1) <= 375


def test_an_event_is_decided_once_by_any_number_of_threads(tmp_path):
    store = StateStore(tmp_path)
    results = []

    def decide():
        own = StateStore(tmp_path)
        results.append(Outbox(own).decide("j1", "completed", send=True, final=True, sink={"url": "http://x"},
                                          payload={"text": "done"}))
        own.close()

    threads = [threading.Thread(target=decide) for _ in range(8)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert sorted(results) == [False] * 7 + [True]
    ob = Outbox(store)
    [n] = ob.due()
    assert ob.lease(n.id, "a", 60) and not ob.lease(n.id, "b", 60)  # one sender at a time
    assert ob.failed(n.id, "a", "HTTP 500", retry_at=0) == "pending"
    assert ob.lease(n.id, "b", 60) and ob.delivered(n.id, "b") and not ob.delivered(n.id, "a")
    assert [x.state for x in ob.of_job("j1")] == ["delivered"] and ob.due() == []


def test_slack_payload_names_the_job_and_event():
    from types import SimpleNamespace

    job = SimpleNamespace(job_id="j-1", name="train", state="GAVE_UP", target="local", last_step=40, meta={})
    p = payload("gave_up", job, "slack", "budget", [], 0.0)
    assert set(p) == {"text"} and "j-1" in p["text"] and "gave up" in p["text"]
    assert payload("gave_up", job, "json", "budget", [], 0.0)["id"] == "j-1:gave_up"


def test_the_slack_text_never_says_the_event_twice():
    from types import SimpleNamespace

    job = SimpleNamespace(job_id="j-1", name="train", state="GAVE_UP", target="local", last_step=None, meta={})
    reason = "gave up: 3 preemptions without progress"
    text = payload("gave_up", job, "slack", reason, [], 0.0)["text"]
    assert "gave up: gave up" not in text and text.splitlines()[0].endswith("gave up: 3 preemptions without progress")
    assert payload("gave_up", job, "json", reason, [], 0.0)["reason"] == reason  # the JSON keeps the stored reason
    assert payload("failed", job, "slack", "", [], 0.0)["text"].splitlines()[0].endswith("failed")


def test_an_array_table_exports_each_elements_own_tracker_run():
    from launcher_backends.slurm.array import sweep_table

    s = spec(sweep={"grid": {"lr": [1, 2]}})
    job = JobRef("sw-1", element_env=((0, (("MLFLOW_RUN_ID", "r0"),)), (1, (("MLFLOW_RUN_ID", "r1"),))))
    lines = sweep_table(s, job).splitlines()[1:]
    assert "MLFLOW_RUN_ID=r0" in lines[0] and "MLFLOW_RUN_ID=r1" in lines[1]
