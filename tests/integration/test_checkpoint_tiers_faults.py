"""Multi-tier checkpoints under real faults, with local processes standing in for nodes.

Each "node" is a set of rank processes with its own local directory (``local/node-{node}``,
reached by the other nodes as a path: the peer transport implemented); the root is a shared
directory. Every start runs ``resume-env`` on node 0 exactly as a job script does, then starts
every rank (tests/integration/tiers_rank.py). Crashes are real (os._exit, SIGKILL at a fault
point), a lost node is its local directory removed, a zombie is the previous generation still
running. Each case checks the tier and step the start resumed from (GENERATIONS.json) and that
the final parameters of every rank are bit for bit those of an uninterrupted run."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import time

import pytest

from launcher.checkpoint import COMMIT, latest, open_store, read_attempt, read_generations, scan
from launcher.checkpoint import tiers as T

HERE = os.path.dirname(os.path.abspath(__file__))
RANK = os.path.join(HERE, "tiers_rank.py")
STEPS, EVERY = 60, 10


def clean_env(extra=None):
    e = {k: v for k, v in os.environ.items() if not k.startswith(("LAUNCHER_", "TRAIN_", "RANK", "WORLD_SIZE"))}
    e.update(LAUNCHER_NODE_FACTS="0", TRAIN_STEPS=str(STEPS), TRAIN_EVERY=str(EVERY), TRAIN_DIM="3000",
             LAUNCHER_HEARTBEAT_SECONDS="0")
    e.update(extra or {})
    return e


class Job:
    def __init__(self, tmp, nodes=4, ranks_per_node=1, peers=1, root=None, env=None):
        self.tmp = tmp
        self.root = root or str(tmp / "root")
        self.template = str(tmp / "local" / "node-{node}")
        self.results = tmp / "results"
        self.results.mkdir(exist_ok=True)
        self.nodes, self.rpn, self.world = nodes, ranks_per_node, nodes * ranks_per_node
        self.env = clean_env({"LAUNCHER_CKPT_ROOT": self.root, "LAUNCHER_CKPT_LOCAL": self.template,
                              "LAUNCHER_CKPT_PEERS": str(peers), "LAUNCHER_NUM_NODES": str(nodes),
                              "LAUNCHER_JOB_ID": "job-tiers", "TRAIN_RESULT_DIR": str(self.results),
                              **(env or {})})
        self.attempt = 0

    def resume_env(self):
        self.attempt += 1
        env = dict(self.env, LAUNCHER_NODE_RANK="0", LAUNCHER_ATTEMPT=str(self.attempt))
        p = subprocess.run([sys.executable, "-m", "launcher.jobside", "resume-env"], env=env, capture_output=True,
                           text=True, timeout=120)
        assert p.returncode == 0, p.stderr
        out = {}
        for line in p.stdout.splitlines():
            k, _, v = line[len("export "):].partition("=")
            out[k] = shlex.split(v)[0] if v else ""
        return out

    def start(self, per_rank=None, wait=True, **train):
        """One start of the job: resume-env on node 0, then every rank. Returns (exports, procs)."""
        ex = self.resume_env()
        procs = []
        for r in range(self.world):
            env = dict(self.env, **ex, RANK=str(r), WORLD_SIZE=str(self.world), LAUNCHER_NODE_RANK=str(r // self.rpn),
                       **{k: str(v) for k, v in train.items()}, **((per_rank or {}).get(r, {})))
            procs.append(subprocess.Popen([sys.executable, RANK], env=env, stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE, text=True))
        if wait:
            for p in procs:
                finish(p)
        return ex, procs

    def lose(self, node):
        shutil.rmtree(T.node_dir(self.template, node))

    def results_sha(self):
        return [json.loads((self.results / ("result-%d.json" % r)).read_text())["sha256"] for r in range(self.world)]

    def last_start(self):
        return read_generations(open_store(self.root)).history[-1]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """Every rank's final parameters in a run that was never interrupted (no checkpoints)."""
    out = tmp_path_factory.mktemp("ref")
    shas = []
    for r in range(4):
        env = clean_env({"RANK": str(r), "WORLD_SIZE": "4", "TRAIN_RESULT_DIR": str(out)})
        subprocess.run([sys.executable, RANK], env=env, check=True, timeout=300)
        shas.append(json.loads((out / ("result-%d.json" % r)).read_text())["sha256"])
    return shas


