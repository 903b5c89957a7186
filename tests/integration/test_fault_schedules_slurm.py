"""Randomized fault schedules on the real test cluster (issue 20 §10; the harness:
tests/integration/fault_harness.py): as tests/integration/test_fault_schedules.py, on target
``testcl`` (sbatch, squeue, scancel), and sometimes with slurmctld itself stopped (SIGSTOP) for
longer than the cluster's MessageTimeout when the fault point is reached, so the scheduler
calls in flight time out. Invariant 2 reads ``squeue -t all``: every job carrying one of the
schedule's dedupe tokens belongs to a job `status` lists, and an active one is recorded with
its id.

$LAUNCHER_FAULT_SLURM_SCHEDULES (default 20) schedules, 2 at a time; replay a failing one
with ``LAUNCHER_FAULT_SEED=S LAUNCHER_FAULT_ONLY=I pytest tests/integration/test_fault_schedules_slurm.py``."""

from __future__ import annotations

import os
import shutil

import pytest

from .fault_harness import base_seed, chosen, run_many, summary

pytestmark = pytest.mark.slurm

COUNT = int(os.environ.get("LAUNCHER_FAULT_SLURM_SCHEDULES", "20"))
PARALLEL = int(os.environ.get("LAUNCHER_FAULT_PARALLEL", "2"))


def test_randomized_fault_schedules_on_slurm_keep_the_three_invariants(clean_queue):
    seed = base_seed()
    print(f"fault schedules on Slurm: base seed {seed} (replay: LAUNCHER_FAULT_SEED={seed})")
    root = clean_queue.shared_dir / f"faults-{seed}"  # the nodes write the lines file there
    root.mkdir(parents=True, exist_ok=True)
    results = run_many(chosen(seed, COUNT, backends=("slurm",)), root, PARALLEL, env=clean_queue.env,
                       cluster=clean_queue, echo=print)
    print(summary(results))
    bad = [r for r in results if r.violations]
    assert not bad, (f"{len(bad)} of {len(results)} schedules broke an invariant (base seed {seed}):\n\n"
                     + "\n\n".join(r.report() for r in bad) + "\n\n" + summary(results))
    shutil.rmtree(root, ignore_errors=True)  # the cluster's shared dir outlives this test (a session fixture)
