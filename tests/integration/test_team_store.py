"""A team on one PostgreSQL store (issue 23, §3): each person's jobs are their own, enforced by
the server's row-level security (``launcher.state.team``), not only by the CLI.

Two throw-away Unix users, alice and bob (their own homes, their own ``$LAUNCHER_HOME`` and
``~/.pgpass``), each log in as a PostgreSQL role of their own, members of ``launcher_team``; a
watcher (this test's process, a member of ``launcher_watcher``) recovers everyone's jobs. The
server: tests.fixtures.postgres (services tier)."""

from __future__ import annotations

import json
import os
import pwd
import secrets
import shutil
import subprocess
import sys
import tempfile
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from tests.fixtures.accounts import passwd
from tests.fixtures.polling import poll
from tests.fixtures.postgres import _remove_user

from .launcher_cli import LAUNCHER, starts_by_job

pytestmark = pytest.mark.postgres

TOKEN = "team-token-" + secrets.token_hex(8)  # a secret the jobs get: never in the store

PROGRAM = """
import os, sys
a = int(os.environ["LAUNCHER_ATTEMPT"])
with open(os.environ["STARTS"], "a") as f:
    f.write(os.environ["LAUNCHER_JOB_ID"] + " " + str(a) + "\\n")
assert os.environ["TEAM_TOKEN"].startswith("team-token-")
sys.exit(75 if a == 1 else 0)  # the first attempt is preempted: a watcher resubmits it
"""


REPO = str(Path(__file__).resolve().parents[2])
SITE = __import__("sysconfig").get_paths()["purelib"]  # the venv's packages (launcher: editable)


def python_for(uid: int, gid: int) -> str:
    """An interpreter UID can run: this one, else (it lives in a home only root enters, as pyenv's
    in /root) the system's of the same version, given the venv's packages (``BOOT``)."""
    for exe in (sys.executable, f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}"):
        try:
            subprocess.run([exe, "-c", "pass"], user=uid, group=gid, extra_groups=[], check=True, timeout=60,
                           cwd="/")
            return exe
        except (OSError, subprocess.CalledProcessError):
            continue
    from tests.fixtures.policy import service_unavailable

    service_unavailable("a person's launcher", f"no Python {sys.version_info.major}.{sys.version_info.minor} "
                                                "that another user may run")


BOOT = ("import site, sys; site.addsitedir(sys.argv.pop(1)); sys.argv[0] = 'launcher'\n"
        "from launcher.cli import main\nsys.exit(main())")


@dataclass
class Person:
    name: str  # Unix user and PostgreSQL role
    uid: int
    gid: int
    home: Path
    url: str  # no password: it is in ~/.pgpass
    password: str
    python: str  # an interpreter this user may run (``python_for``)

    def env(self) -> dict:
        return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(self.home), "USER": self.name,
                "LAUNCHER_HOME": str(self.home / "launcher"), "LAUNCHER_CONFIG": str(self.home / "config.yaml"),
                "LAUNCHER_STATE_URL": self.url, "TEAM_TOKEN": TOKEN, "LAUNCHER_CLAIM_TTL": "3",
                "PYTHONPATH": REPO}  # the jobs' `python -m launcher.jobside` (stdlib only) under python_for's interpreter

    def launcher(self, *args, timeout=120) -> subprocess.CompletedProcess:
        return subprocess.run([self.python, "-I", "-c", BOOT, SITE, *map(str, args)], env=self.env(), capture_output=True, text=True,
                              timeout=timeout, cwd=self.home, user=self.uid, group=self.gid, extra_groups=[])

    def connect(self):
        import psycopg

        return psycopg.connect(self.url, autocommit=True, passfile=str(self.home / ".pgpass"))


