"""Provenance capture (git identity, packages, image), the record's store table on an
existing database, the seed, and the pure diff of two run records."""

from __future__ import annotations

import sqlite3

import pytest

from launcher.provenance.capture import git_identity, image_identity, installed_packages, strip_credentials
from launcher.provenance.diff import diff_runs, flatten, format_diff
from launcher.provenance.seed import choose_seed, with_seed
from tests.fixtures.gitrepo import git


@pytest.fixture
def repo(tmp_path):
    r = tmp_path / "repo"
    (r / "src").mkdir(parents=True)
    git(r, "init", "-q", "-b", "main")
    (r / "src" / "train.py").write_text("print(1)\n")
    git(r, "add", "-A")
    git(r, "commit", "-q", "-m", "one")
    return r


def test_clean_tree(repo):
    g = git_identity(str(repo / "src"))
    assert g["commit"] == git(repo, "rev-parse", "HEAD").strip()
    assert g["repo"] == str(repo) and g["branch"] == "main"
    assert g["dirty"] is False and g["diff_sha256"] is None and g["error"] is None


def test_dirty_tree_hash_follows_the_changes(repo):
    f = repo / "src" / "train.py"
    f.write_text("print(2)\n")
    a = git_identity(str(repo))
    f.write_text("print(3)\n")
    b = git_identity(str(repo))
    f.write_text("print(2)\n")
    c = git_identity(str(repo))
    assert a["dirty"] and a["changed_files"] == 1 and a["untracked_files"] == 0
    assert a["diff_sha256"] != b["diff_sha256"] and a["diff_sha256"] == c["diff_sha256"]
    f.write_text("print(1)\n")
    (repo / "notes.txt").write_text("x")
    d = git_identity(str(repo))
    assert d["dirty"] and d["untracked_files"] == 1 and d["diff_sha256"] not in (None, a["diff_sha256"])
    (repo / "notes.txt").write_text("y")
    assert git_identity(str(repo))["diff_sha256"] != d["diff_sha256"]  # untracked content counts


def test_remote_without_credentials(repo):
    git(repo, "remote", "add", "origin", "https://user:ghp_abcdefghijklmnopqrstuvwxyz0123@github.com/o/r.git")
    assert git_identity(str(repo))["remote"] == "https://github.com/o/r.git"
    assert strip_credentials("git@github.com:o/r.git") == "git@github.com:o/r.git"
    assert strip_credentials("ssh://tok@host:22/x") == "ssh://host:22/x"


def test_not_a_repository_or_no_commit(tmp_path):
    g = git_identity(str(tmp_path))
    assert g["commit"] is None and g["error"] == "not a git repository"
    r = tmp_path / "empty"
    r.mkdir()
    git(r, "init", "-q")
    g = git_identity(str(r))
    assert g["commit"] is None and "no commit" in g["error"]
    assert git_identity(str(tmp_path / "missing"))["error"]


def test_installed_packages_is_the_environment():
    from importlib import metadata

    pkgs = installed_packages()
    assert pkgs == sorted(pkgs, key=lambda p: p.split("==")[0])
    assert f"click=={metadata.version('click')}" in pkgs and f"pyyaml=={metadata.version('pyyaml')}" in pkgs


def test_image_identity():
    assert image_identity(None)["reason"] == "the spec has no image"
    d = "sha256:" + "a" * 64
    assert image_identity(f"nvcr.io/nvidia/pytorch@{d}")["digest"] == d
    tag = image_identity("nvcr.io#nvidia/pytorch:24.01-py3")
    assert tag["digest"] is None and "network" in tag["reason"]
    f = image_identity("/nonexistent/image.sqsh")
    assert f["digest"] is None and "not on this host" in f["reason"]


def test_seed_choice():
    s, how = choose_seed(environ={})
    assert how == "random" and 0 <= s < 2 ** 31
    assert choose_seed(environ={"LAUNCHER_SEED": "42"}) == (42, "env")

    class Fixed:
        seed = 7

    assert choose_seed(Fixed(), environ={"LAUNCHER_SEED": "42"}) == (7, "spec")
    from launcher.core.errors import LauncherError

    with pytest.raises(LauncherError, match="not an integer"):
        choose_seed(environ={"LAUNCHER_SEED": "abc"})
    from launcher.backend.sections import spec_from_text

    spec = spec_from_text("name: x\nrun: 'true'\nenv: {A: b}\n")
    assert with_seed(spec, 5).env == {"A": "b", "LAUNCHER_SEED": "5"} and spec.env == {"A": "b"}


