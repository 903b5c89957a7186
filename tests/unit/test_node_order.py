"""Rank order from the topology (launcher_backends.slurm.nodeorder, the sbatch script's
node-order step and its per-task lookup), the spec's ``layout.group_nodes`` and the
``--segment`` the Slurm render sizes for it."""

from __future__ import annotations

import itertools
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.backend.protocols import Facts, JobRef
from launcher.core.errors import CapabilityError, SpecError
from launcher.backend.sections import spec_from_text
from launcher.jobside.zipapp import stage_zip
from launcher_backends.slurm import nodeorder
from launcher_backends.slurm.backend import JOBSIDE_COMMANDS

from .slurm_facts import facts_2205, facts_2411, facts_2411_block
from .test_slurm_render import backend

DATA = Path(__file__).parent / "data"
JOB = JobRef(job_id="topo-abc123", attempt=1, job_dir="/state/jobs/topo-abc123")


# ---- the pure parts ------------------------------------------------------------------------
def test_hostlists_expand_in_slurm_order_with_padding_and_several_brackets():
    assert nodeorder.expand_hostlist("node[1-3,7],login") == ["node1", "node2", "node3", "node7", "login"]
    assert nodeorder.expand_hostlist("gpu[08-11]") == ["gpu08", "gpu09", "gpu10", "gpu11"]
    assert nodeorder.expand_hostlist("r[1-2]n[1-2]") == ["r1n1", "r1n2", "r2n1", "r2n2"]
    assert nodeorder.expand_hostlist("") == []
    with pytest.raises(ValueError):
        nodeorder.expand_hostlist("node[a-b]")


def test_the_real_show_topology_outputs_give_blocks_and_leaf_switches():
    blocks = nodeorder.parse_show_topology((DATA / "show_topology_2411.txt").read_text())
    assert nodeorder.groups_of(blocks) == {"node1": "block1", "node2": "block1", "node3": "block2",
                                           "node4": "block2"}
    tree = nodeorder.parse_show_topology((DATA / "show_topology_2205.txt").read_text())
    # the spine lists every node too: a node's group is its lowest switch, the leaf
    assert nodeorder.groups_of(tree) == {"node1": "leaf1", "node2": "leaf1", "node3": "leaf2", "node4": "leaf2"}
    assert nodeorder.group_sizes(tree) == {"leaf1": 2, "leaf2": 2}


def test_topology_addresses_name_the_leaf_or_block_before_the_node():
    text = "node1 spine.leaf2.node1\nnode2 block7.node2\nnode3 node3\n\n"
    assert nodeorder.groups_from_addrs(text) == {"node1": "leaf2", "node2": "block7"}


def test_each_blocks_nodes_are_consecutive_in_hostname_order_within_it():
    group_of = {"node1": "b1", "node2": "b2", "node3": "b1", "node4": "b2", "node10": "b1"}
    order = nodeorder.order_nodes(["node4", "node10", "node2", "node3", "node1"], group_of)
    assert order == [("node1", "b1"), ("node3", "b1"), ("node10", "b1"), ("node2", "b2"), ("node4", "b2")]
    # the input's order does not matter: the same nodes always get the same ranks
    for perm in itertools.permutations(group_of):
        assert nodeorder.order_nodes(list(perm), group_of) == order


def test_without_topology_the_order_is_hostname_order():
    assert nodeorder.order_nodes(["n10", "n9", "n1"], {}) == [("n1", ""), ("n9", ""), ("n10", "")]
    # nodes no block lists form one group of their own, after those that come first by name
    assert nodeorder.order_nodes(["a2", "a1", "b1"], {"a2": "x"}) == [("a1", ""), ("b1", ""), ("a2", "x")]


@pytest.mark.parametrize("blocks,group_nodes", [(2, 2), (4, 2), (4, 4), (8, 2), (6, 3)])
def test_no_group_crosses_a_block_when_hostnames_interleave_the_blocks(blocks, group_nodes):
    """Names dealt round-robin over 3 blocks (node1 in b0, node2 in b1, ...): hostname order puts
    every group across blocks; the topology order never does when the block size is a multiple
    of the group."""
    hosts = [f"node{i + 1}" for i in range(3 * blocks)]
    group_of = {h: f"b{i % 3}" for i, h in enumerate(hosts)}
    by_name = [(h, group_of[h]) for h in hosts]
    assert nodeorder.crossing_groups(by_name, group_nodes) > 0
    assert nodeorder.crossing_groups(nodeorder.order_nodes(hosts, group_of), group_nodes) == 0