@pytest.fixture
def team(pg_server):
    """{alice, bob: Person (Unix user + role), watcher: its role's URL, db}: a store created by the
    server's superuser (the tables' owner), on a database of the test's own."""
    from launcher.state.store import StateStore

    tag = secrets.token_hex(3)
    db = pg_server.create_database(f"team_{tag}")
    base = Path(tempfile.mkdtemp(prefix="launcher-team-"))
    base.chmod(0o755)
    people, made_roles = {}, []
    try:
        StateStore(base / "admin", url=pg_server.url(db)).close()  # creates the tables, roles and policies
        for who in ("alice", "bob", "watcher"):
            role, pw = f"{who}_{tag}", secrets.token_hex(12)
            group = "launcher_watcher" if who == "watcher" else "launcher_team"
            pg_server.sql(f"CREATE ROLE {role} LOGIN PASSWORD '{pw}' IN ROLE {group}")
            made_roles.append(role)
            url = f"postgresql://{role}@127.0.0.1:{pg_server.port}/{db}"
            if who == "watcher":
                people[who] = (url, pw)
                continue
            home = base / role
            passwd(["useradd", "-M", "-d", home, "-s", "/bin/sh", "-c", "launcher test person", role], RuntimeError)
            pw_ent = pwd.getpwnam(role)
            home.mkdir(mode=0o700)
            (home / ".pgpass").write_text(f"127.0.0.1:{pg_server.port}:{db}:{role}:{pw}\n")
            (home / ".pgpass").chmod(0o600)
            (home / "config.yaml").write_text("targets: {}\n")
            for p in (home, home / ".pgpass", home / "config.yaml"):
                os.chown(p, pw_ent.pw_uid, pw_ent.pw_gid)
            people[who] = Person(role, pw_ent.pw_uid, pw_ent.pw_gid, home, url, pw,
                                 python_for(pw_ent.pw_uid, pw_ent.pw_gid))
        people["db"], people["base"] = db, base
        yield people
    finally:
        for who in ("alice", "bob"):
            p = people.get(who)
            if isinstance(p, Person):
                _remove_user(p.name, p.uid)  # its processes (jobs) first, then the account
        pg_server.drop_database(db)
        for role in made_roles:
            pg_server.sql(f"DROP ROLE IF EXISTS {role}")
        shutil.rmtree(base, ignore_errors=True)


def launch(person: Person, base: Path, starts: Path) -> str:
    spec = person.home / "job.yaml"
    spec.write_text(yaml.safe_dump({"name": f"{person.name}-job", "run": f"{person.python} {base / 'prog.py'}",
                                    "env": {"STARTS": str(starts)}, "secrets": ["TEAM_TOKEN"],
                                    "recovery": {"preemption": 5}}))
    os.chown(spec, person.uid, person.gid)
    p = person.launcher("launch", spec, "--target", "local")
    assert p.returncode == 0, p.stderr
    return p.stdout.split(":", 1)[0].strip()


