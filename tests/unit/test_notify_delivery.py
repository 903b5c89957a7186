"""Delivering notifications, without services: the operator's rule for webhook variables and
targets (an allow-list of names, http(s) only, no link-local or metadata address), values
that fail it never echoed, each try counted before it is sent (an interrupted one is reclaimed
and counted: never more than max_tries POSTs), and the refusal of a target found by name
lookup, before any connection."""

from __future__ import annotations

import socket

import pytest

from launcher.backend.sections import parse_spec
from launcher.recovery import httppost, notify
from launcher.spec.integrations import (address_refused, notify_env_problems, var_allowed, webhook_target_problem)
from launcher.state.outbox import Outbox
from launcher.state.store import StateStore

SECRET = "Pw9-quartz-lamp-77"  # what a variable the webhook must not read holds


def test_webhook_variables_on_the_operators_allow_list_only():
    assert var_allowed("LAUNCHER_NOTIFY_TEAM", {})
    assert not var_allowed("WAREHOUSE_DB", {}) and not var_allowed("PGPASSWORD", {})
    env = {"LAUNCHER_ALLOW_NOTIFY_VARS": "TEAM_*, OPS_HOOK"}
    assert var_allowed("TEAM_X", env) and var_allowed("OPS_HOOK", env)
    assert not var_allowed("LAUNCHER_NOTIFY_TEAM", env) and not var_allowed("team_x", env)
    # the knobs themselves are never read for a URL, whatever the list says
    assert not var_allowed("LAUNCHER_ALLOW_NOTIFY_VARS", {"LAUNCHER_ALLOW_NOTIFY_VARS": "*"})


@pytest.mark.parametrize("url,why", [
    ("file:///etc/passwd", "not an http"), ("ftp://example.org/x", "not an http"), (SECRET, "not an http"),
    ("http://169.254.169.254/latest/meta-data/", "metadata"), ("http://169.254.1.7:8080/x", "link-local"),
    ("http://[fe80::1]/x", "link-local"), ("http://[fd00:ec2::254]/x", "metadata"),
    ("http://[::ffff:169.254.169.254]/x", "metadata"), ("https://metadata.google.internal./x", "metadata"),
    ("http://h:notaport/x", "not a URL")])
def test_refused_webhook_targets_never_quote_the_url(url, why):
    msg = webhook_target_problem(url, {})
    assert why in msg and url not in msg and "passwd" not in msg and SECRET not in msg


def test_link_local_targets_when_the_operator_allows_them():
    env = {"LAUNCHER_ALLOW_LINK_LOCAL_WEBHOOKS": "1"}
    assert webhook_target_problem("http://169.254.169.254/x", env) == ""
    assert webhook_target_problem("file:///etc/passwd", env)  # never another scheme
    assert webhook_target_problem("http://127.0.0.1:9/x", {}) == "" and address_refused("10.0.0.1") == ""


def test_validate_and_launch_name_the_field_and_the_knob():
    s = parse_spec({"name": "t", "run": "true", "notify": {"webhook": "${WAREHOUSE_DB}"}})  # a stored spec parses
    [(field, msg)] = notify_env_problems(s, {})
    assert field == "notify.webhook" and "LAUNCHER_ALLOW_NOTIFY_VARS" in msg and "WAREHOUSE_DB" in msg
    assert notify_env_problems(s, {"LAUNCHER_ALLOW_NOTIFY_VARS": "WAREHOUSE_*"}) == []
    s = parse_spec({"name": "t", "run": "true", "notify": {"webhook": "http://169.254.169.254/h"},
                    "tracking": {"mlflow": {"tracking_uri": "http://[fe80::1]:5000"}}})
    fields = [f for f, _ in notify_env_problems(s, {})]
    assert fields == ["notify.webhook", "tracking.mlflow.tracking_uri"]
    assert notify_env_problems(s, {"LAUNCHER_ALLOW_LINK_LOCAL_WEBHOOKS": "1"}) == []


def test_a_variable_off_the_list_is_not_read_and_a_bad_value_not_echoed():
    env = {"WAREHOUSE_DB": SECRET, "LAUNCHER_NOTIFY_HOOK": SECRET, "LAUNCHER_NOTIFY_FILE": "file:///etc/hostname",
           "LAUNCHER_NOTIFY_META": "http://169.254.169.254/latest"}
    with pytest.raises(notify.DeliveryError) as e:
        notify.resolve_url({"env": "WAREHOUSE_DB"}, env)
    assert e.value.final and SECRET not in str(e.value) and "not read" in str(e.value)
    for name in ("LAUNCHER_NOTIFY_HOOK", "LAUNCHER_NOTIFY_FILE", "LAUNCHER_NOTIFY_META"):
        with pytest.raises(notify.DeliveryError) as e:
            notify.resolve_url({"env": name}, env)
        assert name in str(e.value) and env[name] not in str(e.value) and "hostname" not in str(e.value)
    assert notify.resolve_url({"env": "LAUNCHER_NOTIFY_OK"}, {"LAUNCHER_NOTIFY_OK": "http://127.0.0.1:9/h"})


