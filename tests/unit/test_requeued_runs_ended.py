"""A run the scheduler requeued in place is over in every view (issue 30, honest clocks). Found by
tests/integration/test_useful_training_slurm.py: on the test cluster (no slurmdbd: the jobcomp
file, `sacct -c`) a run that requeued itself after a preemption notice is recorded with the
state the requeue left the job in, PENDING; the launcher copied that onto the finished attempt,
which `status`, `report` and `serve` then showed as waiting, with no end, after the job had
completed."""

from __future__ import annotations

from types import SimpleNamespace

from backends.slurm.states import run_state
from launcher.launching.tracking import restarted_run

# `sacct -c -n -P -j 3 -o JobIDRaw,State,ExitCode,NodeList,Start,End,Reason,Comment,JobID` on 22.05: the
# run that requeued itself (scontrol requeue after the notice), then the run that completed
JOBCOMP = ("3|PENDING|0:0|node1|2026-12-07T23:27:38|2026-12-07T23:27:43|||3\n"
           "3|COMPLETED|0:0|node1|2026-12-07T23:27:54|2026-12-07T23:27:58|||3\n")


def test_a_run_recorded_ended_in_a_waiting_state_was_requeued():
    assert run_state("PENDING", True) == "REQUEUED"
    assert run_state("REQUEUE_HOLD", True) == "REQUEUED"
    # the current run in slurmdbd's sacct: queued, no end yet
    assert run_state("PENDING", False) == "PENDING" and run_state("RUNNING", False) == "RUNNING"
    assert run_state("CANCELLED by 0", True) == "CANCELLED" and run_state("PREEMPTED", True) == "PREEMPTED"
    assert run_state("COMPLETED", True) == "COMPLETED" and run_state("", True) == ""


class Jobcomp:
    """A cluster without slurmdbd: `sacct` refuses, `sacct -c` reads the jobcomp file."""

    where = "the test cluster"

    def run(self, argv, check=False, **kw):
        if argv[:2] == ["sacct", "-c"]:
            return SimpleNamespace(returncode=0, stdout=JOBCOMP, stderr="")
        return SimpleNamespace(returncode=1, stdout="", stderr="Slurm accounting storage is disabled")


def test_the_run_history_of_a_job_that_requeued_itself_says_requeued_with_its_times():
    from launcher.backend.config import Target
    from launcher.backend.protocols import Handle
    from launcher_backends.slurm import SlurmBackend
    from launcher_backends.slurm.options import SlurmOptions
    from launcher_backends.slurm.times import epoch

    b = SlurmBackend(Target("cl", "slurm", SlurmOptions()), runner=Jobcomp())
    runs = b.run_history(Handle("slurm", "cl", "j", "3"))
    assert [r["state"] for r in runs] == ["REQUEUED", "COMPLETED"]
    assert runs[0]["start"] == epoch("2026-12-07T23:27:38") and runs[0]["end"] == epoch("2026-12-07T23:27:43")


def test_the_attempt_a_restart_in_place_ended_is_ended_with_the_runs_times():
    run = {"state": "REQUEUED", "nodes": "node1", "start": 100.0, "end": 105.0, "exit_code": "0:0"}
    assert restarted_run(run, "slurm", 2) == {"state": "REQUEUED", "reason": "restarted by slurm as attempt 3",
                                              "native_state": "REQUEUED", "started": 100.0, "ended": 105.0}
    assert restarted_run({"state": "PREEMPTED", "nodes": "node2"}, "slurm", 1) == {
        "state": "PREEMPTED", "reason": "restarted by slurm as attempt 2", "native_state": "PREEMPTED"}
    # no per-run history: requeued, its times not invented
    assert restarted_run({}, "slurm", 1) == {"state": "REQUEUED", "reason": "restarted by slurm as attempt 2",
                                             "native_state": ""}