def test_each_persons_jobs_are_their_own_and_the_watcher_recovers_everyones(team, pg_server):
    alice, bob, db, base = team["alice"], team["bob"], team["db"], team["base"]
    (base / "prog.py").write_text(textwrap.dedent(PROGRAM))
    starts = base / "starts.txt"
    starts.touch()
    starts.chmod(0o666)
    a_job, b_job = launch(alice, base, starts), launch(bob, base, starts)
    poll("each person's first attempt ran", lambda: all(starts_by_job(starts).get(j) == [1] for j in (a_job, b_job)),
         timeout=60, interval=0.2, detail=lambda: alice.launcher("logs", a_job).stdout)
    owners = dict(line.split("|") for line in pg_server.sql("SELECT job_id, owner FROM jobs", db=db).splitlines())
    assert owners == {a_job: alice.name, b_job: bob.name}  # filled from the connecting role

    # bob reads the team's jobs (the default setting) ...
    listing = bob.launcher("status", "--json")
    assert listing.returncode == 0, listing.stderr
    assert {a_job, b_job} <= {r["job_id"] for r in json.loads(listing.stdout)}
    # ... but his cancel of alice's job is refused, in one line, and changes nothing
    p = bob.launcher("cancel", a_job)
    assert p.returncode != 0
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and f"belongs to {alice.name}" in lines[0] and "nothing was done" in lines[0], p.stderr
    before = pg_server.sql(f"SELECT state, updated FROM jobs WHERE job_id = '{a_job}'", db=db)

    # ... and so is his cancel of her sweep, or of one of its elements; hers goes through
    sweep_spec = alice.home / "sweep.yaml"
    sweep_spec.write_text(yaml.safe_dump({"name": "alice-sweep", "run": "sleep 120",
                                          "sweep": {"grid": {"lr": [1, 2]}}}))
    os.chown(sweep_spec, alice.uid, alice.gid)
    p = alice.launcher("launch", sweep_spec, "--target", "local")
    assert p.returncode == 0, p.stderr
    sweep = p.stdout.split(":", 1)[0].strip()
    rows = f"SELECT job_id, state, updated FROM jobs WHERE job_id LIKE '{sweep}-e%' ORDER BY job_id"
    untouched = pg_server.sql(rows, db=db)
    assert len(untouched.splitlines()) == 2 and "CANCELLED" not in untouched, untouched
    for target in (sweep, f"{sweep}-e1"):
        p = bob.launcher("cancel", target)
        lines = p.stderr.strip().splitlines()
        assert p.returncode != 0 and len(lines) == 1 and f"belongs to {alice.name}" in lines[0], (target, p.stderr)
    assert pg_server.sql(rows, db=db) == untouched
    p = alice.launcher("cancel", sweep)
    assert p.returncode == 0 and "2 cancelled" in p.stderr + p.stdout, p.stderr
    elements = pg_server.sql(f"SELECT job_id, state FROM jobs WHERE job_id LIKE '{sweep}-e%' ORDER BY job_id", db=db)
    assert elements.splitlines() == [f"{sweep}-e0|CANCELLED", f"{sweep}-e1|CANCELLED"], elements

    # his direct SQL changes nothing of hers; an insert naming her job is refused by the server
    import psycopg

    with bob.connect() as c:
        assert c.execute("SELECT count(*) FROM jobs WHERE job_id = %s", (a_job,)).fetchone()[0] == 1
        for sql in ("UPDATE jobs SET state = 'CANCELLED', owner = current_user WHERE job_id = %s",
                    "UPDATE attempts SET state = 'CANCELLED' WHERE job_id = %s",
                    "DELETE FROM events WHERE job_id = %s", "DELETE FROM jobs WHERE job_id = %s"):
            assert c.execute(sql, (a_job,)).rowcount == 0, sql
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            c.execute("INSERT INTO claims(job_id, owner, expires, taken) VALUES (%s, 'bob', 1e12, 0)", (a_job,))
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            c.execute("UPDATE launcher_settings SET value = 'team'")
        assert c.execute("UPDATE jobs SET reason = 'mine' WHERE job_id = %s", (b_job,)).rowcount == 1
    assert pg_server.sql(f"SELECT state, updated FROM jobs WHERE job_id = '{a_job}'", db=db) == before

    # the team's setting: each person reads only their own
    pg_server.sql("UPDATE launcher_settings SET value = 'own' WHERE name = 'read'", db=db)
    with bob.connect() as c:
        assert [r[0] for r in c.execute("SELECT job_id FROM jobs").fetchall()] == [b_job]
        assert c.execute("SELECT count(*) FROM events WHERE job_id = %s", (a_job,)).fetchone()[0] == 0

    # the watcher (its own role) recovers both: each (job, attempt) runs once
    url, pw = team["watcher"]
    pgpass = base / "watcher.pgpass"
    pgpass.write_text(f"127.0.0.1:{pg_server.port}:{db}:{url.split('//')[1].split('@')[0]}:{pw}\n")
    pgpass.chmod(0o600)
    (base / "watcher-config.yaml").write_text("targets: {}\n")
    env = {**os.environ, "LAUNCHER_HOME": str(base / "watcher"), "LAUNCHER_CONFIG": str(base / "watcher-config.yaml"),
           "LAUNCHER_STATE_URL": url, "PGPASSFILE": str(pgpass), "TEAM_TOKEN": TOKEN, "LAUNCHER_CLAIM_TTL": "3"}

    def both_completed():
        w = subprocess.run([LAUNCHER, "watch", "--once"], env=env, capture_output=True, text=True, timeout=120)
        assert w.returncode == 0, w.stderr
        st = subprocess.run([LAUNCHER, "status", "--json", "--all"], env=env, capture_output=True, text=True,
                            timeout=120)
        states = {r["job_id"]: r["state"] for r in json.loads(st.stdout)}
        return states if states.get(a_job) == states.get(b_job) == "COMPLETED" else None

    poll("the watcher recovered both jobs", both_completed, timeout=120, interval=0.5)
    assert starts_by_job(starts) == {a_job: [1, 2], b_job: [1, 2]}

    # what the store holds: no password, no secret value
    dump = pg_server.sql("SELECT string_agg(t::text, ' ') FROM (SELECT jobs::text FROM jobs UNION ALL "
                         "SELECT attempts::text FROM attempts UNION ALL SELECT events::text FROM events UNION ALL "
                         "SELECT provenance::text FROM provenance UNION ALL SELECT claims::text FROM claims) t", db=db)
    assert a_job in dump
    for secret in (TOKEN, alice.password, bob.password, pw):
        assert secret not in dump


