"""Multi-tier checkpoints on the dockerized 22.05 cluster (tests/cluster/docker), where every
node container has its own local disk (``checkpoint.local`` without ``{node}``: the container's
own file system, gone with the container) and alice's shared home is the durable tier. No node
reaches another's local tier by path: the peer copy goes over the allocation's network
(``launcher.checkpoint.peernet``), and resume decides by host.

One two-rank job lives through three starts after its first, each forced by a real fault:

1. a requeue onto the same two nodes (what PreemptMode=REQUEUE does; the other nodes drained
   so Slurm has no other choice): every part is on the node that runs its rank -> ``local``;
2. node2 crashes and its container is removed (its disk is gone), node3 takes its place:
   rank 1's part comes from the copy node1 holds -> ``peer``;
3. both nodes of that allocation are lost (neighbours: a ring of two): node3 crashes, node1's
   link is cut while it keeps running (a zombie still draining generation 3 to the shared
   home); node2 (a new, empty container) and node4 run it: no host holds a copy ->
   ``durable``, and no step of the zombie past that start's resume step is ever committed.

Every start resumes from the newest step complete in a tier it reaches, never from a torn
one, and the final parameters of both ranks are bit for bit those of an uninterrupted run.

22.05, not 24.11: its topology/tree lets a two-node job span leaf switches, where 24.11's
topology/block keeps it inside one block of two nodes, so no node could take a lost one's place.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from launcher.checkpoint.tiers import run_dir
from tests.fixtures.moto import running_moto
from tests.fixtures.polling import poll

from .launcher_cli import LauncherCLI

pytestmark = pytest.mark.slurm

HERE = Path(__file__).resolve().parent
RANK = HERE / "tiers_rank.py"
COMPOSE = HERE.parents[1] / "tests" / "cluster" / "docker" / "compose.yml"
TRAIN = {"TRAIN_STEPS": "180", "TRAIN_EVERY": "10", "TRAIN_DIM": "3000"}
LOCAL = "/var/tmp/launcher-tiers"  # in the container's own file system: its local disk


@pytest.fixture
def cluster(docker_slurm_2205):
    c = docker_slurm_2205
    c.reset()
    yield c
    c.run("scontrol", "update", "NodeName=node[1-4]", "State=RESUME", check=False)
    for n in c.nodes:
        if not c._docker("inspect", c.container(n), check=False).returncode == 0:
            recreate(c, n)
    c.restore()
    for n in c.nodes:  # the local tiers this test left on the nodes
        c.exec(n, "rm", "-rf", LOCAL, check=False)


@pytest.fixture
def cli(cluster, tmp_path) -> LauncherCLI:
    c = LauncherCLI(tmp_path, None, {"cl": {**cluster.target, "facts_ttl": 0}})
    c.env["HOME"] = str(tmp_path)
    c.env.pop("SLURM_CONF", None)
    return c


def image_of(c) -> str:
    return c._docker("inspect", "-f", "{{.Config.Image}}", c.container("slurmctld")).stdout.strip()


def remove(c, node) -> None:
    """The node crashes and its container is removed: its local disk is gone."""
    c._docker("rm", "-f", c.container(node))


def recreate(c, node) -> None:
    """A new, empty container for NODE (as scripts/slurm-cluster started it)."""
    env = dict(os.environ, LSC_IMAGE=image_of(c), LSC_ETC=str(c.state / "etc"), LSC_KEYS=str(c.state / "keys"))
    subprocess.run(["docker-compose", "--log-level", "ERROR", "-p", c.project, "-f", str(COMPOSE), "up", "-d",
                    "--no-deps", node], env=env, check=True, capture_output=True, timeout=180)


def nodes(c, spec: str, state: str) -> None:
    c.run("scontrol", "update", f"NodeName={spec}", f"State={state}", *(["Reason=tiers-test"] if state != "RESUME"
                                                                         else []), check=False)


def reference(c, base: str, job: str) -> list:
    """Both ranks run uninterrupted, without checkpoints, with the cluster's own Python (and
    the job's staged helper)."""
    out = []
    for r in range(2):
        c.exec("login", "env", "-i", "PATH=/usr/bin:/bin", f"LAUNCHER_JOB_PYZ={c.remote_dir}/{job}/launcher_job.pyz",
               f"RANK={r}", "WORLD_SIZE=2", f"TRAIN_RESULT_DIR={base}/ref",
               *[f"{k}={v}" for k, v in TRAIN.items()], "python3", f"{base}/tiers_rank.py", user="alice",
               workdir=base, timeout=300)
        out.append(json.loads(c.read_file(f"{base}/ref/result-{r}.json"))["sha256"])
    return out


