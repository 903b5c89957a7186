"""The Slurm backend end to end on a matrix of real clusters, driven over SSH the way a
laptop user drives a login node:

- ``netns-22.05``: the netns cluster (tests/cluster/cluster.sh) behind the test sshd, as its non-root user;
- ``docker-22.05``: Debian 12's Slurm 22.05, topology/tree, as the non-root user alice
  logging in to the cluster's login node (noisy ~/.bashrc, home on a shared volume);
- ``docker-24.11``: Debian 13's Slurm 24.11, topology/block (block1 = node[1-2],
  block2 = node[3-4], BlockSizes=2), as alice.

Every test gets ``slurm_cluster`` (one row of the matrix, reset before and after) and
``cli`` (the real `launcher` command with a single target, ``cl``, for that row).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from .launcher_cli import LauncherCLI, job_id_of, ssh_cli

MATRIX = ["netns-22.05", "docker-22.05", "docker-24.11"]


@pytest.fixture(params=MATRIX)
def slurm_cluster(request):
    """One row of the matrix: the session's cluster of that kind, with no job left over
    and every node IDLE before the test (and after it on netns, whose cluster other tests
    share; every user of a docker cluster resets it first)."""
    if request.param == "netns-22.05":
        cluster = request.getfixturevalue("netns_slurm_cluster")
    else:
        cluster = request.getfixturevalue("docker_slurm_" + request.param.split("-")[1].replace(".", ""))
    cluster.reset()
    yield cluster
    if request.param == "netns-22.05":
        cluster.reset()


class Row:
    """What a test needs to know about the row, beyond the SlurmCluster helpers."""

    def __init__(self, cluster, remote_root: str, give=None):
        self.cluster = cluster
        self.give = give  # netns: chown a path to the SSH login user (the tests run as root)
        self.docker = getattr(cluster, "kind", "netns") == "docker"
        self.version = getattr(cluster, "version", "22.05")
        self.remote_root = remote_root  # a directory the job user owns, on storage every node sees

    def read(self, path: str) -> str:
        return self.cluster.read_file(path) if self.docker else Path(path).read_text()

    def exists(self, path: str) -> bool:
        return self.cluster.exists(path) if self.docker else Path(path).exists()

    def mkdir(self, path: str) -> str:
        """A directory the job user owns (made as that user)."""
        if self.docker:
            self.cluster.run_as_alice("mkdir", "-p", path)
        else:
            os.makedirs(path, exist_ok=True)
            self.give(Path(path))
        return path

    def put(self, path: str, text: str) -> str:
        """Write a file as the job user."""
        if self.docker:
            self.cluster.run_as_alice("tee", path, input=text)
        else:
            Path(path).write_text(text)
            self.give(Path(path))
        return path

    def committed_steps(self, root: str) -> list[int]:
        """Steps whose checkpoint directory has its COMMIT.json (read on the cluster)."""
        if self.docker:
            names = self.cluster.exec("login", "find", root, "-mindepth", "2", "-maxdepth", "2",
                                      "-name", "COMMIT.json", check=False).stdout.split()
        else:
            names = [str(p) for p in Path(root).glob("step-*/COMMIT.json")]
        return sorted(int(Path(n).parent.name.split(".")[0][len("step-"):]) for n in names)

    def host_path(self, path: str) -> str:
        """The path on this machine of a file on the cluster's shared storage (docker: the
        home volume's mount point; netns: the same path)."""
        if not self.docker:
            return path
        return self.cluster.home_on_host + path[len("/home"):]

    def listdir(self, path: str) -> list[str]:
        if self.docker:
            return self.cluster.exec("login", "ls", "-A", path).stdout.split()
        return os.listdir(path)


@pytest.fixture
def row(slurm_cluster, request):
    if getattr(slurm_cluster, "kind", "netns") == "docker":
        return Row(slurm_cluster, slurm_cluster.home)
    # netns: the launcher logs in through the test sshd as its non-root user, whose home the
    # nodes see (they share this machine's file system)
    sshd = request.getfixturevalue("sshd_server")
    return Row(slurm_cluster, str(sshd.scratch("matrix")), give=sshd.give)


