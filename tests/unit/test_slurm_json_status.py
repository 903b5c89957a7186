"""The 23.02+ JSON status path on real Slurm 24.11.5 output, against the text path.

tests/unit/data/json_2411/ was captured as alice on the dockerized 24.11 cluster by
tests/cluster/docker/capture-json.sh: ``live`` and ``done`` each hold ``scontrol -o show job``
(.txt) and ``scontrol --json show job`` (.json) taken back to back; ``probe.json`` is the
probe's answer. Jobs 1-4 were submitted by hand before the script (1: ``exit 3``; 2: an array
``0-2%1`` whose task i exits i). The script's jobs: 5 timeout, 6 completed (2 nodes), 7 failed
(exit 3), 8 array 0-1 (task i exits i), 9 requeued then failed (exit 5), 11 cancelled, 12 node
failure (--no-requeue, node killed), 13 preempted and requeued, 14 preempted (--no-requeue),
15 held, 16 array 0-3%1 (one task runs, three wait).
The 23.02 and 23.11 shapes are made from the 24.11 records as Slurm's data parsers v0.0.39
and v0.0.40 print them (src/plugins/data_parser/v0.0.39/parsers.c: job_state a string,
exit_code the raw wait status, times plain integers)."""

from __future__ import annotations

import copy
import functools
import json
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from launcher.core.status import JobState
from launcher_backends.slurm import json_status as js
from launcher_backends.slurm.array import with_array_tasks
from launcher_backends.slurm.states import parse_scontrol_oneliners, status_from_scontrol
from launcher_backends.slurm.status_io import statuses

DATA = Path(__file__).parent / "data" / "json_2411"


@pytest.fixture(autouse=True)
def utc(monkeypatch):
    """The cluster printed its local time (UTC): the text path reads it in this process's zone."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@functools.lru_cache(maxsize=None)
def _read(name: str) -> str:
    return (DATA / name).read_text()


def snapshot(name: str) -> tuple[dict, dict]:
    text = with_array_tasks(parse_scontrol_oneliners(_read(f"{name}.txt")))
    return text, js.scontrol_jobs(json.loads(_read(f"{name}.json")))


def jstatus(snap: str, job: str):
    return js.status_from_job(snapshot(snap)[1][job])


@pytest.mark.parametrize("snap", ["live", "done"])
def test_every_job_reads_the_same_from_json_as_from_text(snap):
    text, jobs = snapshot(snap)
    assert sorted(jobs) == sorted(text)  # array tasks too: 16_1..16_3 share the array's pending record
    for jid in text:
        assert js.status_from_job(jobs[jid]) == status_from_scontrol(text[jid]), jid


def test_finished_states_exit_codes_and_reasons():
    st = jstatus("done", "6")
    assert (st.state, st.exit_code, st.nodes, st.reason) == (JobState.COMPLETED, 0, "node[3-4]", "")
    assert st.start_time and st.end_time and st.extra["partition"] == "batch" and st.extra["requeue"] == "1"
    st = jstatus("done", "7")
    assert st.state is JobState.FAILED and st.exit_code == 3 and st.reason.startswith("NonZeroExitCode: exit 3")
    st = jstatus("done", "5")
    assert (st.state, st.reason, st.exit_code) == (JobState.TIMEOUT, "TimeLimit", 128 + 15)
    st = jstatus("done", "11")
    assert (st.state, st.exit_code) == (JobState.CANCELLED, 128 + 15)
    st = jstatus("done", "12")
    assert (st.state, st.reason, st.nodes) == (JobState.NODE_FAIL, "NodeDown", "node4")
    st = jstatus("done", "9")  # `scontrol requeue`, then its second run exits 5
    assert (st.state, st.exit_code, st.restarts) == (JobState.FAILED, 5, 1)


def test_preempted_jobs():
    st = jstatus("live", "13")  # requeued by preemption, waiting to run again
    assert (st.state, st.native_state, st.reason, st.restarts, st.nodes) == (
        JobState.REQUEUED, "PENDING", "BeginTime", 1, "")
    assert st.start_time is None and st.end_time is None
    st = jstatus("done", "13")
    assert (st.state, st.restarts) == (JobState.RUNNING, 1)
    st = jstatus("done", "14")  # --no-requeue: preemption ends it
    assert (st.state, st.native_state) == (JobState.PREEMPTED, "PREEMPTED")


def test_pending_reasons_and_array_elements():
    assert (jstatus("live", "15").state, jstatus("live", "15").reason) == (JobState.PENDING, "JobHeldUser")
    _, jobs = snapshot("live")
    assert jobs["16_0"]["job_id"] == 17 and js.status_from_job(jobs["16_0"]).state is JobState.RUNNING
    assert jobs["16_2"] is jobs["16"]  # pending tasks: the array's one record
    assert js.status_from_job(jobs["16_3"]).reason == "JobArrayTaskLimit"
    assert [js.status_from_job(jobs[f"8_{i}"]).exit_code for i in (0, 1)] == [0, 1]


def as_2302(job: dict) -> dict:
    """A 24.11 record in data_parser v0.0.39's shape (Slurm 23.02)."""
    j = copy.deepcopy(job)
    j["job_state"] = next((f for f in js.SHOWN_FLAGS if f in job["job_state"]), job["job_state"][0])
    ec = job["exit_code"]
    sig = js.number(ec["signal"]["id"]) or 0
    raw = sig if sig else (js.number(ec["return_code"]) or 0) << 8
    j["exit_code"] = {"set": True, "infinite": False, "number": raw}
    for k in ("start_time", "end_time", "submit_time"):
        j[k] = js.number(job[k]) or 0
    return j


