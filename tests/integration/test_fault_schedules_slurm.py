"""Randomized fault schedules on the real test cluster (issue 20 §10; the harness:
tests/integration/fault_harness.py): as tests/integration/test_fault_schedules.py, on target
``testcl`` (sbatch, squeue, scancel), and sometimes with slurmctld itself stopped (SIGSTOP) for
longer than the cluster's MessageTimeout when the fault point is reached, so the scheduler
calls in flight time out. Invariant 2 reads ``squeue -t all``: every job carrying one of the
schedule's dedupe tokens belongs to a job `status` lists, and an active one is recorded with
its id. Half the schedules put a wrapper sbatch first on PATH (tests/integration/sbatch_wrappers.py):
sbatch killed by a signal after Slurm accepted the job, a banner line before the id, an empty
line instead of it, the id twice; none is a refusal, so the job must never be called rejected.

$LAUNCHER_FAULT_SLURM_SCHEDULES (default 20) schedules, 2 at a time; replay a failing one
with ``LAUNCHER_FAULT_SEED=S LAUNCHER_FAULT_ONLY=I pytest tests/integration/test_fault_schedules_slurm.py``."""

from __future__ import annotations

import collections
import os
import shutil
import signal
import threading
import time
from dataclasses import replace

import pytest

from tests.fixtures.polling import poll

from .fault_harness import (CLOSED, Result, Run, _live_supervisors, _slurm_jobs, base_seed, check, chosen, cli, ctld_pid,
                            draw, heal, loop_timeout, quiet, run_many, stop_jobs, store_rows, summary, unadopted)
from .sbatch_wrappers import drawn

pytestmark = pytest.mark.slurm

COUNT = int(os.environ.get("LAUNCHER_FAULT_SLURM_SCHEDULES", "20"))
PARALLEL = int(os.environ.get("LAUNCHER_FAULT_PARALLEL", "2"))


# A schedule took 26-95 s in a loaded CI run (2 at a time): 20 of them outlived 600 s there
@pytest.mark.timeout(loop_timeout(COUNT, PARALLEL, 150))
def test_randomized_fault_schedules_on_slurm_keep_the_three_invariants(clean_queue):
    seed = base_seed()
    print(f"fault schedules on Slurm: base seed {seed} (replay: LAUNCHER_FAULT_SEED={seed})")
    root = clean_queue.shared_dir / f"faults-{seed}"  # the nodes write the lines file there
    root.mkdir(parents=True, exist_ok=True)
    schedules = [drawn(s) for s in chosen(seed, COUNT, backends=("slurm",))]
    results = run_many(schedules, root, PARALLEL, env=clean_queue.env, cluster=clean_queue, echo=print)
    print(summary(results))
    print("  with a wrapper sbatch: " + ", ".join(f"{k}={n}" for k, n in sorted(collections.Counter(
        s.sbatch.split(":")[0] for s in schedules if s.sbatch).items())))
    bad = [r for r in results if r.violations]
    assert not bad, (f"{len(bad)} of {len(results)} schedules broke an invariant (base seed {seed}):\n\n"
                     + "\n\n".join(r.report() for r in bad) + "\n\n" + summary(results))
    shutil.rmtree(root, ignore_errors=True)  # the cluster's shared dir outlives this test (a session fixture)


@pytest.mark.timeout(300)
def test_heal_waits_for_a_lost_answer_to_be_adopted_before_the_invariants_are_read(clean_queue):
    """Seed 28029, schedule 61, as it broke once: Slurm took the launch's job, sbatch's answer
    was lost to a slow controller and the token lookups timed out, so the row stayed SUBMITTING
    while a Slurm job held its token. The harness' old quiet() (every open row SUBMITTING, no
    local process) called that settled and check() read invariant 2 before watch had adopted
    the job; heal() now runs `watch --once` until no such token is left, and says so."""
    s = replace(draw(28029, 61, backends=("slurm",)), sbatch="lost:once")
    r = Run(s, clean_queue.shared_dir / f"heal-{os.getpid()}", dict(clean_queue.env), clean_queue)
    pid = ctld_pid(clean_queue)
    assert pid, "no slurmctld pid for this cluster"
    wrapper = r.dir / "bin" / "sbatch"  # once Slurm took the job, the controller stops answering
    wrapper.write_text(wrapper.read_text().replace(">/dev/null 2>&1\n", f">/dev/null 2>&1\nkill -STOP {pid}\n", 1))
    res = Result(s, folder=str(r.dir))
    def resume_after_heals_first_pass():
        # the controller answers again only once heal's first `watch --once` has returned, so that
        # pass cannot have adopted the job (under load a fixed timer let it: the pass outlasted it)
        end = time.monotonic() + 150
        while time.monotonic() < end and not any(n == "heal" for n, *_ in r.said):
            time.sleep(0.2)
        os.kill(pid, signal.SIGCONT)

    timer = threading.Thread(target=resume_after_heals_first_pass, daemon=True)
    try:
        p = cli(r, "launch", str(r.spec()), "--target", r.target, timeout=180)
        assert "rejected" not in p.stdout + p.stderr, p.stdout + p.stderr
        assert [x["state"] for x in store_rows(r.home)] == ["SUBMITTING"], p.stdout + p.stderr
        os.kill(pid, signal.SIGCONT)
        ids = poll("Slurm to list the job holding the token", lambda: [j for j, *_ in _slurm_jobs(r)], timeout=60)
        assert len(ids) == 1, ids
        # the old quiet(): every open row SUBMITTING, no local process. Not quiet(slurm=False): it
        # also waits for a start claimed in the job folder, which the Slurm job may already have
        # made by now (CI, under load: it ran before this line)
        assert [x["state"] for x in r.rows() if x["state"] not in CLOSED] == ["SUBMITTING"]
        assert not _live_supervisors(r), "the old quiet(): no local process"
        assert [x["held_by"] for x in unadopted(r)] == [ids] and not quiet(r)
        os.kill(pid, signal.SIGSTOP)  # heal starts while the controller is slow again
        timer.start()
        heal(r, res=res)
    finally:
        os.kill(pid, signal.SIGCONT)
    try:
        assert unadopted(r, tries=3) == [], res.notes
        assert any(n.startswith("heal waited") for n in res.notes), res.notes
        assert check(r, res) == [], res.notes
        # attempt 1 is the job Slurm took; it often fails (exit 1: its srun could not confirm the
        # allocation while slurmctld was stopped) and watch resubmits it: attempt 2 is that recovery
        assert [x["natives"][:1] for x in store_rows(r.home)] == [ids]
    finally:
        stop_jobs(r)
    shutil.rmtree(r.dir, ignore_errors=True)
