"""``Launcher.submit`` and ``Launcher.map`` on the real Slurm test cluster (slurm tier): the
payload and the result travel through the checkpoint root (the default one under
$LAUNCHER_HOME: the cluster's nodes share this machine's files), a value comes back, an
exception is raised again with the job's traceback, and a map of 5 items is ONE job array."""

from __future__ import annotations

import json

import cloudpickle
import pytest

from launcher.api import Launcher
from launcher.api.functions import NoResult, RemoteTraceback
from tests.fixtures.polling import poll

from . import submit_fns

pytestmark = pytest.mark.slurm

cloudpickle.register_pickle_by_value(submit_fns)


@pytest.fixture
def lx(cli, monkeypatch):
    for k, v in cli.env.items():  # the cluster's environment, as the `launcher` command gets it
        monkeypatch.setenv(k, v)
    with Launcher(config=cli.config, home=cli.home) as lx:
        yield lx


def test_a_function_runs_on_slurm_and_returns_its_value(lx):
    job = lx.submit(submit_fns.add, 20, 22, target="testcl", resources={"time_limit": "10m"})
    assert job.result(timeout=300) == 42
    assert lx.status(job.job_id).job.backend == "slurm"


def test_an_exception_on_slurm_is_raised_again_with_its_traceback(lx):
    job = lx.submit(submit_fns.boom, 3, target="testcl")
    with pytest.raises(submit_fns.Refused, match="refused 3") as got:
        job.result(timeout=300)
    assert isinstance(got.value.__cause__, RemoteTraceback)
    assert "inner_helper_that_raises" in got.value.__cause__.tb


def test_a_map_on_slurm_is_one_job_array(lx):
    jobs = lx.map(submit_fns.square, range(5), target="testcl")
    assert [j.result(timeout=300)["square"] for j in jobs] == [i * i for i in range(5)]
    natives = [json.loads(lx.status(j.job_id).job.handle)["native_id"] for j in jobs]
    arrays = {n.split("_")[0] for n in natives}
    assert len(arrays) == 1, natives  # one sbatch --array for the five items
    assert sorted(n.split("_")[1] for n in natives) == [str(i) for i in range(5)]


def test_a_cancelled_call_on_slurm_has_no_result(lx):
    job = lx.submit(submit_fns.sleep_then, 300, "never", target="testcl")
    poll("the job running", lambda: lx.status(job.job_id).job.state == "RUNNING", timeout=120)
    job.cancel()
    with pytest.raises(NoResult, match="CANCELLED"):
        job.result(timeout=120)