def finish(p):
    p.out, p.err = p.communicate(timeout=300)
    return p


def codes(procs):
    return [p.returncode for p in procs]


def test_same_nodes_back_resume_from_local(tmp_path, reference):
    job = Job(tmp_path)
    ex, procs = job.start(TRAIN_DIE_AT=45)          # a crash after the save at step 40, before its drain is sure
    assert codes(procs) == [9] * 4 and ex["LAUNCHER_RESUME_STEP"] == "-1"
    ex, procs = job.start()
    assert codes(procs) == [0] * 4, [p.err for p in procs]
    assert (ex["LAUNCHER_RESUME_STEP"], ex["LAUNCHER_RESUME_TIER"]) == ("40", "local")
    assert (job.last_start()["resume_step"], job.last_start()["resume_tier"]) == (40, "local")
    assert job.results_sha() == reference
    rec = read_attempt(open_store(job.root), 2)
    assert (rec["resume_step"], rec["resume_tier"]) == (40, "local")


def test_a_lost_node_resumes_from_its_peer_copy(tmp_path, reference):
    job = Job(tmp_path)
    ex, procs = job.start(TRAIN_DIE_AT=45, TRAIN_DRAIN_BEFORE_DIE=1)
    assert codes(procs) == [9] * 4
    job.lose(1)
    ex, procs = job.start()
    assert codes(procs) == [0] * 4, [p.err for p in procs]
    assert (ex["LAUNCHER_RESUME_STEP"], ex["LAUNCHER_RESUME_TIER"]) == ("40", "peer")
    assert job.results_sha() == reference
    # every rank saw the whole checkpoint, rank 1's part linked from node 2's peer copy
    seen = json.loads((job.results / "result-3.json").read_text())["seen"]
    assert seen == sorted("rank-%d.%s" % (r, x) for r in range(4) for x in ("bin", "json"))


def test_two_neighbours_lost_resume_from_durable(tmp_path, reference):
    job = Job(tmp_path)
    ex, procs = job.start(TRAIN_DIE_AT=45, TRAIN_DRAIN_BEFORE_DIE=1)
    job.lose(1)
    job.lose(2)
    ex, procs = job.start()
    assert codes(procs) == [0] * 4, [p.err for p in procs]
    assert (ex["LAUNCHER_RESUME_STEP"], ex["LAUNCHER_RESUME_TIER"]) == ("40", "durable")
    assert job.results_sha() == reference


def test_a_drainer_killed_mid_upload_never_tears_the_root_and_the_next_drain_finishes(tmp_path, reference):
    job = Job(tmp_path)
    job.env["LAUNCHER_CKPT_KEEP"] = "100"  # so the root still shows step 10 at the end
    # rank 2 is killed (SIGKILL) in the middle of uploading its first part: one file up, no marker
    ex, procs = job.start(per_rank={2: {"LAUNCHER_FAULTS": "drain_mid_upload=kill"}}, TRAIN_SLEEP=0.01)
    assert procs[2].returncode == -9
    root = open_store(job.root)
    assert os.path.exists(os.path.join(job.root, "step-000000010.g1", "rank-2.bin"))
    assert not os.path.exists(os.path.join(job.root, "step-000000010.g1", COMMIT))
    assert latest(root) is None                    # never torn: no step is committed without rank 2
    assert all(e.state != "committed" for e in scan(root))
    ex, procs = job.start()
    assert codes(procs) == [0] * 4, [p.err for p in procs]
    assert (ex["LAUNCHER_RESUME_STEP"], ex["LAUNCHER_RESUME_TIER"]) == ("10", "local")
    assert job.results_sha() == reference
    # the next start's drainer finished rank 2's upload of step 10: the root committed it
    assert os.path.exists(os.path.join(job.root, "step-000000010.g1", COMMIT))
    assert {e.name for e in scan(root) if e.committed} >= {"step-000000010.g1", "step-000000060.g2"}


