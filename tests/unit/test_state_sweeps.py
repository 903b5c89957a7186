"""A sweep's spec is stored once (the ``sweeps`` row) and its elements hold only their own
facts, while every reader still sees each element's spec and meta; a store written by the
previous version (schema 1: each element row carrying the whole spec) is migrated in place
and its sweeps are read, watched and shown as before."""

from __future__ import annotations

import json
import sqlite3

import pytest

from launcher.backend.protocols import Handle
from launcher.recovery import watch
from launcher.backend.sections import spec_from_text
from launcher.state.store import StateStore
from launcher.state.db import APPLICATION_ID
from launcher.state.schema import SCHEMA_VERSION
from launcher.core.status import STOPPED, JobState, Status
from launcher.state.sweeps import merged, own_meta, shared_of
from launcher.launching.submission import job_spec
from launcher.sweep.control import sweep_status
from launcher.sweep.judgements import record
from launcher.sweep.elements import begin_sweep, element_rows, sweep_rows
from launcher.spec.sweep import EarlyStop

# the schema launcher wrote before the sweeps table (user_version 1), as it was
SCHEMA_1 = """
CREATE TABLE jobs (job_id TEXT PRIMARY KEY, name TEXT NOT NULL, target TEXT NOT NULL, backend TEXT NOT NULL,
  spec_path TEXT, spec_yaml TEXT NOT NULL, created REAL NOT NULL, updated REAL NOT NULL, state TEXT NOT NULL,
  reason TEXT NOT NULL DEFAULT '', handle TEXT, ckpt_root TEXT, last_step INTEGER, meta TEXT NOT NULL DEFAULT '{}');
CREATE INDEX jobs_state ON jobs(state);
CREATE TABLE attempts (job_id TEXT NOT NULL REFERENCES jobs(job_id) ON DELETE CASCADE, attempt INTEGER NOT NULL,
  target TEXT NOT NULL, native_id TEXT, handle TEXT, submitted REAL NOT NULL, state TEXT NOT NULL,
  reason TEXT NOT NULL DEFAULT '', native_state TEXT NOT NULL DEFAULT '', exit_code INTEGER, started REAL,
  ended REAL, resume_step INTEGER, cost_usd REAL, meta TEXT NOT NULL DEFAULT '{}', PRIMARY KEY (job_id, attempt));
CREATE TABLE events (id INTEGER PRIMARY KEY AUTOINCREMENT, job_id TEXT NOT NULL, ts REAL NOT NULL,
  kind TEXT NOT NULL, detail TEXT NOT NULL DEFAULT '{}');
CREATE INDEX events_job ON events(job_id, id);
CREATE TABLE claims (job_id TEXT PRIMARY KEY, owner TEXT NOT NULL, expires REAL NOT NULL, taken REAL NOT NULL);
"""
LOSS = [0.4, 0.1, 0.3, 0.2]


def sweep_text(root) -> str:
    return (f"name: sw\nrun: python3 train.py\ncheckpoint: {{root: {root}}}\n"
            "sweep: {grid: {x: [0, 1, 2, 3]}, early_stop: {metric: loss, mode: min, keep: 0.5, rungs: [10, 20]}}\n")


def old_store(home, text: str, base: str, states) -> None:
    """A schema-1 state.db as the previous version left it: every element row with the whole
    spec and its whole meta (the array's id included), attempt 1 of each."""
    home.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(home / "state.db")
    db.executescript(SCHEMA_1)
    db.execute(f"PRAGMA application_id={APPLICATION_ID}")
    db.execute("PRAGMA user_version=1")
    for r, state in zip(element_rows("old-1", spec_from_text(text), 7, base), states):
        h = Handle("fake", "local", r["job_id"], f"100_{r['index']}", 1, {"sweep_array": "100"})
        meta = {**r["meta"], "sweep": {**r["meta"]["sweep"], "array": "100"}}
        db.execute("INSERT INTO jobs(job_id,name,target,backend,spec_path,spec_yaml,created,updated,state,handle,"
                   "ckpt_root,meta) VALUES(?,?,?,?,?,?,?,?,?,?,?,?)",
                   (r["job_id"], "sw", "local", "fake", None, text, 1.0, 1.0, state, h.to_json(), r["ckpt_root"],
                    json.dumps(meta)))
        db.execute("INSERT INTO attempts(job_id,attempt,target,native_id,handle,submitted,state) VALUES(?,?,?,?,?,?,?)",
                   (r["job_id"], 1, "local", h.native_id, h.to_json(), 1.0, state))
    db.commit()
    db.close()


