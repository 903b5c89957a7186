"""A requeued run's cause, from what a non-root user can read without accounting
(backends/slurm/states.requeued_run). The texts are what alice saw on the dockerized
22.05 and 24.11 clusters (tests/cluster/docker) after `docker kill` of the job's node and
after a preemption by the `high` partition."""

from backends.slurm.states import parse_scontrol_oneliners, requeued_run

# 24.11, alice: `scontrol -o show job 1` after node3 was killed (requeued, running again on node4)
JOB = ("JobId=1 JobName=wrap UserId=alice(2001) GroupId=alice(2001) MCS_label=N/A Priority=1 Nice=0 "
       "Account=(null) QOS=(null) JobState=RUNNING Reason=None Dependency=(null) Requeue=1 Restarts=1 BatchFlag=1 "
       "Reboot=0 ExitCode=0:0 RunTime=00:00:02 TimeLimit=UNLIMITED TimeMin=N/A SubmitTime=2026-12-01T17:50:53 "
       "EligibleTime=2026-12-01T17:50:59 AccrueTime=2026-12-01T17:50:59 StartTime=2026-12-01T17:50:59 "
       "EndTime=Unknown Deadline=N/A PreemptEligibleTime=2026-12-01T17:50:59 PreemptTime=None NodeList=node4")
# 24.11, alice: `sinfo -R -N -h -o '%H|%N|%E'`
DOWN = "2026-12-01T17:50:53|node3|Not responding\n"
# 24.11, alice's own job log after a preemption (slurmstepd writes it to the job's stderr)
PREEMPTED_LOG = ("run\nslurmstepd-node1: error: *** JOB 1 ON node1 CANCELLED AT 2026-12-01T17:50:53 "
                 "DUE TO PREEMPTION ***\nrun 1\n")


def job():
    return parse_scontrol_oneliners(JOB)["1"]


def test_the_node_slurm_set_down_at_the_requeue_is_a_node_failure():
    assert requeued_run(job(), DOWN) == {"state": "NODE_FAIL", "nodes": "node3"}


def test_a_node_down_at_another_time_explains_nothing():
    assert requeued_run(job(), "2026-12-01T17:40:00|node2|Not responding\n")["state"] == "REQUEUED"
    assert requeued_run(job(), "") == {"state": "REQUEUED", "nodes": ""}


def test_slurmstepds_preemption_line_in_the_job_log_is_a_preemption():
    assert requeued_run(job(), "", PREEMPTED_LOG) == {"state": "PREEMPTED", "nodes": "node1"}


def test_an_older_preemption_in_the_log_does_not_explain_this_requeue():
    old = PREEMPTED_LOG.replace("17:50:53", "17:30:00")
    assert requeued_run(job(), DOWN, old) == {"state": "NODE_FAIL", "nodes": "node3"}


def test_noise_and_a_job_without_a_submit_time_are_requeued():
    assert requeued_run({}, DOWN)["state"] == "REQUEUED"
    assert requeued_run(job(), "garbage\n|\nUnknown|node1|x\n", "*** JOB x ***")["state"] == "REQUEUED"


# 24.11, `docker kill` of node3: slurmctld marked it "Not responding" at 18:12:02 and only
# requeued the job (SubmitTime) and set the node DOWN at 18:12:23; the job's log names its runs' nodes
KILLED_JOB = JOB.replace("SubmitTime=2026-12-01T17:50:53", "SubmitTime=2026-12-01T18:12:23")
KILLED_DOWN = "2026-12-01T18:12:02|node3|Not responding\n2026-12-01T18:12:02|node3|Not responding\n"
KILLED_LOG = ("launcher: start 1 of nf-3120ae on node3 (restart 0)\nstart\n"
              "launcher: start 2 of nf-3120ae on node4 (restart 1)\nstart\n")