@pytest.fixture
def cli(slurm_cluster, row, tmp_path, request) -> LauncherCLI:
    if row.docker:
        target = {**slurm_cluster.target, "facts_ttl": 0}
        c = LauncherCLI(tmp_path, None, {"cl": target})
        c.env["HOME"] = str(tmp_path)  # no ~/.ssh of this machine's user is consulted
        c.env.pop("SLURM_CONF", None)
        return c
    return ssh_cli(tmp_path, slurm_cluster, request.getfixturevalue("sshd_server"), name="cl")


def launch_follow(cli: LauncherCLI, spec) -> str:
    return cli.launch(spec, "cl", "--follow")


# ---- tests ---------------------------------------------------------------------------------
def test_two_node_job_sees_one_master_addr_and_ranks_0_and_1(cli, row):
    spec = cli.spec("twonode", {
        "run": 'echo "RANK=$LAUNCHER_NODE_RANK MASTER=$MASTER_ADDR:$MASTER_PORT NODES=$LAUNCHER_NUM_NODES '
               'HOST=$(hostname) USER=$(id -un)"',
        "resources": {"nodes": 2, "time_limit": "5m"}})
    job = launch_follow(cli, spec)
    lines = sorted(l for l in cli.output(job).splitlines() if l.startswith("RANK="))
    assert [l.split()[0] for l in lines] == ["RANK=0", "RANK=1"], lines
    masters = {l.split()[1] for l in lines}
    assert len(masters) == 1 and re.match(r"MASTER=node\d:\d+$", masters.pop()), lines
    assert {l.split()[2] for l in lines} == {"NODES=2"}
    assert len({l.split()[3] for l in lines}) == 2  # two distinct hosts
    if row.docker:  # the job runs as the user who logged in, not as root
        assert {l.split()[4] for l in lines} == {"USER=alice"}
        # her noisy ~/.bashrc ran for the SSH session, never inside the job's shells
        assert "Welcome to the launcher test cluster" not in cli.output(job)
    assert cli.status(job)["state"] == "COMPLETED"


def test_topology_keeps_a_two_node_job_on_one_switch_or_block(cli, row, slurm_cluster):
    """tree: ``max_switches: 1`` lands on one leaf; block (24.11): ``segment: 2`` lands in one block."""
    blocks = getattr(slurm_cluster, "blocks", {})
    if blocks:
        topology, groups = {"segment": 2}, blocks
    else:
        topology, groups = {"max_switches": 1, "switch_wait": "1m"}, slurm_cluster.switches
    spec = cli.spec("onegroup", {"run": "hostname", "resources": {"nodes": 2, "time_limit": "5m"},
                                 "topology": topology})
    job = launch_follow(cli, spec)
    hosts = {l.strip() for l in cli.output(job).splitlines() if l.strip().startswith("node")}
    assert len(hosts) == 2
    assert any(hosts <= set(g) for g in groups.values()), (hosts, groups)
    assert cli.status(job)["state"] == "COMPLETED"


def test_topology_picks_the_group_with_room_while_the_other_is_partly_busy(cli, row, slurm_cluster):
    """node1 is busy (a whole-node job): a 2-node job that must stay inside one switch (tree) or one block
    (24.11, ``segment: 2``) runs on the other group, node3 + node4, never across."""
    blocks = getattr(slurm_cluster, "blocks", {})
    groups = blocks or slurm_cluster.switches
    topology = {"segment": 2} if blocks else {"max_switches": 1, "switch_wait": "1m"}
    first, second = list(groups.values())[:2]
    busy = slurm_cluster.sbatch("-N1", "--exclusive", "-w", first[0], "-o", "/dev/null", "--time=5",
                                script="#!/bin/bash\nsleep 300\n")
    slurm_cluster.wait(busy, "RUNNING")
    spec = cli.spec("onegroup-busy", {"run": "hostname", "resources": {"nodes": 2, "time_limit": "5m"},
                                      "topology": topology})
    job = launch_follow(cli, spec)
    hosts = {l.strip() for l in cli.output(job).splitlines() if l.strip().startswith("node")}
    assert hosts == set(second), (hosts, groups)
    assert cli.status(job)["state"] == "COMPLETED"


