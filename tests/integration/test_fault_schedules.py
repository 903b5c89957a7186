"""Randomized fault schedules on the local target (issue 20 §10; the harness:
tests/integration/fault_harness.py): a launch, a job whose first attempt fails (a watcher
resubmits it) or a sweep, with a pause past the claim TTL, a kill -9, an interrupt or a sleep
at one named fault point of the launch or of one of 2-3 concurrent watchers, and sometimes a
concurrent cancel; 3 in 10 are the frozen duplicate (a watcher paused inside the local
backend's submit past its claim: another watcher submits the attempt, the first starts and
cancels its duplicate). After the faults are healed, no (job, attempt) ran user code twice,
every job the scheduler has is known to `status`, no command reported an action it did not
take, and nothing was cancelled that nobody cancelled.

$LAUNCHER_FAULT_SCHEDULES (default 100) schedules, $LAUNCHER_FAULT_PARALLEL (default 4) at a
time; a failure prints the base seed and each failing schedule, replayed with
``LAUNCHER_FAULT_SEED=S LAUNCHER_FAULT_ONLY=I pytest tests/integration/test_fault_schedules.py``."""

from __future__ import annotations

import os

import pytest

from .fault_harness import base_seed, chosen, loop_timeout, run_many, summary

pytestmark = pytest.mark.faults  # the faults tier (scripts/test-tiers.sh): a long loop of its own

COUNT = int(os.environ.get("LAUNCHER_FAULT_SCHEDULES", "100"))
PARALLEL = int(os.environ.get("LAUNCHER_FAULT_PARALLEL", "6"))
# A schedule takes 35-90 s beside the other tiers; the suite's 600 s was crossed by a loaded
# CI machine with every schedule healthy.
LOOP_TIMEOUT_S = loop_timeout(COUNT, PARALLEL, 120)


@pytest.mark.timeout(LOOP_TIMEOUT_S)
def test_randomized_fault_schedules_on_local_keep_the_four_invariants(tmp_path):
    seed = base_seed()
    print(f"fault schedules: base seed {seed} (replay: LAUNCHER_FAULT_SEED={seed})")
    results = run_many(chosen(seed, COUNT), tmp_path, PARALLEL, echo=print)
    print(summary(results))
    bad = [r for r in results if r.violations]
    assert not bad, (f"{len(bad)} of {len(results)} schedules broke an invariant (base seed {seed}):\n\n"
                     + "\n\n".join(r.report() for r in bad) + "\n\n" + summary(results))
    if len(results) >= 30:  # the faults do fire (about 2 in 3 schedules: 341 of 500 measured)
        assert sum(1 for r in results if r.fired) >= len(results) // 3, summary(results)
