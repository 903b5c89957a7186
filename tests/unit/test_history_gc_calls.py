"""``launcher gc`` and the folders of function calls (``$LAUNCHER_HOME/calls``,
``launcher.state.calls``): a call folder goes with its jobs, under gc's rules; one another job
still uses stays (and gc says which); one no job names goes only once it is older than the
cutoff and the grace; nothing outside ``<home>/calls`` and no symbolic link is followed. On a
real SQLite store, and once end to end with a real ``Launcher.submit`` on the local target."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from launcher.state import calls
from launcher.state.calls import call_folder
from launcher.state.history import collect
from launcher.state.store import StateStore
from tests.fixtures.polling import poll

DAY = 86400.0


@pytest.mark.parametrize("root, folder", [
    ("/h/calls/c1", "/h/calls/c1"),
    ("/h/calls/c1/element-0003", "/h/calls/c1"),
    ("/h/calls/c1/../c2/element-0000", "/h/calls/c2"),
    ("/h/calls", None),
    ("/h/callsx/c1", None),
    ("/h/jobs/j1/ckpt", None),
    ("/elsewhere/calls/c1", None),
    ("s3://b/h/calls/c1", None),
    (None, None),
])
def test_a_call_folder_is_the_first_level_under_a_homes_calls(root, folder):
    assert call_folder(root, [Path("/h")]) == (Path(folder) if folder else None)


@pytest.fixture
def store(tmp_path):
    s = StateStore(tmp_path / "home", url="")
    yield s
    s.close()


def call(store, job_id, root: Path, state="COMPLETED", days_ago=40.0):
    root.mkdir(parents=True, exist_ok=True)
    (root / "result.pkl").write_bytes(b"r")
    store.begin_job(job_id, job_id, "local", "local", None, "name: x\nrun: 'true'\n", ckpt_root=str(root))
    store.record_submission(job_id, 1, "local", json.dumps({"backend": "local"}), f"n-{job_id}", state="RUNNING")
    if state != "RUNNING":
        store.close_job(job_id, state, "test")
    with store.tx() as db:
        db.execute("UPDATE jobs SET updated=? WHERE job_id=?", (time.time() - days_ago * DAY, job_id))


def old(path: Path, days: float = 40.0) -> None:
    t = time.time() - days * DAY
    for dirpath, dirnames, filenames in os.walk(path):
        for n in dirnames + filenames:
            os.utime(os.path.join(dirpath, n), (t, t), follow_symlinks=False)
    os.utime(path, (t, t))


def test_a_call_folder_goes_with_its_jobs_and_stays_while_another_job_uses_it(store, tmp_path):
    base = store.home / "calls"
    call(store, "done", base / "c-done")
    call(store, "open", base / "c-open", state="RUNNING")
    call(store, "recent", base / "c-recent", days_ago=1)
    call(store, "first", base / "c-shared")  # a later job resumes the same root (a spec naming it)
    call(store, "second", base / "c-shared", days_ago=1)
    call(store, "m-0", base / "c-map" / "element-0000")  # a map's elements: the call folder is their parent
    call(store, "m-1", base / "c-map" / "element-0001")
    spec_root = tmp_path / "mine" / "ckpt"  # a root a spec named: never gc's
    call(store, "spec", spec_root)
    cutoff = time.time() - 30 * DAY

    dry = collect(store, cutoff, dry_run=True)
    assert sorted(c["path"] for c in dry.calls) == [str(base / "c-done"), str(base / "c-map")]
    assert (base / "c-done" / "result.pkl").exists()  # a dry run removes nothing

    done = collect(store, cutoff)
    assert {c["path"]: c["jobs"] for c in done.calls} == {str(base / "c-done"): ["done"],
                                                          str(base / "c-map"): ["m-0", "m-1"]}
    assert not (base / "c-done").exists() and not (base / "c-map").exists()
    for kept in ("c-open", "c-recent", "c-shared"):
        assert (base / kept / "result.pkl").exists(), kept
    left = {x["path"]: x for x in done.left}
    assert left[str(base / "c-shared")]["job_id"] == "first"
    assert left[str(base / "c-shared")]["why"] == "job second (COMPLETED) still uses it"  # ended after the cutoff
    assert (spec_root / "result.pkl").exists() and "spec" in {r["job_id"] for r in done.removed}


def test_a_call_folder_no_job_names_goes_only_after_the_cutoff_and_the_grace(store, tmp_path):
    base = store.home / "calls"
    for name in ("orphan-old", "orphan-new"):
        (base / name).mkdir(parents=True)
        (base / name / "payload.pkl").write_bytes(b"p")
    old(base / "orphan-old")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("k")
    old(outside)
    (base / "link").symlink_to(outside)  # a link in calls/ is never followed
    done = collect(store, time.time())  # --older-than 0s: still, a call being launched now is left alone
    assert [c["path"] for c in done.calls] == [str(base / "orphan-old")] and done.calls[0]["jobs"] == []
    assert (base / "orphan-new" / "payload.pkl").exists() and (outside / "keep").read_text() == "k"
    assert (base / "link").is_symlink()
    assert calls.orphans(store, time.time() - 60 * DAY) == []  # older than the cutoff too


def test_a_submitted_functions_folder_goes_with_its_job_through_the_cli(launcher_env, tmp_path):
    import subprocess
    import sys

    from launcher.api.facade import Launcher

    with Launcher() as lx:
        h = lx.submit(pow, 2, 10, target="local")
        assert h.result(timeout=120) == 1024
        poll("the job closed", lambda: not lx.status(h.job_id).open, timeout=120, interval=0.2)
        root = Path(lx.app.store.get_job(h.job_id).ckpt_root)
        assert root.parent == Path(lx.app.home) / "calls" and root.is_dir()
        with lx.app.store.tx() as db:
            db.execute("UPDATE jobs SET updated=? WHERE job_id=?", (time.time() - 3 * DAY, h.job_id))
    p = subprocess.run([str(Path(sys.executable).parent / "launcher"), "gc", "--older-than", "2d"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert f"call folder {root} (of {h.job_id}): removed" in p.stdout, p.stdout
    assert not root.exists()
