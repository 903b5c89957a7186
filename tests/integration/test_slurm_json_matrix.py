"""The status path on the docker rows of the Slurm matrix: on 24.11 the launcher reads job
status from ``scontrol --json show job`` (the probe found its JSON), and reads the same
state, reason and exit code there as ``scontrol -o show job`` does, for a completed, a
failed, a timed-out and a preempted job; on 22.05 (no ``--json``) the text path is used.
Everything runs as alice, over SSH to the login node, as in tests/integration/test_slurm_matrix.py."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from launcher.backend.protocols import Handle
from launcher.backend.config import Target
from launcher_backends.slurm import SlurmBackend
from launcher_backends.slurm import json_status as js
from launcher_backends.slurm.options import SlurmOptions
from launcher_backends.slurm.status_io import statuses
from tests.fixtures.polling import poll
from tests.fixtures.recording import RecordingRunner

from .test_slurm_matrix import cli, row, slurm_cluster  # noqa: F401 - the matrix's fixtures

DOCKER_ROWS = pytest.mark.parametrize("slurm_cluster", ["docker-24.11", "docker-22.05"], indirect=True)
COMPARED = ("state", "native_state", "reason", "exit_code", "restarts", "nodes")




def native_of(cli, job: str) -> str:
    return cli.status(job)["attempts"][-1]["native_id"]


def launch_four(cli, slurm_cluster) -> dict:
    """A completed, a failed, a timed-out and a preempted (requeued) job, launched as alice."""
    jobs = {
        "completed": cli.launch(cli.spec("ok", {"run": "echo ok", "resources": {"time_limit": "5m"}}), "cl"),
        "failed": cli.launch(cli.spec("bad", {"run": "exit 7", "resources": {"time_limit": "5m"}}), "cl"),
        "timeout": cli.launch(cli.spec("late", {"run": "sleep 600", "resources": {"time_limit": "1m"}}), "cl"),
        # alone on its node, so that the job of `high` that takes the node preempts only this one
        "preempted": cli.launch(cli.spec("victim", {"run": "sleep 600", "resources": {"time_limit": "10m"},
                                                     "slurm": {"extra": ["--exclusive"]}}), "cl"),
    }
    natives = {k: native_of(cli, j) for k, j in jobs.items()}
    node = slurm_cluster.wait(natives["preempted"], "RUNNING", timeout=120)["NodeList"]
    slurm_cluster.sbatch("-p", "high", "--exclusive", "-w", node, "-o", "/dev/null", "--time=2",
                         script="#!/bin/bash\nsleep 600\n")
    slurm_cluster.wait(natives["preempted"], lambda j: j.get("Restarts", "0") != "0", timeout=60)
    slurm_cluster.wait(natives["completed"], "COMPLETED", timeout=120)
    slurm_cluster.wait(natives["failed"], "FAILED", timeout=120)
    slurm_cluster.wait(natives["timeout"], "TIMEOUT", timeout=240, interval=2)  # enforced on a ~30 s timer
    # the requeue has settled: a requeued job passes through COMPLETING (its first run being
    # cleaned up, Restarts already 1) before it is PENDING again; at load that took > 100 s on 22.05
    slurm_cluster.wait(natives["preempted"], lambda j: j.get("JobState") != "COMPLETING", timeout=180, interval=1)
    return {k: (jobs[k], natives[k]) for k in jobs}


@DOCKER_ROWS
def test_status_of_finished_and_preempted_jobs_reads_the_same_from_json_and_text(cli, row, slurm_cluster):
    jobs = launch_four(cli, slurm_cluster)
    facts = json.loads((cli.home / "facts" / "cl.json").read_text())["data"]
    json_row = slurm_cluster.version >= "23.02"
    assert facts["json_status"] == ("data_parser/v0.0.42" if slurm_cluster.version == "24.11" else ""), facts
    options = SlurmOptions(**{k: v for k, v in slurm_cluster.target.items() if k != "backend"})
    backend = SlurmBackend(Target("cl", "slurm", options), app=SimpleNamespace(home=str(cli.home)))
    recording = RecordingRunner(backend.runner)
    backend._runner = recording
    handles = [Handle("slurm", "cl", job, native) for job, native in jobs.values()]
    ids = [h.native_id for h in handles]
    try:
        def same_both_ways():
            recording.argvs.clear()
            used = {h.native_id: backend.status([h])[0] for h in handles}  # production path, the CLI's facts
            text = statuses(backend._run, recording.where, ids, "")
            pairs = {i: ({f: getattr(used[i], f) for f in COMPARED}, {f: getattr(text[i], f) for f in COMPARED})
                     for i in ids}
            return (used, recording.argvs[0]) if all(a == b for a, b in pairs.values()) else None

        # back to back, the two reads agree unless a job changed state between them (the
        # preempted job starting again): read again until they agree
        used, first_command = poll("JSON and text status to agree", same_both_ways, timeout=60, interval=1)
        recording.argvs.clear()  # a batch reads text on every row: one call, ~8x fewer bytes than JSON
        assert {s.extra["source"] for s in backend.status(handles)} <= {"scontrol -o", "sacct -c"}
        assert recording.argvs[0] == ["scontrol", "-o", "show", "job"]
    finally:
        backend.close()
    assert first_command == (js.LIVE_ARGV + [ids[0]] if json_row else ["scontrol", "-o", "show", "job"])
    assert {s.extra["source"] for s in used.values()} == {"scontrol --json" if json_row else "scontrol -o"}
    st = {k: used[native] for k, (_, native) in jobs.items()}
    assert (st["completed"].state.value, st["completed"].exit_code) == ("COMPLETED", 0)
    assert (st["failed"].state.value, st["failed"].exit_code) == ("FAILED", 7)
    assert st["failed"].reason.startswith("NonZeroExitCode: exit 7"), st["failed"].reason
    assert (st["timeout"].state.value, st["timeout"].reason) == ("TIMEOUT", "TimeLimit")
    assert st["preempted"].restarts == 1 and st["preempted"].state.value in ("REQUEUED", "RUNNING", "PENDING")
    # what `launcher status` shows for them (the same status path, then the recovery bookkeeping)
    shown = {k: cli.status(job)["attempts"] for k, (job, _) in jobs.items() if k != "preempted"}
    shown["preempted"] = poll("the preempted run as an attempt", lambda: (
        lambda a: a if len(a) >= 2 else None)(cli.status(jobs["preempted"][0])["attempts"]), timeout=60, interval=1)
    assert shown["completed"][-1]["state"] == "COMPLETED"
    assert (shown["failed"][0]["state"], shown["failed"][0]["exit_code"]) == ("FAILED", 7)
    assert (shown["timeout"][0]["state"], shown["timeout"][0]["native_state"]) == ("TIMEOUT", "TIMEOUT")
    assert "TimeLimit" in shown["timeout"][0]["reason"]
    assert shown["preempted"][0]["state"] == "PREEMPTED", shown["preempted"]
