"""Always on (issue 29, item 6): the pure pieces (``launcher.api.always_on``: the staleness rule of
the warning, the systemd unit, the crontab line, the refusal of a password), the heartbeat in the
store (``launcher.state.watchers``, schema 4), the watch loop staying up when no job is open, and
`launcher watch --install` / `--uninstall` with `systemctl` stubbed: nothing here touches this
machine's systemd, crontab or dotfiles (HOME and XDG_CONFIG_HOME are temporary folders)."""

from __future__ import annotations

import os
import shlex
import sqlite3
import stat
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from launcher.api import always_on
from launcher.api.always_on import (STALE_INTERVALS, cron_line, duration, has_password, password_refusal,
                                    render_unit, stale_watchers, systemd_quote, watcher_env)
from launcher.cli import main
from launcher.commands import watch as watch_command
from launcher.core.errors import ConfigError
from launcher.recovery import watch
from launcher.state.schema import SCHEMA_VERSION
from launcher.state.store import StateStore
from launcher.state.watchers import PRUNE_AFTER_S, Heartbeat, WatcherRow, open_job_count, watcher_rows

NOW = 1_800_000_000.0


def row(ago: float, interval: float = 10.0, pass_s: float = 0.0, host: str = "login1") -> WatcherRow:
    return WatcherRow(f"{host}:1:ab", host, 4242, "alice", NOW - 3600, NOW - ago, pass_s, interval)


# ---------------------------------------------------------------- the staleness rule
def test_no_warning_without_open_jobs_whatever_the_heartbeats():
    assert stale_watchers([], 0, NOW) is None
    assert stale_watchers([row(86400)], 0, NOW) is None


def test_open_jobs_and_no_watcher_ever_warns_with_the_fix():
    line = stale_watchers([], 2, NOW)
    assert line.startswith("warning: 2 open jobs and no `launcher watch` has run")
    assert "launcher watch --install" in line and "\n" not in line


def test_a_job_launched_a_moment_ago_warns_no_one_until_it_went_three_intervals_without_a_pass():
    # no watcher ever ran: the first launch (the quickstart's) says nothing for 3 default intervals
    assert stale_watchers([], 1, NOW, oldest_open=NOW - 2) is None
    assert stale_watchers([], 1, NOW, oldest_open=NOW - 30) is None
    assert stale_watchers([], 1, NOW, oldest_open=NOW - 31).startswith("warning: 1 open job and no")
    # a watcher gone for an hour, a job opened 20 s ago: not yet (its window is 3 x 10 s)
    assert stale_watchers([row(3600)], 1, NOW, oldest_open=NOW - 20) is None
    assert "pass for 60 min" in stale_watchers([row(3600)], 1, NOW, oldest_open=NOW - 31)
    # the window follows the slowest watcher's: every 60 s, a job 3 min old has not missed 3 passes
    assert stale_watchers([row(3600, interval=60)], 1, NOW, oldest_open=NOW - 170) is None
    assert stale_watchers([row(3600, interval=60)], 1, NOW, oldest_open=NOW - 181) is not None


def test_a_watcher_is_alive_up_to_three_intervals_plus_its_pass():
    assert stale_watchers([row(30)], 1, NOW) is None  # 3 x 10 s: still alive
    assert stale_watchers([row(31)], 1, NOW) is not None
    assert stale_watchers([row(44, pass_s=5)], 1, NOW) is None  # slow passes: 3 x (10 + 5)
    assert STALE_INTERVALS == 3


def test_the_warning_says_how_long_and_which_watcher_passed_last():
    line = stale_watchers([row(400, host="old"), row(7260, host="older")], 1, NOW)
    assert "1 open job and no `launcher watch` pass for 6 min" in line
    assert "alice@old pid 4242, every 10 s" in line and "run `launcher watch`" in line


def test_one_fresh_watcher_among_gone_ones_is_enough_and_a_clock_ahead_counts_as_alive():
    assert stale_watchers([row(9000), row(3, interval=1)], 5, NOW) is None
    assert stale_watchers([row(-120)], 1, NOW) is None


