"""Recovery's typed state: loaded from (and stored as) the job row's meta keys that earlier
versions wrote, so stores on users' machines keep working in both directions."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import replace

import pytest

from launcher.recovery.state import BurstRace, RecoveryState
from launcher.state.store import StateStore, is_open

# meta exactly as the previous version wrote it: launch keys beside recovery's untyped keys
OLD_RACE = {"phase": "racing", "slurm_attempt": 1, "slurm_target": "hpc",
            "slurm_handle": '{"backend": "slurm", "native_id": "41"}', "cloud_attempt": 2, "cloud_target": "spot"}
OLD_META = {"spec_base": "/home/u/proj", "seed": 7, "seed_source": "spec", "final": True, "retry_at": 1234.5,
            "avoid": {"aws/us-east-1": 9999.0}, "burst": OLD_RACE, "control_plane_errors": 3,
            "unknown_since": 50.0, "attempt": 2}


def test_every_key_the_previous_version_wrote_loads_typed():
    rs = RecoveryState.load(OLD_META)
    assert rs.closed and rs.retry_at == 1234.5 and rs.avoid == {"aws/us-east-1": 9999.0}
    assert rs.control_plane_errors == 3 and rs.unknown_since == 50.0 and rs.attempt == 2
    assert rs.burst == BurstRace("racing", queued_attempt=1, queued_target="hpc",
                                 queued_handle=OLD_RACE["slurm_handle"], copy_attempt=2, copy_target="spot")
    assert rs.racing


def test_what_is_stored_is_what_the_previous_version_reads():
    recovery_keys = {k: v for k, v in OLD_META.items() if k not in ("spec_base", "seed", "seed_source")}
    assert RecoveryState.load(OLD_META).as_meta() == recovery_keys
    done = RecoveryState.load({"burst": {**OLD_RACE, "phase": "done", "winner": "spot"}})
    assert done.burst.winner == "spot" and not done.racing
    assert done.as_meta() == {"burst": {**OLD_RACE, "phase": "done", "winner": "spot"}}


def test_defaults_are_not_stored_and_absent_or_null_keys_take_them():
    assert RecoveryState.load({}) == RecoveryState() == RecoveryState.load(
        {"retry_at": None, "unknown_since": None, "control_plane_errors": None, "burst": None})
    assert RecoveryState().as_meta() == {}
    assert RecoveryState(avoid={}, control_plane_errors=0, attempt=1).as_meta() == {}


def test_changes_name_only_what_differs_and_none_removes_a_key():
    before = RecoveryState.load(OLD_META)
    after = replace(before, retry_at=None, control_plane_errors=4, burst=before.burst.won_by("hpc"))
    changes = after.changes_since(before)
    assert changes == {"retry_at": None, "control_plane_errors": 4,
                       "burst": {**OLD_RACE, "phase": "done", "winner": "hpc"}}


def old_store(tmp_path, meta: dict, state: str = "PREEMPTED") -> StateStore:
    """A store whose job row the previous version wrote (its meta JSON as it was)."""
    s = StateStore(tmp_path)
    s.begin_job("j", "n", "local", "local", None, "name: n\n")
    s.record_attempt("j", 1, "local", "h1", "1")
    s.close()
    db = sqlite3.connect(tmp_path / "state.db")
    db.execute("UPDATE jobs SET state=?, meta=? WHERE job_id='j'", (state, json.dumps(meta)))
    db.commit()
    db.close()
    return StateStore(tmp_path)


def test_a_job_closed_by_an_older_version_stays_closed(tmp_path):
    s = old_store(tmp_path, {"seed": 7, "final": True})
    assert not is_open(s.get_job("j")) and s.open_jobs() == []
    assert not s.mirror_state("j", "h1", "RUNNING", "")  # a late status does not reopen it
    assert s.get_job("j").state == "PREEMPTED"


def test_closing_marks_the_state_closed_drops_the_due_retry_and_keeps_every_other_key(tmp_path):
    s = old_store(tmp_path, {**OLD_META, "final": None})
    assert is_open(s.get_job("j"))
    s.close_job("j", "GAVE_UP", "gave up: budget")
    meta = s.get_job("j").meta
    assert meta["final"] is True and "retry_at" not in meta
    assert {k: meta[k] for k in ("spec_base", "seed", "avoid", "burst", "unknown_since")} == \
        {k: OLD_META[k] for k in ("spec_base", "seed", "avoid", "burst", "unknown_since")}
    s.record_attempt("j", 2, "local", "h2", "2")  # a recorded submission reopens it
    assert is_open(s.get_job("j")) and "final" not in s.get_job("j").meta
    assert s.get_job("j").meta["seed"] == 7


def test_a_burst_race_from_an_older_version_keeps_a_finished_copy_from_closing_the_job(tmp_path):
    s = old_store(tmp_path, {"burst": OLD_RACE}, state="PENDING")
    assert not s.mirror_state("j", "h1", "COMPLETED", "")
    assert is_open(s.get_job("j"))


def test_saving_writes_only_what_changed_and_keeps_what_another_watcher_wrote(tmp_path):
    s = old_store(tmp_path, {"seed": 7, "retry_at": 100.0}, state="PREEMPTED")
    mine = RecoveryState.load(s.get_job("j").meta)
    s.patch_meta("j", control_plane_errors=2)  # another watcher, meanwhile
    s.save_recovery("j", replace(mine, retry_at=None, avoid={"aws/eu-west-1": 5.0}).changes_since(mine), reason="retrying")
    row = s.get_job("j")
    assert row.meta == {"seed": 7, "control_plane_errors": 2, "avoid": {"aws/eu-west-1": 5.0}}
    assert row.reason == "retrying"


@pytest.mark.parametrize("key", ["retry_at", "unknown_since"])
def test_a_time_written_as_an_integer_loads_as_seconds(key):
    assert getattr(RecoveryState.load({key: 12}), key) == 12.0
