"""Cluster facts, collected once per target through a command runner and passed to
render as data (render never shells out)."""

from __future__ import annotations

import re

from launcher.core.errors import CommandError, LauncherError, TransientError
from launcher_backends.slurm.json_status import PROBE_ARGV, SINCE, probed_parser
from launcher_backends.slurm.nodeorder import group_sizes, parse_show_topology
from launcher_backends.slurm.states import parse_version


def parse_show_config(text: str) -> dict[str, str]:
    cfg = {}
    for line in text.splitlines():
        m = re.match(r"^(\w+)\s*=\s*(.*)$", line.strip())
        if m:
            cfg[m.group(1)] = m.group(2).strip()
    return cfg


def parse_partitions(text: str) -> list[dict]:
    """``sinfo -h -o '%P|%a|%l|%D|%G'`` (one line per partition/gres group)."""
    parts: dict[str, dict] = {}
    for line in text.splitlines():
        f = line.strip().split("|")
        if len(f) < 5:
            continue
        name, avail, limit, nodes, gres = f[:5]
        default = name.endswith("*")
        name = name.rstrip("*")
        p = parts.setdefault(name, {"name": name, "default": default, "available": avail, "time_limit": limit,
                                    "nodes": 0, "gres": []})
        p["nodes"] += int(nodes) if nodes.isdigit() else 0
        if gres and gres != "(null)" and gres not in p["gres"]:
            p["gres"].append(gres)
    return list(parts.values())


def parse_nodes(text: str) -> list[dict]:
    """``sinfo -h -N -o '%N|%R|%T|%G|%c|%m'`` -> one dict per node (merged across partitions)."""
    nodes: dict[str, dict] = {}
    for line in text.splitlines():
        f = line.strip().split("|")
        if len(f) < 6:
            continue
        name, part, state, gres, cpus, mem = f[:6]
        n = nodes.setdefault(name, {"name": name, "partitions": [], "state": state, "gres": gres,
                                    "cpus": int(cpus) if cpus.isdigit() else None,
                                    "memory_mb": int(mem) if mem.isdigit() else None})
        if part not in n["partitions"]:
            n["partitions"].append(part)
    return list(nodes.values())


def gpu_types(nodes: list[dict]) -> list[str]:
    """Typed GRES names (gpu:a100:4 -> a100); untyped gpu:4 gives none."""
    types = set()
    for n in nodes:
        for g in (n.get("gres") or "").split(","):
            parts = g.split("(")[0].split(":")
            if parts[0] == "gpu" and len(parts) == 3:
                types.add(parts[1])
    return sorted(types)


def collect(runner, timeout: float = 60) -> dict:
    """Run the probe commands; any failure says which command and where."""
    try:
        version_text = runner.run(["sinfo", "--version"], timeout=timeout).stdout
        config = parse_show_config(runner.run(["scontrol", "show", "config"], timeout=timeout).stdout)
        partitions = parse_partitions(runner.run(["sinfo", "-h", "-o", "%P|%a|%l|%D|%G"], timeout=timeout).stdout)
        nodes = parse_nodes(runner.run(["sinfo", "-h", "-N", "-o", "%N|%R|%T|%G|%c|%m"], timeout=timeout).stdout)
        srun_help = runner.run(["srun", "--help"], timeout=timeout, check=False)
        groups = topology_groups(runner, config.get("TopologyPlugin", ""), timeout)
    except CommandError as e:
        if e.returncode == 127:
            raise LauncherError(f"Slurm client commands are not installed on {e.where}: {e}") from None
        if "unable to contact slurm controller" in str(e).lower():  # slurmctld down: retrying later may work
            raise TransientError(f"cannot reach Slurm on {e.where}: {e}") from None
        raise LauncherError(f"cannot reach Slurm on {e.where}: {e}") from None
    except TransientError as e:  # the login node (SSH) or the controller did not answer: exit 4, as documented
        raise TransientError(f"cannot reach Slurm: {e}") from None
    version = parse_version(version_text)  # fails clearly on text that is not a Slurm version
    return {
        "slurm_version": re.search(r"\d+\.\d+\.\d+", version_text).group(0),
        "cluster": config.get("ClusterName", ""),
        "topology_plugin": config.get("TopologyPlugin", "(null)"),
        # {block or leaf switch: its number of nodes}: what layout.group_nodes is checked against
        "topology_groups": groups,
        "select_type": config.get("SelectType", ""),
        "preempt_type": config.get("PreemptType", ""),
        "preempt_mode": config.get("PreemptMode", ""),
        "job_requeue": config.get("JobRequeue", ""),
        "min_job_age": config.get("MinJobAge", ""),
        "accounting": config.get("AccountingStorageType", ""),
        "jobcomp": config.get("JobCompType", ""),
        "jobcomp_loc": config.get("JobCompLoc", ""),
        "max_array_size": int(config["MaxArraySize"]) if config.get("MaxArraySize", "").isdigit() else None,
        "partitions": partitions,
        "nodes": nodes,
        "gpu_types": gpu_types(nodes),
        "pyxis": "--container-image" in (srun_help.stdout + srun_help.stderr),
        "json_status": json_status_parser(runner, version, timeout),
    }


def topology_groups(runner, plugin: str, timeout: float) -> dict:
    """{block (topology/block) or leaf switch (topology/tree): its number of nodes}, from
    ``scontrol show topology``; {} without such a plugin or when the command fails."""
    if "block" not in plugin and "tree" not in plugin:
        return {}
    r = runner.run(["scontrol", "show", "topology"], timeout=timeout, check=False)
    return group_sizes(parse_show_topology(r.stdout)) if r.returncode == 0 else {}


def json_status_parser(runner, version: tuple, timeout: float) -> str:
    """Whether the status path may read ``scontrol --json`` (23.02+): the data parser its
    answer names (``data_parser/v0.0.42`` on 24.11), else "" (22.05 has no ``--json``)."""
    if version < SINCE:
        return ""
    try:
        r = runner.run(PROBE_ARGV, timeout=timeout, check=False)
    except (CommandError, TransientError):
        return ""
    return probed_parser(r.returncode, r.stdout)


def pyslurm_note(over_ssh: bool, slurm_version: str) -> str:
    """Why Slurm is driven through its commands and not pyslurm on this target. PyPI's
    pyslurm exists only for Slurm 25.11 (and 17/18), so no pyslurm path can be tested
    against the 22.05/24.11 clusters here; the CLI path is the one that is tested."""
    if over_ssh:
        return "not used: the target is reached over SSH"
    try:
        import pyslurm  # optional
    except Exception as e:
        return f"not installed ({type(e).__name__})"
    ver = getattr(pyslurm, "__version__", "?")
    match = ver.split(".")[:2] == (slurm_version or "").split(".")[:2]
    return (f"pyslurm {ver} {'matches' if match else 'does not match'} Slurm {slurm_version}; "
            f"not used: launcher drives Slurm through its commands")
