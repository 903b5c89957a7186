"""The Slurm test harness is a real cluster: separate hosts, a tree topology, fake GPUs,
node crashes, network partitions, preemption and completion records all really happen.

Every other Slurm test relies on these properties; if one breaks, this file says which.
"""

from __future__ import annotations

import re
import sys

import pytest

pytestmark = pytest.mark.slurm


def test_nodes_are_idle_separate_hosts_with_fake_gpus(clean_queue):
    c = clean_queue
    assert c.node_states() == {n: "idle" for n in c.nodes}
    assert len(c.nodes) == 4

    # one task per node, launched from this host (srun's I/O crosses the bridge)
    out = c.run("srun", f"-N{len(c.nodes)}", "--ntasks-per-node=1", "-l", "bash", "-c",
                'echo "$(hostname) $(hostname -I | tr -d " ")"').stdout
    seen = dict(line.split(": ", 1)[1].split() for line in out.strip().splitlines())
    assert sorted(seen) == c.nodes  # own UTS hostname per node
    assert len(set(seen.values())) == len(c.nodes)  # own address per node
    for host, addr in seen.items():
        assert addr.startswith(c.net + ".")

    # own /etc/hosts: every node resolves every other node to its own address
    hosts = c.run("srun", "-w", "node1", "getent", "hosts", "node3").stdout.split()
    assert hosts[:2] == [seen["node3"], "node3"]

    # traffic cannot leave the bridge: nodes have no default route
    r = c.run("srun", "-w", "node2", "ip", "route", "get", "198.51.100.7", check=False)
    assert r.returncode != 0, r.stdout

    # fake GPUs: gres/gpu:2 per node, CUDA_VISIBLE_DEVICES set by slurmd
    assert "gpu:2" in c.node("node1")["Gres"]
    out = c.run("srun", "-N1", "--gres=gpu:2", "bash", "-c", "echo $CUDA_VISIBLE_DEVICES").stdout
    assert out.strip() == "0,1"

    # jobs run this project's Python (shared filesystem, PATH exported by sbatch/srun)
    out = c.run("srun", "-N1", "python", "-c", "import sys, launcher; print(sys.executable)").stdout
    assert out.strip() == sys.executable or out.strip().startswith(str(sys.prefix))


def test_switches_constraint_keeps_a_job_on_one_leaf(clean_queue):
    c = clean_queue
    leaf1, leaf2 = c.switches["leaf1"], c.switches["leaf2"]
    sleeper = "#!/bin/bash\nsleep 300\n"
    # occupy one node on each leaf: the only 2 free nodes are on different leaves
    b1 = c.sbatch("-w", leaf1[1], "--exclusive", "-o", "/dev/null", script=sleeper)
    b2 = c.sbatch("-w", leaf2[1], "--exclusive", "-o", "/dev/null", script=sleeper)
    c.wait(b1, "RUNNING")
    c.wait(b2, "RUNNING")

    job = c.sbatch("-N2", "--switches=1@00:00:30", "-o", "/dev/null", script="#!/bin/bash\nsleep 300\n")
    # the scheduler looked at it and left it pending: a spread allocation is not allowed
    j = c.wait(job, lambda j: j["JobState"] == "PENDING" and j.get("Reason") not in ("None", ""))
    assert j["NodeList"] in ("(null)", "")

    c.run("scancel", b2)  # frees the second node of leaf2
    j = c.wait(job, "RUNNING")
    assert expand(j["NodeList"]) == leaf2
    assert j["JobState"] == "RUNNING"


def test_node_crash_requeues_the_job_on_another_node(clean_queue):
    c = clean_queue
    out = c.shared_dir / "crash.out"
    script = '#!/bin/bash\necho "start $(hostname) ${SLURM_RESTART_COUNT:-0}"\nsleep 300\n'
    jid = c.sbatch("--requeue", "--open-mode=append", "-o", str(out), script=script)
    j = c.wait(jid, "RUNNING")
    first = j["NodeList"]
    c.wait_for("first run wrote its line", lambda: out.exists() and out.read_text().count("\n") >= 1)

    c.kill_node(first)
    assert c.node_processes(first) == []  # the whole node is gone, slurmd and job alike

    j = c.wait(jid, lambda j: j["JobState"] == "RUNNING" and j["Restarts"] == "1", timeout=90)
    assert j["NodeList"] != first
    assert c.node_states()[first].startswith("down")
    lines = c.wait_for("second run wrote its line",
                       lambda: (t := out.read_text().splitlines()) and len(t) >= 2 and t)
    assert lines[:2] == [f"start {first} 0", f"start {j['NodeList']} 1"]

    # the crash left a completion record of the first run (jobcomp/filetxt)
    rec = c.run("sacct", "-c", "-j", jid, "-n", "-P", "-o", "jobid,state,nodelist").stdout
    assert f"{jid}|NODE_FAIL|{first}" in rec.splitlines()