@pytest.mark.parametrize("snap", ["live", "done"])
def test_the_2302_shape_reads_the_same(snap):
    text, jobs = snapshot(snap)
    for jid in text:
        assert js.status_from_job(as_2302(jobs[jid])) == status_from_scontrol(text[jid]), jid


def test_state_flags_read_as_scontrol_prints_them():
    assert js.state_name(["COMPLETED", "COMPLETING"]) == "COMPLETING"
    assert js.state_name(["PENDING", "REQUEUED"]) == "REQUEUED"
    assert js.state_name(["RUNNING", "POWER_UP_NODE"]) == "RUNNING"  # not a flag JobState= shows
    assert js.state_name("CANCELLED by 0") == "CANCELLED"
    assert js.state_name([]) == ""
    assert js.wait_status_code(9) == 128 + 9 and js.wait_status_code(3 << 8) == 3
    assert js.exit_code({"status": ["PENDING"], "return_code": {"set": False, "infinite": False, "number": 0},
                         "signal": {"id": {"set": False, "infinite": False, "number": 0}, "name": ""}}) is None
    assert js.number({"set": True, "infinite": True, "number": 0}) is None and js.number(True) is None


def test_reason_prefers_the_state_description_as_scontrol_prints_it():
    job = {"state_reason": "NonZeroExitCode", "state_description": "failed to run\tprolog"}
    assert js.reason(job) == "failed_to_run_prolog"


def test_probe_reads_the_data_parser():
    assert js.probed_parser(0, (DATA / "probe.json").read_text()) == "data_parser/v0.0.42"
    # 22.05: no --json; a login banner on stdout is not JSON either
    assert js.probed_parser(1, "") == ""
    assert js.probed_parser(0, "Welcome to the cluster\n{}") == ""
    assert js.probed_parser(0, '{"jobs": [], "meta": {}}') == "data_parser/unknown"


# ---- sacct --json: slurmdbd's accounting (the test clusters have none: records as v0.0.42 prints them)
def sacct_record(job_id: int, state: list, rc: int, restarts: int = 0, array=(0, None)) -> dict:
    nv = lambda n: {"set": n is not None, "infinite": False, "number": n or 0}  # noqa: E731
    return {"job_id": job_id, "array": {"job_id": array[0], "task_id": nv(array[1]), "task": ""},
            "state": {"current": state, "reason": "None"}, "nodes": "node2", "restart_cnt": restarts,
            "exit_code": {"status": ["ERROR" if rc else "SUCCESS"], "return_code": nv(rc),
                          "signal": {"id": nv(None), "name": ""}},
            "time": {"start": 1796158921, "end": 1796158930, "submission": 1796158920}}


def test_sacct_json_records():
    past = js.sacct_jobs({"jobs": [sacct_record(40, ["FAILED"], 4, restarts=2),
                                   sacct_record(41, ["COMPLETED"], 0, array=(40, 1))]})
    st = js.status_from_sacct_json(past["40"])
    assert (st.state, st.exit_code, st.restarts, st.nodes) == (JobState.FAILED, 4, 2, "node2")
    assert st.reason.startswith("exit 4") and st.end_time == 1796158930.0
    assert js.status_from_sacct_json(past["40_1"]).state is JobState.COMPLETED


# ---- the status path: JSON where the probe found it, text otherwise or when JSON fails
class Cluster:
    """Answers the status commands from the captured outputs, and records them."""

    where = "the test cluster"

    def __init__(self, snap: str, json_ok: bool = True, sacct: str = "disabled"):
        self.snap, self.json_ok, self.sacct, self.argvs = snap, json_ok, sacct, []

    def run(self, argv, check=False, **kw):
        self.argvs.append(list(argv))
        out = lambda rc, stdout="", stderr="": SimpleNamespace(returncode=rc, stdout=stdout, stderr=stderr)  # noqa
        if argv[:len(js.LIVE_ARGV)] == js.LIVE_ARGV:  # + one id (the snapshot has more: the parser picks)
            return out(0, _read(f"{self.snap}.json")) if self.json_ok else out(0, "banner\n")
        if argv[:2] == ["scontrol", "-o"]:
            return out(0, _read(f"{self.snap}.txt"))
        if argv[:2] == ["sacct", "-c"]:
            return out(0, "99|COMPLETED|0:0|node1|2026-12-01T21:02:01|2026-12-01T21:02:02|||99\n")
        if self.sacct == "disabled":
            return out(1, "", "Slurm accounting storage is disabled\n")
        return out(0, json.dumps({"jobs": [sacct_record(99, ["TIMEOUT"], 0)]}))


