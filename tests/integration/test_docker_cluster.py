"""The dockerized Slurm clusters are what the matrix says they are: a login node whose sshd
is published on 127.0.0.1 only, a non-root user with the same uid everywhere and one home
shared by the login and compute nodes, a noisy login shell, and nodes that can be cut off
and crashed (tests/cluster/docker, tests/fixtures/docker_slurm.py)."""

from __future__ import annotations

import re
import subprocess

import pytest

# its cluster fixture is chosen at run time: mark the module, so `-m docker_slurm` (scripts/test's
# docker tier) selects it and `-m 'not slurm'` leaves it out
pytestmark = [pytest.mark.slurm, pytest.mark.docker_slurm]


@pytest.fixture(params=["22.05", "24.11"])
def cluster(request):
    c = request.getfixturevalue("docker_slurm_" + request.param.replace(".", ""))
    c.reset()  # every user of a docker cluster resets it first: no reset after
    return c


def ssh(c, *command: str) -> subprocess.CompletedProcess:
    return subprocess.run(["ssh", "-F", "none", "-p", str(c.ssh_port), "-i", str(c.ssh_key), "-o", "IdentitiesOnly=yes",
                           "-o", "BatchMode=yes", "-o", f"UserKnownHostsFile={c.known_hosts}",
                           "-o", "StrictHostKeyChecking=yes", "alice@127.0.0.1", *command],
                          capture_output=True, text=True, timeout=60)


def test_login_node_alice_shared_home_and_a_noisy_shell(cluster):
    c = cluster
    p = ssh(c, "id -u; hostname; sinfo --version")
    assert p.returncode == 0, p.stderr
    uid, host, version = p.stdout.split("\n")[:3]
    assert host == "login" and version.split()[-1].startswith(c.version)
    assert "Welcome to the launcher test cluster" in p.stderr  # the banner, on stderr only
    assert "Welcome" not in p.stdout
    # published on 127.0.0.1 only, with the host key of known_hosts
    ports = subprocess.run(["docker", "port", c.container("login")], capture_output=True, text=True).stdout
    assert re.fullmatch(rf"22/tcp -> 127\.0\.0\.1:{c.ssh_port}\s*", ports), ports
    # the same uid on every node, and the home written on the login node is seen by the nodes
    ssh(c, "echo shared > ~/shared-probe")
    out = c.run_as_alice("srun", "-N4", "-l", "bash", "-c", "id -u; cat ~/shared-probe").stdout
    lines = [l.split(": ", 1)[1] for l in out.strip().splitlines()]
    assert sorted(lines) == sorted([uid] * 4 + ["shared"] * 4), out


def test_cut_and_heal_a_node(cluster):
    c = cluster
    c.cut_node("node2")
    c.wait_for("node2 not responding", lambda: c.node_states().get("node2", "").endswith("*"), timeout=90)
    c.heal_node("node2")
    c.wait_nodes_idle(timeout=90)
    assert c.run("srun", "-w", "node2", "hostname").stdout.strip() == "node2"


def test_kill_and_restart_a_node(cluster):
    c = cluster
    c.kill_node("node3")
    c.wait_for("node3 down", lambda: c.node_states().get("node3", "").startswith("down"), timeout=90)
    c.start_node("node3")
    c.wait_nodes_idle(timeout=90)
    assert c.run("srun", "-w", "node3", "hostname").stdout.strip() == "node3"
