"""checkpoint: {root, local, peers, drain}: validated in the spec, refused (with why) on a
backend that cannot honour it, and handed to the job script as LAUNCHER_CKPT_LOCAL/PEERS/DRAIN."""

from __future__ import annotations

from typing import ClassVar

import pytest

from launcher.backend.registry import default_registry
from launcher.backend.sections import spec_from_text
from launcher.backend.support import requested, unsupported
from launcher.core.errors import SpecError

BACKENDS = {n: default_registry().load_class(n) for n in ("local", "slurm", "skypilot")}


def spec(body: str):
    return spec_from_text("name: x\nrun: 'true'\n" + body)


def refused(body: str) -> str:
    with pytest.raises(SpecError) as e:
        spec(body)
    return str(e.value)


def test_a_local_tier_drains_async_by_default_and_sync_when_asked():
    s = spec("checkpoint: {root: /shared/ck, local: /local/nvme/ck}\n")
    assert (s.checkpoint.local, s.checkpoint.peers, s.checkpoint.drain_mode) == ("/local/nvme/ck", 0, "async")
    s = spec("checkpoint: {root: s3://bkt/run, local: '/scratch/node-{node}', peers: 1, drain: sync}\n"
             "resources: {nodes: 2}\n")
    assert (s.checkpoint.peers, s.checkpoint.drain_mode) == (1, "sync")
    assert spec("checkpoint: {root: /shared/ck}\n").checkpoint.drain_mode is None


@pytest.mark.parametrize("body, words", [
    ("checkpoint: {local: /local/ck}\n", "checkpoint.local needs checkpoint.root"),
    ("checkpoint: {root: /r, local: relative/ck}\n", "absolute path"),
    ("checkpoint: {root: /r, local: 's3://b/x'}\n", "node-local POSIX path"),
    ("checkpoint: {root: /r, local: '/l/{rank}'}\n", "the only placeholder is {node}"),
    ("checkpoint: {root: /r, peers: 1}\nresources: {nodes: 2}\n", "set checkpoint.local"),
    ("checkpoint: {root: /r, drain: sync}\n", "set checkpoint.local"),
    ("checkpoint: {root: /r, local: '/l/{node}', peers: 2}\nresources: {nodes: 3}\n", "peers"),
    ("checkpoint: {root: /r, local: '/l/{node}', drain: later}\n", "drain"),
])
def test_malformed_tier_settings_are_refused_with_the_field(body, words):
    assert words in refused(body)


def test_peers_with_one_node_is_refused_saying_why():
    msg = refused("checkpoint: {root: /r, local: '/l/node-{node}', peers: 1}\n")
    assert "keeps a copy of each node's checkpoint shards on the next node" in msg and "1 node" in msg


def test_peers_without_a_node_placeholder_go_over_the_network():
    """Each node's own disk at one path (no {node}): the peer copy goes over the allocation's
    network (launcher.checkpoint.peernet), so the spec takes it."""
    s = spec("checkpoint: {root: /r, local: /local/nvme/ck, peers: 1}\nresources: {nodes: 4}\n")
    assert (s.checkpoint.local, s.checkpoint.peers) == ("/local/nvme/ck", 1)


def test_local_and_peers_are_requests_a_backend_must_declare():
    s = spec("checkpoint: {root: /r, local: '/l/node-{node}', peers: 1}\nresources: {nodes: 2}\n")
    assert {"checkpoint.local": "/l/node-{node}", "checkpoint.peers": 1}.items() <= requested(s).items()
    assert unsupported(s, BACKENDS["slurm"]) == [] and unsupported(s, BACKENDS["skypilot"]) == []

    class NoLocalDisks:  # a backend whose nodes have no disk of their own (a SpecOwner: declares what it honours)
        name: ClassVar[str] = "diskless"
        spec_scope: ClassVar[str] = "runs on diskless nodes"
        spec_section: ClassVar = None
        spec_options: ClassVar = None
        spec_fields: ClassVar[frozenset] = frozenset({"resources.nodes"})

        @classmethod
        def unsupported(cls, spec):
            return []

    (u, v) = unsupported(s, NoLocalDisks)
    assert (u.field, v.field) == ("checkpoint.local", "checkpoint.peers")
    assert "the diskless backend runs on diskless nodes, and does not honour local: /l/node-{node}" in u.why
    assert "slurm" in u.instead and "skypilot" in u.instead


def test_the_local_backend_has_a_local_disk_but_no_peer():
    s = spec("checkpoint: {root: /r, local: /tmp/ck}\n")
    assert unsupported(s, BACKENDS["local"]) == []


def test_the_job_script_exports_the_tier_settings(tmp_path):
    import subprocess

    from launcher.backend.templating import _env, contract_context

    s = spec("checkpoint: {root: /shared/ck, local: '/l/node {node}', peers: 1}\nresources: {nodes: 2}\n")

    class Job:
        job_id, dedupe_token, job_dir, attempt = "j1", "t", "/tmp/j", 1

    ctx = contract_context(s, Job(), "true")
    text = _env("").from_string('{% import "_contract.sh.j2" as contract %}{{ contract.resume(c) }}').render(c=ctx)
    assert "export LAUNCHER_CKPT_LOCAL='/l/node {node}' LAUNCHER_CKPT_PEERS=1 LAUNCHER_CKPT_DRAIN=async" in text
    out = subprocess.run(["bash", "-c", text.replace('eval "$_launcher_resume"', ":") +
                          'echo "$LAUNCHER_CKPT_LOCAL|$LAUNCHER_CKPT_PEERS|$LAUNCHER_CKPT_DRAIN"'],
                         capture_output=True, text=True)
    assert out.stdout.splitlines()[-1] == "/l/node {node}|1|async"
    plain = contract_context(spec("checkpoint: {root: /shared/ck}\n"), Job(), "true")
    assert "LAUNCHER_CKPT_LOCAL" not in _env("").from_string(
        '{% import "_contract.sh.j2" as contract %}{{ contract.resume(c) }}').render(c=plain)