def test_a_node_of_the_run_marked_before_the_requeue_is_a_node_failure():
    job = parse_scontrol_oneliners(KILLED_JOB)["1"]
    assert requeued_run(job, KILLED_DOWN, KILLED_LOG) == {"state": "NODE_FAIL", "nodes": "node3"}
    # without the log's start lines only a node marked in the requeue's second counts
    assert requeued_run(job, KILLED_DOWN, "")["state"] == "REQUEUED"
    # a node that is down but did not run the job explains nothing
    assert requeued_run(job, KILLED_DOWN.replace("node3", "node2"), KILLED_LOG)["state"] == "REQUEUED"
    # nor one marked after the requeue
    assert requeued_run(job, KILLED_DOWN.replace("18:12:02", "18:13:00"), KILLED_LOG)["state"] == "REQUEUED"


def test_a_multi_node_run_is_read_from_its_hostlist():
    job = parse_scontrol_oneliners(KILLED_JOB)["1"]
    log = "launcher: start 1 of j on node[2-3] (restart 0)\nlauncher: start 2 of j on node[1,4] (restart 1)\n"
    assert requeued_run(job, KILLED_DOWN, log) == {"state": "NODE_FAIL", "nodes": "node3"}


def test_hostnames():
    from backends.slurm.states import hostnames

    assert hostnames("node[1-3,7],login") == {"node1", "node2", "node3", "node7", "login"}
    assert hostnames("gpu[08-10]") == {"gpu08", "gpu09", "gpu10"}
    assert hostnames("") == set()


# a sweep element (array task 5_1, its own job id 7) requeued after its node died
ELEMENT = KILLED_JOB.replace("JobId=1 ", "JobId=7 ArrayJobId=5 ArrayTaskId=1 ")


class ElementCluster:
    """Answers `scontrol -o show job 5_1` with the task's record (keyed JobId=7), no accounting."""

    where = "the test cluster"

    def __init__(self):
        self.argvs = []

    def run(self, argv, check=False, **kw):
        from types import SimpleNamespace

        self.argvs.append(list(argv))
        out = {"scontrol": ELEMENT, "sinfo": KILLED_DOWN, "grep": KILLED_LOG}.get(argv[0], "")
        return SimpleNamespace(returncode=0 if out else 1, stdout=out, stderr="" if out else "disabled")


def test_a_requeued_sweep_elements_run_history_reads_its_array_task_record():
    from launcher.backend.protocols import Handle
    from launcher.backend.config import Target
    from launcher_backends.slurm import SlurmBackend
    from launcher_backends.slurm.options import SlurmOptions

    c = ElementCluster()
    b = SlurmBackend(Target("cl", "slurm", SlurmOptions()), runner=c)
    h = Handle("slurm", "cl", "sw-e1", "5_1", extra={"job_dir": "/jobs/sw"})
    assert b.run_history(h) == [{"state": "NODE_FAIL", "nodes": "node3"}]
    assert ["grep", "-a", "-e", "^launcher: start ", "-e", "DUE TO PREEMPTION", "/jobs/sw/slurm-5_1.out"] in c.argvs


def test_a_preemption_line_inside_the_last_runs_log_is_a_preemption_however_late_the_requeue():
    # 22.05, a sweep element that saved on the notice: requeued 5 s after slurmstepd's line
    job = parse_scontrol_oneliners(JOB.replace("SubmitTime=2026-12-01T17:50:53", "SubmitTime=2026-12-01T17:51:00"))["1"]
    log = "launcher: start 1 of sw-e1 on node1 (restart 0)\nstep 3\n" + PREEMPTED_LOG
    assert requeued_run(job, "", log) == {"state": "PREEMPTED", "nodes": "node1"}
    assert requeued_run(job, "", PREEMPTED_LOG)["state"] == "REQUEUED"  # no start line: the window decides
    # a preemption of an earlier run does not explain the last one
    twice = log + "launcher: start 2 of sw-e1 on node2 (restart 1)\nstep 4\n"
    job2 = dict(job, Restarts="2")
    assert requeued_run(job2, "", twice)["state"] == "REQUEUED"