def test_cut_link_makes_a_zombie_until_healed(clean_queue):
    c = clean_queue
    log = c.shared_dir / "zombie.log"
    script = ("#!/bin/bash\n"
              f'while true; do echo "$(hostname) ${{SLURM_RESTART_COUNT:-0}}" >> {log}; sleep 0.2; done\n')
    jid = c.sbatch("--requeue", "-o", "/dev/null", script=script)
    first = c.wait(jid, "RUNNING")["NodeList"]
    c.wait_for("first run writes", lambda: log.exists() and f"{first} 0" in log.read_text())

    c.cut_node(first)
    j = c.wait(jid, lambda j: j["JobState"] == "RUNNING" and j["Restarts"] == "1", timeout=90)
    second = j["NodeList"]
    assert second != first

    def zombie_wrote_after_restart():
        lines = log.read_text().splitlines()
        if f"{second} 1" not in lines:
            return False
        return f"{first} 0" in lines[lines.index(f"{second} 1"):]

    # the partitioned node never heard of the requeue: its copy keeps writing
    c.wait_for("zombie writes after the requeued copy started", zombie_wrote_after_restart)
    assert any("sleep" in cmd or "bash" in cmd for _, cmd in c.node_processes(first))

    c.heal_node(first)
    # back on the network, slurmctld kills the orphan; only slurmd remains on the node
    c.wait_for("orphan killed after heal",
               lambda: [cmd for _, cmd in c.node_processes(first)] and
               all(cmd.startswith("slurmd") for _, cmd in c.node_processes(first)), timeout=90)


def test_high_partition_preempts_and_requeues_batch(clean_queue):
    c = clean_queue
    out = c.shared_dir / "preempt.out"
    low = c.sbatch("-p", "batch", f"-N{len(c.nodes)}", "--exclusive", "--open-mode=append", "-o", str(out),
                   script='#!/bin/bash\necho "start ${SLURM_RESTART_COUNT:-0}"\nsleep 300\n')
    c.wait(low, "RUNNING")
    c.wait_for("low job started", lambda: out.exists() and "start 0" in out.read_text())

    high = c.sbatch("-p", "high", "-N1", "-o", "/dev/null", script="#!/bin/bash\nsleep 1\n")
    c.wait(high, ("RUNNING", "COMPLETED"))
    j = c.wait(low, lambda j: j["Restarts"] == "1")
    assert j["JobState"] in ("PENDING", "COMPLETING", "RUNNING", "REQUEUED")
    assert c.wait(high, "COMPLETED")["ExitCode"] == "0:0"

    # once the high job is done, the preempted job runs again with SLURM_RESTART_COUNT=1
    c.wait(low, lambda j: j["JobState"] == "RUNNING" and j["Restarts"] == "1", timeout=90)
    c.wait_for("requeued run started", lambda: "start 1" in out.read_text())
    starts = [line for line in out.read_text().splitlines() if line.startswith("start")]
    assert starts == ["start 0", "start 1"]
    assert "DUE TO PREEMPTION" in out.read_text()  # slurmstepd's own note in the job's output
    rec = c.run("sacct", "-c", "-j", low, "-n", "-P", "-o", "jobid,state").stdout.splitlines()
    assert rec[:1] == [f"{low}|PREEMPTED"]


def test_completion_records_in_sacct_c(clean_queue):
    c = clean_queue
    ok = c.sbatch("-o", "/dev/null", script="#!/bin/bash\ntrue\n")
    bad = c.sbatch("-o", "/dev/null", script="#!/bin/bash\nexit 3\n")
    assert c.wait(ok, ("COMPLETED", "FAILED"))["JobState"] == "COMPLETED"
    assert c.wait(bad, ("COMPLETED", "FAILED"))["ExitCode"] == "3:0"
    rec = c.run("sacct", "-c", "-n", "-P", "-j", f"{ok},{bad}", "-o", "jobid,state,exitcode").stdout
    lines = set(rec.strip().splitlines())
    assert f"{ok}|COMPLETED|0:0" in lines
    assert f"{bad}|FAILED|3:0" in lines


def expand(nodelist: str) -> list[str]:
    """node[3-4] / node[1,3] / node2 -> names (enough for this harness's flat names)."""
    m = re.fullmatch(r"(\w+?)\[([\d,-]+)\]", nodelist)
    if not m:
        return [nodelist]
    names = []
    for part in m.group(2).split(","):
        a, _, b = part.partition("-")
        names += [f"{m.group(1)}{i}" for i in range(int(a), int(b or a) + 1)]
    return names