def test_gc_removes_only_a_persons_own_ended_jobs_and_the_watcher_removes_everyones(team, pg_server):
    """`launcher gc` on a team's store: alice's removes her ended job (rows and folder) and keeps
    bob's, named as his; the watchers' role removes what is left; open jobs stay."""
    alice, bob, db, base = team["alice"], team["bob"], team["db"], team["base"]
    done = {}
    for person in (alice, bob):
        spec = person.home / "done.yaml"
        spec.write_text(yaml.safe_dump({"name": f"{person.name}-done", "run": "true"}))
        os.chown(spec, person.uid, person.gid)
        p = person.launcher("launch", spec, "--target", "local")
        assert p.returncode == 0, p.stderr
        job = done[person.name] = p.stdout.split(":", 1)[0].strip()
        poll(f"{job} completed", lambda: json.loads(person.launcher("status", job, "--json").stdout)["state"]
             == "COMPLETED", timeout=120, interval=0.5)
    spec = alice.home / "open.yaml"
    spec.write_text(yaml.safe_dump({"name": "alice-open", "run": "sleep 600"}))
    os.chown(spec, alice.uid, alice.gid)
    p = alice.launcher("launch", spec, "--target", "local")
    assert p.returncode == 0, p.stderr
    still_open = p.stdout.split(":", 1)[0].strip()
    try:
        p = alice.launcher("gc", "--older-than", "0s", "--json")
        assert p.returncode == 0, p.stderr
        out = json.loads(p.stdout)
        assert [r["job_id"] for r in out["removed"]] == [done[alice.name]], out
        assert {k["job_id"]: k["why"] for k in out["kept"]} == {done[bob.name]: f"{bob.name}'s job"}, out
        assert not (alice.home / "launcher" / "jobs" / done[alice.name]).exists()
        rows = pg_server.sql("SELECT string_agg(job_id, ' ' ORDER BY job_id) FROM jobs", db=db).split()
        assert sorted(rows) == sorted([done[bob.name], still_open])

        url, pw = team["watcher"]
        pgpass = base / "gc-watcher.pgpass"
        pgpass.write_text(f"127.0.0.1:{pg_server.port}:{db}:{url.split('//')[1].split('@')[0]}:{pw}\n")
        pgpass.chmod(0o600)
        (base / "gc-watcher-config.yaml").write_text("targets: {}\n")
        env = {**os.environ, "LAUNCHER_HOME": str(base / "gc-watcher"),
               "LAUNCHER_CONFIG": str(base / "gc-watcher-config.yaml"), "LAUNCHER_STATE_URL": url,
               "PGPASSFILE": str(pgpass)}
        w = subprocess.run([LAUNCHER, "gc", "--older-than", "0s", "--json"], env=env, capture_output=True, text=True,
                           timeout=120)
        assert w.returncode == 0, w.stderr
        assert [r["job_id"] for r in json.loads(w.stdout)["removed"]] == [done[bob.name]]
        assert not (bob.home / "launcher" / "jobs" / done[bob.name]).exists()  # its launching home's folder
        left = pg_server.sql("SELECT string_agg(job_id || ':' || state, ' ') FROM jobs", db=db).split()
        assert len(left) == 1 and left[0].startswith(still_open + ":"), left
        for table in ("attempts", "events"):
            n = pg_server.sql(f"SELECT count(*) FROM {table} WHERE job_id IN ('{done[alice.name]}', "
                              f"'{done[bob.name]}')", db=db)
            assert n.strip() == "0", (table, n)
    finally:
        alice.launcher("cancel", still_open)


