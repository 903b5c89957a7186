"""A job's own states: the open ones are named (``OPEN_STATES``), so the listings of open jobs
ask the jobs_state index for them and never read the store's closed history."""

from __future__ import annotations

import json
import time

from launcher.core.status import (ATTEMPT_FAILED, FINAL_STATES, OPEN_STATES, QUEUED, JobState, is_final,
                                  job_state_for)
from launcher.state.store import StateStore
from launcher.state.watchers import open_jobs_since


def test_every_state_a_job_can_show_is_either_open_or_final():
    shown = {job_state_for(s.value) for s in JobState} | {QUEUED, JobState.SUBMITTING.value}
    assert shown <= OPEN_STATES | FINAL_STATES
    assert not OPEN_STATES & FINAL_STATES
    assert {ATTEMPT_FAILED, QUEUED, "SUBMITTING", "RUNNING", "PREEMPTED"} <= OPEN_STATES
    assert all(not is_final(s) for s in OPEN_STATES)


def _rows(store, rows):
    now = time.time()
    with store.tx(jobs=()) as db:
        db.executemany(
            "INSERT INTO jobs(job_id,name,target,backend,spec_path,spec_yaml,created,updated,state,ckpt_root,meta,"
            "sweep_id) VALUES(?,?,?,?,?,?,?,?,?,?,?,?)",
            [(j, "n", "t", "local", None, "name: n\n", now + i, now, state, None, json.dumps(meta), None)
             for i, (j, state, meta) in enumerate(rows)])


def test_the_open_listings_read_the_open_rows_by_the_state_index(tmp_path):
    store = StateStore(tmp_path / "home")
    closed = [(f"c{i}", sorted(FINAL_STATES)[i % len(FINAL_STATES)], {}) for i in range(60)]
    opened = [(f"o-{s}", s, {}) for s in sorted(OPEN_STATES)]
    marked = [("x-marked", "CANCELLED", {"launch_overtaken": {"at": 1.0, "attempt": 1}})]
    _rows(store, closed + opened + marked)
    assert {j.job_id for j in store.open_jobs()} == {j for j, _, _ in opened}
    assert {j.job_id for j in store.watch_rows()} == {j for j, _, _ in opened} | {"x-marked"}
    assert open_jobs_since(store)[0] == len(opened)
    plan = " ".join(str(tuple(r)) for r in store.db.execute(
        "EXPLAIN QUERY PLAN SELECT * FROM jobs WHERE state IN (%s)" % ",".join("?" * len(OPEN_STATES)),
        sorted(OPEN_STATES)).fetchall())
    assert "USING INDEX jobs_state" in plan, plan
    store.close()


def test_the_marked_cancelled_rows_are_read_by_their_own_index_and_a_schema_7_store_gains_it(tmp_path):
    import sqlite3

    store = StateStore(tmp_path / "home")
    store.close()
    db = sqlite3.connect(tmp_path / "home" / "state.db")
    db.execute("DROP INDEX jobs_overtaken")
    db.execute("PRAGMA user_version=7")
    db.commit()
    db.close()
    store = StateStore(tmp_path / "home")
    try:
        assert store.db.execute("PRAGMA user_version").fetchone()[0] == 8
        _rows(store, [(f"c{i}", "CANCELLED", {"closing": {"by": "u"}}) for i in range(50)]
              + [("m-1", "CANCELLED", {"launch_overtaken": {"at": 1.0}}), ("r-1", "RUNNING", {})])
        assert [j.job_id for j in store.watch_rows()] == ["r-1", "m-1"]  # newest first
        plan = " ".join(str(tuple(r)) for r in store.db.execute(
            f"EXPLAIN QUERY PLAN SELECT * FROM {store.db.engine.overtaken_from} WHERE "
            + store.db.engine.types["OVERTAKEN_ROWS"]).fetchall())
        assert "jobs_overtaken" in plan, plan
    finally:
        store.close()
