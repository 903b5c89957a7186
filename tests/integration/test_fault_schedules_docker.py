"""Randomized fault schedules on the dockerized Slurm 24.11 cluster (issue 20 §10; the harness:
tests/integration/fault_harness.py): as tests/integration/test_fault_schedules_slurm.py, on
target ``testcl``, here the cluster's login node over SSH (the paramiko transport, as alice),
so every scheduler call crosses an SSH session; sometimes with the controller container's
slurmctld stopped (SIGSTOP) for longer than its MessageTimeout (3 s) when the fault point is
reached. The schedules' folders lie on the cluster's shared home volume: the job appends its
starts to a lines file there, which this machine reads through the volume's mount point.

$LAUNCHER_FAULT_DOCKER_SCHEDULES (default 12) schedules, 2 at a time; replay a failing one
with ``LAUNCHER_FAULT_SEED=S LAUNCHER_FAULT_ONLY=I pytest tests/integration/test_fault_schedules_docker.py``."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from .fault_harness import base_seed, chosen, ctld_pid, loop_timeout, run_many, summary

pytestmark = [pytest.mark.slurm, pytest.mark.docker_slurm]

COUNT = int(os.environ.get("LAUNCHER_FAULT_DOCKER_SCHEDULES", "12"))
PARALLEL = int(os.environ.get("LAUNCHER_FAULT_PARALLEL", "2"))


# every scheduler call crosses SSH into a container: slower per schedule than the plain cluster
@pytest.mark.timeout(loop_timeout(COUNT, PARALLEL, 180))
def test_randomized_fault_schedules_on_docker_slurm_2411_keep_the_three_invariants(docker_slurm_2411):
    c = docker_slurm_2411
    c.reset()  # every user of a docker cluster resets it first
    assert ctld_pid(c), "slurmctld's process of the controller container was not found: no stall could be made"
    seed = base_seed()
    print(f"fault schedules on docker Slurm {c.version}: base seed {seed} (replay: LAUNCHER_FAULT_SEED={seed})")
    root = Path(c.home_on_host) / "alice" / f"faults-{seed}"
    root.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAUNCHER_")}
    results = run_many(chosen(seed, COUNT, backends=("slurm",)), root, PARALLEL, env=env, cluster=c, echo=print)
    print(summary(results))
    stalls = sum(1 for r in results if any(n.startswith("slurmctld was stopped") for n in r.notes))
    print(f"schedules that stopped slurmctld: {stalls}")
    bad = [r for r in results if r.violations]
    assert not bad, (f"{len(bad)} of {len(results)} schedules broke an invariant (base seed {seed}):\n\n"
                     + "\n\n".join(r.report() for r in bad) + "\n\n" + summary(results))
    shutil.rmtree(root, ignore_errors=True)  # the volume outlives this test (a session fixture)