def test_an_existing_database_gains_the_provenance_table(tmp_path):
    from launcher.provenance.record import load_record, save_record
    from launcher.state.store import StateStore

    # a database written before this table existed
    st = StateStore(tmp_path)
    st.close()
    old = sqlite3.connect(tmp_path / "state.db")
    old.execute("DROP TABLE provenance")
    old.commit()
    names = {r[0] for r in old.execute("SELECT name FROM sqlite_master")}
    old.close()
    assert "provenance" not in names and "jobs" in names
    st = StateStore(tmp_path)
    assert load_record(st, "j-1") is None
    save_record(st, "j-1", {"run": "j-1", "seed": 3}, "/x/RUN.json")
    st.close()
    st = StateStore(tmp_path)
    doc = load_record(st, "j-1")
    assert doc["seed"] == 3 and doc["_location"] == "/x/RUN.json"


def record(**over):
    base = {"run": "a-1", "target": "c1", "seed": 1,
            "spec": {"sha256": "s1", "resolved": {"name": "x", "run": "python t.py", "env": {"A": "1"},
                                                  "resources": {"nodes": 2, "gpus_per_node": 8}}},
            "rendered": {"sha256": "r1"},
            "code": {"repo": "/r", "commit": "c" * 40, "dirty": False, "diff_sha256": None, "branch": "main",
                     "remote": "https://h/r.git", "error": None},
            "python": {"version": "3.11.7", "packages_sha256": "p1", "packages": ["click==8.1.7", "numpy==1.26.0",
                                                                                  "torch==2.3.0"]},
            "versions": {"launcher": "0.1.0", "backend": {"name": "slurm", "version": "22.05.8"},
                         "slurm": "22.05.8", "skypilot": None},
            "image": {"name": None, "digest": None}}
    for k, v in over.items():
        cur = base
        *path, last = k.split("__")
        for p in path:
            cur = cur[p]
        cur[last] = v
    return base


def test_diff_of_identical_runs_is_empty():
    d = diff_runs(record(), record())
    assert d["same"] and "no differences" in format_diff(d)


def test_diff_names_config_code_packages_and_versions():
    b = record(run="b-2", seed=2, spec__resolved__resources={"nodes": 4, "gpus_per_node": 8},
               spec__resolved__env={"A": "1", "B": "2"}, code__commit="d" * 40, code__dirty=True,
               code__diff_sha256="h", python__packages=["click==8.1.7", "numpy==2.0.0", "jax==0.4.30"],
               python__packages_sha256="p2", versions__backend={"name": "slurm", "version": "24.05.1"})
    d = diff_runs(record(), b)
    assert not d["same"] and (d["a"], d["b"]) == ("a-1", "b-2")
    cfg = {r["key"]: r for r in d["config"]}
    assert cfg["resources.nodes"]["a"] == 2 and cfg["resources.nodes"]["b"] == 4
    assert cfg["env.B"]["change"] == "added" and "name" not in cfg
    code = {r["key"]: r for r in d["code"]}
    assert set(code) == {"commit", "dirty", "diff_sha256"}
    assert d["packages"] == {"added": ["jax==0.4.30"], "removed": ["torch==2.3.0"],
                             "changed": [{"name": "numpy", "a": "1.26.0", "b": "2.0.0"}]}
    vers = {r["key"]: (r["a"], r["b"]) for r in d["versions"]}
    assert vers["backend version"] == ("22.05.8", "24.05.1") and "python packages sha256" in vers
    assert {r["key"] for r in d["run"]} == {"seed"}
    text = format_diff(d)
    for line in ("~ resources.nodes: 2 -> 4", "+ env.B: 2", "+ jax==0.4.30", "- torch==2.3.0",
                 "~ numpy: 1.26.0 -> 2.0.0", "~ backend version: 22.05.8 -> 24.05.1"):
        assert line in text, text


def test_flatten():
    assert flatten({"a": {"b": 1, "c": [1, 2]}, "d": {}}) == {"a.b": 1, "a.c": [1, 2], "d": {}}