def test_a_zombie_generation_still_draining_never_wins(tmp_path, reference):
    job = Job(tmp_path)
    # generation 1 held after step 10 until generation 2 has started: on a loaded machine a
    # free-running generation 1 could finish all its steps before generation 2's start, and
    # then it is no zombie at all
    go_on = tmp_path / "generation-2-started"
    ex1, zombies = job.start(wait=False, TRAIN_SLEEP=0.05, TRAIN_HOLD_AFTER=10, TRAIN_HOLD_FILE=go_on)
    deadline = time.time() + 120
    while time.time() < deadline and not os.path.exists(os.path.join(job.root, "step-000000010.g1", COMMIT)):
        time.sleep(0.05)
    ex2, procs = job.start(wait=False)                         # generation 2 while 1 still runs
    go_on.touch()
    for p in zombies + procs:
        finish(p)
    assert codes(procs) == [0] * 4, [p.err for p in procs]
    assert codes(zombies) == [3] * 4, [p.err for p in zombies]  # each zombie stood down at its next save
    assert job.results_sha() == reference
    resumed = int(ex2["LAUNCHER_RESUME_STEP"])
    gens = read_generations(open_store(job.root))
    for e in scan(open_store(job.root), gens=gens):
        if e.generation == 1 and e.step > resumed:
            assert e.state != "committed"                      # a zombie's later step is never committed
    ex3 = job.resume_env()                                     # and never what a later start takes
    assert int(ex3["LAUNCHER_RESUME_STEP"]) == STEPS and ex3["LAUNCHER_RESUME_TIER"] == "local"
    assert ex3["LAUNCHER_RESUME_FROM"].endswith(".g2")


def test_a_full_local_disk_saves_synchronously_to_the_root_with_a_warning_and_an_event(tmp_path, reference):
    job = Job(tmp_path)
    job.env["LAUNCHER_CKPT_LOCAL_MIN_FREE"] = str(1 << 60)    # no local disk has that much free: "full"
    ex, procs = job.start(TRAIN_DIE_AT=45)
    assert codes(procs) == [9] * 4
    assert "saving step 10 synchronously to" in procs[0].err
    root = open_store(job.root)
    assert latest(root).step == 40                             # synchronous: committed before os._exit
    events = read_attempt(root, 1)["events"]
    assert {(e["kind"], e["rank"]) for e in events} >= {("local_full", r) for r in range(4)}
    del job.env["LAUNCHER_CKPT_LOCAL_MIN_FREE"]
    ex, procs = job.start()
    assert codes(procs) == [0] * 4, [p.err for p in procs]
    assert (ex["LAUNCHER_RESUME_STEP"], ex["LAUNCHER_RESUME_TIER"]) == ("40", "durable")
    assert job.results_sha() == reference


def test_two_ranks_per_node(tmp_path, reference):
    job = Job(tmp_path, nodes=2, ranks_per_node=2)
    ex, procs = job.start(TRAIN_DIE_AT=45, TRAIN_DRAIN_BEFORE_DIE=1)
    job.lose(0)
    ex, procs = job.start()
    assert codes(procs) == [0] * 4, [p.err for p in procs]
    assert (ex["LAUNCHER_RESUME_STEP"], ex["LAUNCHER_RESUME_TIER"]) == ("40", "peer")
    assert job.results_sha() == reference