HOSTILE_VALUES = {
    "SUBST": "$(touch PWNED_ENV)", "BACKTICK": "`touch PWNED_BT`", "QUOTES": "it's \"quoted\"",
    "SEMI": "; touch PWNED_SEMI", "NEWLINE": "first\nsecond", "UNICODE": "naïve — 日本", "DOLLAR": "$HOME ${PATH}",
}


def test_hostile_values_are_printed_literally_and_never_executed(cli, row):
    work = row.mkdir(f"{row.remote_root}/hostile-{uuid.uuid4().hex[:8]}")
    run_args = ["$(touch PWNED_RUN)", "`touch PWNED_RUN_BT`", "a'b", 'c"d', "; touch PWNED_RUN_SEMI", "ü"]
    script = "; ".join(f'printf "%s=[%s]\\n" {k} "${k}"' for k in HOSTILE_VALUES)
    spec = cli.spec("hostile", {
        "name": "evil $(touch PWNED_NAME) `id` 'q' ; rm -rf / ü",
        "workdir": work,
        "setup": script,
        "run": ["python3", "-c", "import sys, os; print('ARGS=' + repr(sys.argv[1:])); "
                "print('NAME=' + repr(os.environ['LAUNCHER_JOB_NAME']))", *run_args],
        "env": HOSTILE_VALUES, "resources": {"time_limit": "5m"}})
    job = launch_follow(cli, spec)
    out = cli.output(job)
    for k, v in HOSTILE_VALUES.items():
        assert f"{k}=[{v}]" in out, (k, out)
    assert f"ARGS={run_args!r}" in out
    assert "NAME=\"evil $(touch PWNED_NAME) `id` 'q' ; rm -rf / ü\"" in out
    assert not [p for p in row.listdir(work) if p.startswith("PWNED")]
    assert not list(cli.tmp.glob("PWNED*"))


def test_failed_job_keeps_its_exit_code_and_follow_returns_it(cli, row):
    spec = cli.spec("fails", {"run": "echo about to fail; exit 7", "resources": {"time_limit": "5m"}})
    p = cli.run("launch", spec, "--target", "cl", "--follow", check=False)
    assert p.returncode == 7 and "about to fail" in p.stdout, (p.stdout, p.stderr)
    st = cli.status(job_id_of(p))
    # the attempt failed; the job stays open for `launcher watch` to decide on (app_error budget)
    assert st["state"] == "ATTEMPT_FAILED" and st["open"], st
    assert st["attempts"][0]["state"] == "FAILED" and st["attempts"][0]["exit_code"] == 7, st["attempts"]


CKPT_PROGRAM = r'''
import os, sys
if os.environ.get("LAUNCHER_JOB_PYZ"):
    sys.path.insert(0, os.environ["LAUNCHER_JOB_PYZ"])
from launcher import jobside
start = (jobside.resume_step() or 0) + 1 if jobside.resume_from() else 1
for step in range(start, start + 3):
    with jobside.save(step) as d:
        with open(os.path.join(d, "weights.txt"), "w") as f:
            f.write("step %d by uid %d\n" % (step, os.getuid()))
print("COMMITTED", step, "UID", os.getuid(), "JOBDIR", os.environ["LAUNCHER_JOB_DIR"])
'''


def test_checkpoints_and_job_dir_work_for_the_job_user_on_shared_storage(cli, row, slurm_cluster):
    root = f"{row.remote_root}/ckpt-{uuid.uuid4().hex[:8]}"
    spec = cli.spec("ckpt", {"run": ["python3", "-c", CKPT_PROGRAM], "checkpoint": {"root": root, "keep": 2},
                             "resources": {"nodes": 1, "time_limit": "5m"}})
    job = launch_follow(cli, spec)
    out = cli.output(job)
    m = re.search(r"COMMITTED (\d+) UID (\d+) JOBDIR (\S+)", out)
    assert m, out
    step, uid, job_dir = int(m.group(1)), int(m.group(2)), m.group(3)
    assert step == 3
    st = cli.status(job)
    assert st["state"] == "COMPLETED"
    # a second run resumes from the committed step 3 on the same shared storage
    job2 = launch_follow(cli, spec)
    m2 = re.search(r"COMMITTED (\d+)", cli.output(job2))
    assert m2 and int(m2.group(1)) == 6, cli.output(job2)
    # keep: 2 -> the newest checkpoints remain, the oldest are collected
    steps = sorted(int(p.split(".")[0][len("step-"):]) for p in row.listdir(root) if p.startswith("step-"))
    assert steps and steps[-1] == 6 and steps[0] >= 4, steps
    assert job_dir.startswith(cli_remote_dir(cli, row)), (job_dir, cli_remote_dir(cli, row))
    assert row.exists(f"{job_dir}/attempt-1.sbatch")
    if row.docker:  # everything the job wrote belongs to alice, none of it to root
        alice = slurm_cluster.stat(slurm_cluster.home)["uid"]
        assert uid == alice
        for p in (root, job_dir, f"{job_dir}/attempt-1.sbatch"):
            assert slurm_cluster.stat(p)["uid"] == alice, p
        listing = slurm_cluster.exec("login", "find", root, job_dir, "-uid", "0").stdout.split()
        assert listing == [], listing


