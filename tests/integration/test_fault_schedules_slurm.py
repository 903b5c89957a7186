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

import pytest

from .fault_harness import base_seed, chosen, run_many, summary
from .sbatch_wrappers import drawn

pytestmark = pytest.mark.slurm

COUNT = int(os.environ.get("LAUNCHER_FAULT_SLURM_SCHEDULES", "20"))
PARALLEL = int(os.environ.get("LAUNCHER_FAULT_PARALLEL", "2"))


# ~25 s of wall per schedule at 2 at a time on the loaded 2-core machine: 600 s for 20 is the floor
@pytest.mark.timeout(max(600, COUNT * 25))
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