def test_json_path_for_one_job_is_one_command_and_matches_the_text_path():
    ids = ["5", "6", "7", "9", "11", "12", "14", "16_2"]
    text = statuses(Cluster("done").run, "test", ids, "")
    for i in ids:
        c = Cluster("done")
        got = statuses(c.run, "test", [i], "data_parser/v0.0.42")
        assert c.argvs == [js.LIVE_ARGV + [i]]
        assert got[i].extra.pop("source") == "scontrol --json" and text[i].extra.pop("source") == "scontrol -o"
        assert got[i] == text[i], i


def test_a_batch_reads_text_in_one_command_even_where_json_works():
    """scontrol show job takes one id: a batch reads every job, and ~8x more bytes as JSON."""
    ids = ["5", "6", "7", "16_2"]
    c = Cluster("done")
    got = statuses(c.run, "test", ids, "data_parser/v0.0.42")
    assert c.argvs == [["scontrol", "-o", "show", "job"]]
    assert {got[i].extra["source"] for i in ids} == {"scontrol -o"}


def test_unreadable_json_falls_back_to_text():
    c = Cluster("done", json_ok=False)
    got = statuses(c.run, "test", ["7"], "data_parser/v0.0.42")
    assert got["7"].extra["source"] == "scontrol -o" and got["7"].exit_code == 3
    assert c.argvs == [js.LIVE_ARGV + ["7"], ["scontrol", "-o", "show", "job"]]


def test_finished_jobs_past_min_job_age():
    c = Cluster("done")  # accounting disabled: straight to the jobcomp records, which ignore --json
    got = statuses(c.run, "test", ["99"], "data_parser/v0.0.42")
    assert got["99"].state is JobState.COMPLETED and got["99"].extra["source"] == "sacct -c"
    assert [a[:2] for a in c.argvs] == [["scontrol", "--json"], ["sacct", "--json"], ["sacct", "-c"]]
    c = Cluster("done", sacct="slurmdbd")
    got = statuses(c.run, "test", ["99", "1234"], "data_parser/v0.0.42")
    assert got["99"].state is JobState.TIMEOUT and got["99"].extra["source"] == "sacct --json"
    assert got["1234"].state is JobState.UNKNOWN
    c = Cluster("done")  # 22.05: text only
    assert statuses(c.run, "test", ["99"], "")["99"].extra["source"] == "sacct -c"
    assert [a[:2] for a in c.argvs] == [["scontrol", "-o"], ["sacct", "-n"], ["sacct", "-c"]]


def test_the_backend_takes_the_fact_from_the_facts_cache_and_never_probes(tmp_path):
    from launcher.backend.config import Target
    from launcher_backends.slurm import SlurmBackend
    from launcher_backends.slurm.options import SlurmOptions
    from launcher.backend.protocols import Handle

    c = Cluster("done")
    b = SlurmBackend(Target("cl", "slurm", SlurmOptions()), app=SimpleNamespace(home=str(tmp_path)), runner=c)
    assert b.status([Handle("slurm", "cl", "j", "7")])[0].extra["source"] == "scontrol -o"  # no facts yet
    (tmp_path / "facts").mkdir()
    (tmp_path / "facts" / "cl.json").write_text(json.dumps(
        {"probed_at": 0, "data": {"json_status": "data_parser/v0.0.42"}}))  # stale: still good for this
    st = b.status([Handle("slurm", "cl", "j", "7")])[0]
    assert st.extra["source"] == "scontrol --json" and st.exit_code == 3
    assert c.argvs == [["scontrol", "-o", "show", "job"], js.LIVE_ARGV + ["7"]]


def test_the_probe_asks_only_a_slurm_that_has_json():
    from launcher_backends.slurm.probe import json_status_parser

    class Runner:
        def __init__(self, rc, out, err=""):
            self.answer, self.argvs = SimpleNamespace(returncode=rc, stdout=out, stderr=err), []

        def run(self, argv, **kw):
            self.argvs.append(argv)
            return self.answer

    r = Runner(0, _read("probe.json"))
    assert json_status_parser(r, (24, 11, 5), 10) == "data_parser/v0.0.42" and r.argvs == [js.PROBE_ARGV]
    r = Runner(1, "", "scontrol: unrecognized option '--json'\n")  # what 22.05.8 answers
    assert json_status_parser(r, (22, 5, 8), 10) == "" and r.argvs == []  # not even asked
    assert json_status_parser(r, (23, 2, 0), 10) == "" and r.argvs == [js.PROBE_ARGV]