TRAIN = Path(__file__).resolve().parents[2] / "examples" / "train.py"


def test_node_crash_resumes_elsewhere_from_the_latest_commit_with_an_identical_result(cli, row, slurm_cluster,
                                                                                      tmp_path):
    """The node running the job dies (netns: every process SIGKILLed; docker: `docker kill`):
    Slurm requeues the job, it resumes on another node from the latest committed step and
    ends with the same result as an uninterrupted run."""
    base = row.mkdir(f"{row.remote_root}/crash-{uuid.uuid4().hex[:8]}")
    train = row.put(f"{base}/train.py", TRAIN.read_text())
    root, result = f"{base}/ckpt", f"{base}/result.json"
    # 30 s of training: the launch and a status round trip over SSH, then the crash, all land
    # while it runs, with other test tiers beside it (a 15 s job once ended before the test saw
    # it RUNNING on a loaded machine)
    steps = 120
    spec = cli.spec("nodecrash", {"run": f"python3 {train} --steps {steps} --every 4 --sleep 0.25 --result {result}",
                                  "checkpoint": {"root": root}, "resources": {"nodes": 1, "time_limit": "10m"}})
    job = cli.launch(spec, "cl")
    # watched on the cluster itself: a status round trip over SSH to a loaded login node can
    # take longer than the job's first steps
    native = cli.status(job)["attempts"][-1]["native_id"]
    slurm_cluster.wait(native, "RUNNING", timeout=120)
    slurm_cluster.wait_for("a commit at step >= 8", lambda: [s for s in row.committed_steps(root) if s >= 8],
                           timeout=120)
    node = slurm_cluster.job(native)["NodeList"]
    slurm_cluster.kill_node(node)
    st = cli.wait_state(job, "COMPLETED", timeout=240, interval=1)
    ref = reference_sha(cli, row, slurm_cluster, job, train, base, steps, tmp_path)
    assert json.loads(row.read(result))["sha256"] == ref
    states = [a["state"] for a in st["attempts"]]
    # without slurmdbd the jobcomp records (sacct -c) are root-only ("sacct: fatal: open
    # ...jobcomp.txt: Permission denied" for every row's non-root user): the run's NODE_FAIL is
    # read from the requeue time and the node Slurm set DOWN at that second (sinfo -R)
    assert states[:2] == ["NODE_FAIL", "COMPLETED"], st["attempts"]
    log = cli.output(job)
    resumed = [int(m) for m in re.findall(r"train: resumed from \S+ at step (\d+)", log)]
    assert resumed and resumed[0] >= 8, log
    assert f"on {node}" not in log.split("start 2 of")[1].splitlines()[0]


def reference_sha(cli, row, slurm_cluster, job: str, train: str, base: str, steps: int, tmp_path) -> str:
    """The result of an uninterrupted run (no checkpoints), with the cluster's own Python
    (Debian 13's 3.13 hashes the trainer's floats differently from 3.11)."""
    if row.docker:
        pyz = f"{cli_remote_dir(cli, row)}/{job}/launcher_job.pyz"
        slurm_cluster.exec("login", "env", "-i", "PATH=/usr/bin:/bin", f"LAUNCHER_JOB_PYZ={pyz}", "python3",
                           train, "--steps", str(steps), "--result", f"{base}/ref.json", user="alice", workdir=base)
        return json.loads(row.read(f"{base}/ref.json"))["sha256"]
    subprocess.run([sys.executable, str(TRAIN), "--steps", str(steps), "--result", str(tmp_path / "ref.json")],
                   capture_output=True, text=True, check=True, env={"PATH": "/usr/bin:/bin"})
    return json.loads((tmp_path / "ref.json").read_text())["sha256"]