# ---- the group size: as few crossing groups as the allocation allows --------------------------
def _compositions(total: int):
    """Every ordered list of block sizes adding up to TOTAL."""
    if total == 0:
        yield []
        return
    for first in range(1, total + 1):
        for rest in _compositions(total - first):
            yield [first] + rest


def _distinct_orders(sizes: list):
    """Every distinct sequence of block labels with SIZES[i] nodes of block i (brute force)."""
    left, seq = list(sizes), []

    def rec():
        if len(seq) == sum(sizes):
            yield tuple(seq)
            return
        for b, count in enumerate(left):
            if count:
                left[b] -= 1
                seq.append(b)
                yield from rec()
                seq.pop()
                left[b] += 1
    yield from rec()


def _crossings(labels, n: int) -> int:
    return sum(1 for i in range(0, len(labels), n) if len(set(labels[i:i + n])) > 1)


def _splits(labels) -> int:
    """How many times a block's nodes start again after another block's (0: every block consecutive)."""
    seen, count = set(), 0
    for i, b in enumerate(labels):
        if i and labels[i - 1] != b and b in seen:
            count += 1
        seen.add(b)
    return count


_BEST = {}


def _brute_best(sizes: tuple, n: int) -> tuple:
    """(fewest crossing groups, then fewest split blocks) over every order of these blocks' nodes."""
    key = (tuple(sorted(sizes)), n)
    if key not in _BEST:
        _BEST[key] = min((_crossings(o, n), _splits(o)) for o in _distinct_orders(sorted(sizes)))
    return _BEST[key]


def _dealt(sizes: list) -> dict:
    """{host: block} with the hosts dealt round-robin over the blocks, so that names interleave them."""
    group_of, left, b = {}, list(sizes), 0
    while len(group_of) < sum(sizes):
        if left[b % len(sizes)]:
            left[b % len(sizes)] -= 1
            group_of[f"n{len(group_of) + 1}"] = f"b{b % len(sizes)}"
        b += 1
    return group_of


@pytest.mark.parametrize("group_nodes", [1, 2, 3, 4])
def test_the_order_crosses_no_more_groups_than_the_best_order_brute_force_finds(group_nodes):
    """Every allocation of up to 8 nodes over blocks of any sizes (in every order of the blocks):
    the order's crossing groups equal the fewest any order of those nodes gives, and among such
    orders it splits no more blocks than the best (each block consecutive where that costs nothing)."""
    for total in range(1, 9):
        for sizes in _compositions(total):
            group_of = _dealt(sizes)
            order = nodeorder.order_nodes(list(group_of), group_of, group_nodes)
            assert sorted(h for h, _ in order) == sorted(group_of)
            labels = [g for _, g in order]
            got = (nodeorder.crossing_groups(order, group_nodes), _splits(labels))
            assert got == _brute_best(tuple(sizes), group_nodes), (sizes, group_nodes, labels)


@pytest.mark.parametrize("group_of,group_nodes,best", [
    # the audit's cases: leaves {n1}, {n2,n3}, {n4} with N = 2; leaves of 1, 4 and 3 nodes with N = 4
    ({"n1": "l1", "n2": "l2", "n3": "l2", "n4": "l3"}, 2, 1),
    ({"n1": "a", "n2": "b", "n3": "b", "n4": "b", "n5": "b", "n6": "c", "n7": "c", "n8": "c"}, 4, 1),
    ({"n1": "a", "n2": "b", "n3": "c", "n4": "b", "n5": "c", "n6": "b", "n7": "c", "n8": "b"}, 4, 1),
])
def test_uneven_blocks_cost_only_the_crossings_they_must(group_of, group_nodes, best):
    without_n = nodeorder.order_nodes(list(group_of), group_of)
    assert nodeorder.crossing_groups(without_n, group_nodes) > best  # what the order did before it knew N
    order = nodeorder.order_nodes(list(group_of), group_of, group_nodes)
    assert nodeorder.crossing_groups(order, group_nodes) == best


def test_the_first_audit_case_in_full():
    group_of = {"n1": "l1", "n2": "l2", "n3": "l2", "n4": "l3"}
    assert nodeorder.order_nodes(["n4", "n3", "n2", "n1"], group_of, 2) == [
        ("n2", "l2"), ("n3", "l2"), ("n1", "l1"), ("n4", "l3")]


