"""Multi-tier checkpoints with a real multi-node torchrun job (gloo on CPU): two torchrun
"nodes" of two workers each on this machine, each node with its own local directory. Saved
with the plain file API (torch.save into ``jobside.save``) and with
``torch.distributed.checkpoint.async_save`` (``jobside.commit(step, after=future)``); after a
crash the job resumes from the nearest complete copy and ends bit for bit where an
uninterrupted run ends.

Needs torch (the ``torchtests`` extra, which scripts/test installs for the services tier: a CPU
build); without it the tests skip locally and fail under CI=true."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import socket
import subprocess
import sys

import pytest

try:
    import torch  # noqa: F401 - the torchrun job below needs it in this interpreter
except ImportError as e:  # pragma: no cover - CI installs it
    from tests.fixtures.policy import in_ci

    if in_ci():
        raise RuntimeError("torch is not installed (pip install -e '.[torchtests]'): CI=true never skips") from e
    pytest.skip("torch is not installed (pip install -e '.[torchtests]')", allow_module_level=True)

from launcher.checkpoint import open_store, read_generations  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
TRAIN = os.path.join(HERE, "tiers_torch_train.py")
NODES, PER_NODE = 2, 2


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def clean_env(extra):
    e = {k: v for k, v in os.environ.items() if not k.startswith(("LAUNCHER_", "TRAIN_"))}
    e.update(OMP_NUM_THREADS="1", LAUNCHER_NODE_FACTS="0", LAUNCHER_HEARTBEAT_SECONDS="0", TRAIN_STEPS="40",
             TRAIN_EVERY="10", GLOO_SOCKET_IFNAME="lo")
    e.update(extra)
    return e


def torchrun(env, result):
    """One start of the job on NODES torchrun nodes; returns their exit codes."""
    port = free_port()
    procs = []
    for node in range(NODES):
        e = dict(env, LAUNCHER_NODE_RANK=str(node), TRAIN_RESULT=str(result))
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "torch.distributed.run", "--nnodes", str(NODES), "--node-rank", str(node),
             "--nproc-per-node", str(PER_NODE), "--master-addr", "127.0.0.1", "--master-port", str(port), TRAIN],
            env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = [p.communicate(timeout=600) for p in procs]
    return [p.returncode for p in procs], [o[1] for o in outs]


def resume_env(env, attempt):
    p = subprocess.run([sys.executable, "-m", "launcher.jobside", "resume-env"],
                       env=dict(env, LAUNCHER_NODE_RANK="0", LAUNCHER_ATTEMPT=str(attempt)),
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    out = {}
    for line in p.stdout.splitlines():
        k, _, v = line[len("export "):].partition("=")
        out[k] = shlex.split(v)[0] if v else ""
    return out


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    out = tmp_path_factory.mktemp("ref") / "result.json"
    rc, err = torchrun(clean_env({}), out)
    assert rc == [0, 0], err
    return json.loads(out.read_text())["sha256"]


@pytest.mark.parametrize("api, lose, tier", [("files", [1], "peer"), ("dcp", [], "local"),
                                             ("dcp", [1], "peer")])
def test_torchrun_job_resumes_from_the_nearest_copy_bit_for_bit(tmp_path, reference, api, lose, tier):
    root, template = str(tmp_path / "root"), str(tmp_path / "local" / "node-{node}")
    env = clean_env({"LAUNCHER_CKPT_ROOT": root, "LAUNCHER_CKPT_LOCAL": template, "LAUNCHER_CKPT_PEERS": "1",
                     "LAUNCHER_NUM_NODES": str(NODES), "LAUNCHER_JOB_ID": "job-torch", "TRAIN_API": api})
    result = tmp_path / "result.json"
    ex = resume_env(env, 1)
    rc, err = torchrun(dict(env, **ex, TRAIN_DIE_AT="25", TRAIN_DRAIN_BEFORE_DIE="1"), result)
    assert rc != [0, 0] and not result.exists(), err
    for node in lose:
        shutil.rmtree(template.replace("{node}", str(node)))
    ex = resume_env(env, 2)
    assert (ex["LAUNCHER_RESUME_STEP"], ex["LAUNCHER_RESUME_TIER"]) == ("20", tier)
    rc, err = torchrun(dict(env, **ex), result)
    assert rc == [0, 0], err
    doc = json.loads(result.read_text())
    assert doc["resumed_from"] == 20 and doc["sha256"] == reference
    h = read_generations(open_store(root)).history[-1]
    assert (h["resume_step"], h["resume_tier"]) == (20, tier)
    names = sorted(os.listdir(os.path.join(root, "step-000000040.g2")))
    if api == "dcp":  # the root holds DCP's own layout: one .metadata, every rank's shard file
        assert ".metadata" in names and sum(n.endswith(".distcp") for n in names) == NODES * PER_NODE
    else:
        assert [n for n in names if n.endswith(".pt")] == ["rank-%d.pt" % r for r in range(NODES * PER_NODE)]