def test_link_cut_leaves_a_zombie_that_never_wins(cli, row, slurm_cluster, tmp_path):
    """The link of the job's node is cut (netns: its veth goes down; docker: `docker network
    disconnect`) while the job runs: slurmctld declares the node DOWN and requeues the job,
    which resumes elsewhere from the last committed checkpoint, while the cut-off original
    keeps running and writing to the shared storage. Once the new generation started, the
    zombie's commits are refused or stale, never chosen; after the link heals Slurm kills it,
    and the job ends with the result of an uninterrupted run: no torn, stale or regressed
    checkpoint is ever resumed from."""
    base = row.mkdir(f"{row.remote_root}/zombie-{uuid.uuid4().hex[:8]}")
    train = row.put(f"{base}/train.py", TRAIN.read_text())
    root, result = f"{base}/ckpt", f"{base}/result.json"
    # long enough that the zombie still runs when the requeued copy starts (24.11 declares a
    # node DOWN after SlurmdTimeout=10 s, 22.05 after 3 s), and that it still runs when the
    # launch over SSH has returned on a loaded machine (a 60 s job once ended before that)
    steps = 300
    spec = cli.spec("zombie", {"run": f"python3 {train} --steps {steps} --every 2 --sleep 0.3 --result {result}",
                               "checkpoint": {"root": root}, "resources": {"nodes": 1, "time_limit": "10m"}})
    job = cli.launch(spec, "cl")
    native = cli.status(job)["attempts"][-1]["native_id"]
    slurm_cluster.wait(native, "RUNNING", timeout=120)
    slurm_cluster.wait_for("a commit at step >= 6", lambda: [s for s in row.committed_steps(root) if s >= 6],
                           timeout=120)
    node = slurm_cluster.job(native)["NodeList"]
    slurm_cluster.cut_node(node)
    try:
        slurm_cluster.wait_for(f"{node} DOWN", lambda: slurm_cluster.node_states().get(node, "").startswith("down"),
                               timeout=120)
        slurm_cluster.wait(native, lambda j: j.get("Restarts", "0") != "0" and j.get("JobState") == "RUNNING",
                           timeout=120)
        assert slurm_cluster.job(native)["NodeList"] != node

        def gen2():
            if not row.exists(f"{root}/GENERATIONS.json"):
                return None
            hist = json.loads(row.read(f"{root}/GENERATIONS.json"))["history"]
            return [h for h in hist if h["generation"] == 2]

        fork = slurm_cluster.wait_for("generation 2 to start", gen2, timeout=60)[0]["resume_step"]
        assert fork >= 6
        # the launcher sees the restart while the node is still cut off (DOWN): its first run NODE_FAILed
        assert [a["state"] for a in cli.status(job)["attempts"]][:1] == ["NODE_FAIL"]
        # both attempts write side by side until the zombie's next commit is refused
        slurm_cluster.wait_for("the zombie refused", lambda: "superseded" in row.read(
            f"{cli_remote_dir(cli, row)}/{job}/slurm-{native}.out").lower(), timeout=60)
    finally:
        slurm_cluster.heal_node(node)
    st = cli.wait_state(job, "COMPLETED", timeout=300, interval=1)
    assert json.loads(row.read(result))["sha256"] == reference_sha(cli, row, slurm_cluster, job, train, base, steps,
                                                                   tmp_path)
    entries = json.loads(cli.run("checkpoints", row.host_path(root), "--json").stdout)
    zombie_late = [e for e in entries if e["generation"] == 1 and e["step"] > fork]
    assert all(e["state"] != "committed" or "stale" in e["reason"] for e in zombie_late), zombie_late
    assert all(e["state"] == "stale" for e in zombie_late if (Path(e["path"]) / "COMMIT.json").exists())
    # where a restart would resume: generation 2's last commit, above the fork, never torn
    newest = next(e for e in entries if e["state"] == "committed")
    assert newest["generation"] >= 2 and newest["step"] > fork, entries[:5]
    log = cli.output(job)
    resumed = [int(m) for m in re.findall(r"train: resumed from \S+ at step (\d+)", log)]
    assert resumed and resumed[0] == fork, (fork, log[-3000:])
    # the first run NODE_FAILed, the job ended COMPLETED; between them only restarts in place:
    # when the cut node reconnects, Slurm may TERM the live run's step too, which saves, exits
    # 75 and requeues itself (templates/sbatch.sh.j2, "seen in CI"): a REQUEUED attempt, never
    # a zombie's win (the result and the checkpoints above say so)
    states = [a["state"] for a in st["attempts"]]
    assert states[0] == "NODE_FAIL" and states[-1] == "COMPLETED", st["attempts"]
    assert set(states[1:-1]) <= {"REQUEUED"}, st["attempts"]