def test_durations_read_as_a_person_says_them():
    assert [duration(s) for s in (0, 59, 119, 120, 7199, 7200, 7260, 86400 * 3, 86400 * 2 + 3600)] == [
        "0 s", "59 s", "119 s", "2 min", "119 min", "2 h", "2 h 1 min", "3 days", "2 days 1 h"]


# ---------------------------------------------------------------- passwords
@pytest.mark.parametrize("url, has", [
    ("postgresql://bob:s3cret@db:5432/launcher", True),
    ("postgresql://bob:@db/launcher", True),  # an empty password is still one in the URL
    ("postgresql://db/launcher?user=bob&password=x", True),
    ("postgresql://db/launcher?PASSWORD=x", True),
    ("postgresql://bob@db/launcher", False),
    ("postgresql://db/launcher?sslmode=require", False),
    ("postgresql://bob:pw@[::1/launcher", True),  # cannot be parsed: a ':' before the '@'
])
def test_a_password_is_found_in_the_address_or_the_query(url, has):
    assert has_password(url) is has


def test_a_url_with_a_password_is_refused_pointing_at_pgpass():
    e = password_refusal({"LAUNCHER_STATE_URL": "postgresql://bob:s3cret@db/x"})
    assert isinstance(e, ConfigError) and e.exit_code == 2
    assert "~/.pgpass" in str(e) and "s3cret" not in str(e) and "nothing was written" in str(e)
    assert password_refusal({"LAUNCHER_STATE_URL": "postgresql://bob@db/x"}) is None
    assert password_refusal({}) is None


# ---------------------------------------------------------------- the unit and the crontab line
ENV = {"LAUNCHER_HOME": "/home/a b/launcher %h", "LAUNCHER_STATE_URL": "postgresql://bob@db/x?sslmode=require",
       "LAUNCHER_CONFIG": "/etc/launcher/c.yaml", "PATH": "/usr/bin:/bin"}


def test_watcher_env_keeps_the_launchers_values_that_are_set_in_order():
    env = {"PATH": "/bin", "LAUNCHER_HOME": "/h", "LAUNCHER_CONFIG": "", "HOME": "/root", "AWS_SECRET_ACCESS_KEY": "k"}
    assert watcher_env(env) == {"LAUNCHER_HOME": "/h", "PATH": "/bin"}


def test_the_unit_restarts_always_runs_the_exact_executable_and_carries_the_environment():
    text = render_unit(["/opt/venv/bin/launcher"], ENV, 10.0)
    lines = text.splitlines()
    assert "Restart=always" in lines and "WantedBy=default.target" in lines
    assert 'ExecStart="/opt/venv/bin/launcher" "watch"' in lines  # stays up: no --exit-when-idle, no --once
    assert 'Environment="LAUNCHER_HOME=/home/a b/launcher %%h"' in lines  # % is a specifier: doubled
    assert 'Environment="LAUNCHER_STATE_URL=postgresql://bob@db/x?sslmode=require"' in lines
    assert 'Environment="LAUNCHER_CONFIG=/etc/launcher/c.yaml"' in lines
    assert "exit-when-idle" not in text and "--once" not in text
    assert 'ExecStart="/opt/venv/bin/launcher" "watch" "--interval" "30"' in render_unit(["/opt/venv/bin/launcher"],
                                                                                          {}, 30.0)


def test_unit_values_are_quoted_for_systemd():
    assert systemd_quote('a "b" \\c %d $e') == '"a \\"b\\" \\\\c %%d $e"'
    assert systemd_quote("$HOME/x", exec_line=True) == '"$$HOME/x"'  # an Exec line expands $: doubled
    with pytest.raises(ConfigError, match="line break"):
        render_unit(["/bin/launcher"], {"LAUNCHER_HOME": "/a\nExecStartPre=/bin/rm -rf ~"})