def history(c, root: str) -> list:
    raw = c.exec("login", "cat", f"{root}/GENERATIONS.json", check=False).stdout
    return json.loads(raw)["history"] if raw.strip() else []


def durable_steps(c, root: str) -> list:
    names = c.exec("login", "find", root, "-mindepth", "2", "-maxdepth", "2", "-name", "COMMIT.json",
                   check=False).stdout.split()
    return sorted(int(Path(n).parent.name.split(".")[0][len("step-"):]) for n in names)


def local_steps(c, node: str, rank: int, root: str) -> list:
    """Steps whose part of RANK is committed on NODE's own disk (its own copy), in the run of ROOT."""
    out = c.exec(node, "sh", "-c", f"ls -d {LOCAL}/{run_dir(root)}/r{rank}/step-*/COMMIT.json 2>/dev/null",
                 check=False).stdout
    return sorted(int(Path(p).parent.name.split(".")[0][len("step-"):]) for p in out.split())


def running_on(c, native: str) -> list:
    j = poll("the job running", lambda: (lambda j: j if j.get("JobState") == "RUNNING" else None)(c.job(native)),
             timeout=180, interval=0.5)
    return c.run("scontrol", "show", "hostnames", j["NodeList"]).stdout.split()


def test_a_job_on_nodes_with_their_own_disks_resumes_from_local_then_peer_then_durable_bit_for_bit(cli, cluster):
    c = cluster
    base = f"{c.home}/tiers-{uuid.uuid4().hex[:8]}"
    c.run_as_alice("mkdir", "-p", f"{base}/res", f"{base}/ref")
    c.run_as_alice("tee", f"{base}/tiers_rank.py", input=RANK.read_text())
    root = f"{base}/ckpt"
    env = " ".join(f"{k}={v}" for k, v in TRAIN.items())
    spec = cli.spec("tiers", {
        "run": f"RANK=$LAUNCHER_RANK WORLD_SIZE=2 TRAIN_SLEEP=0.5 TRAIN_RESULT_DIR={base}/res {env} "
               f"python3 {base}/tiers_rank.py",
        "checkpoint": {"root": root, "local": LOCAL, "peers": 1},
        "recovery": {"node_failure": 5, "preemption": 5},
        "resources": {"nodes": 2, "time_limit": "15m"}})
    nodes(c, "node[3-4]", "DRAIN")  # the first allocation (and the requeue) is node[1-2]
    job = cli.launch(spec, "cl")
    native = cli.status(job)["attempts"][-1]["native_id"]
    assert running_on(c, native) == ["node1", "node2"]
    gens = lambda: [h.get("generation") for h in history(c, root)]  # noqa: E731

    def progressed(steps_past):
        """Both ranks committed (locally) a step STEPS_PAST beyond this start's resume step,
        and the peer copies had time to land; returns the newest step complete on both nodes."""
        h = history(c, root)
        start = max(h[-1].get("resume_step", -1), 0) if h else 0
        on = running_on(c, native)
        got = set(local_steps(c, on[0], 0, root)) & set(local_steps(c, on[1], 1, root))
        return max(got) if got and max(got) >= start + steps_past else None

    # 1. a requeue onto the same nodes: local
    newest = poll("step >= 30 on both local tiers", lambda: progressed(30), timeout=240, interval=0.5)
    c.run("scontrol", "requeue", native)
    poll("a second start", lambda: len(gens()) >= 2, timeout=180, interval=0.5)
    h = history(c, root)[1]
    assert h["resume_tier"] == "local" and h["resume_step"] >= newest, h
    assert running_on(c, native) == ["node1", "node2"]

    # 2. node2 crashes, its container (and disk) removed; node3 takes its place: peer
    newest = poll("attempt 2 went on", lambda: progressed(20), timeout=240, interval=0.5)
    time.sleep(1.5)  # the peer copy of that step (a few hundred kB) reached node1
    nodes(c, "node3", "RESUME")
    remove(c, "node2")
    poll("a third start", lambda: len(gens()) >= 3, timeout=240, interval=0.5)
    h = history(c, root)[2]
    assert h["resume_tier"] == "peer" and h["resume_step"] >= newest, h
    assert running_on(c, native) == ["node1", "node3"]

    # 3. both nodes of the allocation are lost (neighbours): node3 crashes, node1's link is cut
    # (a zombie: it keeps training and draining generation 3 to the shared home); a new node2
    # and node4 run it: no host of theirs holds a copy -> durable
    poll("attempt 3 went on", lambda: progressed(20), timeout=240, interval=0.5)
    recreate(c, "node2")
    nodes(c, "node2,node4", "RESUME")
    durable_before = durable_steps(c, root)
    c.cut_node("node1")
    c.kill_node("node3")
    poll("a fourth start", lambda: len(gens()) >= 4, timeout=240, interval=0.5)
    h = history(c, root)[3]
    # the newest step committed in the root, at least the newest one there before the loss
    assert h["resume_tier"] == "durable" and h["resume_step"] >= max(durable_before), (h, durable_before)
    assert running_on(c, native) == ["node2", "node4"]

    st = cli.wait_state(job, "COMPLETED", timeout=300, interval=1)
    ref = reference(c, base, job)
    results = [json.loads(c.read_file(f"{base}/res/result-{r}.json")) for r in range(2)]
    assert [r["sha256"] for r in results] == ref, (results, st["attempts"])
    assert [r["resumed_from"] for r in results] == [history(c, root)[-1]["resume_step"]] * 2
    assert [h.get("resume_tier") for h in history(c, root)] == ["fresh", "local", "peer", "durable"]
    # the zombie never won: no step of generation 3 past the one generation 4 resumed from is
    # committed in the root (its drains were refused as a stale fork)
    fork = history(c, root)[3]["resume_step"]
    out = c.exec("login", "sh", "-c", f"ls -d {root}/step-*.g3/COMMIT.json 2>/dev/null", check=False).stdout
    assert not [p for p in out.split() if int(Path(p).parent.name.split(".")[0][5:]) > fork], out
    c.exec("login", "rm", "-rf", base, check=False)