def cli_remote_dir(cli, row) -> str:
    import yaml

    return yaml.safe_load(cli.config.read_text())["targets"]["cl"]["remote_dir"]


# ---- states and reasons of jobs Slurm ended, live on 24.11 (its outputs, read as alice) ----------
ROWS_2411 = pytest.mark.parametrize("slurm_cluster", ["docker-24.11"], indirect=True)


@ROWS_2411
def test_a_job_past_its_time_limit_reads_timeout_with_slurms_reason(cli, row, slurm_cluster):
    spec = cli.spec("overtime", {"run": "echo started; sleep 600", "resources": {"time_limit": "1m"}})
    job = cli.launch(spec, "cl")
    native = cli.status(job)["attempts"][-1]["native_id"]
    # Slurm enforces the limit on a ~30 s timer: TIMEOUT 60-90 s after the start
    slurm_cluster.wait(native, "TIMEOUT", timeout=240, interval=2)
    st = cli.wait_state(job, ("TIMEOUT", "ATTEMPT_FAILED"), timeout=60, interval=1)
    first = st["attempts"][0]
    assert (first["state"], first["native_state"]) == ("TIMEOUT", "TIMEOUT"), st["attempts"]
    assert "TimeLimit" in first["reason"], first
    assert len(st["attempts"]) == 1  # a time limit is never requeued, even with --requeue
    assert "DUE TO TIME LIMIT" in cli.output(job)


@ROWS_2411
def test_a_preempted_run_reads_preempted_and_the_job_runs_again(cli, row, slurm_cluster):
    """A job of the `high` partition takes the node whole: Slurm preempts the launcher's job
    (PreemptMode=REQUEUE) and starts it again later. The launcher's user is not root, so the
    run's PREEMPTED is read from slurmstepd's line in the job's own log at the requeue time."""
    spec = cli.spec("preempted", {"run": 'echo "run $SLURM_RESTART_COUNT on $(hostname)"; sleep 600',
                                  "resources": {"time_limit": "10m"}})
    job = cli.launch(spec, "cl")
    native = cli.status(job)["attempts"][-1]["native_id"]
    node = slurm_cluster.wait(native, "RUNNING", timeout=120)["NodeList"]
    high = slurm_cluster.sbatch("-p", "high", "--exclusive", "-w", node, "-o", "/dev/null", "--time=2",
                                script="#!/bin/bash\nsleep 15\n")
    slurm_cluster.wait(native, lambda j: j.get("Restarts", "0") != "0", timeout=60)
    st = poll_status(cli, job, lambda s: len(s["attempts"]) >= 2, timeout=60)
    first = st["attempts"][0]
    assert (first["state"], first["native_state"]) == ("PREEMPTED", "PREEMPTED"), st["attempts"]
    restarted = [e for e in st["events"] if e["kind"] == "restarted"]
    assert restarted and restarted[0]["previous"] == "PREEMPTED", st["events"]
    slurm_cluster.wait(high, "COMPLETED", timeout=120)
    slurm_cluster.wait(native, lambda j: j.get("JobState") == "RUNNING" and j.get("Restarts") == "1", timeout=120)
    assert "DUE TO PREEMPTION" in cli.output(job)


def poll_status(cli, job: str, predicate, timeout: float) -> dict:
    from tests.fixtures.polling import poll

    return poll(f"{job}: status condition", lambda: (lambda s: s if predicate(s) else None)(cli.status(job)),
                timeout=timeout, interval=1)
