"""Early stopping and elements that are pending in the Slurm array (real test cluster).

Successive halving judges an element at a rung only once it has reported a step at or past
the rung: an element still waiting for a slot of max_parallel (never started) has no value,
so it is NOT judged, and it is never stopped for what others reported; it starts when a slot
frees (a stopped element's, here) and is judged when it reaches the rung, against everyone
judged there before. The one way a pending element does get stopped is a stop decided on
what it reported before it went back to pending (requeued, here held): that stop goes
through the backend (`scancel <array>_<index>` of the pending task), closes it STOPPED, and
it never starts again; the judgement and the stop are each recorded once."""

from __future__ import annotations

import textwrap

import pytest

from tests.fixtures.polling import poll

from .test_sweep_early_stop_slurm import _reached, launch_gated_sweep
from .test_sweep_status_one_call import _wrappers

pytestmark = pytest.mark.slurm

# element i reports loss L[i] at step 10 (element 2 only once gate go-2 is open), then waits for go-end
PROGRAM = textwrap.dedent("""
    import os, sys, time
    sys.path.insert(0, os.environ["LAUNCHER_JOB_PYZ"])
    from launcher import jobside
    L = [0.1, 0.9, 0.5]
    i, gates = int(os.environ["LAUNCHER_SWEEP_INDEX"]), sys.argv[1]
    def wait(name):
        while not os.path.exists(os.path.join(gates, name)):
            time.sleep(0.2)
    with open(os.path.join(gates, "starts.txt"), "a") as f:
        f.write("start %d\\n" % i)
    if i == 2:
        wait("go-2")
    jobside.report(10, loss=L[i])
    wait("go-end")
    print("FINISHED", i, flush=True)
""")


def _setup(cluster, tmp_path, size: int, max_parallel: int):
    return launch_gated_sweep(cluster, tmp_path, "esp", PROGRAM, {
        "points": [{"x": i} for i in range(size)], "max_parallel": max_parallel,
        "early_stop": {"metric": "loss", "mode": "min", "keep": 0.5, "rungs": [10]}})


def _starts(tmp) -> list[str]:
    f = tmp / "starts.txt"
    return sorted(f.read_text().split("\n")[:-1]) if f.exists() else []


def _events(cli, job: str, kind: str) -> list:
    return [e for e in cli.status(job)["events"] if e["kind"] == kind]


def _task_states(cluster) -> dict:
    out = cluster.run("squeue", "-h", "-r", "-t", "all", "-o", "%i %T", check=False).stdout
    return dict(line.split() for line in out.splitlines() if line.strip())


def test_a_pending_element_is_not_judged_and_is_judged_when_it_reaches_the_rung(clean_queue, tmp_path):
    cluster = clean_queue
    cli, tmp, sweep_id, array = _setup(cluster, tmp_path, 3, 2)
    e = [f"{sweep_id}-e{i}" for i in range(3)]
    poll("elements 0 and 1 at rung 10", lambda: _reached(tmp, 10, (0, 1)), timeout=240, interval=1)
    assert _starts(tmp) == ["start 0", "start 1"]  # element 2 waits for a slot: never started
    assert cli.status(e[2])["state"] == "PENDING"

    out = cli.run("watch", "--once").stdout
    assert f"{e[1]}: stopped (rung 10: loss 0.9 ranks 2 of 2" in out, out
    assert _events(cli, e[2], "early_stop") == [] and "rung" not in (cli.status(e[2])["reason"] or "")

    # the stopped element's slot starts element 2; at the rung it is ranked with 0 and 1
    poll("element 2 started", lambda: "start 2" in _starts(tmp), timeout=120, interval=1)
    (tmp / "go-2").touch()
    poll("element 2 at rung 10", lambda: _reached(tmp, 10, (2,)), timeout=120, interval=1)
    out = cli.run("watch", "--once").stdout
    (j,) = _events(cli, e[2], "early_stop")
    assert not j["stop"] and j["rank"] == 2 and j["population"] == 3 and j["kept"] == 2, j
    assert cli.status(e[2])["state"] == "RUNNING", out

    (tmp / "go-end").touch()
    assert "no open jobs left" in cli.run("watch", "--exit-when-idle", "--interval", "1", timeout=300).stdout
    s = cli.status(sweep_id)
    assert [el["state"] for el in s["elements"]] == ["COMPLETED", "STOPPED", "COMPLETED"], s
    assert [len(_events(cli, x, "early_stop")) for x in e] == [1, 1, 1]
    assert _starts(tmp) == ["start 0", "start 1", "start 2"]  # each started once


def test_a_pending_element_with_a_stop_is_cancelled_through_the_backend_and_never_starts_again(clean_queue,
                                                                                                 tmp_path):
    cluster = clean_queue
    cli, tmp, sweep_id, array = _setup(cluster, tmp_path, 2, 2)
    e = [f"{sweep_id}-e{i}" for i in range(2)]
    poll("both elements at rung 10", lambda: _reached(tmp, 10, (0, 1)), timeout=240, interval=1)
    cluster.run("scontrol", "requeuehold", f"{array}_1")  # element 1 goes back to pending, held
    poll("element 1 pending", lambda: _task_states(cluster).get(f"{array}_1") == "PENDING", timeout=60, interval=1,
         detail=lambda: str(_task_states(cluster)))

    log = tmp / "slurm-calls.log"
    out = cli.run("watch", "--once", env={"PATH": _wrappers(cluster, tmp / "wrappers", log)}).stdout
    assert f"{e[1]}: stopped (rung 10: loss 0.9 ranks 2 of 2" in out, out
    calls = log.read_text().splitlines()
    assert f"scancel {array}_1" in calls, calls  # through the backend's cancel of the pending task
    st = cli.status(e[1])
    assert st["state"] == "STOPPED" and not st["open"], st
    # the requeue is a restart in place (attempt 2, same task): it is what was cancelled; nothing new submitted
    assert [(a["attempt"], a["native_id"]) for a in st["attempts"]] == [(1, f"{array}_1"), (2, f"{array}_1")], st
    assert st["attempts"][-1]["state"] == "CANCELLED", st
    poll("the pending task left the queue", lambda: _task_states(cluster).get(f"{array}_1") in (None, "CANCELLED"),
         timeout=60, interval=1, detail=lambda: str(_task_states(cluster)))

    cli.run("watch", "--once")  # a further pass records nothing more
    assert len(_events(cli, e[1], "early_stop")) == 1 and len(_events(cli, e[1], "early_stopped")) == 1
    assert _starts(tmp) == ["start 0", "start 1"]  # element 1 never started again
    assert cli.status(e[0])["state"] == "RUNNING"
    (tmp / "go-end").touch()
    assert "no open jobs left" in cli.run("watch", "--exit-when-idle", "--interval", "1", timeout=300).stdout
    assert cli.status(sweep_id)["counts"] == {"COMPLETED": 1, "STOPPED": 1}
    assert _starts(tmp) == ["start 0", "start 1"]
