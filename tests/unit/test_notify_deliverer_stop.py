"""The notification deliverer (a thread per process and store) ends before its store closes:
closing a SQLite connection another thread is using can crash the interpreter (a fleet bench
watcher died with SIGSEGV as its `Launcher` closed). A real store in a temporary home."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

from launcher.api.facade import Launcher
from launcher.recovery import notify


def test_closing_the_store_ends_its_deliverer_first(tmp_path):
    (tmp_path / "config.yaml").write_text("targets: {}\n")
    lx = Launcher(config=tmp_path / "config.yaml", home=tmp_path / "home")
    store = lx.app.store
    d = notify.kick(lx.app)
    assert d.thread.is_alive()
    lx.close()
    assert not d.thread.is_alive()  # joined before the store closed
    assert notify.deliverer_of(store) is None


def test_a_deliverer_busy_past_the_wait_is_left_and_never_wakes_into_a_closed_store(tmp_path, monkeypatch):
    (tmp_path / "config.yaml").write_text("targets: {}\n")
    lx = Launcher(config=tmp_path / "config.yaml", home=tmp_path / "home")
    calls, release = [], threading.Event()

    def slow(store):
        if store is not lx.app.store:  # a deliverer an earlier test left polling its own store
            return
        calls.append(time.monotonic())
        release.wait(10)  # under way until the test lets it finish (a sleep raced a loaded machine)

    monkeypatch.setattr(notify, "deliver_due", slow)
    d = notify.kick(lx.app)
    while not d.busy.is_set():
        time.sleep(0.01)
    notify.stop(lx.app.store, timeout=0.05)  # a delivery under way outlasts the wait
    assert d.thread.is_alive() and d.stopping.is_set()
    assert notify.deliverer_of(lx.app.store) is None  # forgotten: a new kick starts another
    release.set()
    d.thread.join(5)
    assert not d.thread.is_alive() and len(calls) == 1  # it finished that delivery, then ended
    lx.close()


def test_stop_without_a_deliverer_does_nothing():
    notify.stop(SimpleNamespace())


def test_a_store_opened_again_gets_its_own_deliverer(tmp_path):
    (tmp_path / "config.yaml").write_text("targets: {}\n")
    first = Launcher(config=tmp_path / "config.yaml", home=tmp_path / "home")
    d1 = notify.kick(first.app)
    first.close()
    second = Launcher(config=tmp_path / "config.yaml", home=tmp_path / "home")
    store = second.app.store
    d2 = notify.kick(second.app)
    try:
        assert d2 is not d1 and d2.store is store and not d1.thread.is_alive()
        assert notify.kick(second.app) is d2  # one per store, woken again
    finally:
        second.close()
    assert notify.deliverer_of(store) is None and not d2.thread.is_alive()