def test_when_n_divides_every_block_the_order_is_the_same_as_without_it():
    hosts = [f"node{i + 1}" for i in range(12)]
    group_of = {h: f"b{i % 3}" for i, h in enumerate(hosts)}
    for n in (1, 2, 4):
        assert nodeorder.order_nodes(hosts, group_of, n) == nodeorder.order_nodes(hosts, group_of)


def test_the_exports_name_hosts_master_and_each_nodes_rank_block_and_block_size():
    env = dict(nodeorder.node_env([("node1", "b1"), ("node3", "b1"), ("node2", "b2")]))
    assert env == {"LAUNCHER_NODE_HOSTS": "node1,node3,node2", "MASTER_ADDR": "node1",
                   "LAUNCHER_NODE_ORDER": "node1=0:b1:2 node3=1:b1:2 node2=2:b2:1"}


# ---- the job-side command and the script's per-task lookup ------------------------------------
def _fake_bin(tmp_path: Path, topology: str) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (tmp_path / "topology.txt").write_text(topology)
    (bin_dir / "scontrol").write_text(f"#!/bin/sh\n[ \"$1 $2\" = 'show topology' ] && "
                                      f"exec cat {tmp_path}/topology.txt\nexit 1\n")
    (bin_dir / "scontrol").chmod(0o755)
    return bin_dir


def test_node_order_runs_from_the_staged_helper_and_prints_quoted_exports(tmp_path):
    pyz = stage_zip(tmp_path / "launcher_job.pyz", JOBSIDE_COMMANDS)
    bin_dir = _fake_bin(tmp_path, "BlockName=b1 BlockIndex=0 Nodes=node[1,3]\nBlockName=b2 BlockIndex=1 "
                                  "Nodes=node[2,4]\n")
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "SLURM_JOB_NODELIST": "node[1-4]"}
    p = subprocess.run([sys.executable, "-I", "-S", pyz, "node-order"], capture_output=True, text=True,
                       timeout=60, env=env)
    assert p.returncode == 0, p.stderr
    assert p.stdout == ("export LAUNCHER_NODE_HOSTS=node1,node3,node2,node4\nexport MASTER_ADDR=node1\n"
                        "export LAUNCHER_NODE_ORDER='node1=0:b1:2 node3=1:b1:2 node2=2:b2:2 node4=3:b2:2'\n")
    assert "node order from scontrol show topology: b1: node1,node3; b2: node2,node4" in p.stderr


def test_node_order_takes_the_group_size_and_packs_uneven_leaves(tmp_path):
    """Leaves {node1}, {node2,node3}, {node4} and groups of 2: one group must cross, not two."""
    pyz = stage_zip(tmp_path / "launcher_job.pyz", JOBSIDE_COMMANDS)
    bin_dir = _fake_bin(tmp_path, "SwitchName=l1 Level=0 LinkSpeed=1 Nodes=node1\nSwitchName=l2 Level=0 "
                                  "LinkSpeed=1 Nodes=node[2-3]\nSwitchName=l3 Level=0 LinkSpeed=1 Nodes=node4\n"
                                  "SwitchName=top Level=1 LinkSpeed=1 Nodes=node[1-4]\n")
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "SLURM_JOB_NODELIST": "node[1-4]"}
    hosts = {}
    for args in ([], ["--group-nodes", "2"]):
        p = subprocess.run([sys.executable, "-I", "-S", pyz, "node-order", *args], capture_output=True, text=True,
                           timeout=60, env=env)
        assert p.returncode == 0, p.stderr
        hosts[len(args)] = [l for l in p.stdout.splitlines() if "LAUNCHER_NODE_HOSTS" in l][0]
    assert hosts[0] == "export LAUNCHER_NODE_HOSTS=node1,node2,node3,node4"  # n1|n2 and n3|n4: 2 groups cross
    assert hosts[2] == "export LAUNCHER_NODE_HOSTS=node2,node3,node1,node4"  # only n1|n4 crosses


