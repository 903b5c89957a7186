"""Rank order from the topology: the nodes of one block (topology/block) or leaf switch
(topology/tree) get consecutive node ranks, so a model-parallel group of consecutive ranks
stays inside one block where the allocation allows it.

Stdlib only: runs inside the job. The Slurm backend stages the job-side zipapp with this
module as a job-side command (``launcher.jobside.zipapp``), and the batch script of a job of
several nodes runs ``eval "$(launcher_job.pyz node-order)"`` once per start, before the
checkpoint helper reads the node list. It prints, shell-quoted::

    export LAUNCHER_NODE_HOSTS=node1,node3,node2,node4   # the job's nodes in rank order
    export MASTER_ADDR=node1                             # rank 0 (torchrun's static rendezvous)
    export LAUNCHER_NODE_ORDER='node1=0:block1:2 node3=1:block1:2 ...'   # host=rank:group:nodes

from which every task of the job reads its own ``LAUNCHER_NODE_RANK``, ``LAUNCHER_NODE_BLOCK``
and ``LAUNCHER_NODES_PER_BLOCK`` (the job's nodes in that block) by its ``SLURMD_NODENAME``
(templates/sbatch.sh.j2).

Where each node is learned from: ``scontrol show topology`` (22.05 topology/tree prints one
``SwitchName=... Level=N Nodes=...`` line per switch, 24.11 topology/block one
``BlockName=... Nodes=...`` line per block): a node's group is the lowest-level switch, or
the block, that lists it. When that names none of the job's nodes and the job's tasks see a
``SLURM_TOPOLOGY_ADDR`` (``spine.leaf1.node1``, ``block1.node1``), one ``srun`` step reads it
on every node instead; the group is the address's part before the node. With neither, the
order is hostname order and the group is empty. Ordering never fails a job: a
problem only prints a line and keeps hostname order.

The ordering itself is :func:`order_nodes`, a pure function: each group's nodes consecutive
and in hostname order, the groups in the hostname order of their first node.
"""

from __future__ import annotations
import argparse

import itertools
import os
import re
import shlex
import subprocess
import sys

COMMAND = "node-order"  # the job-side command (launcher.jobside.cli)
HELP = "Slurm: the job's nodes in topology order (each block's or leaf switch's nodes consecutive)"

_FIELD = re.compile(r"(\w+)=(\S*)")


def expand_hostlist(expr: str) -> list:
    """A Slurm hostlist (``node[1-3,7],gpu-a[01-02]b[1-2],login``) -> its names, in order.

    Zero padding follows the range's lower bound (``[01-10]`` -> 01..10); several bracket
    groups in one name expand as Slurm does (the last one varies fastest)."""
    names = []
    for item in _split_top(expr or ""):
        parts = re.split(r"(\[[^\]]*\])", item)
        choices = []
        for part in parts:
            if part.startswith("[") and part.endswith("]"):
                choices.append(_expand_ranges(part[1:-1]))
            elif part:
                choices.append([part])
        names.extend("".join(p) for p in itertools.product(*choices))
    return names


def _split_top(expr: str) -> list:
    """Split at the commas outside brackets."""
    out, depth, cur = [], 0, ""
    for ch in expr.strip():
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    out.append(cur)
    return [s.strip() for s in out if s.strip()]


def _expand_ranges(spec: str) -> list:
    out = []
    for r in spec.split(","):
        lo, _, hi = r.strip().partition("-")
        if not lo.isdigit() or (hi and not hi.isdigit()):
            raise ValueError("not a hostlist range: %r" % r)
        out += ["%0*d" % (len(lo), i) for i in range(int(lo), int(hi or lo) + 1)]
    return out


def parse_show_topology(text: str) -> list:
    """``scontrol show topology`` -> [(kind, name, level, [nodes])], kind "block" or "switch".

    24.11 topology/block: ``BlockName=block1 BlockIndex=0 Nodes=node[1-2]`` (level 0);
    topology/tree (22.05, 24.11): ``SwitchName=leaf1 Level=0 LinkSpeed=1 Nodes=node[1-2]``
    (a higher switch lists the nodes below it too). Other lines (aggregated blocks, notes)
    are skipped."""
    records = []
    for line in (text or "").splitlines():
        fields = dict(_FIELD.findall(line))
        if "BlockName" in fields:
            kind, name = "block", fields["BlockName"]
        elif "SwitchName" in fields:
            kind, name = "switch", fields["SwitchName"]
        else:
            continue
        level = int(fields["Level"]) if fields.get("Level", "").isdigit() else 0
        try:
            nodes = expand_hostlist(fields.get("Nodes", ""))
        except ValueError:
            continue
        records.append((kind, name, level, nodes))
    return records


def groups_of(records: list) -> dict:
    """{node: its group}: the block that lists it, else its lowest-level switch (leaf)."""
    best = {}
    for kind, name, level, nodes in records:
        for n in nodes:
            if n not in best or level < best[n][0]:
                best[n] = (level, name)
    return {n: name for n, (_, name) in best.items()}


