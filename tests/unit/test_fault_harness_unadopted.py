"""The fault harness's wait for unadopted tokens (tests/integration/fault_harness.py
``unadopted_rows``): heal goes on running `watch --once` while a SUBMITTING row's dedupe token
is held by a Slurm job the store has not recorded, e.g. sbatch's answer was lost to a slow
controller and watch's lookups still time out (seed 28029, schedule 61). And the ``lost``
wrapper sbatch and the ``$LAUNCHER_FAULT_SBATCH`` override that make that case on purpose."""

from __future__ import annotations

import subprocess
from dataclasses import replace

import pytest

from launcher_backends.slurm.submitting import classify
from tests.integration.fault_harness import draw, parse_squeue, unadopted_rows
from tests.integration.sbatch_wrappers import drawn, install, misbehaved, overridden, parse


def row(job, state="SUBMITTING", attempt=1, natives=(), sweep_id=None):
    return {"job_id": job, "state": state, "attempt": attempt, "natives": list(natives), "sweep_id": sweep_id}


def test_a_submitting_row_whose_token_a_slurm_job_holds_is_unadopted_until_recorded():
    held = [("7", "launcher:f1i61-abc:1", "RUNNING")]
    out = unadopted_rows([row("f1i61-abc")], held)
    assert [(x["job_id"], x["held_by"]) for x in out] == [("f1i61-abc", ["7"])]
    # watch adopted it: the row is PENDING with the id recorded
    assert unadopted_rows([row("f1i61-abc", "PENDING", natives=["7"])], held) == []
    # a job that ended before it was adopted is still to be adopted (watch finds it in squeue -t all)
    assert unadopted_rows([row("f1i61-abc")], [("7", "launcher:f1i61-abc:1", "COMPLETED")])


def test_nothing_to_wait_for_without_a_slurm_job_holding_the_token():
    assert unadopted_rows([row("a-1")], []) == []  # nothing found: settled after the launcher's quiet period
    assert unadopted_rows([row("a-1")], [("7", "launcher:b-2:1", "RUNNING")]) == []  # another job's token
    assert unadopted_rows([row("a-1", "COMPLETED", natives=["7"])], [("7", "launcher:a-1:1", "COMPLETED")]) == []


def test_the_token_names_the_attempt_the_row_submits():
    # fail_first: attempt 1's job is recorded, the row is SUBMITTING attempt 2
    jobs = [("7", "launcher:a-1:1", "FAILED")]
    assert unadopted_rows([row("a-1", attempt=2, natives=["7"])], jobs) == []
    jobs.append(("9", "launcher:a-1:2", "PENDING"))
    assert [x["held_by"] for x in unadopted_rows([row("a-1", attempt=2, natives=["7"])], jobs)] == [["9"]]
    assert unadopted_rows([row("a-1", attempt=None)], jobs)  # attempt unknown: any of its tokens


def test_a_sweep_array_is_adopted_when_any_element_recorded_it():
    array = [("5_0", "launcher:sw-1:1", "RUNNING"), ("5_1", "launcher:sw-1:1", "RUNNING"),
             ("5_[2%2]", "launcher:sw-1:1", "PENDING")]
    rows = [row(f"sw-1-e{i}", sweep_id="sw-1") for i in range(3)]
    assert [x["job_id"] for x in unadopted_rows(rows, array)] == ["sw-1-e0", "sw-1-e1", "sw-1-e2"]
    rows[0] = row("sw-1-e0", "RUNNING", natives=["5_0"], sweep_id="sw-1")
    rows[1] = row("sw-1-e1", "RUNNING", natives=["5_1"], sweep_id="sw-1")
    assert unadopted_rows(rows, array) == []  # e2 waits in the same (recorded) array
    # without a sweep_id column, the element's id names its sweep
    assert unadopted_rows([row("sw-1-e0")], array[:1])


def test_squeue_lines_are_read_for_the_schedules_own_tokens():
    text = "7|launcher:f1i61-abc:1|RUNNING\n8|launcher:f1i62-abc:1|RUNNING\n9|(null)|PENDING\n\n"
    assert parse_squeue(text, "f1i61") == [("7", "launcher:f1i61-abc:1", "RUNNING")]


def test_the_lost_wrapper_runs_the_real_sbatch_and_prints_only_a_time_out(tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    took = tmp_path / "took"
    (real / "sbatch").write_text(f"#!/bin/sh\necho \"$@\" >> {took}\necho 4242\n")
    (real / "sbatch").chmod(0o755)
    env = install(tmp_path / "w", "lost", {"PATH": f"{real}:/usr/bin:/bin"}, "once")
    p = subprocess.run(["sbatch", "--parsable", "x.sh"], env=env, capture_output=True, text=True, timeout=30)
    assert took.read_text() == "--parsable x.sh\n"  # Slurm took it
    assert p.returncode == 1 and p.stdout == "" and "Socket timed out on send/recv" in p.stderr
    assert misbehaved(tmp_path / "w")
    assert classify(p.returncode, p.stdout, p.stderr).kind == "unknown"  # never "rejected"
    again = subprocess.run(["sbatch", "--parsable", "y.sh"], env=env, capture_output=True, text=True, timeout=30)
    assert again.returncode == 0 and again.stdout == "4242\n"  # once: the next sbatch answers


def test_launcher_fault_sbatch_overrides_the_drawn_wrapper_on_slurm_only(monkeypatch):
    s = draw(28029, 61, backends=("slurm",))
    assert s.sbatch is None and drawn(s).sbatch is None  # schedule 61 of seed 28029 draws none
    monkeypatch.setenv("LAUNCHER_FAULT_SBATCH", "lost:once")
    assert drawn(s).sbatch == "lost:once" and overridden(s).sbatch == "lost:once"
    assert "sbatch wrapper lost:once" in drawn(s).describe()
    assert replace(drawn(s), sbatch=None) == s  # nothing else of the schedule changes
    local = draw(28029, 61)  # backends=("local",): a local schedule gets no wrapper
    assert local.backend == "local" and overridden(local) == local
    monkeypatch.setenv("LAUNCHER_FAULT_SBATCH", "none")
    assert overridden(replace(s, sbatch="banner:once")).sbatch is None
    monkeypatch.setenv("LAUNCHER_FAULT_SBATCH", "lost")
    with pytest.raises(ValueError):
        overridden(s)
    assert parse("signal:every:KILL") == ("signal", "every", "KILL") and parse("lost:once") == ("lost", "once", "")


def test_a_submitting_row_whose_start_was_claimed_is_not_quiet_until_adopted(tmp_path):
    """The local counterpart of ``unadopted``: a launch interrupted while recording leaves the row
    SUBMITTING after its program started (the job folder's start claim); heal must not read the
    invariants before a watch adopted it (seed 7212, schedule 121, once)."""
    from types import SimpleNamespace

    from launcher.jobside.startclaim import claim_start
    from launcher.state.store import StateStore
    from tests.integration.fault_harness import quiet, started_unrecorded

    home = tmp_path / "home"
    store = StateStore(home)
    try:
        store.begin_job("j-1", "j", "local", "local", None, "name: j\n")
    finally:
        store.close()
    r = SimpleNamespace(home=home, url="", cluster=None,
                        rows=lambda: [{"job_id": "j-1", "state": "SUBMITTING"}])
    assert started_unrecorded(r) == [] and quiet(r)  # nothing ran: settled after the launcher's quiet period
    claim_start(str(home / "jobs" / "j-1"), 1, "4242")
    assert started_unrecorded(r) == ["j-1"] and not quiet(r)
