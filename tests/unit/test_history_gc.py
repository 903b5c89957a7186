"""``launcher gc`` (``launcher.state.history``): ended jobs older than the cutoff go, with their
rows in every table and their local folders; open jobs, sweeps that are not over, jobs whose
notifications are not settled, others' jobs and checkpoint roots stay. The choice is pure
(``choose``, ``holds_root``); the rest runs on a real SQLite store in a temporary home and
through the real CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from launcher.api.facade import older_than_seconds
from launcher.core.args import ArgumentError
from launcher.state.history import Kept, choose, collect, holds_root
from launcher.state.rows import JobRow
from launcher.state.store import StateStore

LAUNCHER = str(Path(sys.executable).parent / "launcher")
DAY = 86400.0


def row(job_id, state="COMPLETED", sweep_id=None, owner=None, ckpt_root=None) -> JobRow:
    return JobRow(job_id=job_id, name=job_id, target="local", backend="local", spec_path=None, spec_yaml="",
                  created=0.0, updated=0.0, state=state, reason="", handle=None, ckpt_root=ckpt_root, last_step=None,
                  meta={}, sweep_id=sweep_id, owner=owner)


# ---- the pure choice
def test_choose_keeps_others_jobs_unsettled_ones_and_every_element_of_a_sweep_that_stays():
    rows = [row("a"), row("b", owner="bob"), row("c"), row("s1-0", sweep_id="s1"), row("s1-1", sweep_id="s1"),
            row("s2-0", sweep_id="s2"), row("s2-1", sweep_id="s2"), row("s3-0", sweep_id="s3"),
            row("s3-1", sweep_id="s3")]
    c = choose(rows, {"s2": "its sweep s2 has element s2-2 still RUNNING"}, unsettled={"c", "s3-1"},
               may_act=lambda r: r.owner != "bob")
    assert [r.job_id for r in c.jobs] == ["a", "s1-0", "s1-1"]
    assert c.sweeps == ["s1"]
    kept = {k.job_id: k.why for k in c.kept}
    assert set(kept) == {"b", "c", "s2-0", "s2-1", "s3-0", "s3-1"}
    assert kept["b"] == "bob's job"
    assert "notifications" in kept["c"]
    assert kept["s2-0"] == kept["s2-1"] == "its sweep s2 has element s2-2 still RUNNING"
    assert kept["s3-0"] == "another element of its sweep stays"  # s3-1 is unsettled: the sweep stays whole
    assert Kept("s3-1", kept["s3-1"]) in c.kept and "notifications" in kept["s3-1"]


@pytest.mark.parametrize("folder, root, holds", [
    ("/h/jobs/j1", "/h/jobs/j1/ckpt", True),
    ("/h/jobs/j1", "/h/jobs/j1", True),
    ("/h/jobs/j1", "/h/jobs/j1/../j1/ckpt", True),
    ("/h/jobs/j1", "/h/jobs/j10/ckpt", False),
    ("/h/jobs/j1", "/data/ckpt", False),
    ("/h/jobs/j1", "s3://bucket/h/jobs/j1", False),
    ("/h/jobs/j1", None, False),
])
def test_a_folder_holds_the_root_only_when_the_root_is_it_or_inside_it(folder, root, holds):
    assert holds_root(Path(folder), root) is holds


@pytest.mark.parametrize("value, seconds", [("30d", 30 * DAY), ("12h", 43200.0), ("0s", 0.0), (0, 0.0), (90.5, 90.5)])
def test_older_than_reads_a_duration_or_seconds(value, seconds):
    assert older_than_seconds(value) == seconds


@pytest.mark.parametrize("value", ["5x", "", "-1d", -1, float("nan"), float("inf"), True, None])
def test_older_than_refuses_what_is_not_a_duration_naming_the_option(value):
    with pytest.raises(ArgumentError, match="--older-than"):
        older_than_seconds(value)


# ---- on a real SQLite store
def age(store, job_ids, seconds_ago: float) -> None:
    with store.tx() as db:
        db.executemany("UPDATE jobs SET updated=? WHERE job_id=?", [(time.time() - seconds_ago, j) for j in job_ids])


def job(store, job_id, state, ckpt_root=None, spec="name: x\nrun: 'true'\n") -> None:
    store.begin_job(job_id, job_id, "local", "local", None, spec, ckpt_root=ckpt_root)
    store.record_submission(job_id, 1, "local", json.dumps({"backend": "local"}), f"n-{job_id}", state="RUNNING")
    store.record_event(job_id, "note", said="hello")
    if state != "RUNNING":
        store.close_job(job_id, state, "test")
    store.job_dir(job_id)  # its folder
    (store.home / "jobs" / job_id / "stdout.log").write_text("out\n")


def table_counts(store, job_ids) -> dict:
    marks = ",".join("?" * len(job_ids))
    return {t: store.db.execute(f"SELECT COUNT(*) FROM {t} WHERE job_id IN ({marks})", list(job_ids)).fetchone()[0]
            for t in ("jobs", "attempts", "events")}


@pytest.fixture
def store(tmp_path):
    s = StateStore(tmp_path / "home", url="")
    yield s
    s.close()


def test_gc_removes_old_ended_jobs_whole_and_leaves_everything_else(store, tmp_path):
    job(store, "old-done", "COMPLETED")
    job(store, "old-failed", "FAILED")
    job(store, "recent-done", "COMPLETED")
    job(store, "old-open", "RUNNING")
    inside = store.home / "jobs" / "old-ckpt" / "ckpt"
    job(store, "old-ckpt", "COMPLETED", ckpt_root=str(inside))
    inside.mkdir(parents=True)
    (inside / "step-1").write_text("weights\n")
    job(store, "old-notify", "COMPLETED", spec="name: x\nrun: 'true'\nnotify:\n  webhook: http://127.0.0.1:1/x\n")
    old = ["old-done", "old-failed", "old-open", "old-ckpt", "old-notify"]
    age(store, old, 40 * DAY)

    dry = collect(store, time.time() - 30 * DAY, dry_run=True)
    assert sorted(r["job_id"] for r in dry.removed) == ["old-ckpt", "old-done", "old-failed"]
    assert table_counts(store, old)["jobs"] == 5 and (store.home / "jobs" / "old-done").is_dir()  # dry: nothing

    done = collect(store, time.time() - 30 * DAY)
    assert sorted(r["job_id"] for r in done.removed) == ["old-ckpt", "old-done", "old-failed"]
    assert table_counts(store, ["old-done", "old-failed", "old-ckpt"]) == {"jobs": 0, "attempts": 0, "events": 0}
    assert not (store.home / "jobs" / "old-done").exists() and not (store.home / "jobs" / "old-failed").exists()
    # a folder holding its job's checkpoint root stays, and says so
    assert (inside / "step-1").read_text() == "weights\n"
    assert [x["job_id"] for x in done.left] == ["old-ckpt"] and "checkpoint root" in done.left[0]["why"]
    # the open job, the recent one and the one whose closing the watcher still owes a notification
    for j in ("old-open", "recent-done", "old-notify"):
        assert table_counts(store, [j]) == {"jobs": 1, "attempts": 1, "events": table_counts(store, [j])["events"]}
        assert (store.home / "jobs" / j / "stdout.log").read_text() == "out\n"
    assert store.get_job("old-open").state == "RUNNING"
    assert [k["job_id"] for k in done.kept] == ["old-notify"]


def test_a_sweep_goes_whole_once_every_element_is_over(store):
    store.sweeps.begin("sw", "sw", "local", "local", None, "name: sw\nrun: 'true'\n", {"sweep": {"id": "sw"}},
                       [("sw-0", None, {"sweep": {"id": "sw", "index": 0}}),
                        ("sw-1", None, {"sweep": {"id": "sw", "index": 1}})])
    for j in ("sw-0", "sw-1"):
        store.record_submission(j, 1, "local", json.dumps({"backend": "local"}), f"n-{j}", state="RUNNING")
    store.close_job("sw-0", "COMPLETED", "test")
    age(store, ["sw-0", "sw-1"], 40 * DAY)
    cutoff = time.time() - 30 * DAY
    first = collect(store, cutoff)
    assert first.removed == [] and [k["job_id"] for k in first.kept] == ["sw-0"]
    assert "sw-1" in first.kept[0]["why"] and "RUNNING" in first.kept[0]["why"]
    store.close_job("sw-1", "COMPLETED", "test")
    age(store, ["sw-0", "sw-1"], 40 * DAY)
    second = collect(store, cutoff)
    assert sorted(r["job_id"] for r in second.removed) == ["sw-0", "sw-1"] and second.sweeps == ["sw"]
    assert store.db.execute("SELECT COUNT(*) FROM sweeps WHERE sweep_id='sw'").fetchone()[0] == 0


def test_ten_thousand_jobs_half_ended_every_open_one_intact(store):
    ids = [f"j{i:05d}" for i in range(10_000)]
    with store.batch():
        for i, j in enumerate(ids):
            store.begin_job(j, j, "local", "local", None, "name: x\nrun: 'true'\n")
            store.record_submission(j, 1, "local", json.dumps({"backend": "local"}), f"n{i}", state="RUNNING")
    ended = ids[::2]
    with store.tx() as db:
        db.executemany("UPDATE jobs SET state='COMPLETED', updated=? WHERE job_id=?",
                       [(time.time() - 40 * DAY, j) for j in ended])
    done = collect(store, time.time() - 30 * DAY)
    assert len(done.removed) == 5_000
    left = {r.job_id: r.state for r in store.list_jobs(limit=20_000)}
    assert sorted(left) == ids[1::2] and set(left.values()) == {"RUNNING"}
    assert store.db.execute("SELECT COUNT(*) FROM attempts").fetchone()[0] == 5_000


def test_the_cli_says_what_it_removed_and_kept(tmp_path):
    home = tmp_path / "home"
    env = {**os.environ, "LAUNCHER_HOME": str(home), "LAUNCHER_CONFIG": str(tmp_path / "config.yaml")}
    env.pop("LAUNCHER_STATE_URL", None)
    (tmp_path / "config.yaml").write_text("targets: {}\n")
    s = StateStore(home, url="")
    job(s, "gone", "CANCELLED")
    job(s, "open", "RUNNING")
    age(s, ["gone", "open"], 3 * DAY)
    s.close()
    p = subprocess.run([LAUNCHER, "gc", "--older-than", "2d", "--json"], env=env, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert [r["job_id"] for r in out["removed"]] == ["gone"] and out["dry_run"] is False
    assert out["removed"][0]["folders"] == [str(home / "jobs" / "gone")]
    p = subprocess.run([LAUNCHER, "gc", "--older-than", "2d"], env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and "removed 0 job(s)" in p.stdout, p.stdout + p.stderr
    p = subprocess.run([LAUNCHER, "gc", "--older-than", "soon"], env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "--older-than 'soon'" in p.stderr and "Traceback" not in p.stderr, p.stderr


def test_a_removed_job_takes_its_watch_mark_with_it(store):
    from launcher.state import marks

    job(store, "old-done", "COMPLETED")
    job(store, "old-open", "RUNNING")
    marks.save(store, [("old-done", "seen", 1.0), ("old-open", "seen", 1.0)])
    age(store, ["old-done", "old-open"], 40 * DAY)
    collect(store, time.time() - 30 * DAY)
    assert marks.load(store) == {"old-open": ("seen", 1.0)}