class FakeScheduler:
    name = "fake"

    def __init__(self, states):
        self.states = dict(states)
        self.cancelled: list = []

    def status(self, handles):
        return [Status(self.states.get(h.native_id, JobState.UNKNOWN), native_state="x") for h in handles]

    def cancel(self, h):
        self.cancelled.append(h.native_id)
        self.states[h.native_id] = JobState.CANCELLED

    def cancel_many(self, handles):
        for h in handles:
            self.cancel(h)
        return {}

    def find(self, job):
        return None  # it keeps no dedupe token

    def close(self):
        pass


# ---------------------------------------------------------------- the new layout
def test_own_meta_keeps_what_is_the_elements_and_merged_gives_it_back():
    meta = {"spec_base": "/b", "seed": 11, "seed_source": "sweep", "final": True,
            "sweep": {"id": "old-1", "index": 3, "size": 4, "params": {"x": 3}, "seed": 7}}
    shared = shared_of(meta)
    own = own_meta(meta, shared)
    assert own == {"seed": 11, "final": True, "sweep": {"id": "old-1", "index": 3, "params": {"x": 3}}}
    assert merged(own, shared) == meta
    assert merged(own, {**shared, "sweep": {**shared["sweep"], "array": "100"}})["sweep"]["array"] == "100"
    assert merged(meta, None) is meta  # a row written before the sweeps table: its own meta


@pytest.mark.usefixtures("state_engine")  # on both engines (tests.fixtures.stores)
def test_the_spec_is_stored_once_and_every_element_reads_it(tmp_path):
    text = sweep_text(tmp_path / "ck")
    spec = spec_from_text(text)
    rows = element_rows("old-1", spec, 7, "/base")
    store = StateStore(tmp_path / "h")
    try:
        begin_sweep(store, "old-1", spec, text, "/base/sw.yaml", "t", "fake", rows)
        store.sweeps.share("old-1", array="100")
        raw = store.db.execute("SELECT spec_yaml, meta, sweep_id FROM jobs ORDER BY job_id").fetchall()
        assert [r["spec_yaml"] for r in raw] == [""] * 4 and {r["sweep_id"] for r in raw} == {"old-1"}
        assert "spec_base" not in raw[0]["meta"] and '"size"' not in raw[0]["meta"]
        assert [tuple(r) for r in store.db.execute("SELECT spec_yaml, size FROM sweeps")] == [(text, 4)]
        got = sweep_rows(store, "old-1")
        assert [j.job_id for j in got] == [f"old-1-e{i}" for i in range(4)]
        for j, r in zip(got, rows):
            assert j.spec_yaml == text and j.meta == {**r["meta"], "sweep": {**r["meta"]["sweep"], "array": "100"}}
        assert store.get_job("old-1-e2") == got[2] and store.claim("old-1-e2").job == got[2]
        assert job_spec(got[2]).sweep.early_stop.metric == "loss"
        store.patch_meta("old-1-e2", final=True)  # a write of the element's own meta keeps the split
        assert store.get_job("old-1-e2").meta["sweep"]["size"] == 4
    finally:
        store.close()


def test_a_new_store_is_at_this_schema_and_opening_it_again_changes_nothing(tmp_path):
    StateStore(tmp_path / "h").close()
    db = sqlite3.connect(tmp_path / "h" / "state.db")
    assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 8
    before = db.execute("SELECT sql FROM sqlite_master ORDER BY name").fetchall()
    StateStore(tmp_path / "h").close()
    assert db.execute("SELECT sql FROM sqlite_master ORDER BY name").fetchall() == before
    assert ("jobs_sweep",) in db.execute("SELECT name FROM sqlite_master WHERE type='index'").fetchall()


