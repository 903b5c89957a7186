"""Cluster facts for render tests: parsed from real probe outputs captured on the
22.05 test cluster and on the dockerized 24.11 cluster with topology/block
(tests/unit/data/, tests/cluster/docker/capture-probe.sh), and a 24.11 cluster with
typed H100 GRES and pyxis (built from the same parsers on representative text)."""

from pathlib import Path

from launcher.backend.protocols import Facts
from launcher_backends.slurm.json_status import probed_parser
from launcher_backends.slurm.nodeorder import group_sizes, parse_show_topology
from launcher_backends.slurm.probe import gpu_types, parse_nodes, parse_partitions, parse_show_config

DATA = Path(__file__).parent / "data"


def _groups(name: str) -> dict:
    return group_sizes(parse_show_topology((DATA / name).read_text()))


def facts_2205() -> Facts:
    cfg = parse_show_config((DATA / "show_config_2205.txt").read_text())
    nodes = parse_nodes((DATA / "sinfo_nodes_2205.txt").read_text())
    return Facts("testcl", "slurm", {
        "slurm_version": "22.05.8", "cluster": cfg["ClusterName"], "topology_plugin": cfg["TopologyPlugin"],
        "partitions": parse_partitions((DATA / "sinfo_partitions_2205.txt").read_text()),
        "nodes": nodes, "gpu_types": gpu_types(nodes), "pyxis": False, "max_array_size": int(cfg["MaxArraySize"]),
        "json_status": "", "topology_groups": _groups("show_topology_2205.txt")})


def facts_2411() -> Facts:
    """The real Slurm 24.11.5 docker cluster (topology/block, untyped gpu:2, no pyxis)."""
    cfg = parse_show_config((DATA / "show_config_2411.txt").read_text())
    nodes = parse_nodes((DATA / "sinfo_nodes_2411.txt").read_text())
    return Facts("testcl", "slurm", {
        "slurm_version": cfg["SLURM_VERSION"], "cluster": cfg["ClusterName"], "topology_plugin": cfg["TopologyPlugin"],
        "partitions": parse_partitions((DATA / "sinfo_partitions_2411.txt").read_text()),
        "nodes": nodes, "gpu_types": gpu_types(nodes), "pyxis": False, "max_array_size": int(cfg["MaxArraySize"]),
        "json_status": probed_parser(0, (DATA / "json_2411" / "probe.json").read_text()),
        "topology_groups": _groups("show_topology_2411.txt")})


SINFO_NODES_2411 = "\n".join(f"gpu{i:03d}|gpu|idle|gpu:h100:8(S:0-1)|128|1031000" for i in range(1, 9))
SINFO_PARTS_2411 = "gpu*|up|2-00:00:00|8|gpu:h100:8(S:0-1)\n"


def facts_2411_block() -> Facts:
    nodes = parse_nodes(SINFO_NODES_2411)
    return Facts("bigcl", "slurm", {
        "slurm_version": "24.11.1", "cluster": "bigcl", "topology_plugin": "topology/block",
        "partitions": parse_partitions(SINFO_PARTS_2411), "nodes": nodes, "gpu_types": gpu_types(nodes),
        "pyxis": True})
