"""Rank order from the topology on the dockerized clusters: Slurm 24.11 with topology/block and
Slurm 22.05 with topology/tree, each with its blocks (leaf switches) re-drawn across the node
names, so that hostname order crosses them: block1 (leaf1) = node[1,3], block2 (leaf2) =
node[2,4]. A 4-node job with ``layout: {group_nodes: 2}`` runs through the launcher over SSH;
its groups of consecutive node ranks are counted against the topology the test wrote:

- the launcher's order: 0 groups across a block or leaf switch;
- hostname order (what torchrun got before: ranks by the node list) on the same allocation: >= 1.

The permuted topology.conf is written into the cluster's config dir (mounted into every
container) and loaded with ``scontrol reconfigure``; the original comes back after the test.
"""

from __future__ import annotations

import re
import time

import pytest

from launcher_backends.slurm import nodeorder

from .launcher_cli import LauncherCLI

PERMUTED = {"block": ("BlockName=block1 Nodes=node1,node3\nBlockName=block2 Nodes=node2,node4\nBlockSizes=2\n",
                      {"node1": "block1", "node3": "block1", "node2": "block2", "node4": "block2"}),
            "tree": ("SwitchName=leaf1 Nodes=node1,node3\nSwitchName=leaf2 Nodes=node2,node4\n"
                     "SwitchName=spine Switches=leaf[1-2]\n",
                     {"node1": "leaf1", "node3": "leaf1", "node2": "leaf2", "node4": "leaf2"})}


def _live_groups(cluster) -> tuple[dict, str]:
    text = cluster.run("scontrol", "show", "topology").stdout
    return nodeorder.groups_of(nodeorder.parse_show_topology(text)), text


def _load_topology(cluster, conf: str, want: dict, timeout: float = 120) -> str:
    (cluster.state / "etc" / "topology.conf").write_text(conf)
    cluster.run("scontrol", "reconfigure")
    deadline = time.monotonic() + timeout
    while True:  # 24.11 restarts slurmctld on reconfigure: wait until it answers with the new topology
        try:
            groups, text = _live_groups(cluster)
            if groups == want:
                return text
        except Exception:  # noqa: BLE001 - the controller is restarting
            text = "(no answer)"
        if time.monotonic() > deadline:
            raise AssertionError(f"scontrol show topology never showed {want}; last:\n{text}")
        time.sleep(0.5)


@pytest.fixture(scope="module", params=["24.11", "22.05"])
def permuted(request):
    cluster = request.getfixturevalue("docker_slurm_" + request.param.replace(".", ""))
    cluster.reset()
    kind = "block" if cluster.block else "tree"
    conf_path = cluster.state / "etc" / "topology.conf"
    original_conf = conf_path.read_text()
    original = dict(_live_groups(cluster)[0])
    conf, truth = PERMUTED[kind]
    live_text = _load_topology(cluster, conf, truth)
    cluster.wait_nodes_idle(timeout=120)
    try:
        yield cluster, kind, truth, live_text
    finally:
        cluster.reset()
        _load_topology(cluster, original_conf, original)
        cluster.wait_nodes_idle(timeout=120)


def _cli(cluster, tmp_path) -> LauncherCLI:
    c = LauncherCLI(tmp_path, None, {"cl": {**cluster.target, "facts_ttl": 0}})
    c.env["HOME"] = str(tmp_path)  # no ~/.ssh of this machine's user is consulted
    c.env.pop("SLURM_CONF", None)
    return c


def test_groups_of_consecutive_ranks_stay_in_one_block_where_hostname_order_crosses(permuted, tmp_path):
    cluster, kind, truth, live_text = permuted
    print(f"scontrol show topology ({cluster.version}, permuted):\n{live_text}")
    cli = _cli(cluster, tmp_path)
    spec = cli.spec("topo", {
        "run": 'echo "RANK=$LAUNCHER_NODE_RANK HOST=$SLURMD_NODENAME BLOCK=$LAUNCHER_NODE_BLOCK '
               'NPB=$LAUNCHER_NODES_PER_BLOCK PET=$PET_NODE_RANK MASTER=$MASTER_ADDR HOSTS=$LAUNCHER_NODE_HOSTS '
               'ADDR=${SLURM_TOPOLOGY_ADDR:-}"',
        "resources": {"nodes": 4, "time_limit": "5m"}, "layout": {"group_nodes": 2}})
    script = cli.run("render", spec, "--target", "cl").stdout
    if kind == "block":  # sized for the layout: a multiple of 2 that fits a block of 2
        assert "#SBATCH --segment=2" in script, script
    job = cli.launch(spec, "cl", "--follow")
    assert cli.status(job)["state"] == "COMPLETED", cli.output(job)
    out = cli.output(job)
    rows = [dict(f.split("=", 1) for f in l.split()) for l in out.splitlines() if l.startswith("RANK=")]
    assert len(rows) == 4, out
    by_rank = sorted(rows, key=lambda r: int(r["RANK"]))
    assert [r["RANK"] for r in by_rank] == ["0", "1", "2", "3"], out
    launcher_order = [(r["HOST"], truth[r["HOST"]]) for r in by_rank]
    hostname_order = [(h, truth[h]) for h in sorted((r["HOST"] for r in rows), key=nodeorder.host_key)]
    crossing = nodeorder.crossing_groups(launcher_order, 2)
    crossing_by_name = nodeorder.crossing_groups(hostname_order, 2)
    print(f"{cluster.version} {kind}: launcher order {launcher_order}: {crossing} group(s) across; "
          f"hostname order {hostname_order}: {crossing_by_name} group(s) across")
    # what the nodes' slurmd say, node-order's fallback source (22.05 spine.leaf1.node1, 24.11 block1.node1)
    print(f"{cluster.version} SLURM_TOPOLOGY_ADDR: " + ", ".join(f"{r['HOST']}={r['ADDR']}" for r in by_rank))
    assert nodeorder.groups_from_addrs("\n".join(f"{r['HOST']} {r['ADDR']}" for r in rows)) == truth, rows
    assert crossing == 0, (launcher_order, out)
    assert crossing_by_name >= 1, (hostname_order, out)
    # what each task was told: its block, the job's nodes in it, torchrun's rank, rank 0 as master
    for r in rows:
        assert r["BLOCK"] == truth[r["HOST"]] and r["NPB"] == "2" and r["PET"] == r["RANK"], r
        assert r["MASTER"] == by_rank[0]["HOST"] and r["HOSTS"] == ",".join(h for h, _ in launcher_order), r
    assert re.search(r"launcher: node order from scontrol show topology: ", out), out


def test_a_layout_the_blocks_cannot_hold_is_refused_before_submission(permuted, tmp_path):
    cluster, kind, truth, _ = permuted
    cli = _cli(cluster, tmp_path)
    spec = cli.spec("toobig", {"run": "hostname", "resources": {"nodes": 4}, "layout": {"group_nodes": 4}})
    p = cli.run("launch", spec, "--target", "cl", check=False)
    assert p.returncode != 0
    needle = "does not divide the block size 2" if kind == "block" else "is more than the 2 nodes of the largest leaf"
    assert f"layout.group_nodes: 4 {needle}" in p.stdout + p.stderr, p.stdout + p.stderr
    assert not cluster.active_jobs()
