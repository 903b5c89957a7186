"""A store damaged anywhere refuses every command, writes included (issue 20, §6): before
the fix, a damaged page that a launch's INSERT happens not to touch let `launch` submit a
job and write into the store while `status` and `watch` refused it with exit 3."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.core.errors import EXIT_STATE, StateStoreError
from launcher.state.store import StateStore

LAUNCHER = str(Path(sys.executable).parent / "launcher")
PAGE = 4096


def store_damaged_in_the_middle(home: Path) -> Path:
    """300 jobs, then one page of the jobs table's data overwritten: the first pages (the
    schema, the events table, the jobs index) are intact, so an INSERT can still succeed."""
    s = StateStore(home)
    for i in range(300):
        s.begin_job(f"j{i:04d}-x", "j", "local", "local", None, "name: j\nrun: echo " + "x" * 200,
                    meta={"a": "b" * 100})
    s.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    s.close()
    db = home / "state.db"
    b = bytearray(db.read_bytes())
    assert len(b) >= 30 * PAGE
    b[14 * PAGE:15 * PAGE] = b"\x5a" * PAGE  # page 15: a leaf of the jobs table
    db.write_bytes(bytes(b))
    return db


def sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def test_opening_a_store_damaged_past_its_first_pages_is_refused(tmp_path):
    db = store_damaged_in_the_middle(tmp_path / "home")
    before = sha(db)
    with pytest.raises(StateStoreError, match="is damaged") as e:
        StateStore(tmp_path / "home")
    assert str(db) in str(e.value) and ".recover" in str(e.value)
    assert sha(db) == before


def test_launch_refuses_a_damaged_store_before_submitting(tmp_path):
    home = tmp_path / "home"
    db = store_damaged_in_the_middle(home)
    cfg = tmp_path / "c.yaml"
    cfg.write_text("targets: {}\n")
    spec = tmp_path / "j.yaml"
    marker = tmp_path / "ran"
    spec.write_text(f"name: j\nrun: touch {marker}\n")
    before = sha(db)
    env = {**os.environ, "LAUNCHER_HOME": str(home), "LAUNCHER_CONFIG": str(cfg)}
    env.pop("LAUNCHER_DEBUG", None)
    for cmd in (["status"], ["watch", "--once"], ["launch", str(spec), "--follow"]):
        p = subprocess.run([LAUNCHER, *cmd], env=env, capture_output=True, text=True, timeout=120,
                           cwd=str(tmp_path))
        assert p.returncode == EXIT_STATE, (cmd, p.returncode, p.stderr)
        assert "is damaged" in p.stderr and "Traceback" not in p.stderr, p.stderr
        assert sha(db) == before, cmd
    assert not marker.exists()  # nothing was submitted
    assert not (home / "jobs").exists() or list((home / "jobs").iterdir()) == []
