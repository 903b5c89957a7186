"""The state store on a real PostgreSQL server (issue 23, §1, §4, §5): what a person sees when
the server cannot be used (one line, exit 3, nothing written), migrations under an advisory
lock (two processes upgrading at once run a step once), the launcher's commands on the
server, and ``launcher state migrate`` moving a SQLite store in without loss, idempotently.

The store's semantics on both engines: the unit tests with ``state_engine``
(tests.fixtures.stores). The server: tests.fixtures.postgres (services tier)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from launcher.core.errors import EXIT_STATE
from launcher.state.schema import SCHEMA_VERSION
from launcher.state.store import StateStore

from .launcher_cli import LAUNCHER, LauncherCLI

pytestmark = pytest.mark.postgres


def launcher(home: Path, *args, url: str = "", env=None, code: str = "") -> subprocess.CompletedProcess:
    """The real `launcher` (or, with CODE, python -c CODE that runs it) with its own home and URL."""
    config = home.parent / f"{home.name}-config.yaml"
    config.write_text("targets: {}\n")
    e = {**os.environ, "LAUNCHER_HOME": str(home), "LAUNCHER_CONFIG": str(config), "LAUNCHER_STATE_URL": url,
         **(env or {})}
    argv = [sys.executable, "-c", code, *args] if code else [LAUNCHER, *args]
    return subprocess.run(argv, env=e, capture_output=True, text=True, timeout=120)


def tables_of(server, db: str) -> str:
    return server.sql("SELECT string_agg(table_name, ',' ORDER BY table_name) FROM information_schema.tables "
                      "WHERE table_schema = 'public'", db=db)


def one_line_error(p: subprocess.CompletedProcess) -> str:
    assert p.returncode == EXIT_STATE, (p.returncode, p.stdout, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), p.stderr
    return lines[0]


# ---------------------------------------------------------------- what a person sees
def test_a_server_that_cannot_be_reached_is_one_line_and_nothing_is_written(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nobody listens there once closed
    home = tmp_path / "home"
    line = one_line_error(launcher(home, "status", url=f"postgresql://u:secretpw@127.0.0.1:{port}/team"))
    assert "cannot be reached" in line and f"127.0.0.1:{port}" in line and "LAUNCHER_STATE_URL" in line
    assert "secretpw" not in line  # the password is never shown
    assert not home.exists()  # nothing written, not even the home


def test_a_refused_login_says_to_check_the_user_and_password(tmp_path, pg_server, pg_url):
    home = tmp_path / "home"
    bad = pg_url.replace(f":{pg_server.password}@", ":wrong-password@")
    line = one_line_error(launcher(home, "status", url=bad))
    assert "refused the login" in line and "password" in line and "wrong-password" not in line
    assert tables_of(pg_server, pg_url.rsplit("/", 1)[1]) == ""  # nothing written


def test_a_missing_database_says_to_create_it(tmp_path, pg_server):
    line = one_line_error(launcher(tmp_path / "home", "status", url=pg_server.url("no_such_db")))
    assert "does not exist" in line and "createdb" in line


def test_a_missing_driver_says_how_to_install_it(tmp_path, pg_url):
    code = "import sys; sys.modules['psycopg'] = None; sys.argv[0] = 'launcher'\nfrom launcher.cli import main\nmain()"
    line = one_line_error(launcher(tmp_path / "home", "status", url=pg_url, code=code))
    assert "pip install 'launcher[postgres]'" in line


def test_a_schema_newer_than_the_code_is_refused_before_anything_is_written(tmp_path, pg_server, pg_url):
    StateStore(tmp_path / "home", url=pg_url).close()
    db = pg_url.rsplit("/", 1)[1]
    pg_server.sql("UPDATE launcher_schema SET version = 99", db=db)
    before = pg_server.sql("SELECT count(*) FROM jobs", db=db)
    line = one_line_error(launcher(tmp_path / "home", "status", url=pg_url))
    assert "schema version 99" in line and "upgrade launcher" in line
    assert pg_server.sql("SELECT version FROM launcher_schema", db=db) == "99"
    assert pg_server.sql("SELECT count(*) FROM jobs", db=db) == before


def test_a_database_of_another_application_is_refused_and_left_as_it_is(tmp_path, pg_server, pg_url):
    db = pg_url.rsplit("/", 1)[1]
    pg_server.sql("CREATE TABLE invoices (id int)", db=db)
    line = one_line_error(launcher(tmp_path / "home", "status", url=pg_url))
    assert "not a launcher state store" in line and "invoices" in line
    assert tables_of(pg_server, db) == "invoices"


def test_a_url_that_is_not_postgresql_is_refused(tmp_path):
    p = launcher(tmp_path / "home", "status", url="mysql://x@127.0.0.1/db")
    assert p.returncode != 0 and "expected a postgresql:// URL" in p.stderr


def test_the_config_files_state_url_is_used_and_the_environment_wins(tmp_path, pg_server, pg_url):
    from launcher.api.context import App

    cfg = tmp_path / "config.yaml"
    cfg.write_text(f"state_url: {pg_url}\n")
    app = App(config_path=cfg, home=tmp_path / "home")
    try:
        assert app.store.url == pg_url
    finally:
        app.close_store()
    os.environ["LAUNCHER_STATE_URL"] = ""
    try:
        app = App(config_path=cfg, home=tmp_path / "home")
        assert app.store.url == pg_url  # an empty variable is no URL: the config's is used
        app.close_store()
    finally:
        del os.environ["LAUNCHER_STATE_URL"]


def test_a_server_restart_costs_one_failed_write_then_the_store_reconnects(tmp_path, pg_server, pg_url):
    s = StateStore(tmp_path / "home", url=pg_url)
    try:
        s.begin_job("j", "n", "local", "local", None, "name: n\n")
        pg_server.restart()
        from launcher.core.errors import StateStoreError

        try:
            s.record_event("j", "first")  # the connection died with the server: this write may fail whole
        except StateStoreError as e:
            assert "cannot be reached" in str(e)
        s.record_event("j", "second")  # a new connection
        kinds = [e["kind"] for e in s.events("j")]
        assert kinds[-1] == "second" and set(kinds) <= {"first", "second"}
    finally:
        s.close()


# ---------------------------------------------------------------- migrations under the advisory lock
MIGRATOR = """
import sys, time
from launcher.state import schema
def slow_step(db, engine):
    db.execute("CREATE TABLE IF NOT EXISTS step_runs (pid BIGINT, at DOUBLE PRECISION)")
    db.execute("INSERT INTO step_runs VALUES (?, ?)", (__import__('os').getpid(), time.time()))
    time.sleep(1.5)  # long enough for the other process to arrive while this one migrates