def test_the_cron_line_runs_one_watcher_at_a_time_and_is_quoted_for_the_shell():
    line = cron_line(["/opt/my venv/bin/launcher"], ENV, always_on.Path("/h/watch.lock"),
                     always_on.Path("/h/watch.log"))
    assert line.startswith("* * * * * flock -n /h/watch.lock env ")
    assert "%" not in line.replace("\\%", "")  # cron turns a bare % into a line break
    words = shlex.split(line[len("* * * * * "):].replace("\\%", "%"))
    assert words[:4] == ["flock", "-n", "/h/watch.lock", "env"]
    assert "LAUNCHER_HOME=/home/a b/launcher %h" in words and "PATH=/usr/bin:/bin" in words
    assert words[-5:] == ["/opt/my venv/bin/launcher", "watch", ">>", "/h/watch.log", "2>&1"]
    with pytest.raises(ConfigError):
        cron_line(["/bin/launcher"], {"LAUNCHER_HOME": "/a\n* * * * * evil"}, always_on.Path("/l"),
                  always_on.Path("/g"))


def test_a_hostile_value_stays_one_word_of_the_cron_line():
    env = {"LAUNCHER_HOME": "/x'; rm -rf ~; echo '$(id)`id`"}
    line = cron_line(["/bin/launcher"], env, always_on.Path("/l"), always_on.Path("/g"))
    assert f"LAUNCHER_HOME={env['LAUNCHER_HOME']}" in shlex.split(line[10:])


# ---------------------------------------------------------------- the heartbeat in the store
def test_each_pass_upserts_one_row_per_watcher_and_old_rows_are_pruned(tmp_path):
    store = StateStore(tmp_path / "h")
    try:
        with store.tx() as db:
            db.execute("INSERT INTO watchers(watcher_id, host, pid, user_name, started, last_pass, pass_s, interval_s) "
                       "VALUES('gone:1:x', 'gone', 1, 'bob', 0, ?, 0, 10)", (NOW - PRUNE_AFTER_S - 1,))
            db.execute("INSERT INTO watchers(watcher_id, host, pid, user_name, started, last_pass, pass_s, interval_s) "
                       "VALUES('other:2:y', 'other', 2, 'bob', 0, ?, 0, 10)", (NOW - 3600,))
        hb = Heartbeat(2.5, now=NOW - 10)
        for i in range(3):
            hb.beat(store, NOW + i - 0.25, NOW + i)
        rows = watcher_rows(store)
        assert [r.host for r in rows] == [hb.host, "other"]  # the gone one pruned, newest first
        mine = rows[0]
        assert (mine.pid, mine.interval_s, mine.last_pass, mine.started) == (os.getpid(), 2.5, NOW + 2, NOW - 10)
        assert mine.pass_s == pytest.approx(0.25) and mine.user_name
    finally:
        store.close()


def test_open_jobs_are_counted_without_reading_rows(tmp_path):
    store = StateStore(tmp_path / "h")
    try:
        assert open_job_count(store) == 0
        for job_id, state in (("a", "RUNNING"), ("b", "PENDING"), ("c", "COMPLETED"), ("d", "GAVE_UP")):
            store.begin_job(job_id, job_id, "local", "local", None, "name: x\n")
            store.update_job(job_id, state=state)
        assert open_job_count(store) == 2
    finally:
        store.close()


def test_a_store_of_schema_3_gets_the_watchers_table(tmp_path):
    StateStore(tmp_path / "h").close()
    db = sqlite3.connect(tmp_path / "h" / "state.db")
    db.execute("DROP TABLE watchers")
    db.execute("PRAGMA user_version=3")
    db.commit()
    db.close()
    store = StateStore(tmp_path / "h")
    try:
        assert store.db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 8
        assert watcher_rows(store) == []
    finally:
        store.close()


# ---------------------------------------------------------------- the loop
def loop_app(open_after: list):
    """An app whose store has open jobs as OPEN_AFTER says, pass after pass."""
    calls = {"n": 0}

    def open_jobs():
        calls["n"] += 1
        return open_after[min(calls["n"], len(open_after)) - 1]

    return SimpleNamespace(store=SimpleNamespace(open_jobs=open_jobs, watch_rows=lambda: [],
                                                 may_act=lambda row: True))