def _row(store, sink, max_tries=8):
    ob = Outbox(store)
    ob.decide("j1", "completed", send=True, final=True, sink=sink, payload={"text": "done"}, max_tries=max_tries,
              now=0)
    return ob


def test_a_file_url_in_the_variable_is_never_opened_and_its_value_never_recorded(tmp_path, monkeypatch):
    store = StateStore(tmp_path)
    marker = tmp_path / "marker"
    marker.write_text("x")
    monkeypatch.setenv("LAUNCHER_NOTIFY_HOOK", f"file://{marker}")
    monkeypatch.setenv("WAREHOUSE_DB", SECRET)
    ob = _row(store, {"env": "LAUNCHER_NOTIFY_HOOK", "timeout": 1})
    ob.decide("j2", "completed", send=True, final=True, sink={"env": "WAREHOUSE_DB", "timeout": 1},
              payload={"text": "done"}, now=0)
    got = dict(notify.deliver_due(store, now=1.0))
    rows = {n.job_id: n for n in ob.of_job("j1") + ob.of_job("j2")}
    assert rows["j1"].state == "pending" and rows["j1"].delivered is None and "not an http" in rows["j1"].last_error
    assert rows["j2"].state == "undeliverable" and rows["j2"].tries == 1  # the name is refused for good
    assert set(got.values()) == {"pending", "undeliverable"}
    events = [e for j in ("j1", "j2") for e in store.events(j)]
    dump = "".join(str(x) for x in events)
    raw = (tmp_path / "state.db").read_bytes()
    assert SECRET.encode() not in raw and str(marker).encode() not in raw and SECRET not in dump
    assert "notify_failed" in dump
    store.close()


def test_each_try_is_counted_before_it_is_sent_and_an_interrupted_one_is_reclaimed(tmp_path):
    store = StateStore(tmp_path)
    ob = _row(store, {"url": "http://127.0.0.1:9/h"}, max_tries=2)
    [n] = ob.due(now=1)
    assert ob.lease(n.id, "a", 30, now=1) == 1  # try 1, recorded before anything is sent
    assert [x.tries for x in ob.of_job("j1")] == [1]
    assert not ob.lease(n.id, "b", 30, now=2) and ob.reclaim(now=2) == []  # a's lease holds
    # a dies mid-POST: once its lease expires, the try is released, counted, and said
    [r] = ob.reclaim(now=40)
    assert r.state == "pending" and r.tries == 1 and "interrupted" in r.last_error and ob.reclaim(now=41) == []
    assert ob.lease(n.id, "b", 30, now=41) == 2
    [r] = ob.reclaim(now=80)  # b dies too: that was the last try
    assert r.state == "undeliverable" and ob.due(now=100) == [] and not ob.lease(n.id, "c", 30, now=100)
    assert [(x.state, x.tries) for x in ob.of_job("j1")] == [("undeliverable", 2)]
    store.close()


def test_deliver_due_sends_at_most_max_tries_and_says_which_try(tmp_path):
    store = StateStore(tmp_path)
    ob = _row(store, {"url": "http://127.0.0.1:9/h"}, max_tries=3)
    tries = []

    def failing(n, try_no):
        tries.append(try_no)
        raise notify.DeliveryError("127.0.0.1 answered HTTP 500")

    t = 1.0
    for _ in range(6):
        notify.deliver_due(store, sender=failing, clock=lambda: t)
        t += 1000
    assert tries == [1, 2, 3] and [(x.state, x.tries) for x in ob.of_job("j1")] == [("undeliverable", 3)]
    store.close()


def test_a_name_that_resolves_to_a_metadata_address_is_refused_before_connecting(monkeypatch):
    monkeypatch.setattr(httppost, "_resolve", lambda host, port, seconds: ["169.254.169.254"])

    def no_connect(*a, **k):
        raise AssertionError("connected")

    monkeypatch.setattr(socket, "create_connection", no_connect)
    with pytest.raises(httppost.PostError) as e:
        httppost.post("http://hooks.example.org/x", b"{}", {}, 5, {})
    assert e.value.final and "metadata" in str(e.value) and "LAUNCHER_ALLOW_LINK_LOCAL_WEBHOOKS" in str(e.value)
    # one refused address among others: only the others are used
    monkeypatch.setattr(httppost, "_resolve", lambda host, port, seconds: ["fe80::1", "169.254.9.9"])
    with pytest.raises(httppost.PostError, match="link-local"):
        httppost.post("http://hooks.example.org/x", b"{}", {}, 5, {})


def test_mlflow_credentials_go_to_the_watchers_own_server_only():
    env = {"MLFLOW_TRACKING_URI": "https://mlflow.corp:443/", "MLFLOW_TRACKING_TOKEN": "tok-abc"}
    assert notify.mlflow_headers("https://mlflow.corp", env) == {"Authorization": "Bearer tok-abc"}
    assert notify.mlflow_headers("https://evil.example.org", env) == {}
    assert notify.mlflow_headers("http://mlflow.corp", env) == {}