def group_sizes(records: list) -> dict:
    """{group: its number of nodes} for the groups nodes belong to (blocks, leaf switches)."""
    sizes = {}
    for group in groups_of(records).values():
        sizes[group] = sizes.get(group, 0) + 1
    return sizes


def groups_from_addrs(text: str) -> dict:
    """Lines "NODE SLURM_TOPOLOGY_ADDR" (``node1 spine.leaf1.node1``) -> {node: leaf/block}."""
    out = {}
    for line in (text or "").splitlines():
        f = line.split()
        if len(f) == 2:
            parts = f[1].split(".")
            if len(parts) >= 2:
                out[f[0]] = parts[-2]
    return out


def host_key(host: str) -> tuple:
    """Hostname order as Slurm lists nodes: digit runs compare as numbers (node2 < node10)."""
    return tuple((0, int(p), p) if p.isdigit() else (1, 0, p) for p in re.findall(r"\d+|\D+", host))


def order_nodes(hosts: list, group_of: dict) -> list:
    """Pure: HOSTS -> [(host, group)] in rank order, each group's hosts consecutive.

    Within a group the hosts are in hostname order; the groups come in the hostname order of
    their first host. A host with no known group is in group "" (with the others that have
    none): with no topology at all the order is plain hostname order."""
    hosts = sorted(set(hosts), key=host_key)
    first = {}
    for i, h in enumerate(hosts):
        first.setdefault(group_of.get(h, ""), i)
    return sorted(((h, group_of.get(h, "")) for h in hosts), key=lambda hg: first[hg[1]])


def node_env(order: list) -> list:
    """[(name, value)] to export for ORDER ([(host, group)] in rank order)."""
    count = {}
    for _, g in order:
        count[g] = count.get(g, 0) + 1
    table = " ".join("%s=%d:%s:%d" % (h, r, g, count[g]) for r, (h, g) in enumerate(order))
    return [("LAUNCHER_NODE_HOSTS", ",".join(h for h, _ in order)), ("MASTER_ADDR", order[0][0] if order else ""),
            ("LAUNCHER_NODE_ORDER", table)]


def crossing_groups(order: list, group_nodes: int) -> int:
    """How many runs of GROUP_NODES consecutive ranks of ORDER ([(host, group)]) span two groups."""
    runs = [order[i:i + group_nodes] for i in range(0, len(order), group_nodes)]
    return sum(1 for run in runs if len({g for _, g in run}) > 1)


def summary(order: list, source: str) -> str:
    groups = {}
    for h, g in order:
        groups.setdefault(g or "-", []).append(h)
    return "launcher: node order from %s: %s" % (source, "; ".join("%s: %s" % (g, ",".join(hs))
                                                                    for g, hs in groups.items()))


# ---- the thin shell around it ---------------------------------------------------------------
def _run(argv, timeout=30):
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return p.stdout if p.returncode == 0 else None


def _hosts(env) -> list:
    listed = [h for h in env.get("LAUNCHER_NODE_HOSTS", "").split(",") if h]
    if listed:
        return listed
    try:
        return expand_hostlist(env.get("SLURM_JOB_NODELIST", ""))
    except ValueError:
        return []


def learn_groups(hosts: list, env) -> tuple:
    """({host: group}, source) for HOSTS, from scontrol, else SLURM_TOPOLOGY_ADDR on each node."""
    found = groups_of(parse_show_topology(_run(["scontrol", "show", "topology"]) or ""))
    mine = {h: found[h] for h in hosts if h in found}
    if mine:
        return mine, "scontrol show topology"
    if env.get("SLURM_TOPOLOGY_ADDR") and len(hosts) > 1:
        out = _run(["srun", "--ntasks-per-node=1", "--nodes=%d" % len(hosts), "--ntasks=%d" % len(hosts),
                    "bash", "-c", 'echo "$SLURMD_NODENAME $SLURM_TOPOLOGY_ADDR"'], timeout=120)
        mine = {h: g for h, g in groups_from_addrs(out or "").items() if h in hosts}
        if mine:
            return mine, "SLURM_TOPOLOGY_ADDR"
    return {}, "hostnames (no topology names these nodes)"


def run(args, env=None) -> int:
    env = os.environ if env is None else env
    hosts = _hosts(env)
    if not hosts:
        print("launcher: node-order: no node list (SLURM_JOB_NODELIST): ranks stay Slurm's", file=sys.stderr)
        return 0
    group_of, source = learn_groups(hosts, env)
    order = order_nodes(hosts, group_of)
    print(summary(order, source), file=sys.stderr)
    sys.stdout.write("".join("export %s=%s\n" % (k, shlex.quote(v)) for k, v in node_env(order)))
    return 0


def add_arguments(parser) -> None:
    pass


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog=COMMAND, description=HELP)
    add_arguments(ap)
    return run(ap.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
