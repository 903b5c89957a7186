"""The netns test cluster shares the machine with Docker: dockerd sets the iptables FORWARD
policy to DROP and loads br_netfilter, which drops node-to-node traffic on the cluster's
bridge (srun across two nodes fails, sinfo still works). cluster.sh adds its own ACCEPT
rule for its bridge on start and removes it on stop."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.fixtures.slurm import start_cluster, stop_cluster
from tests.fixtures.policy import service_unavailable

pytestmark = pytest.mark.slurm


def iptables(*args, check=True) -> subprocess.CompletedProcess:
    return subprocess.run(["iptables", *args], capture_output=True, text=True, check=check)


@pytest.fixture
def firewall():
    if not shutil.which("iptables") or iptables("-S", "FORWARD", check=False).returncode != 0:
        service_unavailable("this test's prerequisite", "no usable iptables on this machine: nothing can drop bridged traffic")


def test_two_node_srun_works_when_the_firewall_drops_forwarded_traffic(firewall, clean_queue):
    c = clean_queue
    br = f"{c.prefix}br0"
    rules = iptables("-S", "FORWARD").stdout
    assert f"launcher-slurm-test:{c.prefix}" in rules, rules
    # what Docker's FORWARD policy DROP does to this bridge, without touching anyone else's
    drop = ["FORWARD", "-i", br, "-o", br, "-j", "DROP"]
    iptables("-A", *drop)
    try:
        out = c.run("srun", "-N2", "--ntasks-per-node=1", "-l", "hostname", timeout=60).stdout
        assert sorted(l.split(": ", 1)[1] for l in out.strip().splitlines()) == ["node1", "node2"]
    finally:
        iptables("-D", *drop)


def test_stop_removes_the_rule_it_added(firewall):
    c = start_cluster(nnodes=1)
    try:
        assert f"launcher-slurm-test:{c.prefix}" in iptables("-S", "FORWARD").stdout
    finally:
        stop_cluster(c)
    assert f"launcher-slurm-test:{c.prefix}" not in iptables("-S").stdout