# ---------------------------------------------------------------- launcher serve on the server
def test_serve_reads_a_postgresql_store_and_never_writes_it(launcher_env, pg_server, pg_url, monkeypatch):
    from launcher.core.errors import StateStoreError
    from launcher.state.readonly import ReadOnlyStore
    from tests.fixtures.serving import get, served
    from tests.unit.test_serve import fill

    home, db = launcher_env["home"], pg_url.rsplit("/", 1)[1]
    monkeypatch.setenv("LAUNCHER_STATE_URL", pg_url)
    with served(home) as (url, _):  # an empty database: nothing to show, and nothing created
        assert get(url + "/")[0] == 200 and json.loads(get(url + "/api/jobs")[2])["exists"] is False
    assert pg_server.sql("SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'", db=db) == "0"

    ids = fill(home, n=4)
    pg_server.sql(f"UPDATE jobs SET meta = '{{oops' WHERE job_id = '{ids[3]}'", db=db)
    before = pg_server.sql("SELECT md5(string_agg(t::text, '' ORDER BY t::text)) FROM (SELECT jobs::text FROM jobs "
                           "UNION ALL SELECT events::text FROM events UNION ALL SELECT attempts::text FROM attempts) t",
                           db=db)
    with served(home) as (url, _):
        d = json.loads(get(url + "/api/jobs?per=2&page=1")[2])
        assert (d["total"], d["pages"], d["exists"]) == (4, 2, True)
        d = json.loads(get(url + "/api/jobs")[2])
        assert {j["job_id"]: (j["attempts"], j["open"], j["cost_usd"]) for j in d["jobs"]} == \
            {ids[0]: (1, True, 0.25), ids[1]: (2, False, 0.75), ids[2]: (2, False, 0.75)}
        assert "not valid JSON" in d["unreadable"][ids[3]]
        status, _, body = get(url + f"/job/{ids[1]}")
        assert status == 200 and '<table id="attempts">' in body and "COMPLETED" in body
        job = json.loads(get(url + f"/api/job/{ids[1]}")[2])
        assert [a["state"] for a in job["attempts"]] == ["PREEMPTED", "COMPLETED"] and job["report"]["job_id"] == ids[1]
        # the dashboard: its header names the server's store without the password, and filters by the owner column
        from urllib.parse import urlsplit

        from launcher.serve.pages import e
        from launcher.state.engines import shown

        page = get(url + "/")[2]
        assert f'<code id="store">{e(shown(pg_url))}</code>' in page and str(home) not in page.split("<main>")[0]
        secret = urlsplit(pg_url).password
        assert not secret or secret not in page
        owner = job["owner"]
        d = json.loads(get(url + f"/api/jobs?owner={owner}&state=COMPLETED")[2])
        assert d["total"] == 3 and len(d["jobs"]) == 2 and d["counts"]["owner"] == {owner: 4}  # one unreadable
        assert {j["owner"] for j in d["jobs"]} == {owner}
        assert json.loads(get(url + "/api/jobs?owner=nobody-here")[2])["total"] == 0
    ro = ReadOnlyStore(home, url=pg_url)
    try:
        with pytest.raises(StateStoreError, match="may not be written"):  # the server refuses: a read-only session
            ro.db.execute("DELETE FROM events")
    finally:
        ro.close()
    assert pg_server.sql("SELECT md5(string_agg(t::text, '' ORDER BY t::text)) FROM (SELECT jobs::text FROM jobs "
                         "UNION ALL SELECT events::text FROM events UNION ALL SELECT attempts::text FROM attempts) t",
                         db=db) == before


