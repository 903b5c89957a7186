"""bench/fleet_slurm.py run small (issue 29 item 7, the netns Slurm part): 200 held jobs on the
test cluster, 3 watcher processes on one PostgreSQL store, the target's poller killed with -9,
its successor frozen (SIGSTOP) past its lease and continued, while held jobs are released (half
complete, half fail their first attempt and are resubmitted by a watcher). Asserted: the
invariants (no (job, attempt) submitted twice to Slurm, no job the store and Slurm disagree on
after settling, every job observed again after each fault, another watcher polling the target
after each), never a time: the gaps and per-tick calls are the bench's figures
(docs/benchmarks.md)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

from fleet_slurm import run_fleet  # noqa: E402

pytestmark = [pytest.mark.slurm, pytest.mark.postgres]

JOBS = 200


@pytest.mark.timeout(900)
def test_a_fleet_of_held_jobs_survives_a_killed_and_a_frozen_watcher(clean_queue, pg_server, tmp_path):
    line = run_fleet(clean_queue, pg_server.url(), JOBS, watchers=3, interval=2.0, churn=0.05, work=tmp_path,
                     echo=print)
    print(line)
    assert line["jobs"] == JOBS
    assert line["double_submits"] == 0, line
    assert line["lost"] == 0, line
    assert line["released"] > 0, line  # jobs ran and ended (or failed and were resubmitted) meanwhile
    assert line["slurm_jobs"] > JOBS, line  # some first attempts failed and were submitted again
    assert line["kill"]["pid"] != line["freeze"]["pid"], line
    for fault in ("kill", "freeze"):
        assert line[fault]["unobserved_after"] == 0, (fault, line)  # every open job was polled again
        assert line[fault]["next_poller"] not in (None, line[fault]["pid"]), (fault, line)
