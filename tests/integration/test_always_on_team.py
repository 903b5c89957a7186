"""The watchers' heartbeat on a team's PostgreSQL store (issue 29, item 6): the `watchers` table is
usable by a member of `launcher_team` (granted like the other tables), a store of schema 3 gets
it when migrated, and a member's view of the heartbeats gives the same warning as SQLite's. The
server: tests.fixtures.postgres (services tier)."""

from __future__ import annotations

import secrets
import time

import pytest

from launcher.api.always_on import stale_watchers
from launcher.state.schema import SCHEMA_VERSION
from launcher.state.store import StateStore
from launcher.state.watchers import Heartbeat, open_job_count, watcher_rows

pytestmark = pytest.mark.postgres


@pytest.fixture
def member_store(pg_server, tmp_path):
    """(the owner's URL, a StateStore of a fresh member of launcher_team) on a database of its own."""
    tag = secrets.token_hex(3)
    db = pg_server.create_database(f"watchers_{tag}")
    role, pw = f"member_{tag}", secrets.token_hex(12)
    owner_url = pg_server.url(db)
    StateStore(tmp_path / "admin", url=owner_url).close()  # the tables, the roles and the grants
    pg_server.sql(f"CREATE ROLE {role} LOGIN PASSWORD '{pw}' IN ROLE launcher_team")
    store = StateStore(tmp_path / "member", url=pg_server.url(db, user=role, password=pw))
    try:
        yield owner_url, store, db
    finally:
        store.close()
        pg_server.drop_database(db)
        pg_server.sql(f"DROP ROLE IF EXISTS {role}")


def test_a_member_records_and_reads_heartbeats_and_gets_the_warning(member_store):
    _, store, _ = member_store
    now = time.time()
    hb = Heartbeat(10.0, now=now - 5000)
    hb.beat(store, now - 4000.5, now - 4000)  # one upsert per pass: the same row, moved on
    hb.beat(store, now - 3600.5, now - 3600)
    rows = watcher_rows(store)
    assert [(r.watcher_id, r.last_pass, r.interval_s) for r in rows] == [(hb.watcher_id, now - 3600, 10.0)]
    assert stale_watchers(rows, open_job_count(store), now) is None  # no job open: no warning
    store.begin_job("j1", "j1", "local", "local", None, "name: j1\n")
    line = stale_watchers(watcher_rows(store), open_job_count(store), now)
    assert line.startswith("warning: 1 open job and no `launcher watch` pass for 60 min"), line
    hb.beat(store, now - 1, now)
    assert stale_watchers(watcher_rows(store), open_job_count(store), now) is None


def test_a_store_of_schema_3_gets_the_table_and_its_grant(member_store, pg_server, tmp_path):
    owner_url, store, db = member_store
    store.close()
    pg_server.sql("DROP TABLE watchers; UPDATE launcher_schema SET version = 3", db=db)
    StateStore(tmp_path / "admin2", url=owner_url).close()  # the owner's launcher migrates it
    assert pg_server.sql("SELECT version FROM launcher_schema", db=db) == str(SCHEMA_VERSION)
    assert pg_server.sql("SELECT has_table_privilege('launcher_team', 'watchers', 'INSERT, UPDATE, DELETE')",
                         db=db) == "t"
    Heartbeat(1.0).beat(store, time.time() - 0.1, time.time())  # the member's store connects again
    assert len(watcher_rows(store)) == 1


def test_a_store_of_schema_4_gets_the_marks_and_the_pollers_table_for_the_watchers_role_only(member_store, pg_server,
                                                                                             tmp_path):
    owner_url, store, db = member_store
    store.close()
    pg_server.sql("DROP TABLE watch_marks; DROP TABLE target_polls; UPDATE launcher_schema SET version = 4", db=db)
    StateStore(tmp_path / "admin3", url=owner_url).close()  # the owner's launcher migrates it
    assert pg_server.sql("SELECT version FROM launcher_schema", db=db) == str(SCHEMA_VERSION) == "8"
    # a snapshot is acted on by every watcher: only the watchers' role may read or write one
    assert pg_server.sql("SELECT has_table_privilege('launcher_watcher', 'target_polls', 'SELECT, INSERT, UPDATE')",
                         db=db) == "t"
    assert pg_server.sql("SELECT has_table_privilege('launcher_team', 'target_polls', 'SELECT')", db=db) == "f"
    assert pg_server.sql("SELECT has_table_privilege('launcher_team', 'target_polls', 'UPDATE')", db=db) == "f"
    # the marks are a job's own: covered by its row-level security, like its attempts
    assert pg_server.sql("SELECT count(*) FROM pg_policies WHERE tablename = 'watch_marks'", db=db) == "4"
    assert pg_server.sql("SELECT has_table_privilege('launcher_team', 'watch_marks', 'INSERT, UPDATE, DELETE')",
                         db=db) == "t"


def test_a_store_of_schema_6_gets_the_node_tables_members_write_and_the_watchers_role_releases(member_store, pg_server,
                                                                                              tmp_path):
    owner_url, store, db = member_store
    store.close()
    pg_server.sql("DROP TABLE node_blames; DROP TABLE node_quarantine; UPDATE launcher_schema SET version = 6", db=db)
    StateStore(tmp_path / "admin4", url=owner_url).close()  # the owner's launcher migrates it
    assert pg_server.sql("SELECT version FROM launcher_schema", db=db) == str(SCHEMA_VERSION) == "8"
    for table in ("node_blames", "node_quarantine"):  # every member blames and quarantines (docs/bad-nodes.md)
        assert pg_server.sql(f"SELECT has_table_privilege('launcher_team', '{table}', 'SELECT, INSERT, UPDATE')",
                             db=db) == "t"
        # releasing a node: the watchers' role (and the store's owner) only
        assert pg_server.sql(f"SELECT has_table_privilege('launcher_team', '{table}', 'DELETE')", db=db) == "f"
        assert pg_server.sql(f"SELECT has_table_privilege('launcher_watcher', '{table}', 'DELETE')", db=db) == "t"


def test_a_store_of_schema_7_gets_the_overtaken_index_and_a_members_pass_lists_its_marked_rows(member_store,
                                                                                              pg_server, tmp_path):
    owner_url, store, db = member_store
    store.close()
    pg_server.sql("DROP INDEX jobs_overtaken; UPDATE launcher_schema SET version = 7", db=db)
    StateStore(tmp_path / "admin5", url=owner_url).close()  # the owner's launcher migrates it
    assert pg_server.sql("SELECT version FROM launcher_schema", db=db) == str(SCHEMA_VERSION) == "8"
    assert pg_server.sql("SELECT count(*) FROM pg_indexes WHERE indexname = 'jobs_overtaken'", db=db) == "1"
    owner = StateStore(tmp_path / "admin6", url=owner_url)
    try:
        for job_id, state in (("open-1", "RUNNING"), ("gone-1", "CANCELLED"), ("marked-1", "CANCELLED")):
            owner.begin_job(job_id, "n", "t", "local", None, "name: n\n")
            owner.update_job(job_id, state=state)
        owner.patch_meta("marked-1", launch_overtaken={"at": time.time(), "attempt": 1, "target": "t"})
        assert {j.job_id for j in owner.watch_rows()} == {"open-1", "marked-1"}
    finally:
        owner.close()