def test_a_store_from_before_the_policies_is_brought_up_to_them_in_place(tmp_path, pg_server, pg_url):
    from launcher.state.store import StateStore

    db = pg_url.rsplit("/", 1)[1]
    s = StateStore(tmp_path / "home", url=pg_url)
    s.begin_job("old-1", "n", "local", "local", None, "name: n\n")
    s.close()
    # what an earlier launcher left: no owner column, no policies, no security stamp
    pg_server.sql("ALTER TABLE jobs DROP COLUMN owner CASCADE; ALTER TABLE sweeps DROP COLUMN owner CASCADE; "
                  "ALTER TABLE jobs DISABLE ROW LEVEL SECURITY; ALTER TABLE launcher_schema DROP COLUMN security",
                  db=db)
    s = StateStore(tmp_path / "home", url=pg_url)  # migrates, under the migration lock
    try:
        assert s.get_job("old-1").owner == "launcher"  # the role that ran the migration
        assert s.db.acts_on_all and s.may_act(s.get_job("old-1"))
    finally:
        s.close()
    assert pg_server.sql("SELECT relrowsecurity FROM pg_class WHERE relname = 'jobs'", db=db) == "t"
    assert pg_server.sql("SELECT count(*) FROM pg_policies WHERE tablename = 'jobs'", db=db) == "4"
    from launcher.state.team import SECURITY_VERSION

    assert pg_server.sql("SELECT security FROM launcher_schema", db=db) == str(SECURITY_VERSION)


STEPPER = """
import os, sys, time
sys.path.insert(0, os.environ["LAUNCHER_JOB_PYZ"])
from launcher import jobside
with jobside.save(3) as d:
    open(os.path.join(d, "w.txt"), "w").write("3")
time.sleep(600)
"""


def test_a_teams_names_whose_each_job_is_who_cancelled_it_and_how_old_a_row_shown_as_stored_is(team, pg_server):
    """Issue 33, item 2: `status` names each job's owner; bob's view of alice's open job says it is
    shown as stored and how long ago its row changed (its step stays as stored until a launcher
    that may write it reads her checkpoint root); a cancel by the watchers' role is recorded as
    that role's, in the job's reason and in the event's actor, never as "by user"."""
    alice, bob, db, base = team["alice"], team["bob"], team["db"], team["base"]
    (base / "stepper.py").write_text(textwrap.dedent(STEPPER))
    root = base / "ck-alice"
    root.mkdir()
    os.chown(root, alice.uid, alice.gid)
    spec = alice.home / "steps.yaml"
    spec.write_text(yaml.safe_dump({"name": "alice-steps", "run": f"{alice.python} {base / 'stepper.py'}",
                                    "checkpoint": {"root": str(root)}}))
    os.chown(spec, alice.uid, alice.gid)
    p = alice.launcher("launch", spec, "--target", "local")
    assert p.returncode == 0, p.stderr
    job = p.stdout.split(":", 1)[0].strip()
    poll("step 3 committed", lambda: any(root.glob("step-*3.g*/COMMIT.json")), timeout=120, interval=0.3)

    # bob's view: her job, as stored, with its age; his own refreshes nothing of hers
    p = bob.launcher("status", job)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[1].startswith(f"owner {alice.name}; as stored, not refreshed here ({alice.name}'s job: only its "
                               "owner or the watchers' role refresh it); its row last changed "), p.stdout
    assert lines[2].endswith("last committed step: - (as stored)"), p.stdout
    listing = {r["job_id"]: r for r in json.loads(bob.launcher("status", "--json").stdout)}
    assert (listing[job]["owner"], listing[job]["refreshed"], listing[job]["last_step"]) == (alice.name, False, None)
    text = bob.launcher("status").stdout
    row = next(line for line in text.splitlines() if line.startswith(job))
    assert row.split()[1] == alice.name and "[as stored, " in row, text

    # hers brings it up to date: then every reader sees the one step
    mine = json.loads(alice.launcher("status", job, "--json").stdout)
    assert (mine["owner"], mine["refreshed"], mine["last_step"]) == (alice.name, True, 3)
    assert json.loads(bob.launcher("status", job, "--json").stdout)["last_step"] == 3
    assert json.loads(alice.launcher("report", job, "--json").stdout)["last_step"] == 3

    # the watchers' role cancels it: its own name is recorded, not "user", and not alice's
    url, pw = team["watcher"]
    role = url.split("//")[1].split("@")[0]
    pgpass = base / "names-watcher.pgpass"
    pgpass.write_text(f"127.0.0.1:{pg_server.port}:{db}:{role}:{pw}\n")
    pgpass.chmod(0o600)
    (base / "names-watcher-config.yaml").write_text("targets: {}\n")
    env = {**os.environ, "LAUNCHER_HOME": str(base / "names-watcher"),
           "LAUNCHER_CONFIG": str(base / "names-watcher-config.yaml"), "LAUNCHER_STATE_URL": url,
           "PGPASSFILE": str(pgpass)}
    w = subprocess.run([LAUNCHER, "cancel", job], env=env, capture_output=True, text=True, timeout=120)
    assert w.returncode == 0, w.stderr
    d = json.loads(bob.launcher("status", job, "--json").stdout)
    assert (d["state"], d["reason"]) == ("CANCELLED", f"cancelled by {role}"), d
    cancelled = [e for e in d["events"] if e["kind"] == "cancelled"]
    assert len(cancelled) == 1 and cancelled[0]["actor"] == role and cancelled[0]["by"] == role, cancelled
    assert {e["actor"] for e in d["events"] if e["kind"] == "submitted"} == {alice.name}
    assert f"  event cancelled by {role}: " in bob.launcher("status", job).stdout
    # the server fills the actor itself: a person's own INSERT names that person, whatever the launcher does
    actors = pg_server.sql(f"SELECT string_agg(DISTINCT actor, ' ') FROM events WHERE job_id = '{job}'", db=db)
    assert sorted(actors.split()) == sorted({alice.name, role}), actors


