"""What launch() keeps between launches, and when it stops trusting it: the git identity
(by a stamp of HEAD, refs, index and every file of the work tree), the installed package
list (by sys.path folders), the staged job-side helper (one copy per content hash), and
the environment's secret values."""

from __future__ import annotations

import os
import sys
import time

import pytest

from launcher.core import redact
from launcher.backend import staging
from launcher.provenance import capture, gitcache
from tests.fixtures.gitrepo import git


@pytest.fixture
def repo(tmp_path):
    r = tmp_path / "repo"
    (r / "src").mkdir(parents=True)
    git(r, "init", "-q", "-b", "main")
    (r / "src" / "train.py").write_text("print(1)\n")
    (r / "README").write_text("hi\n")
    git(r, "add", "-A")
    git(r, "commit", "-q", "-m", "one")
    gitcache.clear()
    yield r
    gitcache.clear()


class Counting:
    """capture.git_identity, counting its calls."""

    def __init__(self):
        self.calls = 0

    def __call__(self, path):
        self.calls += 1
        return capture.git_identity(path)


def later():
    """A clock 10 s ahead: files written just now are then not "racy" for the cache."""
    return time.time_ns() + 10 * 10**9


# ---------------------------------------------------------------- gitcache: pure rules
def test_reusable_only_with_the_same_stamp_and_no_racy_time():
    old = (("HEAD", b"ref: refs/heads/main\n"), ("/r/a", 1_000, 1_000, 3, 7, 0o100644))
    assert gitcache.reusable(old, 10 * 10**9, old)
    assert not gitcache.reusable(old, 10 * 10**9, old[:1] + (("/r/a", 2_000, 2_000, 3, 7, 0o100644),))
    assert not gitcache.reusable(old, 2 * 10**9, old)  # a time within RACY_SECONDS of the capture
    assert not gitcache.reusable(old, 10 * 10**9, old[:1] + (("/r/a", None),))  # deleted


def test_stamp_follows_edits_new_files_add_and_commit(repo):
    layout = gitcache.layout_of(str(repo / "src"))
    assert layout is not None and layout.top == str(repo)
    assert "src/train.py" in layout.paths and "src" in layout.paths
    s0 = gitcache.stamp(layout)
    assert gitcache.stamp(layout) == s0
    f = repo / "src" / "train.py"
    f.write_text("print(2)\n")  # same size: mtime/ctime tell
    os.utime(f, ns=(time.time_ns() + 5 * 10**9,) * 2)
    s1 = gitcache.stamp(layout)
    assert s1 != s0
    (repo / "src" / "new.py").write_text("x\n")  # an untracked file: its folder's mtime
    os.utime(repo / "src", ns=(time.time_ns() + 6 * 10**9,) * 2)
    s2 = gitcache.stamp(layout)
    assert s2 != s1
    git(repo, "add", "-A")  # the index
    s3 = gitcache.stamp(layout)
    assert s3 != s2
    git(repo, "commit", "-q", "-m", "two")  # HEAD's ref (and the index)
    assert gitcache.stamp(layout) != s3


def test_no_cache_for_a_tree_with_submodules_or_outside_git(repo, tmp_path):
    (repo / ".gitmodules").write_text("")
    assert gitcache.layout_of(str(repo)) is None
    (tmp_path / "plain").mkdir()
    assert gitcache.layout_of(str(tmp_path / "plain")) is None


# ---------------------------------------------------------------- gitcache: the cache
def test_identity_reused_while_nothing_changed(repo):
    cap = Counting()
    a = gitcache.cached_identity(str(repo / "src"), cap, clock=later)
    b = gitcache.cached_identity(str(repo / "src"), cap, clock=later)
    assert cap.calls == 1 and a == b and a["dirty"] is False


def test_racy_capture_is_not_reused(repo):
    cap = Counting()
    gitcache.cached_identity(str(repo), cap)  # the files were written this very second
    gitcache.cached_identity(str(repo), cap)
    assert cap.calls == 2


@pytest.mark.parametrize("change", ["edit", "untracked", "delete", "add", "commit", "checkout"])
def test_a_change_between_two_launches_shows(repo, change):
    cap = Counting()
    first = gitcache.cached_identity(str(repo / "src"), cap, clock=later)
    assert first["dirty"] is False
    time.sleep(0.05)  # past the file system's clock tick (the real clock's RACY_SECONDS covers this)
    f = repo / "src" / "train.py"
    if change == "edit":
        f.write_text("print(3)\n")  # same size
    elif change == "untracked":
        (repo / "src" / "deep").mkdir()
        (repo / "src" / "deep" / "x.py").write_text("1\n")
    elif change == "delete":
        f.unlink()
    elif change == "add":
        (repo / "added.py").write_text("1\n")
        git(repo, "add", "added.py")
    elif change == "commit":
        f.write_text("print(4)\n")
        git(repo, "commit", "-qam", "two")
    elif change == "checkout":
        git(repo, "checkout", "-q", "-b", "other")
    second = gitcache.cached_identity(str(repo / "src"), cap, clock=later)
    assert cap.calls == 2
    assert second == capture.git_identity(str(repo / "src"))
    if change in ("commit", "checkout"):
        assert (second["commit"], second["branch"]) != (first["commit"], first["branch"])
    else:
        assert second["dirty"] is True and second["diff_sha256"]


