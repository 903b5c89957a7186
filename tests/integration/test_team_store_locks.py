"""No one can stop the team's writes (issue 28; docs/team-store.md, "No one can stop the team's
writes"): a launcher frozen (SIGSTOP) inside its write transaction, and a member's own SQL
session sitting on the writers' lock or on a table lock, hold up the others' launches and the
watchers' passes for at most the configured idle limit; every wait is bounded by the busy
timeout and its error names the holder. On the real PostgreSQL server (tests.fixtures.postgres).

No wall-clock assertion: each command is given far more than the configured limits, and must
finish with exit 0 (a write blocked for the whole busy timeout exits 3, "locked")."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess

import psycopg
import pytest

from launcher.state.store import StateStore
from tests.fixtures.polling import poll

from .launcher_cli import LAUNCHER, LauncherCLI

pytestmark = pytest.mark.postgres

IDLE = 2.0  # $LAUNCHER_STATE_IDLE_TIMEOUT: a session idle this long inside a transaction is ended
BUSY = 60.0  # $LAUNCHER_STATE_BUSY_TIMEOUT: every wait's bound (a command blocked this long exits 3)
TTL = 30.0  # $LAUNCHER_CLAIM_TTL


def cli_for(tmp_path, name: str, url: str) -> LauncherCLI:
    (tmp_path / name).mkdir()
    cli = LauncherCLI(tmp_path / name)
    cli.env.update(LAUNCHER_STATE_URL=url, LAUNCHER_STATE_IDLE_TIMEOUT=str(IDLE),
                   LAUNCHER_STATE_BUSY_TIMEOUT=str(BUSY), LAUNCHER_CLAIM_TTL=str(TTL))
    return cli


def launch_ok(cli: LauncherCLI, name: str) -> subprocess.CompletedProcess:
    spec = cli.spec(name, {"run": f"echo {name}"})
    p = cli.run("launch", spec, "--target", "local", check=False, timeout=BUSY * 3)
    assert p.returncode == 0, (p.returncode, p.stdout, p.stderr)
    return p


def idle_sessions(pg_server, db: str) -> str:
    return pg_server.sql("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                         "AND state LIKE 'idle in transaction%'", db=db)


def test_a_launcher_frozen_inside_its_write_transaction_stops_no_one(tmp_path, pg_server, pg_url):
    db = pg_url.rsplit("/", 1)[1]
    frozen_cli = cli_for(tmp_path, "frozen", pg_url)
    log = tmp_path / "faults.log"
    spec = frozen_cli.spec("frozen", {"run": "echo frozen"})
    frozen = subprocess.Popen([LAUNCHER, "launch", str(spec), "--target", "local"],
                              env={**frozen_cli.env, "LAUNCHER_FAULTS": "during_record=pause",
                                   "LAUNCHER_FAULTS_LOG": str(log)},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        poll("the launcher froze inside its write transaction",
             lambda: log.exists() and f"during_record {frozen.pid} pause" in log.read_text(), timeout=120,
             interval=0.05)
        # another person's launch, and a watcher's pass, both write: each completes
        other = cli_for(tmp_path, "other", pg_url)
        launch_ok(other, "other")
        p = other.run("watch", "--once", check=False, timeout=BUSY * 3)
        assert p.returncode == 0, (p.stdout, p.stderr)
        # the server ended the frozen launcher's transaction (its locks went with it)
        assert idle_sessions(pg_server, db) == "0"
    finally:
        os.kill(frozen.pid, signal.SIGCONT)
    out, err = frozen.communicate(timeout=120)
    # continued, it learns its transaction was ended (rolled back whole) and records its submission again
    assert frozen.returncode == 0, (out, err)
    job = out.split(":", 1)[0].strip()
    st = frozen_cli.status(job)
    assert [a["attempt"] for a in st["attempts"]] == [1], st
    assert int(pg_server.sql(f"SELECT count(*) FROM attempts WHERE job_id = '{job}'", db=db)) == 1


@pytest.fixture
def member(tmp_path, pg_server, pg_url):
    """A role of the team (a member of launcher_team) and its URL, on a store made by the owner."""
    StateStore(tmp_path / "owner", url=pg_url).close()  # the tables, the roles, the writers' lock
    role, pw = f"m_{secrets.token_hex(3)}", secrets.token_hex(12)
    pg_server.sql(f"CREATE ROLE {role} LOGIN PASSWORD '{pw}' IN ROLE launcher_team")
    try:
        yield role, pg_server.url(pg_url.rsplit("/", 1)[1], user=role, password=pw)
    finally:
        pg_server.sql(f"DROP OWNED BY {role} CASCADE", db=pg_url.rsplit("/", 1)[1])
        pg_server.sql(f"DROP ROLE IF EXISTS {role}")


@pytest.mark.parametrize("hold", ["writers_lock", "table_lock", "old_advisory_lock"])
def test_a_members_own_session_cannot_hold_the_teams_writes_hostage(tmp_path, pg_server, pg_url, member, hold):
    role, url = member
    cli = cli_for(tmp_path, "team", pg_url)
    launch_ok(cli, "first")  # the store exists (tables, policies, the writers' lock)
    s = psycopg.connect(url, autocommit=True)
    try:
        # the lock's own table is the owner's alone: no direct way to it
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            s.execute("SELECT 1 FROM launcher_writer FOR UPDATE")
        s.execute("SET idle_in_transaction_session_timeout = 0")  # its own session: no server-side limit
        s.execute("BEGIN")
        if hold == "writers_lock":  # the function every writer takes it through
            s.execute("SELECT launcher_write_lock(1, 3600, 3600)")
        elif hold == "table_lock":  # what its UPDATE privilege on jobs allows
            s.execute("LOCK TABLE jobs IN EXCLUSIVE MODE")
        else:  # the advisory lock launchers took before schema 3: on no one's path now
            s.execute("SELECT pg_advisory_xact_lock(1280197448, 1)")
        # ... and sits on it: the team's launches and watchers go on (the session is ended)
        launch_ok(cli, "second")
        p = cli.run("watch", "--once", check=False, timeout=BUSY * 3)
        assert p.returncode == 0, (p.stdout, p.stderr)
        if hold != "old_advisory_lock":
            with pytest.raises(psycopg.OperationalError):
                s.execute("SELECT 1")  # ended by the waiting launcher
            assert s.broken or s.closed
    finally:
        s.close()


def test_a_wait_that_cannot_end_names_the_lock_and_its_holder(tmp_path, pg_server, pg_url, member):
    """The store's owner (here not allowed to end sessions) cannot end the holder: the wait ends
    at the busy timeout with one line naming the writers' lock and who holds it (exit 3)."""
    role, url = member
    cli = cli_for(tmp_path, "team", pg_url)
    launch_ok(cli, "first")
    db = pg_url.rsplit("/", 1)[1]
    s = psycopg.connect(url, autocommit=True)
    try:
        s.execute("BEGIN")
        s.execute("SELECT launcher_write_lock(1, 3600, 3600)")
        # held for less than the waiter's limits (idle, claim TTL): not a hostage yet
        p = cli.run("launch", cli.spec("blocked", {"run": "echo x"}), "--target", "local", check=False,
                    env={"LAUNCHER_STATE_BUSY_TIMEOUT": "2", "LAUNCHER_STATE_IDLE_TIMEOUT": "3000",
                         "LAUNCHER_CLAIM_TTL": "9000"}, timeout=120)
        assert p.returncode == 3, (p.stdout, p.stderr)
        line = p.stderr.strip()
        assert len(line.splitlines()) == 1 and "writers' lock" in line and f"role {role}" in line, line
        assert s.execute("SELECT 1").fetchone() == (1,)  # its session is left alone
    finally:
        s.close()
    assert pg_server.sql("SELECT count(*) FROM jobs WHERE name = 'blocked'", db=db) == "0"