NEXT = schema.SCHEMA_VERSION + 1
schema.STEPS = schema.STEPS + [(NEXT, slow_step)]
schema.SCHEMA_VERSION = NEXT
url, start = sys.argv[1], float(sys.argv[2])
time.sleep(max(0.0, start - time.time()))
from launcher.state.store import StateStore
StateStore(sys.argv[3], url=url).close()
print("ok")
"""


def test_two_launchers_upgrading_at_once_run_each_step_once(tmp_path, pg_server, pg_url):
    StateStore(tmp_path / "home", url=pg_url).close()  # a store at this schema
    db = pg_url.rsplit("/", 1)[1]
    start = time.time() + 2.0
    procs = [subprocess.Popen([sys.executable, "-c", MIGRATOR, pg_url, str(start), str(tmp_path / f"h{i}")],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert pg_server.sql("SELECT count(*) FROM step_runs", db=db) == "1"  # one ran it, the other found it done
    assert pg_server.sql("SELECT version FROM launcher_schema", db=db) == str(SCHEMA_VERSION + 1)


def test_two_launchers_creating_one_new_store_at_once_both_succeed(tmp_path, pg_server, pg_url):
    code = ("import sys, time\nfrom launcher.state.store import StateStore\n"
            "time.sleep(max(0.0, float(sys.argv[2]) - time.time()))\n"
            "s = StateStore(sys.argv[3], url=sys.argv[1]); s.begin_job(sys.argv[4], 'n', 'l', 'l', None, ''); s.close()")
    start = time.time() + 2.0
    procs = [subprocess.Popen([sys.executable, "-c", code, pg_url, str(start), str(tmp_path / f"h{i}"), f"j{i}"],
                              stderr=subprocess.PIPE, text=True) for i in range(3)]
    errs = [p.communicate(timeout=120)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], errs
    assert pg_server.sql("SELECT string_agg(job_id, ',' ORDER BY job_id) FROM jobs", db=pg_url.rsplit("/", 1)[1]) \
        == "j0,j1,j2"


# ---------------------------------------------------------------- the launcher on the server
def test_a_launch_and_its_status_on_the_server(tmp_path, pg_url):
    cli = LauncherCLI(tmp_path)
    cli.env["LAUNCHER_STATE_URL"] = pg_url
    spec = cli.spec("pgjob", {"run": "echo hello-from-pg"})
    job = cli.launch(spec, "local")
    cli.wait_state(job, "COMPLETED", timeout=60)
    assert not (cli.home / "state.db").exists()  # the server holds the state
    (tmp_path / "elsewhere").mkdir()
    other = LauncherCLI(tmp_path / "elsewhere")  # another person's home, the same server
    other.env["LAUNCHER_STATE_URL"] = pg_url
    assert other.status(job)["state"] == "COMPLETED"


# ---------------------------------------------------------------- moving in
def rich_sqlite_store(home: Path) -> None:
    """A SQLite store with a row in every table: jobs, a sweep, attempts, events, claims,
    provenance and spot observations (one of an attempt, one of none), written by the store;
    then a row in any other table of SCHEMA (``fill_the_rest``)."""
    from launcher.state import observations, provenance

    s = StateStore(home, url="")
    try:
        s.begin_job("solo-1", "solo", "local", "local", "/x/solo.yaml", "name: solo\n", ckpt_root="/ck/solo",
                    meta={"seed": 7})
        s.record_submission("solo-1", 1, "local", '{"h": 1}', "101", events=[("submitted", {"n": 1})],
                            provenance=("/ck/solo/RUN.json", '{"run": "solo-1"}'))
        s.update_attempt("solo-1", 1, state="PREEMPTED", exit_code=143, started=1.5, ended=2.25, cost_usd=0.125)
        s.record_submission("solo-1", 2, "local", '{"h": 2}', "102", resume_step=40)
        s.record_event("solo-1", "note", text="x" * 10)
        s.record_event("solo-1", "note", text="x" * 10)  # the same event twice: both are kept
        s.sweeps.begin("sw-1", "sw", "local", "local", None, "name: sw\n", {"sweep": {"id": "sw-1", "size": 2}},
                       [(f"sw-1-e{i}", f"/ck/{i}", {"sweep": {"id": "sw-1", "index": i, "size": 2}}) for i in range(2)])
        s.claim("solo-1", ttl=30)
        s.claim_name("sweep:sw-1", ttl=30)
        observations.record(s, ("aws", "us-east-1", "a", "p3", True), 1.5, 1, "preempted", 10.0, "solo-1", 1)
        observations.record(s, ("aws", "us-east-1", "", "", True), 0.5, 0, "ran", 11.0)
        provenance.save(s, "sw-1-e0", None, '{"run": "sw-1-e0"}')
    finally:
        s.close()
    fill_the_rest(home / "state.db")


def fill_the_rest(path: Path) -> None:
    """A row in each table the writes above left empty (a table added to SCHEMA later): every
    column set, of its declared type, its job being solo-1."""
    import sqlite3

    db = sqlite3.connect(path)
    try:
        for (table,) in db.execute("SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%'"
                                   ).fetchall():
            if db.execute(f"SELECT count(*) FROM {table}").fetchone()[0]:
                continue
            cols = [(r[1], r[2].upper(), r[5]) for r in db.execute(f"PRAGMA table_info({table})").fetchall()]
            values = {name: ("solo-1" if name == "job_id" else 1 if "INT" in kind else 1.5 if "REAL" in kind
                             else f"{table}.{name}") for name, kind, pk in cols if not (pk and kind == "INTEGER")}
            db.execute(f"INSERT INTO {table}({', '.join(values)}) VALUES({','.join('?' * len(values))})",
                       list(values.values()))
        db.commit()
    finally:
        db.close()


def every_row(store) -> dict:
    """{table: its rows, every column but a surrogate id, in the order they were written}."""
    from launcher.state.schema import tables

    out = {}
    for t, (cols, _keys, rowid) in tables().items():
        kept = [c for c in cols if c != rowid]
        order = rowid or ", ".join(kept)
        out[t] = [tuple(r) for r in store.db.execute(f"SELECT {', '.join(kept)} FROM {t} ORDER BY {order}").fetchall()]
    return out


def test_state_migrate_copies_every_row_of_every_table_and_twice_copies_nothing(tmp_path, pg_url):
    home = tmp_path / "home"
    rich_sqlite_store(home)
    source = StateStore(home, url="")
    want = every_row(source)
    source.close()
    assert all(want.values())  # a row in every table

    dry = launcher(home, "state", "migrate", "--to", pg_url, "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    counts = json.loads(dry.stdout)["tables"]
    assert {t: c["to_copy"] for t, c in counts.items()} == {t: len(rows) for t, rows in want.items()}
    server = StateStore(tmp_path / "other", url=pg_url)
    try:
        assert every_row(server) == {t: [] for t in want}  # the dry run wrote nothing

        first = launcher(home, "state", "migrate", "--to", pg_url)
        assert first.returncode == 0, first.stderr
        assert f"{sum(map(len, want.values()))} rows copied" in first.stdout
        assert every_row(server) == want  # every row, every column, in order

        again = launcher(home, "state", "migrate", "--to", pg_url, "--json")
        assert again.returncode == 0, again.stderr
        assert all(c["copied"] == 0 for c in json.loads(again.stdout)["tables"].values())
        assert every_row(server) == want  # nothing duplicated

        job = server.get_job("solo-1")  # and the launcher reads it as it read the SQLite store
        assert [a.attempt for a in server.attempts("solo-1")] == [1, 2] and job.meta == {"seed": 7}
        assert [j.job_id for j in server.sweeps.jobs("sw-1")] == ["sw-1-e0", "sw-1-e1"]
        assert server.sweeps.jobs("sw-1")[0].spec_yaml == "name: sw\n"
    finally:
        server.close()


def test_state_migrate_adds_what_is_new_since_the_last_run(tmp_path, pg_url):
    home = tmp_path / "home"
    rich_sqlite_store(home)
    assert launcher(home, "state", "migrate", "--to", pg_url).returncode == 0
    s = StateStore(home, url="", moved_ok=True)  # (by hand: every launcher refuses a moved store)
    s.record_event("solo-1", "later")  # written to the SQLite store after the first run
    s.begin_job("solo-2", "solo", "local", "local", None, "name: solo\n")
    want = every_row(s)
    s.close()
    p = launcher(home, "state", "migrate", "--to", pg_url, "--json")
    assert p.returncode == 0, p.stderr
    copied = {t: c["copied"] for t, c in json.loads(p.stdout)["tables"].items()}
    assert copied["events"] == 1 and copied["jobs"] == 1 and sum(copied.values()) == 2
    server = StateStore(tmp_path / "other", url=pg_url)
    try:
        assert every_row(server) == want
    finally:
        server.close()


def test_a_store_moved_by_state_migrate_is_refused_by_every_launcher_naming_the_url(tmp_path, pg_url):
    """A watcher still pointed at the SQLite store after `state migrate` would run its jobs a second
    time: every command refuses it in one line (exit 3) naming the server (its password hidden)."""
    home = tmp_path / "home"
    rich_sqlite_store(home)
    secret_url = pg_url  # the fixture's URL carries the password
    password = secret_url.split("://", 1)[1].split("@", 1)[0].split(":", 1)[1]
    assert launcher(home, "state", "migrate", "--to", secret_url).returncode == 0
    before = (home / "state.db").read_bytes()
    for args in (("watch", "--once"), ("status",), ("cancel", "solo-1")):
        line = one_line_error(launcher(home, *args))
        assert "was moved to postgresql://" in line and "LAUNCHER_STATE_URL" in line, line
        assert password not in line
    assert (home / "state.db").read_bytes() == before  # nothing written
    server = StateStore(tmp_path / "other", url=secret_url)  # the jobs are on the server
    try:
        assert server.get_job("solo-1") is not None
    finally:
        server.close()
    again = launcher(home, "state", "migrate", "--to", secret_url)  # a second run is still allowed
    assert again.returncode == 0, again.stderr


def test_state_migrate_without_a_sqlite_store_says_so(tmp_path, pg_url):
    p = launcher(tmp_path / "nohome", "state", "migrate", "--to", pg_url)
    assert p.returncode != 0 and "no SQLite state store" in p.stderr
    assert not (tmp_path / "nohome" / "state.db").exists()


# ---------------------------------------------------------------- watchers with homes of their own
def test_watchers_with_homes_of_their_own_share_a_jobs_folder_or_say_they_cannot(tmp_path, pg_url, capfd):
    launching = StateStore(tmp_path / "a", url=pg_url)
    watcher = StateStore(tmp_path / "b", url=pg_url)  # another $LAUNCHER_HOME on the same store
    try:
        launching.begin_job("j1", "n", "local", "local", None, "name: n\n")
        mine = launching.job_dir("j1")
        assert mine == tmp_path / "a" / "jobs" / "j1"
        assert watcher.job_dir("j1") == mine  # the folder it was launched with, not a second one
        assert not (tmp_path / "b" / "jobs" / "j1").exists()

        launching.begin_job("j2", "n", "local", "local", None, "name: n\n")  # its folder is never made ...
        (tmp_path / "a").rename(tmp_path / "a-gone")  # ... and its home cannot be reached from here
        got = watcher.job_dir("j2")
        assert got == tmp_path / "b" / "jobs" / "j2"
        assert watcher.job_dir("j2") == got
        said = [e for e in watcher.events("j2") if e["kind"] == "job_dir_elsewhere"]
        assert len(said) == 1 and said[0]["launched_from"] == str(tmp_path / "a" / "jobs" / "j2"), said
        err = capfd.readouterr().err
        assert err.count("warning: job j2's folder") == 1, err
    finally:
        launching.close()
        watcher.close()
