"""`launcher lineage` on checkpoint roots written through the contract: the run of each
checkpoint, the chain of checkpoints it descends from (across runs and generations),
and what it says when something is missing."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from launcher import jobside
from launcher.checkpoint import open_store, start_generation
from launcher.core.errors import LauncherError
from launcher.provenance.lineage import format_lineage, lineage
from launcher.provenance.record import run_key, to_bytes


def save(root, step, gen, run):
    with jobside.save(step, root=str(root), generation=gen, run=run) as d:
        with open(os.path.join(d, "w.bin"), "wb") as f:
            f.write(b"x" * step)


@pytest.fixture
def root(tmp_path, monkeypatch):
    monkeypatch.setenv("LAUNCHER_HOME", str(tmp_path / "no-home"))
    monkeypatch.delenv("LAUNCHER_BACKEND", raising=False)
    r = tmp_path / "ck"
    st = open_store(str(r))
    start_generation(st, job_id="run-a")  # generation 1, fresh
    save(r, 5, 1, "run-a")
    save(r, 10, 1, "run-a")
    st.put(run_key("run-a"), to_bytes({"run": "run-a", "name": "first", "spec": {"path": "/x/a.yaml"}}))
    start_generation(st, job_id="run-b")  # generation 2: a relaunch resuming from step 10
    save(r, 15, 2, "run-b")
    return r


def test_the_chain_of_checkpoints_across_runs(root):
    d = lineage(str(root / "step-000000015.g2"))
    assert d["run_id"] == "run-b" and d["run_id_source"] == "COMMIT.json"
    assert d["run"] is None  # run-b's RUN.json is missing, and there is no state store
    assert [(a["step"], a["generation"], a["run"]) for a in d["ancestry"]] == [(15, 2, "run-b"), (10, 1, "run-a")]
    assert d["generation"]["generation"] == 2 and d["save"]["step"] == 15
    text = format_lineage(d)
    assert "lineage     step 15 g2 [run-b] <- step 10 g1 [run-a] <- fresh start" in text
    assert "RUN.json is missing" in text
    a = lineage(str(root / "step-000000010.g1" / "COMMIT.json"))
    assert a["run"]["name"] == "first" and a["record_location"].endswith(".launcher/runs/run-a/RUN.json")
    assert lineage(str(root))["checkpoint"]["step"] == 15


def test_a_garbage_collected_ancestor_and_a_torn_checkpoint(root):
    shutil.rmtree(root / "step-000000010.g1")
    d = lineage(str(root / "step-000000015.g2"))
    assert d["ancestry"][-1]["state"].startswith("gone") and "fresh start" not in format_lineage(d)
    os.remove(root / "step-000000015.g2" / "COMMIT.json")
    t = lineage(str(root / "step-000000015.g2"))
    assert t["checkpoint"]["state"] == "torn" and t["run_id"] == "run-b"  # from the attempt record
    assert t["run_id_source"].startswith("attempt record")


def test_errors_name_the_problem(root, tmp_path):
    with pytest.raises(LauncherError, match="no such checkpoint"):
        lineage(str(root / "step-000000099.g1"))
    with pytest.raises(LauncherError, match="no such directory"):
        lineage(str(tmp_path / "nowhere"))
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(LauncherError, match="no committed checkpoint"):
        lineage(str(empty))


def test_the_local_state_store_is_a_fallback_for_a_missing_run_json(root, tmp_path, monkeypatch):
    from launcher.provenance.record import save_record
    from launcher.state.store import StateStore

    home = tmp_path / "home"
    st = StateStore(home)
    save_record(st, "run-b", {"run": "run-b", "name": "second"}, None)
    st.close()
    monkeypatch.setenv("LAUNCHER_HOME", str(home))
    d = lineage(str(root / "step-000000015.g2"))
    assert d["run"]["name"] == "second" and "state store" in d["record_location"]
    json.dumps(d)  # JSON-ready