def test_watch_stays_up_when_no_job_is_open_and_says_so_once(monkeypatch):
    monkeypatch.setattr(watch, "cycle", lambda app, clock, hooks, specs=None, poller=None: [])
    monkeypatch.setattr(watch.notify, "pending", lambda app: False)
    app = loop_app([[], [], ["job"], [], []])
    said, slept, beats = [], [], []
    hb = SimpleNamespace(beat=lambda store, started, now: beats.append(now))
    watch._run(app, 5.0, False, lambda: 100.0, slept.append, said.append, 6, None, heartbeat=hb)
    assert len(beats) == 6 and slept == [5.0] * 5  # every pass beat, and it went on sleeping
    idle = "no open jobs left: still watching for new ones every 5 s"
    assert said == [idle, idle]  # once per idle stretch (a job opened between them)


def test_exit_when_idle_ends_as_before(monkeypatch):
    monkeypatch.setattr(watch, "cycle", lambda app, clock, hooks, specs=None, poller=None: [])
    monkeypatch.setattr(watch.notify, "pending", lambda app: False)
    app = loop_app([["job"], []])
    said = []
    watch._run(app, 1.0, False, lambda: 1.0, lambda s: None, said.append, None, None, exit_when_idle=True)
    assert said == ["no open jobs left"]


def test_exit_when_idle_waits_for_a_cancelled_submission_to_settle(monkeypatch):
    """A job closed by a cancel while its submission's outcome was unknown is not open, but what
    it submitted may still appear: the watcher stays until that is settled (``settle_overtaken``)."""
    from launcher.recovery.cancel import OVERTAKEN

    monkeypatch.setattr(watch, "cycle", lambda app, clock, hooks, specs=None, poller=None: [])
    monkeypatch.setattr(watch.notify, "pending", lambda app: False)
    app = loop_app([["job"], [], [], []])
    marked = SimpleNamespace(job_id="j", state="CANCELLED", handle=None, meta={OVERTAKEN: {"at": 1.0, "attempt": 1}})
    unsettled = [[marked], [marked], []]
    app.store.watch_rows = lambda: unsettled.pop(0) if unsettled else []
    said, slept = [], []
    watch._run(app, 1.0, False, lambda: 1.0, slept.append, said.append, None, None, exit_when_idle=True)
    assert said == ["no open jobs left"] and len(slept) == 3  # two more passes while the mark stood


def test_a_heartbeat_that_cannot_be_written_is_said_once_and_watching_goes_on(monkeypatch):
    from launcher.core.errors import StateStoreError

    monkeypatch.setattr(watch, "cycle", lambda app, clock, hooks, specs=None, poller=None: [])
    monkeypatch.setattr(watch.notify, "pending", lambda app: False)
    app = loop_app([["job"]])

    def refused(store, started, now):
        raise StateStoreError("permission denied for table watchers")

    said = []
    watch._run(app, 1.0, False, lambda: 1.0, lambda s: None, said.append, 3, None,
               heartbeat=SimpleNamespace(beat=refused))
    assert len(said) == 1 and "heartbeat was not recorded" in said[0] and "permission denied" in said[0]


