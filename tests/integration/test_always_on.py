"""Always on (issue 29, item 6), through the real `launcher` command on the local target: `launcher
watch` stays up with no job open (and records its heartbeat every pass), `--exit-when-idle` exits
as watch did before, `status` and `launch` warn on stderr (one line, never on stdout) when a job is
open and the last heartbeat is stale, and `watch --install` where no user systemd can be found
prints the crontab line and writes nothing. HOME, XDG_CONFIG_HOME and PATH point at temporary
folders for --install: this machine's dotfiles, crontab and systemd are never touched."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import time

from tests.fixtures.polling import poll

from .launcher_cli import LAUNCHER, LauncherCLI, job_id_of


def heartbeats(cli: LauncherCLI) -> list:
    db = sqlite3.connect(cli.home / "state.db")
    try:
        return db.execute("SELECT watcher_id, pid, last_pass, interval_s FROM watchers ORDER BY last_pass").fetchall()
    finally:
        db.close()


def test_watch_stays_up_with_no_job_open_and_beats_every_pass(tmp_path):
    cli = LauncherCLI(tmp_path)
    cli.run("status")  # the store exists
    log = tmp_path / "watch.log"
    with open(log, "ab") as out:
        p = subprocess.Popen([LAUNCHER, "watch", "--interval", "0.2"], env=cli.env, stdout=out,
                             stderr=subprocess.STDOUT, cwd=str(tmp_path), start_new_session=True)
    try:
        poll("watch says it keeps watching", lambda: "still watching for new ones" in log.read_text(), timeout=60,
             interval=0.2, detail=log.read_text)
        first = poll("a heartbeat", lambda: [r for r in heartbeats(cli) if r[1] == p.pid], timeout=30,
                     interval=0.2)[0]
        assert first[3] == 0.2
        poll("the heartbeat moves on", lambda: [r for r in heartbeats(cli) if r[1] == p.pid and r[2] > first[2] + 0.5],
             timeout=30, interval=0.2)
        assert p.poll() is None, log.read_text()  # still up, with nothing to watch
        assert log.read_text().count("still watching for new ones") == 1  # said once, not every pass
        assert cli.run("status").stderr == ""  # no job open: no warning
    finally:
        if p.poll() is None:
            os.kill(p.pid, signal.SIGTERM)
        p.wait(timeout=30)


def test_exit_when_idle_exits_once_no_job_is_open(tmp_path):
    cli = LauncherCLI(tmp_path)
    p = cli.run("watch", "--exit-when-idle", "--interval", "0.2", timeout=120)
    assert p.stdout.strip().splitlines()[-1] == "no open jobs left"
    assert len(heartbeats(cli)) == 1  # its one pass was recorded


def test_status_and_launch_warn_when_a_job_is_open_and_the_heartbeat_is_stale(tmp_path):
    cli = LauncherCLI(tmp_path)
    spec = cli.spec("sleeper", {"run": "sleep 300"})
    launched = cli.run("launch", spec, "--target", "local")
    job = job_id_of(launched)
    jobs = [job]
    try:
        # a job launched a moment ago has not gone without a watcher for 3 intervals: no warning
        assert launched.stderr == "", launched.stderr
        assert launched.stdout.startswith(f"{job}: submitted to local")
        db = sqlite3.connect(cli.home / "state.db")  # the job has been open for an hour
        db.execute("UPDATE jobs SET created = ?", (time.time() - 3600,))
        db.commit()
        db.close()
        # no watcher ever ran: status says so
        never = cli.run("status", "--json")
        assert "no `launcher watch` has run on this state store" in never.stderr, never.stderr

        cli.run("watch", "--once", "--interval", "10")  # one pass: a fresh heartbeat
        fresh = cli.run("status", "--json")
        assert fresh.stderr == "" and any(r["job_id"] == job for r in json.loads(fresh.stdout))

        db = sqlite3.connect(cli.home / "state.db")  # that watcher was last seen an hour ago
        db.execute("UPDATE watchers SET last_pass = ?", (time.time() - 3600,))
        db.commit()
        db.close()
        stale = cli.run("status", "--json")
        rows = json.loads(stale.stdout)  # stdout stays JSON: the warning is on stderr
        assert any(r["job_id"] == job for r in rows)
        lines = stale.stderr.strip().splitlines()
        assert len(lines) == 1, stale.stderr
        assert lines[0].startswith("warning: 1 open job and no `launcher watch` pass for 60 min"), lines[0]
        assert "every 10 s" in lines[0] and "launcher watch --install" in lines[0]
        one = cli.run("status", job)
        assert one.stderr.count("warning:") == 1 and "no `launcher watch` pass for" in one.stderr

        again = cli.run("launch", spec, "--target", "local")
        jobs.append(job_id_of(again))
        assert "warning: 2 open jobs and no `launcher watch` pass for 60 min" in again.stderr, again.stderr
    finally:
        for j in jobs:
            cli.run("cancel", j, check=False)
    closed = cli.run("status")
    assert "warning" not in closed.stderr, closed.stderr  # no job open: no warning, however stale


def test_install_without_systemd_prints_the_cron_line_and_writes_nothing(tmp_path):
    cli = LauncherCLI(tmp_path)
    home, xdg, bin_dir = tmp_path / "homedir", tmp_path / "xdg", tmp_path / "bin"
    for d in (home, bin_dir):
        d.mkdir()
    env = {"HOME": str(home), "XDG_CONFIG_HOME": str(xdg), "PATH": str(bin_dir),  # no systemctl on PATH
           "XDG_RUNTIME_DIR": str(tmp_path / "run")}
    cli.run("status")  # the launcher's home exists: the line's lock and log go there
    before = sorted(tmp_path.rglob("*"))
    p = cli.run("watch", "--install", env=env)
    assert p.stdout.count("\n") == 1, p.stdout
    line = p.stdout.strip()
    assert line.startswith(f"* * * * * flock -n {cli.home / 'watch.lock'} env "), line
    assert f"LAUNCHER_HOME={cli.home}" in line and f"LAUNCHER_CONFIG={cli.config}" in line
    assert f"{LAUNCHER} watch >> {cli.home / 'watch.log'} 2>&1" in line
    assert "no user systemd answers here" in p.stderr and "crontab -e" in p.stderr
    assert sorted(tmp_path.rglob("*")) == before and not xdg.exists()  # nothing written

    refused = cli.run("watch", "--install", check=False,
                      env={**env, "LAUNCHER_STATE_URL": "postgresql://bob:s3cret@127.0.0.1:1/x"})
    assert refused.returncode == 2 and refused.stdout == "" and "~/.pgpass" in refused.stderr
    assert "s3cret" not in refused.stderr

    gone = cli.run("watch", "--uninstall", env=env)
    assert "nothing to remove" in gone.stdout and sorted(tmp_path.rglob("*")) == before
