"""Status parsing on captured outputs: Slurm 22.05 (real, from the test cluster) and
24.11 (representative lines: same text format, a few more keys)."""

from pathlib import Path

from launcher.core.status import JobState
from launcher_backends.slurm.states import (parse_sacct, parse_scontrol_oneliners, parse_version,
                                            status_from_sacct, status_from_scontrol)

DATA = Path(__file__).parent / "data"

SCONTROL_2411 = (
    "JobId=812 JobName=train UserId=alice(1000) GroupId=alice(1000) MCS_label=N/A Priority=1 Nice=0 "
    "Account=ml QOS=normal JobState=OUT_OF_MEMORY Reason=OutOfMemory Dependency=(null) Requeue=1 Restarts=0 "
    "BatchFlag=1 Reboot=0 ExitCode=0:125 RunTime=00:01:02 TimeLimit=01:00:00 TimeMin=N/A "
    "SubmitTime=2026-11-01T10:00:00 EligibleTime=2026-11-01T10:00:00 AccrueTime=2026-11-01T10:00:00 "
    "StartTime=2026-11-01T10:00:01 EndTime=2026-11-01T10:01:03 Deadline=N/A Partition=gpu "
    "AllocNode:Sid=login1:4242 NodeList=gpu[001-002] BatchHost=gpu001 NumNodes=2 NumCPUs=256 "
    "Comment=launcher:train-1a2b3c:1 StdOut=/scratch/launcher/train-1a2b3c/slurm-812.out Power= "
    "ResvPort=N/A SegmentSize=2\n"
    "JobId=813 JobName=train UserId=alice(1000) JobState=TIMEOUT Reason=TimeLimit Restarts=0 ExitCode=0:15 "
    "StartTime=2026-11-01T10:00:01 EndTime=2026-11-01T11:00:31 Partition=gpu NodeList=gpu003\n")


def test_2205_running_job():
    jobs = parse_scontrol_oneliners((DATA / "scontrol_2205_running.txt").read_text())
    st = status_from_scontrol(jobs["6"])
    assert st.state is JobState.RUNNING and st.nodes == "node1" and st.extra["partition"] == "batch"


def test_2205_requeued_then_failed_job_counts_its_restart():
    jobs = parse_scontrol_oneliners((DATA / "scontrol_2205_requeued_failed.txt").read_text())
    st = status_from_scontrol(jobs["4"])
    assert st.state is JobState.FAILED and st.restarts == 1 and st.exit_code == 138


def test_2411_out_of_memory_and_timeout_keep_their_reason():
    jobs = parse_scontrol_oneliners(SCONTROL_2411)
    oom = status_from_scontrol(jobs["812"])
    assert oom.state is JobState.OUT_OF_MEMORY and oom.reason == "OutOfMemory"
    assert oom.extra["comment"] == "launcher:train-1a2b3c:1" and oom.nodes == "gpu[001-002]"
    assert oom.exit_code == 128 + 125
    to = status_from_scontrol(jobs["813"])
    assert to.state is JobState.TIMEOUT and to.reason == "TimeLimit" and to.end_time is not None


def test_pending_after_a_restart_is_reported_as_requeued():
    line = "JobId=9 JobState=PENDING Reason=BeginTime Restarts=2 ExitCode=0:0 NodeList=(null)"
    st = status_from_scontrol(parse_scontrol_oneliners(line)["9"])
    assert st.state is JobState.REQUEUED and st.restarts == 2 and st.nodes == ""


def test_jobcomp_history_has_one_record_per_run():
    hist = parse_sacct((DATA / "sacct_c_2205.txt").read_text())
    assert [r["State"] for r in hist["4"]] == ["PREEMPTED", "FAILED"]
    st = status_from_sacct(hist["4"])
    assert st.state is JobState.FAILED and st.restarts == 1
    assert status_from_sacct(hist["2"]).state is JobState.COMPLETED


def test_sacct_cancelled_by_user_is_cancelled():
    st = status_from_sacct(parse_sacct("77|CANCELLED by 1000|0:15|n1|2026-01-01T00:00:00|2026-01-01T00:01:00||\n")["77"])
    assert st.state is JobState.CANCELLED and st.native_state == "CANCELLED"


def test_versions():
    assert parse_version("slurm 22.05.8") == (22, 5, 8)
    assert parse_version("slurm-wlm 24.11.1") == (24, 11, 1)