# ---------------------------------------------------------------- a store of the previous version
def test_an_old_store_is_migrated_in_place_and_its_elements_keep_their_own_spec(tmp_path):
    text = sweep_text(tmp_path / "ck")
    old_store(tmp_path / "h", text, "/base", ["RUNNING"] * 4)
    store = StateStore(tmp_path / "h")
    try:
        db = store.db
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert [r[0] for r in db.execute("SELECT sweep_id FROM jobs ORDER BY job_id")] == ["old-1"] * 4
        assert db.execute("SELECT count(*) FROM sweeps").fetchone()[0] == 0  # nothing rewritten
        rows = sweep_rows(store, "old-1")
        assert [j.meta["sweep"]["index"] for j in rows] == [0, 1, 2, 3]
        assert all(j.spec_yaml == text and j.meta["sweep"]["array"] == "100" for j in rows)
        assert job_spec(rows[1]).sweep.size == 4 and rows[1].meta["spec_base"] == "/base"
    finally:
        store.close()
    again = StateStore(tmp_path / "h")  # a second open finds it migrated
    try:
        assert len(sweep_rows(again, "old-1")) == 4
    finally:
        again.close()


def test_early_stop_judges_an_old_stores_elements_found_by_the_sweep_id_the_migration_filled(tmp_path):
    text = sweep_text(tmp_path / "ck")
    old_store(tmp_path / "h", text, "/base", ["RUNNING", "RUNNING", "COMPLETED", "RUNNING"])
    store = StateStore(tmp_path / "h")
    try:
        made = record(store, "old-1", EarlyStop(metric="loss", mode="min", keep=0.5, rungs=[10, 20]),
                      {i: {10: {"loss": v}} for i, v in enumerate(LOSS)})
        assert sorted((j.index, j.stop) for j in made) == [(0, True), (1, False), (2, False), (3, False)]
        raw = store.db.execute("SELECT spec_yaml, meta FROM jobs WHERE sweep_id='old-1' ORDER BY job_id").fetchall()
        assert all(r["spec_yaml"] == text for r in raw)  # the old rows keep their own spec and meta
        assert all(json.loads(r["meta"])["spec_base"] == "/base" for r in raw)
        assert [len(json.loads(r["meta"])["early_stop"]["judgements"]) for r in raw] == [1, 1, 1, 1]
    finally:
        store.close()


@pytest.fixture
def old_rig(launcher_env, tmp_path):
    """An App over an old store holding a 4-element sweep, all RUNNING on a fake scheduler."""
    from launcher.api.context import App

    root = tmp_path / "ck"
    old_store(launcher_env["home"], sweep_text(root), str(tmp_path), ["RUNNING"] * 4)
    app = App()
    fake = FakeScheduler({f"100_{i}": JobState.RUNNING for i in range(4)})
    app._backends["local"] = fake
    yield app, fake
    app.close()


def test_watch_decides_on_an_old_stores_elements_from_their_own_spec(old_rig):
    app, fake = old_rig
    record(app.store, "old-1", EarlyStop(metric="loss", mode="min", keep=0.5, rungs=[10, 20]),
           {i: {10: {"loss": v}} for i, v in enumerate(LOSS)})  # rung 10 stops 0 and 2
    fake.states["100_1"] = JobState.COMPLETED
    out = watch.cycle(app)
    assert sorted((o.job_id, o.action) for o in out if o.action in ("stopped", "done")) == [
        ("old-1-e0", "stopped"), ("old-1-e1", "done"), ("old-1-e2", "stopped")]
    assert sorted(fake.cancelled) == ["100_0", "100_2"]
    assert [r.state for r in sweep_rows(app.store, "old-1")] == [STOPPED, "COMPLETED", STOPPED, "RUNNING"]


def test_status_of_an_old_stores_sweep_reads_its_rows_and_metric(old_rig):
    app, fake = old_rig
    fake.states["100_3"] = JobState.COMPLETED
    s = sweep_status(app, "old-1")
    assert s["size"] == 4 and s["metric"] == "loss"
    assert s["counts"] == {"RUNNING": 3, "COMPLETED": 1}
    assert [e["params"] for e in s["elements"]] == [{"x": i} for i in range(4)]


def test_the_schema_splits_into_whole_statements():
    """``migrate`` runs the schema statement by statement in one transaction (split at ';')."""
    from launcher.state.schema import SCHEMA

    db = sqlite3.connect(":memory:")
    for statement in filter(str.strip, SCHEMA.split(";")):
        assert sqlite3.complete_statement(statement + ";"), statement
        db.execute(statement)