# ---------------------------------------------------------------- `launcher watch --install`, systemctl stubbed
@pytest.fixture
def dotless(tmp_path, monkeypatch, launcher_env):
    """HOME and XDG_CONFIG_HOME in temporary folders; systemctl calls recorded, never run."""
    monkeypatch.setenv("HOME", str(tmp_path / "homedir"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("LAUNCHER_STATE_URL", raising=False)
    monkeypatch.setattr(watch_command, "_executable", lambda: "/opt/venv/bin/launcher")
    calls = []
    monkeypatch.setattr(watch_command, "_systemctl", lambda *args: calls.append(args))
    return SimpleNamespace(tmp=tmp_path, calls=calls, unit=tmp_path / "xdg" / "systemd" / "user" /
                           "launcher-watch.service", monkeypatch=monkeypatch)


def cli(*args):
    try:
        runner = CliRunner(mix_stderr=False)
    except TypeError:  # click 8.2 keeps them apart by itself
        runner = CliRunner()
    return runner.invoke(main, list(args), catch_exceptions=False)


def test_install_writes_a_private_unit_and_enables_it_when_systemd_answers(dotless, launcher_env):
    dotless.monkeypatch.setattr(watch_command, "_user_systemd", lambda: True)
    r = cli("watch", "--install", "--interval", "20")
    assert r.exit_code == 0, r.stderr
    assert stat.S_IMODE(dotless.unit.stat().st_mode) == 0o600
    text = dotless.unit.read_text()
    assert f'Environment="LAUNCHER_HOME={launcher_env["home"]}"' in text
    assert 'ExecStart="/opt/venv/bin/launcher" "watch" "--interval" "20"' in text
    assert dotless.calls == [("daemon-reload",), ("enable", "--now", "launcher-watch.service")]
    assert str(dotless.unit) in r.stdout and "enable-linger" in r.stderr

    r = cli("watch", "--uninstall")
    assert r.exit_code == 0 and not dotless.unit.exists() and f"removed {dotless.unit}" in r.stdout
    assert dotless.calls[2:] == [("disable", "--now", "launcher-watch.service"), ("daemon-reload",)]


def test_install_without_systemd_prints_the_cron_line_and_writes_nothing(dotless, launcher_env):
    dotless.monkeypatch.setattr(watch_command, "_user_systemd", lambda: False)
    before = sorted(p for p in dotless.tmp.rglob("*"))
    r = cli("watch", "--install")
    assert r.exit_code == 0, r.stderr
    assert r.stdout.startswith("* * * * * flock -n ") and r.stdout.count("\n") == 1
    assert "/opt/venv/bin/launcher watch >> " in r.stdout and "crontab -e" in r.stderr
    assert sorted(p for p in dotless.tmp.rglob("*")) == before and dotless.calls == []


def test_install_cron_prints_the_line_even_where_systemd_answers(dotless):
    dotless.monkeypatch.setattr(watch_command, "_user_systemd", lambda: True)
    r = cli("watch", "--install", "--cron")
    assert r.exit_code == 0 and r.stdout.startswith("* * * * * flock -n ") and not dotless.unit.exists()


def test_install_refuses_a_url_with_a_password(dotless):
    dotless.monkeypatch.setattr(watch_command, "_user_systemd", lambda: True)
    dotless.monkeypatch.setenv("LAUNCHER_STATE_URL", "postgresql://bob:s3cret@db/x")
    for args in (["--install"], ["--install", "--cron"]):
        r = cli("watch", *args)
        assert r.exit_code == 2 and "~/.pgpass" in r.stderr and r.stdout == "" and "s3cret" not in r.stderr
    assert not dotless.unit.exists() and dotless.calls == []


def test_install_options_that_do_not_go_together_are_usage_errors(dotless):
    for args in (["--cron"], ["--install", "--uninstall"], ["--install", "--once"], ["--install", "--exit-when-idle"]):
        assert cli("watch", *args).exit_code == 2, args


def test_a_pass_starts_every_interval_whatever_it_costs():
    assert watch.pause_after(10.0, 0.0) == 10.0
    assert watch.pause_after(10.0, 4.0) == 6.0  # a 4 s pass: the next starts 10 s after this one did
    assert watch.pause_after(10.0, 12.0) == 1.0  # longer than the interval: a breath, not back to back
    assert watch.pause_after(0.5, 3.0) == 0.05
    assert watch.pause_after(5.0, -2.0) == 5.0  # a clock that stepped back


def test_the_loop_waits_out_the_rest_of_the_interval(monkeypatch):
    monkeypatch.setattr(watch, "cycle", lambda app, clock, hooks, specs=None, poller=None: [])
    monkeypatch.setattr(watch.notify, "pending", lambda app: False)
    app = loop_app([["job"]])
    now = iter([100.0, 103.0, 110.0, 121.5, 130.0, 130.5])  # passes of 3 s and 11.5 s
    slept = []
    watch._run(app, 10.0, False, lambda: next(now), slept.append, lambda s: None, 2, None)
    assert slept == [7.0]