def test_the_script_passes_layout_group_nodes_to_node_order():
    text = backend().render(spec_from_text(_spec(4, 2)), facts_2205(), JOB).text
    assert 'node-order --group-nodes 2)"' in text
    text = backend().render(spec_from_text("name: t\nrun: hostname\nresources: {nodes: 4}\n"), facts_2205(), JOB).text
    assert 'node-order)"' in text and "--group-nodes" not in text  # N = 1: the order as before


def test_node_order_keeps_hostname_order_when_scontrol_fails(tmp_path):
    pyz = stage_zip(tmp_path / "launcher_job.pyz", JOBSIDE_COMMANDS)
    bin_dir = _fake_bin(tmp_path, "")
    (bin_dir / "scontrol").write_text("#!/bin/sh\nexit 1\n")
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "LAUNCHER_NODE_HOSTS": "n2,n1"}
    p = subprocess.run([sys.executable, "-I", "-S", pyz, "node-order"], capture_output=True, text=True,
                       timeout=60, env=env)
    assert p.returncode == 0, p.stderr
    assert "export LAUNCHER_NODE_HOSTS=n1,n2\n" in p.stdout and "no topology names these nodes" in p.stderr


def test_node_order_reads_slurm_topology_addr_on_each_node_when_scontrol_names_none(tmp_path):
    """A Slurm whose `scontrol show topology` says nothing of these nodes, but whose tasks see
    SLURM_TOPOLOGY_ADDR: one srun step reads each node's address."""
    pyz = stage_zip(tmp_path / "launcher_job.pyz", JOBSIDE_COMMANDS)
    bin_dir = _fake_bin(tmp_path, "SwitchName=other Level=0 LinkSpeed=1 Nodes=elsewhere[1-2]\n")
    (bin_dir / "srun").write_text("#!/bin/sh\nprintf 'n1 top.leafB.n1\\nn2 top.leafA.n2\\nn3 top.leafB.n3\\n'\n")
    (bin_dir / "srun").chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "LAUNCHER_NODE_HOSTS": "n1,n2,n3", "SLURM_TOPOLOGY_ADDR": "top.leafB.n1"}
    p = subprocess.run([sys.executable, "-I", "-S", pyz, "node-order"], capture_output=True, text=True,
                       timeout=60, env=env)
    assert p.returncode == 0, p.stderr
    assert "export LAUNCHER_NODE_ORDER='n1=0:leafB:2 n3=1:leafB:2 n2=2:leafA:1'\n" in p.stdout
    assert "node order from SLURM_TOPOLOGY_ADDR" in p.stderr


def _node_env_function(text: str) -> str:
    start = text.index("_launcher_node_env() {")
    return text[start:text.index("export -f _launcher_node_env", start)]


def test_every_task_reads_its_own_rank_block_and_block_size_from_the_order():
    spec = spec_from_text("name: t\nrun: hostname\nresources: {nodes: 4}\nlayout: {group_nodes: 2}\n")
    text = backend().render(spec, facts_2411(), JOB).text
    fn = _node_env_function(text)
    order = "node1=0:b1:2 node3=1:b1:2 node2=2:b2:2 node4=3:b2:2"
    seen = {}
    for node_id, host in enumerate(["node1", "node2", "node3", "node4", "stray"]):
        env = {"PATH": "/usr/bin:/bin", "LAUNCHER_NODE_ORDER": order, "SLURMD_NODENAME": host,
               "SLURM_NODEID": str(node_id)}
        out = subprocess.run(["bash", "-c", fn + '_launcher_node_env; echo "$LAUNCHER_NODE_RANK $LAUNCHER_NODE_BLOCK '
                              '$LAUNCHER_NODES_PER_BLOCK $PET_NODE_RANK"'], env=env, capture_output=True,
                             text=True, check=True).stdout.split()
        seen[host] = out
    assert seen == {"node1": ["0", "b1", "2", "0"], "node3": ["1", "b1", "2", "1"], "node2": ["2", "b2", "2", "2"],
                    "node4": ["3", "b2", "2", "3"], "stray": ["4", "1", "4"]}  # unknown: SLURM_NODEID, no block


def test_a_one_node_job_runs_no_node_order_and_is_rank_0():
    text = backend().render(spec_from_text("name: t\nrun: hostname\n"), facts_2205(), JOB).text
    assert "node-order" not in text and "_launcher_node_env;" in text


def test_the_script_reorders_before_the_checkpoint_helper_reads_the_hosts():
    spec = spec_from_text("name: t\nrun: hostname\nresources: {nodes: 2}\ncheckpoint: {root: /ck}\n")
    text = backend().render(spec, facts_2205(), JOB).text
    assert text.index("node-order") < text.index("resume-env") < text.index("srun")


