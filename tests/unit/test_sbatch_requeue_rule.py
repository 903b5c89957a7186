"""The Slurm job script's requeue rule (``_launcher_requeue`` in templates/sbatch.sh.j2), run by
bash as rendered, against a stand-in ``scontrol`` that answers with a given job line and records
a requeue. Measured on the test cluster (22.05): ``scontrol requeue`` brings back even a
cancelled job; while a job is being ended scontrol says COMPLETING, with Reason=TimeLimit only
when its time limit ended it. So: requeue a running job, or one its time limit is ending; never
one being cancelled, nor one scontrol cannot show."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "slurm" / "multinode.facts_2411.sh"

FAKE_SCONTROL = """#!/bin/bash
case "$1" in
  -o) [ -n "$FAKE_JOB" ] || { echo "slurm_load_jobs error: Socket timed out" >&2; exit 1; }
      printf '%s\\n' "$FAKE_JOB" ;;
  requeue) echo "requeue $2" >> "$CALLS" ;;
  *) exit 2 ;;
esac
"""


def requeue_function() -> str:
    lines = GOLDEN.read_text().splitlines()
    start = lines.index("_launcher_requeue() {")
    end = lines.index("}", start)
    return "\n".join(lines[start:end + 1])


def job_line(state: str, reason: str = "None") -> str:
    return f"JobId=7 JobName=x UserId=u(1) JobState={state} Reason={reason} Dependency=(null) Restarts=0"


@pytest.mark.parametrize("job, ending, requeued", [
    (job_line("RUNNING"), "", True),                        # a step signalled alone: exit 75, restart it
    (job_line("RUNNING"), "1", False),                      # this shell got TERM: the job is being ended
    (job_line("COMPLETING"), "1", False),                   # scancel: COMPLETING, Reason=None
    (job_line("COMPLETING"), "", False),                    # ... even before this shell saw the TERM
    (job_line("CANCELLED"), "", False),
    (job_line("COMPLETING", "TimeLimit"), "1", True),       # its time limit ends it: the run saved, go on
    (job_line("TIMEOUT", "TimeLimit"), "1", True),
    ("", "", False),                                        # scontrol cannot tell: never guess
], ids=["running", "running-term", "cancelling", "cancelling-no-term", "cancelled", "time-limit",
        "timed-out", "unknown"])
def test_the_job_script_requeues_only_a_job_that_is_not_being_cancelled(tmp_path, job, ending, requeued):
    fake = tmp_path / "bin" / "scontrol"
    fake.parent.mkdir()
    fake.write_text(FAKE_SCONTROL)
    fake.chmod(0o755)
    calls = tmp_path / "calls"
    script = f"{requeue_function()}\n_launcher_ending={ending}\n_launcher_requeue 'the run saved'\n"
    env = {**os.environ, "PATH": f"{fake.parent}:{os.environ['PATH']}", "FAKE_JOB": job, "CALLS": str(calls),
           "SLURM_JOB_ID": "7", "LAUNCHER_SELF_ID": "7"}
    r = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    assert calls.exists() == requeued, r.stderr
    if requeued:
        assert "the run saved; requeueing 7" in r.stderr
    else:
        assert "the run saved, but the job is being ended" in r.stderr and "no requeue" in r.stderr
