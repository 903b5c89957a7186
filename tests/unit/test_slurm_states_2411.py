"""Status parsing on real Slurm 24.11.5 outputs, captured as the non-root user alice on
the dockerized 24.11 cluster (tests/cluster/docker/capture-probe.sh -> tests/unit/data/)."""

from pathlib import Path

from launcher.core.status import JobState
from launcher_backends.slurm.probe import parse_nodes, parse_partitions, parse_show_config
from launcher_backends.slurm.states import (parse_sacct, parse_scontrol_oneliners, parse_version,
                                            status_from_sacct, status_from_scontrol)

DATA = Path(__file__).parent / "data"


def scontrol(name: str):
    (job,) = parse_scontrol_oneliners((DATA / f"scontrol_2411_{name}.txt").read_text()).values()
    return status_from_scontrol(job)


def test_completed_two_node_job():
    st = scontrol("completed")
    assert st.state is JobState.COMPLETED and st.exit_code == 0 and st.nodes == "node[3-4]"
    assert st.reason == "" and st.restarts == 0 and st.start_time and st.end_time
    assert st.extra["partition"] == "batch"


def test_running_job_has_no_end_time():
    st = scontrol("running")
    assert st.state is JobState.RUNNING and st.nodes == "node4" and st.end_time is None


def test_failed_job_keeps_exit_code_and_reason():
    st = scontrol("failed")
    assert st.state is JobState.FAILED and st.exit_code == 3
    assert st.reason.startswith("NonZeroExitCode: exit 3: "), st.reason  # Slurm's reason, then what 3 means


def test_requeued_then_failed_job_counts_its_restart():
    st = scontrol("requeued_failed")
    assert st.state is JobState.FAILED and st.exit_code == 5 and st.restarts == 1


def test_timed_out_job():
    st = scontrol("timeout")
    assert st.state is JobState.TIMEOUT and st.reason == "TimeLimit" and st.exit_code == 128 + 15


def test_preempted_job_waiting_to_run_again_is_requeued():
    st = scontrol("preempted_requeued")
    assert st.state is JobState.REQUEUED and st.native_state == "PENDING" and st.restarts == 1
    assert st.nodes == "" and st.reason == "BeginTime"


def test_jobcomp_history_has_one_record_per_run():
    hist = parse_sacct((DATA / "sacct_c_2411.txt").read_text())
    # preempted (REQUEUE), then cancelled while pending
    assert [r["State"] for r in hist["24"]] == ["PREEMPTED", "CANCELLED"]
    st = status_from_sacct(hist["24"])
    assert st.state is JobState.CANCELLED and st.restarts == 1
    # `scontrol requeue`: 24.11 records the first run as PENDING (the state it went back to)
    assert [r["State"] for r in hist["22"]] == ["PENDING", "FAILED"]
    assert status_from_sacct(hist["22"]).state is JobState.FAILED
    assert status_from_sacct(hist["20"]).state is JobState.COMPLETED
    assert status_from_sacct(hist["21"]).exit_code == 3
    assert status_from_sacct(hist["23"]).state is JobState.TIMEOUT


def test_probe_facts():
    cfg = parse_show_config((DATA / "show_config_2411.txt").read_text())
    assert parse_version(cfg["SLURM_VERSION"]) == (24, 11, 5)
    assert cfg["TopologyPlugin"] == "topology/block" and cfg["JobCompType"] == "jobcomp/filetxt"
    parts = {p["name"]: p for p in parse_partitions((DATA / "sinfo_partitions_2411.txt").read_text())}
    assert parts["batch"]["default"] and parts["high"]["nodes"] == 4 and parts["batch"]["gres"] == ["gpu:2"]
    nodes = parse_nodes((DATA / "sinfo_nodes_2411.txt").read_text())
    assert [n["name"] for n in nodes] == ["node1", "node2", "node3", "node4"]
    assert all(sorted(n["partitions"]) == ["batch", "high"] and n["cpus"] == 2 for n in nodes)