def test_every_member_blames_and_quarantines_a_node_and_only_the_watchers_role_releases_it(team, tmp_path,
                                                                                          monkeypatch):
    """Bad nodes remembered (docs/bad-nodes.md) on a team's store: alice's blames quarantine a node
    for everyone (bob reads it); neither alice nor bob may lift it, the watchers' role may."""
    import time

    from launcher.core.errors import LauncherError
    from launcher.state import nodes
    from launcher.state.store import StateStore

    def store_of(person, name):
        return StateStore(tmp_path / name, url=person.url.replace("@", f":{person.password}@", 1))

    alice, bob = team["alice"], team["bob"]
    w_url, w_pw = team["watcher"]
    now = time.time()
    mine, theirs = store_of(alice, "alice"), store_of(bob, "bob")
    try:
        kw = dict(after=2, window=86400, quarantine_s=3600)
        assert nodes.blame(mine, "cl", ["n1"], "alice-job", 1, "exit 42", now, **kw) == (["n1"], [])
        assert nodes.blame(theirs, "cl", ["n2"], "bob-job", 1, "NODE_FAIL", now, **kw) == (["n2"], [])
        _, (q,) = nodes.blame(mine, "cl", ["n1"], "alice-job", 2, "exit 42", now + 1, **kw)
        assert (q.node, q.blames) == ("n1", 2)
        (listed,) = nodes.quarantines(theirs, now + 2)
        assert (listed.target, listed.node, listed.blames) == ("cl", "n1", 2)
        for store in (mine, theirs):
            with pytest.raises(LauncherError, match="(?i)permission denied"):
                nodes.release(store, "n1")
        assert nodes.quarantined(mine, "cl", now + 2) == ("n1",)
        from launcher.api.facade import Launcher  # the CLI's `nodes release`, as bob

        monkeypatch.setenv("LAUNCHER_STATE_URL", bob.url.replace("@", f":{bob.password}@", 1))
        monkeypatch.setenv("LAUNCHER_HOME", str(tmp_path / "bob-home"))
        with Launcher() as lx:
            with pytest.raises(LauncherError, match="only members of launcher_watcher and the store's owner may "
                                                    "release a node on this team's store; nothing was released"):
                lx.release_node("n1")
            assert [q.node for q in lx.nodes()] == ["n1"]
    finally:
        mine.close()
        theirs.close()
    watcher = StateStore(tmp_path / "watcher", url=w_url.replace("@", f":{w_pw}@", 1))
    try:
        assert nodes.release(watcher, "n1", "cl") == ["cl"]
        assert nodes.quarantines(watcher, now + 2) == []
        # its blames went with it; bob's blame of n2 stays
        assert nodes.blame(watcher, "cl", ["n2"], "bob-job", 2, "NODE_FAIL", now + 3, **kw)[1][0].node == "n2"
    finally:
        watcher.close()
