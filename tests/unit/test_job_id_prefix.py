"""Job-id arguments (issue 20, §8): an exact id or an unambiguous prefix of one; never empty,
and no wildcards. Before the fix `launcher cancel ""` cancelled the only job (the empty
prefix matched every row) and '%' and '_' in a prefix were SQL LIKE wildcards."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.core.errors import EXIT_USAGE, LauncherError
from launcher.state.store import StateStore

LAUNCHER = str(Path(sys.executable).parent / "launcher")


@pytest.fixture
def store(tmp_path):
    s = StateStore(tmp_path / "home")
    for j in ("train-abc123", "train-abd456", "eval-x_y1"):
        s.begin_job(j, j.split("-")[0], "local", "local", None, "name: n\n")
    yield s
    s.close()


@pytest.mark.parametrize("ref", ["", " ", "\t\n"])
def test_an_empty_job_id_is_refused(store, ref):
    with pytest.raises(LauncherError, match="empty") as e:
        store.get_job(ref)
    assert e.value.exit_code == EXIT_USAGE


@pytest.mark.parametrize("ref", ["%", "_", "train%", "%456", "train-ab_123", "eval-x%", "t_ain"])
def test_percent_and_underscore_are_plain_characters(store, ref):
    with pytest.raises(LauncherError, match="no job"):
        store.get_job(ref)


def test_an_underscore_matches_itself(store):
    assert store.get_job("eval-x_").job_id == "eval-x_y1"


def test_exact_and_unambiguous_prefix_and_ambiguous_lists_the_matches(store):
    assert store.get_job("train-abc123").job_id == "train-abc123"
    assert store.get_job("train-abd").job_id == "train-abd456"
    with pytest.raises(LauncherError, match="ambiguous") as e:
        store.get_job("train-ab")
    assert "train-abc123" in str(e.value) and "train-abd456" in str(e.value)


def test_a_non_string_job_id_is_refused_naming_what_was_expected(store):
    with pytest.raises(LauncherError, match="job id.*str"):
        store.get_job(123)


def test_cancel_of_an_empty_id_cancels_nothing(tmp_path):
    home = tmp_path / "home"
    s = StateStore(home)
    s.begin_job("only-abc123", "only", "local", "local", None, "name: only\n")
    s.close()
    cfg = tmp_path / "c.yaml"
    cfg.write_text("targets: {}\n")
    env = {**os.environ, "LAUNCHER_HOME": str(home), "LAUNCHER_CONFIG": str(cfg)}
    p = subprocess.run([LAUNCHER, "cancel", ""], env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == EXIT_USAGE and "empty" in p.stderr and "Traceback" not in p.stderr, p.stderr
    s = StateStore(home)
    assert s.get_job("only-abc123").state == "SUBMITTING" and s.events("only-abc123") == []
