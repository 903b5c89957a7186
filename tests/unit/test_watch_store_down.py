"""`launcher watch` outlives a team's PostgreSQL server going away (restarted, down): each cycle
that cannot reach the store is said once and tried again; `--once` fails as before."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from launcher.recovery import watch
from launcher.state.db import StoreUnreachable


def test_a_watch_waits_out_an_unreachable_server_then_goes_on(monkeypatch):
    calls = {"n": 0}

    def cycle(app, clock, hooks, specs=None, poller=None):
        calls["n"] += 1
        if calls["n"] <= 3:
            raise StoreUnreachable("the state store postgresql://db/x cannot be reached (terminating connection)")
        return []

    monkeypatch.setattr(watch, "cycle", cycle)
    monkeypatch.setattr(watch.notify, "pending", lambda app: False)
    app = SimpleNamespace(store=SimpleNamespace(open_jobs=lambda: [], watch_rows=lambda: []))
    said, slept = [], []
    watch._run(app, 0.1, False, None, slept.append, said.append, None, None, exit_when_idle=True)
    assert calls["n"] == 4 and slept == [1.0, 1.0, 1.0]  # at least a second between tries
    assert said[0].endswith("trying again every 1 s") and "cannot be reached" in said[0]
    assert said[1:] == ["the state store answers again", "no open jobs left"]  # said once per outage


def test_watch_once_fails_on_an_unreachable_server(monkeypatch):
    def cycle(app, clock, hooks, specs=None, poller=None):
        raise StoreUnreachable("cannot be reached")

    monkeypatch.setattr(watch, "cycle", cycle)
    with pytest.raises(StoreUnreachable):
        watch._run(SimpleNamespace(), 0.1, True, None, lambda s: None, lambda s: None, None, None)