@pytest.fixture
def moto_on_cluster(cluster, tmp_path):
    """moto_server reachable from the cluster's containers: bound to the gateway address of
    the cluster's docker network (the containers reach this machine there, and only there)."""
    with running_moto(str(tmp_path), host=cluster.gateway()) as srv:
        yield srv


def give_boto3(c, base: str) -> str:
    """The job side reaches an S3 root through boto3, which the nodes' Python lacks (and the
    cluster has no package index): this machine's copy (pure Python) goes to BASE/pylib on
    the shared home, for PYTHONPATH."""
    import boto3  # only the S3 case needs it, from this machine's venv

    site = Path(boto3.__file__).resolve().parents[1]
    with tempfile.TemporaryDirectory() as tmp:
        lib = Path(tmp) / "pylib"
        lib.mkdir()
        for name in ("boto3", "botocore", "s3transfer", "jmespath", "dateutil", "urllib3", "six.py"):
            (shutil.copytree if (site / name).is_dir() else shutil.copy)(site / name, lib / name)
        subprocess.run(["docker", "cp", str(lib), f"{c.container('login')}:{base}/pylib"], check=True,
                       capture_output=True, timeout=120)
    c.exec("login", "chmod", "-R", "a+rX", f"{base}/pylib")
    return f"{base}/pylib"


def s3_keys(s3, bucket, prefix) -> list:
    out = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        out += [o["Key"][len(prefix):] for o in page.get("Contents") or []]
    return out


