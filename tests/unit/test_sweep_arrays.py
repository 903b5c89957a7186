"""Pure parts of launching a sweep: element rows, element handles, Slurm's array task records."""

from __future__ import annotations

from launcher.backend.protocols import Handle
from launcher.backend.sections import parse_spec
from launcher.spec.sweep_elements import element_seed
from launcher.sweep.elements import element_job_id, element_rows
from launcher.sweep.arrays import array_handle, element_handle
from launcher_backends.slurm import SlurmBackend
from launcher_backends.slurm.array import task_ids, with_array_tasks
from launcher_backends.slurm.states import parse_sacct, parse_scontrol_oneliners


def _spec(**extra):
    return parse_spec({"name": "s", "run": "true", "checkpoint": {"root": "/ck"},
                       "sweep": {"grid": {"lr": [0.1, 0.2], "b": [1, 2, 3]}, "max_parallel": 2}, **extra}, "s.yaml")


def test_every_element_gets_its_own_row_root_seed_and_params():
    rows = element_rows("sw-1", _spec(), 7, "/base")
    assert [r["job_id"] for r in rows] == [element_job_id("sw-1", i) for i in range(6)] == \
        [f"sw-1-e{i}" for i in range(6)]
    assert [r["ckpt_root"] for r in rows] == [f"/ck/element-{i:04d}" for i in range(6)]
    m = rows[4]["meta"]
    assert m["sweep"] == {"id": "sw-1", "index": 4, "size": 6, "params": {"lr": 0.2, "b": 2}, "seed": 7}
    assert m["seed"] == element_seed(7, 4) and m["spec_base"] == "/base"


def test_the_spec_seed_is_the_sweep_seed():
    from launcher.provenance.seed import choose_seed

    spec = _spec(seed=99)
    rows = element_rows("sw-1", spec, choose_seed(spec, environ={})[0], "/base")
    assert rows[0]["meta"]["sweep"]["seed"] == 99 and rows[0]["meta"]["seed"] == element_seed(99, 0)


def test_an_element_handle_names_its_array_task():
    array = Handle("slurm", "cl", "sw-1", "812", 1, {"job_dir": "/j"})
    h = element_handle(array, "sw-1-e3", 3, SlurmBackend)
    assert (h.job_id, h.native_id, h.extra) == ("sw-1-e3", "812_3", {"job_dir": "/j", "sweep_array": "812"})
    assert array.native_id == "812"
    found = Handle("slurm", "cl", "sw-1", "812_[0-5%2]", 1, {})  # a dedupe lookup's spelling of the array
    assert element_handle(found, "sw-1-e0", 0, SlurmBackend).native_id == "812_0"


def test_array_task_id_forms():
    assert task_ids("3") == [3]
    assert task_ids("4-11%3") == list(range(4, 12))
    assert task_ids("1,3,5-7") == [1, 3, 5, 6, 7]
    assert task_ids("0-10:5") == [0, 5, 10]
    assert task_ids("N/A") == [] and task_ids("") == []


def test_pending_tasks_share_the_array_record_and_started_ones_have_their_own():
    text = ("JobId=100 ArrayJobId=100 ArrayTaskId=2-5%2 JobName=s JobState=PENDING Reason=JobArrayTaskLimit\n"
            "JobId=101 ArrayJobId=100 ArrayTaskId=0 JobName=s JobState=RUNNING Reason=None\n"
            "JobId=102 ArrayJobId=100 ArrayTaskId=1 JobName=s JobState=COMPLETED Reason=None\n"
            "JobId=200 JobName=plain JobState=RUNNING Reason=None\n")
    live = with_array_tasks(parse_scontrol_oneliners(text))
    assert {k: v["JobState"] for k, v in live.items() if "_" in k} == {
        "100_0": "RUNNING", "100_1": "COMPLETED", "100_2": "PENDING", "100_3": "PENDING", "100_4": "PENDING",
        "100_5": "PENDING"}
    assert live["200"]["JobState"] == "RUNNING" and "200_0" not in live


def test_sacct_records_of_array_tasks_are_found_by_their_task_name_too():
    text = ("101|COMPLETED|0:0|n1|2026-01-01T00:00:00|2026-01-01T00:01:00|None||100_0\n"
            "100|PENDING|0:0|None assigned|Unknown|Unknown|JobArrayTaskLimit||100_[3-5%2]\n"
            "300|FAILED|1:0|n2|2026-01-01T00:00:00|2026-01-01T00:01:00|None|\n")  # without JobID: older format
    h = parse_sacct(text)
    assert h["100_0"][0]["State"] == "COMPLETED" and h["101"] is h.get("101")
    assert "100_[3-5%2]" not in h and h["300"][0]["State"] == "FAILED"


def test_one_element_alone_is_an_array_of_its_index_with_the_sweeps_table():
    from launcher.backend.protocols import Facts, JobRef
    from launcher_backends.slurm.array import array_directive, sweep_table

    spec, facts = _spec(), Facts("cl", "slurm", {"max_array_size": 1001})
    assert array_directive(spec, facts) == "--array=0-5%2"
    assert array_directive(spec, facts, (3,)) == "--array=3"
    job = JobRef("sw-1-e3", 2, "/j", seed=7, elements=(3,), sweep_id="sw-1")
    whole = sweep_table(spec, JobRef("sw-1", 1, "/j", seed=7))
    assert sweep_table(spec, job) == whole  # same ids, seeds and roots for every element
    assert "LAUNCHER_SWEEP_ID=sw-1 " in whole.splitlines()[2 + 3]
    assert job.dedupe_token == "launcher:sw-1-e3:2"


def test_an_array_found_by_its_pending_record_is_named_by_the_array_id():
    """A sbatch that timed out after Slurm accepted the array is found by its token as the
    pending record (``30_[0-2%2]``): the launch, the sweep and its elements name the array 30."""
    found = Handle("slurm", "cl", "sw", "30_[0-2%2]", 1, extra={"found_by_token": True})
    array = array_handle(found, SlurmBackend)
    assert array.native_id == "30" and array.extra == found.extra
    assert element_handle(array, "sw-e2", 2, SlurmBackend).native_id == "30_2"
    assert array_handle(Handle("slurm", "cl", "sw", "31", 1), SlurmBackend).native_id == "31"
