"""`launch --fresh` on the checkpoint side: the job's first start takes a generation above
every existing one and records that it resumed from nothing ("fresh": true); every older
checkpoint is then stale (kept on disk, never resumed from, left alone by gc), and the
job's later starts resume its own checkpoints."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from launcher.checkpoint import (CheckpointError, Superseded, commit, gc, latest, open_store, read_generations,
                                 scan, start_generation, step_dir)
from launcher.checkpoint.attempts import starts_over
from launcher.checkpoint.contract import Generations


def write_ckpt(root, step, gen):
    d = os.path.join(str(root), step_dir(step, gen))
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "model.bin"), "wb") as f:
        f.write(b"m" * 100)
    commit(open_store(str(root)), step, gen, fence=False)


def earlier_run(root, steps=(10, 20, 30)):
    """Run A: generation 1 committed STEPS, then generation 2 (a requeue) resumed from the last."""
    store = open_store(str(root))
    start_generation(store, job_id="run-a")
    for s in steps:
        write_ckpt(root, s, 1)
    start_generation(store, job_id="run-a")
    return store


def test_starts_over_only_at_the_jobs_first_start():
    gens = Generations(2, [{"generation": 1, "job_id": "a"}, {"generation": 2, "job_id": "a"}])
    assert starts_over(gens, "b", fresh=True)
    assert not starts_over(gens, "a", fresh=True)   # a restart of the fresh job itself
    assert not starts_over(gens, "b", fresh=False)
    with pytest.raises(CheckpointError, match="LAUNCHER_JOB_ID"):
        starts_over(gens, None, fresh=True)


def test_fresh_start_makes_every_older_checkpoint_stale_and_keeps_it(tmp_path):
    store = earlier_run(tmp_path)
    assert latest(store).step == 30

    gens, found, _ = start_generation(store, job_id="run-b", fresh=True)
    assert found is None and gens.generation == 3
    rec = gens.record(3)
    assert rec["fresh"] is True and rec["resume_step"] == -1 and rec["job_id"] == "run-b"
    assert latest(store) is None                       # nothing to resume from
    entries = scan(store)
    assert [(e.step, e.state) for e in entries] == [(30, "stale"), (20, "stale"), (10, "stale")]
    assert all("superseded by a fresh run" in e.reason and "job run-b" in e.reason for e in entries)
    assert all(os.path.exists(os.path.join(str(tmp_path), step_dir(s, 1), "COMMIT.json")) for s in (10, 20, 30))

    # the earlier run, still running somewhere, can no longer commit
    os.makedirs(os.path.join(str(tmp_path), step_dir(40, 2)))
    open(os.path.join(str(tmp_path), step_dir(40, 2), "x"), "w").close()
    with pytest.raises(Superseded):
        commit(store, 40, 2)

    # the fresh run trains; its own checkpoints are the only candidates
    write_ckpt(tmp_path, 5, 3)
    assert (latest(store).step, latest(store).generation) == (5, 3)

    # a restart of the fresh job resumes its own checkpoint, and does not start over again
    gens, found, _ = start_generation(store, job_id="run-b", fresh=True)
    assert gens.generation == 4 and found.step == 5 and "fresh" not in gens.record(4)
    write_ckpt(tmp_path, 10, 4)
    assert (latest(store).step, latest(store).generation) == (10, 4)
    # a later plain relaunch (run C) continues the fresh run, never the older one
    gens, found, _ = start_generation(store, job_id="run-c")
    assert (found.step, found.generation) == (10, 4)


def test_gc_leaves_an_earlier_runs_checkpoints_in_place_but_quarantines_a_zombies(tmp_path):
    store = earlier_run(tmp_path)
    write_ckpt(tmp_path, 50, 1)          # a zombie of generation 1 committed after generation 2 resumed at 30
    start_generation(store, job_id="run-b", fresh=True)
    for s in (1, 2, 3, 4):
        write_ckpt(tmp_path, s, 3)
    causes = {e.step: read_generations(store).stale_cause(e.step, e.generation)[0]
              for e in scan(store) if e.generation == 1}
    assert causes == {50: "fork", 30: "fresh", 20: "fresh", 10: "fresh"}

    rep = gc(store, keep=2)
    assert [q["path"].rsplit("/", 1)[-1] for q in rep["quarantined"]] == [step_dir(50, 1)]
    skipped = {s["path"].rsplit("/", 1)[-1]: s["reason"] for s in rep["skipped"]}
    assert set(skipped) == {step_dir(s, 1) for s in (10, 20, 30)}
    assert all("earlier run" in r for r in skipped.values())
    assert all(os.path.isdir(os.path.join(str(tmp_path), step_dir(s, 1))) for s in (10, 20, 30))
    assert len(rep["deleted"]) == 2     # the fresh run's own old checkpoints: keep=2


def test_a_fresh_run_resuming_below_an_earlier_runs_steps_leaves_them_an_earlier_runs(tmp_path):
    """The fresh run is preempted at step 4 and resumes there. Its resume point says nothing
    about the earlier run: that run's steps 10-30 stay "fresh"-stale (left in place by gc),
    never read as a zombie's fork of the new run (quarantined)."""
    store = earlier_run(tmp_path)
    start_generation(store, job_id="run-b", fresh=True)          # generation 3 starts over
    write_ckpt(tmp_path, 4, 3)
    gens, found, _ = start_generation(store, job_id="run-b")     # generation 4 resumes at 4
    assert (found.step, found.generation) == (4, 3)
    gens = read_generations(store)
    assert gens.fork_point(1) == (30, 2) and gens.fork_point(3) == (4, 4)
    for s in (10, 20, 30):
        assert gens.stale_cause(s, 1)[0] == "fresh", s
    for s in (8, 12):
        write_ckpt(tmp_path, s, 4)
    rep = gc(store, keep=10)
    assert rep["quarantined"] == []
    skipped = {s["path"].rsplit("/", 1)[-1] for s in rep["skipped"]}
    assert skipped == {step_dir(s, 1) for s in (10, 20, 30)}
    assert all(os.path.isdir(os.path.join(str(tmp_path), step_dir(s, 1))) for s in (10, 20, 30))


def test_resume_env_honours_launcher_fresh(tmp_path):
    earlier_run(tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAUNCHER_")}

    def resume_env(job, fresh):
        e = {**env, "LAUNCHER_JOB_ID": job, **({"LAUNCHER_FRESH": "1"} if fresh else {})}
        p = subprocess.run([sys.executable, "-m", "launcher.jobside", "resume-env", "--root", str(tmp_path)],
                           capture_output=True, text=True, env=e, timeout=60)
        assert p.returncode == 0, p.stderr
        return p

    p = resume_env("run-b", True)
    assert "LAUNCHER_RESUME_STEP=-1" in p.stdout and "LAUNCHER_RESUME_FROM=''" in p.stdout
    assert "starts over" in p.stderr and "--fresh" in p.stderr
    write_ckpt(tmp_path, 7, 3)
    p = resume_env("run-b", True)                   # the same job's next start: resumes its own
    assert "LAUNCHER_RESUME_STEP=7" in p.stdout and "starts over" not in p.stderr
