"""Garbage collection on a real directory: keep N committed, never the newest, quarantine
torn and stale ones, leave in-progress / malformed / framework checkpoints alone."""

from __future__ import annotations

import json
import os

import pytest
from click.testing import CliRunner

from launcher.checkpoint import (COMMIT, CheckpointError, QUARANTINE, commit, gc, latest, open_store, scan,
                                 start_generation, step_dir)
from launcher.cli import main as cli


def ckpt(root, step, gen, do_commit=True, payload=b"p" * 100):
    d = os.path.join(str(root), step_dir(step, gen))
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "w.bin"), "wb") as f:
        f.write(payload)
    if do_commit:
        commit(open_store(str(root)), step, gen, fence=False)
    return d


def names(root):
    return sorted(x for x in os.listdir(str(root)) if x.startswith("step-"))


def test_keeps_n_newest_deletes_older_quarantines_torn(tmp_path):
    store = open_store(str(tmp_path))
    start_generation(store)                                   # g1
    for s in (10, 20, 30, 40, 50):
        ckpt(tmp_path, s, 1)
    ckpt(tmp_path, 25, 1, do_commit=False, payload=b"torn!")  # older torn: dead
    start_generation(store)                                   # g2 resumes from 50
    ckpt(tmp_path, 60, 2, do_commit=False)                    # newest, torn, g2 may be writing it
    rep = gc(store, keep=2)
    assert [os.path.basename(p) for p in rep["kept"]] == [step_dir(50, 1), step_dir(40, 1)]
    assert sorted(os.path.basename(p) for p in rep["deleted"]) == [step_dir(s, 1) for s in (10, 20, 30)]
    assert [os.path.basename(q["path"]) for q in rep["quarantined"]] == [step_dir(25, 1)]
    assert [os.path.basename(s["path"]) for s in rep["skipped"]] == [step_dir(60, 2)]
    assert "may still be being written" in rep["skipped"][0]["reason"]
    assert names(tmp_path) == [step_dir(40, 1), step_dir(50, 1), step_dir(60, 2)]
    # the torn checkpoint was moved aside with its bytes, not deleted
    q = rep["quarantined"][0]["to"]
    assert os.path.dirname(q) == str(tmp_path / QUARANTINE)
    with open(os.path.join(q, "w.bin"), "rb") as f:
        assert f.read() == b"torn!"
    assert latest(store).step == 50
    # a second run has nothing more to do
    rep2 = gc(store, keep=2)
    assert rep2["deleted"] == [] and rep2["quarantined"] == []


def test_never_deletes_the_newest_committed(tmp_path):
    store = open_store(str(tmp_path))
    for s in (1, 2, 3):
        ckpt(tmp_path, s, 1)
    for bad in (0, -1, None, 1.5):
        with pytest.raises(CheckpointError, match="keep must be an integer >= 1"):
            gc(store, keep=bad)
    assert names(tmp_path) == [step_dir(s, 1) for s in (1, 2, 3)]
    rep = gc(store, keep=1)
    assert names(tmp_path) == [step_dir(3, 1)]
    assert len(rep["deleted"]) == 2
    r = CliRunner().invoke(cli, ["checkpoints", str(tmp_path), "--gc", "--keep", "0"])
    assert r.exit_code != 0 and names(tmp_path) == [step_dir(3, 1)]


def test_stale_forks_are_quarantined(tmp_path):
    store = open_store(str(tmp_path))
    start_generation(store)
    ckpt(tmp_path, 100, 1)
    start_generation(store)                                    # g2 resumes from 100
    ckpt(tmp_path, 200, 1)                                     # zombie commit (raced the fence)
    ckpt(tmp_path, 150, 2)
    assert {e.name: e.state for e in scan(store)}[step_dir(200, 1)] == "stale"
    rep = gc(store, keep=5)
    assert [os.path.basename(q["path"]) for q in rep["quarantined"]] == [step_dir(200, 1)]
    assert names(tmp_path) == [step_dir(100, 1), step_dir(150, 2)]


def test_malformed_and_framework_checkpoints_are_left_alone(tmp_path):
    store = open_store(str(tmp_path))
    ckpt(tmp_path, 1, 1)
    ckpt(tmp_path, 2, 1)
    d = ckpt(tmp_path, 3, 1, do_commit=False)
    with open(os.path.join(d, COMMIT), "w") as f:
        f.write("{broken")
    os.makedirs(tmp_path / "step_0")
    with open(tmp_path / "step_0" / ".metadata", "w") as f:
        f.write("m")
    rep = gc(store, keep=1)
    skipped = {os.path.basename(s["path"]): s["reason"] for s in rep["skipped"]}
    assert "left in place for a human" in skipped[step_dir(3, 1)]
    assert os.path.join(d, COMMIT) in skipped[step_dir(3, 1)]
    assert "read-only" in skipped["step_0"]
    assert os.path.exists(os.path.join(d, COMMIT))
    assert os.path.exists(tmp_path / "step_0" / ".metadata")
    assert names(tmp_path) == [step_dir(2, 1), step_dir(3, 1)]


def test_dry_run_and_cli_json(tmp_path):
    for s in (1, 2, 3):
        ckpt(tmp_path, s, 1)
    ckpt(tmp_path, 0, 1, do_commit=False)
    r = CliRunner().invoke(cli, ["checkpoints", str(tmp_path), "--gc", "--keep", "1", "--dry-run", "--json"])
    assert r.exit_code == 0, r.output
    rep = json.loads(r.output)
    assert rep["dry_run"] is True
    assert len(rep["deleted"]) == 2 and len(rep["quarantined"]) == 1
    assert names(tmp_path) == [step_dir(s, 1) for s in (0, 1, 2, 3)]     # nothing changed
    r = CliRunner().invoke(cli, ["checkpoints", str(tmp_path), "--gc", "--keep", "1"])
    assert r.exit_code == 0, r.output
    assert "quarantine" in r.output and "delete" in r.output
    assert names(tmp_path) == [step_dir(3, 1)]


def test_cli_errors_name_the_root_and_delete_nothing(tmp_path):
    missing = tmp_path / "missing"
    r = CliRunner().invoke(cli, ["checkpoints", str(missing), "--gc", "--keep", "1"])
    assert r.exit_code == 1
    assert "%s: no such directory" % missing in r.output
    assert not missing.exists()