@pytest.mark.s3
@pytest.mark.parametrize("lose, tier", [([3], "peer"), ([3, 0], "durable")])
def test_with_s3_as_the_durable_tier(tmp_path, reference, s3_bucket, moto_server, lose, tier):
    root = "s3://%s/job" % s3_bucket
    job = Job(tmp_path, root=root, env={**moto_server.env(), "LAUNCHER_STAGING_DIR": str(tmp_path / "staging")})
    ex, procs = job.start(TRAIN_DIE_AT=45, TRAIN_DRAIN_BEFORE_DIE=1)
    assert codes(procs) == [9] * 4, [p.err for p in procs]
    for node in lose:
        job.lose(node)
    ex, procs = job.start()
    assert codes(procs) == [0] * 4, [p.err for p in procs]
    assert (ex["LAUNCHER_RESUME_STEP"], ex["LAUNCHER_RESUME_TIER"]) == ("40", tier)
    assert job.results_sha() == reference
    e = latest(open_store(root))
    assert e.step == STEPS and e.manifest["parts"] == 4, [p.err for p in procs]


def test_the_final_drain_at_exit_is_bounded_and_leaves_no_process_behind(tmp_path):
    job = Job(tmp_path, nodes=1, peers=0)
    job.env.update(LAUNCHER_CKPT_DRAIN_TIMEOUT="1", LAUNCHER_FAULTS="drain_mid_upload=sleep:60")
    ex = job.resume_env()
    env = dict(job.env, **ex, RANK="0", WORLD_SIZE="1", LAUNCHER_NODE_RANK="0", TRAIN_STEPS="10")
    p = finish(subprocess.Popen([sys.executable, RANK], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, start_new_session=True))
    assert p.returncode == 0, p.err            # the upload still sleeps: exit did not wait for it
    assert "the final drain did not finish within 1s" in p.err
    try:
        os.killpg(p.pid, 0)                     # the drainer was a thread: nothing of the job is left
        alive = True
    except ProcessLookupError:
        alive = False
    assert not alive
    assert latest(open_store(job.root)) is None
    ex = job.resume_env()                       # the part stays committed locally: the next start has it
    assert (ex["LAUNCHER_RESUME_STEP"], ex["LAUNCHER_RESUME_TIER"]) == ("10", "local")


@pytest.mark.parametrize("fresh", [False, True])
def test_two_jobs_sharing_the_local_path_never_restore_each_others_step(tmp_path, reference, fresh):
    """Issue 28 HIGH 3: job A (root RA) crashes with step 40 committed on the local tier; job B,
    with root RB and the same checkpoint.local path, is launched for the first time (plainly,
    or with --fresh): it starts from step 0, never from A's step, and never carries A's parts
    into its root. A, relaunched, still resumes its own step 40 from the local tier."""
    a = Job(tmp_path, root=str(tmp_path / "ra"))
    ex, procs = a.start(TRAIN_DIE_AT=45)
    assert codes(procs) == [9] * 4
    b = Job(tmp_path, root=str(tmp_path / "rb"),
            env={"LAUNCHER_JOB_ID": "job-b", **({"LAUNCHER_FRESH": "1"} if fresh else {})})
    ex, procs = b.start(TRAIN_DIE_AT=25)              # B saves its own 10 and 20, then crashes
    assert ex["LAUNCHER_RESUME_STEP"] == "-1", "job B restored job A's step %s" % ex["LAUNCHER_RESUME_STEP"]
    assert codes(procs) == [9] * 4
    ex, procs = b.start()                             # B's requeue: its own step 20
    assert codes(procs) == [0] * 4, [p.err for p in procs]
    assert (ex["LAUNCHER_RESUME_STEP"], ex["LAUNCHER_RESUME_TIER"]) == ("20", "local")
    assert b.results_sha() == reference
    assert [e.step for e in scan(open_store(b.root)) if e.step == 40 and e.generation == 1] == []
    ex, procs = a.start()
    assert codes(procs) == [0] * 4, [p.err for p in procs]
    assert (ex["LAUNCHER_RESUME_STEP"], ex["LAUNCHER_RESUME_TIER"]) == ("40", "local")
