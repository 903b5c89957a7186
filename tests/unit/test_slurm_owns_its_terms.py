"""What only Slurm knows is said by the Slurm backend (issue 19 §3): its timestamps, the
restart counter in an attempt record, an array element's id, and what the job side is told."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from types import SimpleNamespace

from launcher.report.collect import _match
from launcher_backends.slurm import SlurmBackend
from launcher_backends.slurm.times import epoch, parse_timestamp


def test_one_timestamp_parser_for_every_slurm_output():
    d = parse_timestamp("2026-11-20T12:00:05")
    assert (d.year, d.hour, d.second, d.tzinfo) == (2026, 12, 5, None)
    for none in ("", "Unknown", "UNKNOWN", "None", "N/A", "soon", None, 17):
        assert parse_timestamp(none) is None and epoch(none) is None
    assert epoch("2026-11-20T12:00:05") == d.timestamp()


def test_slurm_reads_an_attempt_records_scheduler_variables():
    assert SlurmBackend.run_of({"SLURM_JOB_ID": "42", "SLURM_RESTART_COUNT": "2"}) == ("42", 2)
    assert SlurmBackend.run_of({"SLURM_JOB_ID": "42"}) == ("42", 0)
    assert SlurmBackend.run_of({"SLURM_JOB_ID": "42", "SLURM_RESTART_COUNT": "x"}) is None
    assert SlurmBackend.run_of({"SKYPILOT_TASK_ID": "t"}) is None


def test_the_report_matches_records_to_attempts_through_the_backend():
    rows = [SimpleNamespace(attempt=n, native_id="42", started=1.0) for n in (1, 2, 3)]
    records = [{"generation": 7, "scheduler": {"SLURM_JOB_ID": "42", "SLURM_RESTART_COUNT": "1"}}]
    assert _match(rows, records, [SlurmBackend.run_of]) == {2: records[0]}
    # without a backend that reads them, the record is matched by order of the attempts that started
    assert _match(rows, records) == {1: records[0]}


def test_an_array_element_is_named_by_the_backend():
    assert SlurmBackend.element_native_id("812", 3) == "812_3"
    assert SlurmBackend.array_of("812_[0-5%2]") == SlurmBackend.array_of("812") == "812"


def _stand_down(env):
    code = "from launcher.jobside.signals import stand_down\nstand_down('refused', max_wait=30)"
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "LAUNCHER_"))}
    return subprocess.Popen([sys.executable, "-c", code], env={**clean, **env}, stderr=subprocess.PIPE, text=True)


def test_a_superseded_run_waits_only_where_the_backend_renders_a_requeue_command():
    p = _stand_down({"SLURM_JOB_ID": "1"})  # a scheduler variable alone no longer decides
    assert p.wait(timeout=60) == 3
    p = _stand_down({"LAUNCHER_REQUEUE_CMD": "scontrol requeue 1", "LAUNCHER_BACKEND": "slurm"})
    try:
        line = p.stderr.readline()
        line += p.stderr.readline()
        assert "superseded under Slurm: waiting to be cleaned up" in line, line
        assert p.poll() is None
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=30)


def test_the_attempt_record_keeps_the_variables_the_job_script_names(monkeypatch):
    from launcher.checkpoint.attempts import _scheduler_vars

    for k in list(os.environ):
        if k.startswith(("SLURM_", "LAUNCHER_")):
            monkeypatch.delenv(k)
    monkeypatch.setenv("SLURM_JOB_ID", "5")
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")
    monkeypatch.setenv("LAUNCHER_JOB_ID", "j-1")
    assert _scheduler_vars() == {"LAUNCHER_JOB_ID": "j-1"}
    monkeypatch.setenv("LAUNCHER_SCHEDULER_VARS", "SLURM_JOB_ID SLURM_ARRAY_JOB_ID SLURM_RESTART_COUNT")
    assert _scheduler_vars() == {"SLURM_JOB_ID": "5", "SLURM_RESTART_COUNT": "1", "LAUNCHER_JOB_ID": "j-1"}
