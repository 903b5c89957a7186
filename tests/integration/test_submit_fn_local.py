"""``Launcher.submit`` and ``Launcher.map`` on the local target, end to end (real processes, the
real store; the watch is the real `launcher watch --once`): a value comes back, an exception is
raised again with the job's traceback, a cancelled or killed job says it has no result, a map
is one sweep, and a function that checkpoints through launcher.jobside is killed, resubmitted
by the watch and resumes from its last committed step."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

import cloudpickle
import pytest

from launcher.api import Launcher
from launcher.api.functions import FunctionJob, NoResult, NotPicklable, RemoteTraceback
from tests.fixtures.polling import poll

from . import submit_fns
from .launcher_cli import LauncherCLI, committed_steps

cloudpickle.register_pickle_by_value(submit_fns)  # the job need not import the tests package


@pytest.fixture
def cli(tmp_path) -> LauncherCLI:
    return LauncherCLI(tmp_path)


@pytest.fixture
def lx(cli):
    with Launcher(config=cli.config, home=cli.home) as lx:
        yield lx


def test_a_submitted_function_returns_its_value(lx, cli):
    job = lx.submit(submit_fns.add, 2, b=40)
    assert isinstance(job, FunctionJob)
    assert job.result(timeout=120) == 42
    assert job.done() and job.exception() is None
    poll("the job COMPLETED", lambda: cli.status(job.job_id)["state"] == "COMPLETED", timeout=60,
         detail=lambda: str(cli.status(job.job_id)))  # (the result is in as the function returns)
    assert (Path(job.root) / ".launcher" / "call" / "result.pkl").is_file()


def test_an_exception_is_raised_again_with_the_jobs_traceback(lx):
    job = lx.submit(submit_fns.boom, 7)
    with pytest.raises(submit_fns.Refused, match="refused 7") as got:
        job.result(timeout=120)
    cause = got.value.__cause__
    assert isinstance(cause, RemoteTraceback)
    assert "inner_helper_that_raises" in cause.tb and "Refused: refused 7" in cause.tb
    assert any(job.job_id in n for n in got.value.__notes__)
    assert isinstance(job.exception(), submit_fns.Refused)


def test_what_cannot_be_pickled_is_named_before_anything_is_launched(lx):
    lock = threading.Lock()

    def holds_a_lock():
        return lock

    with pytest.raises(NotPicklable, match="function .*holds_a_lock cannot be pickled"):
        lx.submit(holds_a_lock)
    with pytest.raises(NotPicklable, match=r"argument 2 of add \(lock\) cannot be pickled"):
        lx.submit(submit_fns.add, 1, lock)
    assert lx.jobs(all=True) == []


def test_a_cancelled_call_says_it_ended_without_a_result(lx):
    job = lx.submit(submit_fns.sleep_then, 120, "never")
    poll("the job running", lambda: lx.status(job.job_id).job.state == "RUNNING", timeout=60)
    assert not job.done()
    job.cancel()
    with pytest.raises(NoResult, match=f"function job {job.job_id} ended without a result: state CANCELLED"):
        job.result(timeout=60)


def test_map_runs_one_element_per_item_as_one_sweep(lx):
    jobs = lx.map(submit_fns.square, range(5))
    assert len(jobs) == 5
    sweep = jobs[0].sweep_id
    assert lx.is_sweep(sweep) and all(j.sweep_id == sweep for j in jobs)
    assert [j.job_id for j in jobs] == [f"{sweep}-e{i}" for i in range(5)]
    results = [j.result(timeout=180) for j in jobs]
    assert [(r["x"], r["square"]) for r in results] == [(i, i * i) for i in range(5)]
    assert len({r["pid"] for r in results}) == 5  # one process per item
    # a result is in as the function returns; the processes end a moment later
    poll("every element COMPLETED", lambda: lx.sweep(sweep).counts.get("COMPLETED") == 5, timeout=60,
         detail=lambda: str(lx.sweep(sweep).counts))


def test_a_killed_function_that_checkpoints_is_resumed_by_the_watch(lx, cli, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    job = lx.submit(submit_fns.count_to, 40, str(out), 0.25)
    poll("three committed steps", lambda: len(committed_steps(cli, job.root)) >= 3, timeout=120)
    pid = int((out / "pid-1").read_text())
    os.kill(pid, signal.SIGKILL)
    poll("the killed attempt seen as over", job.done, timeout=60)
    with pytest.raises(NoResult, match="no `launcher watch` is running"):
        job.result(timeout=0)
    resumed_from = max(committed_steps(cli, job.root))
    cli.run("watch", "--once")
    got = job.result(timeout=180)
    assert got["attempt"] >= 2 and got["last"] == 39
    assert got["first"] == resumed_from + 1 >= 3  # resumed after its last committed step, not from 0
    assert (out / "pid-1").read_text() != (out / f"pid-{got['attempt']}").read_text()