# ---- layout.group_nodes: the spec and the render -----------------------------------------------
def _spec(nodes: int, group: int, topology: str = "") -> str:
    return f"name: t\nrun: hostname\nresources: {{nodes: {nodes}}}\nlayout: {{group_nodes: {group}}}\n{topology}"


@pytest.mark.parametrize("text,needle", [
    (_spec(4, 3), "layout.group_nodes: 3 does not divide resources.nodes 4"),
    (_spec(4, 2, "topology: {segment: 3}\n"), "layout.group_nodes: 2 does not divide topology.segment 3"),
    (_spec(4, 0), "layout.group_nodes"),
])
def test_a_layout_no_placement_can_keep_is_refused_in_one_line_naming_the_field(text, needle):
    with pytest.raises(SpecError) as ei:
        spec_from_text(text)
    assert needle in str(ei.value)
    assert [line for line in str(ei.value).splitlines() if "layout.group_nodes" in line][0].strip().startswith(
        "layout.group_nodes")


def _directives(text: str) -> list:
    return [l[len("#SBATCH "):] for l in text.splitlines() if l.startswith("#SBATCH ")]


def _block_facts(sizes: dict, version: str = "24.11.5") -> Facts:
    return Facts("testcl", "slurm", {**facts_2411().data, "slurm_version": version, "topology_groups": sizes})


@pytest.mark.parametrize("nodes,group,block,segment", [(4, 2, 2, 2), (8, 2, 4, 4), (8, 4, 4, 4), (12, 2, 8, 6),
                                                       (2, 2, 4, 2), (6, 3, 6, 6)])
def test_on_topology_block_segment_is_sized_to_a_multiple_of_the_group_that_fits_a_block(nodes, group, block,
                                                                                         segment):
    text = backend().render(spec_from_text(_spec(nodes, group)), _block_facts({"b1": block, "b2": block}), JOB).text
    assert f"--segment={segment}" in _directives(text)


def test_a_spec_segment_is_kept_and_a_tree_cluster_gets_no_segment():
    text = backend().render(spec_from_text(_spec(4, 2, "topology: {segment: 4}\n")), _block_facts({"b1": 4}), JOB).text
    assert [d for d in _directives(text) if d.startswith("--segment")] == ["--segment=4"]
    text = backend().render(spec_from_text(_spec(4, 2)), facts_2205(), JOB).text
    assert not [d for d in _directives(text) if d.startswith("--segment")]


def test_the_probed_2411_cluster_sizes_its_segment_from_its_blocks():
    facts = facts_2411()
    assert facts.get("topology_groups") == {"block1": 2, "block2": 2}
    assert "--segment=2" in _directives(backend().render(spec_from_text(_spec(4, 2)), facts, JOB).text)
    assert "--segment=2" in _directives(backend().render(spec_from_text(_spec(4, 2)), facts_2411_block(), JOB).text)


@pytest.mark.parametrize("sizes,group,needle", [
    ({"b1": 2, "b2": 2}, 4, "layout.group_nodes: 4 does not divide the block size 2 of cluster"),
    ({"b1": 4, "b2": 6}, 4, "layout.group_nodes: 4 does not divide the block size 6 of cluster"),
    ({"b1": 6}, 4, "use a group size that divides 6"),
])
def test_a_group_the_blocks_cannot_hold_is_refused_naming_the_field(sizes, group, needle):
    with pytest.raises(CapabilityError) as ei:
        backend().render(spec_from_text(_spec(group * 2, group)), _block_facts(sizes), JOB)
    assert needle in str(ei.value) and "\n" not in str(ei.value)


def test_a_group_larger_than_every_leaf_switch_is_refused_on_topology_tree():
    facts = Facts("testcl", "slurm", {**facts_2205().data, "topology_groups": {"leaf1": 2, "leaf2": 2}})
    with pytest.raises(CapabilityError) as ei:
        backend().render(spec_from_text(_spec(4, 4)), facts, JOB)
    assert "layout.group_nodes: 4 is more than the 2 nodes of the largest leaf switch" in str(ei.value)
    assert "--nodes=4" in _directives(backend().render(spec_from_text(_spec(4, 2)), facts, JOB).text)
