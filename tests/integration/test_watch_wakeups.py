"""A launch and a cancel wake the watchers of a team's PostgreSQL store (issue 29, item 4):
a `launcher watch` whose interval is a minute passes again within seconds of a job being
launched, and of one being cancelled, instead of sleeping its interval out (``NOTIFY`` in the
writing transaction, ``LISTEN`` in the watcher: launcher.state.wakeups)."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from tests.fixtures.polling import poll

from .launcher_cli import LAUNCHER, LauncherCLI

pytestmark = pytest.mark.postgres

INTERVAL = 60  # the watcher's interval: far longer than any wait below


def passes(cli: LauncherCLI) -> list:
    """The watchers' last passes, as the store's heartbeat rows say."""
    from launcher.state.store import StateStore
    from launcher.state.watchers import watcher_rows

    store = StateStore(cli.home, url=cli.env["LAUNCHER_STATE_URL"])
    try:
        return [w.last_pass for w in watcher_rows(store)]
    finally:
        store.close()


def test_a_launch_and_a_cancel_wake_a_watcher_on_a_minute_interval(tmp_path, pg_url):
    cli = LauncherCLI(tmp_path)
    cli.env["LAUNCHER_STATE_URL"] = pg_url
    log = open(tmp_path / "watch.log", "ab")
    watcher = subprocess.Popen([LAUNCHER, "watch", "--interval", str(INTERVAL)], env=cli.env, stdout=log,
                               stderr=subprocess.STDOUT, cwd=str(tmp_path), start_new_session=True)
    try:
        first = poll("the watcher's first pass", lambda: passes(cli), timeout=60)[0]
        time.sleep(1.0)  # past the watcher's least gap between two wake-ups
        spec = cli.spec("woken", {"run": f"{sys.executable} -c 'import time; time.sleep(120)'"})
        launched = time.time()
        job = cli.launch(spec, "local")
        woke = poll("a pass after the launch", lambda: [t for t in passes(cli) if t > launched], timeout=20)[0]
        assert woke - first < INTERVAL / 2, (first, launched, woke)  # woken, not the interval's pass
        time.sleep(1.0)
        cancelled = time.time()
        cli.run("cancel", job)
        again = poll("a pass after the cancel", lambda: [t for t in passes(cli) if t > cancelled], timeout=20)[0]
        assert again - woke < INTERVAL / 2, (woke, cancelled, again)
        assert watcher.poll() is None, (tmp_path / "watch.log").read_text()
    finally:
        watcher.terminate()
        try:
            watcher.wait(20)
        except subprocess.TimeoutExpired:
            watcher.kill()
            watcher.wait()
        log.close()
