"""launch() keeps what does not change between launches (issue 13 §8), on the real Slurm
test cluster: launches in a row from one process reuse the git identity until the work
tree changes (an edit in between is recorded as dirty), and an identical job-side helper
is staged once and linked into every job's folder."""

from __future__ import annotations

import os
import time

import pytest

from launcher.provenance import gitcache
from launcher.provenance.record import load_record
from launcher.backend.staging import HELPER_NAME, SHARED_DIR
from tests.fixtures.gitrepo import git

from .launcher_cli import LauncherCLI

pytestmark = pytest.mark.slurm


def test_launches_in_a_row_see_an_edit_and_share_one_helper(clean_queue, tmp_path, monkeypatch):
    from launcher.api.context import App
    from launcher.launching.launch import launch
    from launcher.backend.sections import spec_from_text

    cli = LauncherCLI(tmp_path, clean_queue)  # writes the config naming the test cluster
    monkeypatch.setenv("LAUNCHER_HOME", str(cli.home))
    monkeypatch.setenv("LAUNCHER_CONFIG", str(cli.config))
    monkeypatch.setenv("SLURM_CONF", str(clean_queue.conf))
    repo = tmp_path / "proj"
    repo.mkdir()
    (repo / "train.py").write_text("print('one')\n")
    text = "name: cached\nrun: python3 train.py\nslurm: {extra: ['--hold']}\n"
    (repo / "job.yaml").write_text(text)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "one")
    time.sleep(gitcache.RACY_SECONDS + 0.2)  # so the first launch's identity is kept and reused
    gitcache.clear()
    from launcher.provenance import capture

    calls = []
    real = capture.git_identity
    monkeypatch.setattr(capture, "git_identity", lambda path: calls.append(path) or real(path))

    app = App()
    try:
        spec = spec_from_text(text, str(repo / "job.yaml"))
        ids = [launch(app, spec, text, str(repo / "job.yaml"), "testcl").job_id for _ in range(2)]
        (repo / "train.py").write_text("print('two')\n")  # same size: only its times tell
        ids.append(launch(app, spec, text, str(repo / "job.yaml"), "testcl").job_id)
        codes = [load_record(app.store, j)["code"] for j in ids]
        dirs = [app.store.job_dir(j) for j in ids]
    finally:
        app.close()
        clean_queue.run("scancel", "-u", str(os.getuid()), check=False)
    head = git(repo, "rev-parse", "HEAD")
    assert [c["commit"] for c in codes] == [head] * 3
    assert [c["dirty"] for c in codes] == [False, False, True]
    assert codes[2]["diff_sha256"] and codes[2]["changed_files"] == 1
    assert len(calls) == 2  # git ran for the first launch and after the edit, not for the second

    helpers = [os.stat(d / HELPER_NAME) for d in dirs]
    assert len({(s.st_dev, s.st_ino) for s in helpers}) == 1  # one file, linked into each job's folder
    shared = dirs[0].parent / SHARED_DIR
    assert [p.name for p in shared.iterdir()] == [f"launcher_job-{_digest(dirs[0] / HELPER_NAME)[:40]}.pyz"]


def _digest(path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()