def test_edit_of_an_already_dirty_file_changes_the_diff_hash(repo):
    f = repo / "src" / "train.py"
    f.write_text("print(5)\n")
    one = gitcache.cached_identity(str(repo), capture.git_identity, clock=later)
    time.sleep(0.05)
    f.write_text("print(6)\n")
    two = gitcache.cached_identity(str(repo), capture.git_identity, clock=later)
    assert one["dirty"] and two["dirty"] and one["diff_sha256"] != two["diff_sha256"]


def test_outside_git_is_remembered_until_a_repository_appears(tmp_path):
    gitcache.clear()
    plain = tmp_path / "plain" / "sub"
    plain.mkdir(parents=True)
    cap = Counting()
    one = gitcache.cached_identity(str(plain), cap)
    two = gitcache.cached_identity(str(plain), cap)
    assert cap.calls == 1 and one == two and one["error"] == gitcache.NOT_A_REPO
    git(tmp_path / "plain", "init", "-q", "-b", "main")  # a repository above it now
    three = gitcache.cached_identity(str(plain), cap)
    assert cap.calls == 2 and three["error"] != gitcache.NOT_A_REPO and three["repo"] == str(tmp_path / "plain")
    gitcache.clear()


# ---------------------------------------------------------------- installed packages
def test_package_list_is_read_again_when_a_sys_path_folder_changes(tmp_path, monkeypatch):
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.setattr(sys, "path", [str(site)])
    monkeypatch.setattr(capture, "_PACKAGES", {})
    reads = []
    monkeypatch.setattr(capture, "_installed_packages", lambda: reads.append(1) or ("a==1",))
    assert capture.installed_packages() == ["a==1"]
    capture.installed_packages()
    assert len(reads) == 1
    (site / "b-2.dist-info").mkdir()  # an install
    os.utime(site, ns=(time.time_ns() + 10**9,) * 2)
    capture.installed_packages()
    assert len(reads) == 2


def test_path_stamp_names_missing_entries():
    assert capture.path_stamp(["/no/such/dir"]) == (("/no/such/dir", None, None),)


# ---------------------------------------------------------------- the staged helper
def test_identical_helper_is_written_once_and_linked(tmp_path, monkeypatch):
    writes = []
    real = staging._write_aside
    monkeypatch.setattr(staging, "_write_aside", lambda p, d: writes.append(p) or real(p, d))
    data = b"PK helper v1"
    a = staging.stage_helper_locally(str(tmp_path / "jobs" / "j1"), data)
    b = staging.stage_helper_locally(str(tmp_path / "jobs" / "j2"), data)
    assert open(a, "rb").read() == data == open(b, "rb").read()
    assert os.stat(a).st_ino == os.stat(b).st_ino
    assert len(writes) == 1
    assert os.listdir(tmp_path / "jobs" / staging.SHARED_DIR) == [os.path.basename(
        staging.shared_helper_path(str(tmp_path / "jobs"), data))]
    staging.stage_helper_locally(str(tmp_path / "jobs" / "j3"), b"PK helper v2")  # another helper: its own name
    assert len(os.listdir(tmp_path / "jobs" / staging.SHARED_DIR)) == 2


@pytest.mark.parametrize("damage", ["tampered", "partial", "empty"])
def test_damaged_shared_helper_is_never_reused(tmp_path, damage):
    data = b"PK the real helper " * 50
    jobs = tmp_path / "jobs"
    shared = staging.shared_helper_path(str(jobs), data)
    os.makedirs(os.path.dirname(shared))
    bad = {"tampered": data.replace(b"real", b"evil"), "partial": data[:100], "empty": b""}[damage]
    with open(shared, "wb") as f:
        f.write(bad)
    out = staging.stage_helper_locally(str(jobs / "j1"), data)
    assert open(out, "rb").read() == data
    assert open(shared, "rb").read() == data


def test_helper_tampered_after_staging_is_replaced(tmp_path):
    data = b"PK helper " * 20
    jobs = tmp_path / "jobs"
    staging.stage_helper_locally(str(jobs / "j1"), data)
    shared = staging.shared_helper_path(str(jobs), data)
    os.chmod(shared, 0o644)
    with open(shared, "r+b") as f:  # same size, new content: the stat stamp (mtime/ctime) changes
        f.write(b"XX")
    out = staging.stage_helper_locally(str(jobs / "j2"), data)
    assert open(out, "rb").read() == data


def test_a_further_attempt_in_the_same_folder_gets_the_new_helper(tmp_path):
    job = str(tmp_path / "jobs" / "j1")
    staging.stage_helper_locally(job, b"PK old helper")
    out = staging.stage_helper_locally(job, b"PK new helper")
    assert open(out, "rb").read() == b"PK new helper"


# ---------------------------------------------------------------- secret values of the environment
def test_secret_values_follow_the_environment(monkeypatch):
    monkeypatch.delenv("SOME_API_TOKEN", raising=False)
    assert "Zq9-secret-value-1" not in redact.secret_values()
    monkeypatch.setenv("SOME_API_TOKEN", "Zq9-secret-value-1")
    assert "Zq9-secret-value-1" in redact.secret_values()
    monkeypatch.setenv("SOME_API_TOKEN", "Zq9-secret-value-2")
    vals = redact.secret_values()
    assert "Zq9-secret-value-2" in vals and "Zq9-secret-value-1" not in vals
    monkeypatch.setenv("MY_VAR", "Zq9-named-secret-3")
    assert "Zq9-named-secret-3" in redact.secret_values(["MY_VAR"])
    assert "Zq9-named-secret-3" not in redact.secret_values()