def test_s3_durable_a_drainer_killed_mid_upload_and_a_full_local_disk(cli, cluster, moto_on_cluster):
    """The durable tier is S3. Attempt 1: rank 1's process is killed (SIGKILL) in the middle of
    its first upload (step 10: its first file is in the bucket, its part marker is not); the job
    requeues itself onto the same nodes and resumes from local; the new start's drain finishes
    step 10 (committed in the bucket with every rank's files, never before). Attempt 2: node2's
    local disk (a 4 MB tmpfs) is filled from outside: its rank's next saves go synchronously to
    S3, with a warning in the job's log and a local_full event. The result is bit for bit that
    of an uninterrupted run; no checkpoint in the bucket is torn."""
    c, moto = cluster, moto_on_cluster
    s3 = moto.client()
    bucket = moto.new_bucket("tiers")
    root = f"s3://{bucket}/run"
    base = f"{c.home}/tiers-{uuid.uuid4().hex[:8]}"
    c.run_as_alice("mkdir", "-p", f"{base}/res", f"{base}/ref")
    c.run_as_alice("tee", f"{base}/tiers_rank.py", input=RANK.read_text())
    pylib = give_boto3(c, base)
    c.exec("node2", "sh", "-c", f"mkdir -p {LOCAL} && mount -t tmpfs -o size=4m,mode=1777 tmpfs {LOCAL}")
    try:
        cli.env.update(moto.env())
        env = " ".join(f"{k}={v}" for k, v in TRAIN.items())
        faults = '$([ "$LAUNCHER_ATTEMPT" = 1 ] && [ "$LAUNCHER_RANK" = 1 ] && echo drain_mid_upload=kill)'
        run = (f"LAUNCHER_FAULTS={faults} RANK=$LAUNCHER_RANK WORLD_SIZE=2 TRAIN_SLEEP=0.3 "
               f"TRAIN_RESULT_DIR={base}/res {env} python3 {base}/tiers_rank.py; rc=$?; "
               # the crash of attempt 1 requeues the job (as a node health check or the launcher would)
               'if [ $rc = 137 ] && [ "$LAUNCHER_ATTEMPT" = 1 ]; then scontrol requeue $SLURM_JOB_ID; sleep 60; fi; '
               "exit $rc")
        spec = cli.spec("tiers-s3", {
            "run": run, "env": {**moto.env(), "PYTHONPATH": pylib},
            "checkpoint": {"root": root, "local": LOCAL, "peers": 1, "keep": 100},
            "resources": {"nodes": 2, "time_limit": "15m"}})
        nodes(c, "node[3-4]", "DRAIN")
        job = cli.launch(spec, "cl")
        native = cli.status(job)["attempts"][-1]["native_id"]
        prefix = "run/"

        def gens():
            try:
                doc = json.loads(s3.get_object(Bucket=bucket, Key=prefix + "GENERATIONS.json")["Body"].read())
            except s3.exceptions.NoSuchKey:
                return []
            return doc["history"]

        poll("a second start", lambda: len(gens()) >= 2, timeout=240, interval=0.5)
        h = gens()[1]
        assert h["resume_tier"] == "local" and h["resume_step"] >= 10, h
        keys = s3_keys(s3, bucket, prefix + "step-000000010.g1/")
        assert "rank-1.bin" in keys or "rank-1.json" in keys or "COMMIT.json" in keys, keys
        # the next drain finishes step 10: committed with both ranks' files and markers
        poll("step 10 committed in the bucket by the next drain",
             lambda: "COMMIT.json" in s3_keys(s3, bucket, prefix + "step-000000010.g1/"), timeout=120, interval=0.5)
        keys = set(s3_keys(s3, bucket, prefix + "step-000000010.g1/"))
        assert {"rank-0.bin", "rank-0.json", "rank-1.bin", "rank-1.json", ".parts/r0.json", ".parts/r1.json"} <= keys

        # node2's local disk fills up once attempt 2 saved there
        saved = f"ls -d {LOCAL}/{run_dir(root)}/r1/step-*.g2/COMMIT.json"
        poll("attempt 2 saved on node2", lambda: c.exec("node2", "sh", "-c", saved, check=False).stdout.strip(),
             timeout=120, interval=0.5)
        # fill it to 8 KiB short of full; the job's own saves change the free space between
        # the df and the fallocate, so a failed fill is undone and measured again
        c.exec("node2", "sh", "-c", "for i in $(seq 50); do "
                                    f"avail=$(df -B1 --output=avail {LOCAL} | tail -1); "
                                    "[ $avail -le 8192 ] && exit 0; "
                                    f"fallocate -l $((avail - 8192)) {LOCAL}/fill-$i && exit 0; "
                                    f"rm -f {LOCAL}/fill-$i; sleep 0.1; done; exit 1")
        st = cli.wait_state(job, "COMPLETED", timeout=300, interval=1)
        ref = reference(c, base, job)
        results = [json.loads(c.read_file(f"{base}/res/result-{r}.json")) for r in range(2)]
        assert [r["sha256"] for r in results] == ref, (results, st["attempts"])
        rec = json.loads(s3.get_object(Bucket=bucket, Key=prefix + ".launcher/attempts/g2.json")["Body"].read())
        assert [e for e in rec.get("events") or [] if e["kind"] == "local_full" and e["rank"] == 1], rec.get("events")
        assert "has less free space than this save needs" in cli.output(job)
        # no torn checkpoint in the bucket: every step directory with a COMMIT.json has every file it lists
        for name in {k.split("/")[0] for k in s3_keys(s3, bucket, prefix) if k.startswith("step-")}:
            keys = set(s3_keys(s3, bucket, prefix + name + "/"))
            if "COMMIT.json" in keys:
                doc = json.loads(s3.get_object(Bucket=bucket, Key=prefix + name + "/COMMIT.json")["Body"].read())
                assert {f["path"] for f in doc["files"]} <= keys, (name, keys)
    finally:
        c.exec("node2", "sh", "-c", f"umount {LOCAL}; rm -rf {LOCAL}", check=False)
        c.exec("login", "rm", "-rf", base, check=False)
