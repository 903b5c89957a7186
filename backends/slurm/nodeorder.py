"""Rank order from the topology: the nodes of one block (topology/block) or leaf switch
(topology/tree) get consecutive node ranks, so a model-parallel group of consecutive ranks
stays inside one block where the allocation allows it.

Stdlib only: runs inside the job. The Slurm backend stages the job-side zipapp with this
module as a job-side command (``launcher.jobside.zipapp``), and the batch script of a job of
several nodes runs ``eval "$(launcher_job.pyz node-order [--group-nodes N])"`` once per start
(N: the spec's ``layout.group_nodes``, given when it is above 1), before the checkpoint helper
reads the node list. It prints, shell-quoted::

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

The ordering itself is :func:`order_nodes`, a pure function: as few model-parallel groups of
N consecutive ranks span two blocks as the allocation allows; each block's nodes consecutive
(in hostname order) where that costs no crossing, the blocks in the hostname order of their
first node, except that blocks holding a number of the job's nodes that N does not divide come
last. With N = 1 every block's nodes are consecutive, the blocks in that order.
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


def order_nodes(hosts: list, group_of: dict, group_nodes: int = 1) -> list:
    """Pure: HOSTS -> [(host, group)] in rank order, so that as few runs of GROUP_NODES
    consecutive ranks (one model-parallel group each) as possible span two groups (blocks or
    leaf switches), and each group's hosts are consecutive where that costs no crossing.

    A host with no known group is in group "" (with the others that have none): with no
    topology at all the order is plain hostname order. With GROUP_NODES 1 (or every group
    holding a multiple of it) each group's hosts are consecutive, in hostname order, and the
    groups come in the hostname order of their first host.

    Otherwise a group of s hosts holds s // N whole runs (N = GROUP_NODES) and s % N hosts
    over. No order keeps more runs inside one group than the sum of s // N, plus the last,
    short run when N does not divide the job's hosts and a group has that many over; this
    order reaches it: the whole runs start at multiples of N and the hosts over are packed
    together after them, so only runs made of those cross. To keep groups consecutive, the
    groups with hosts over come last: the first of them whole (its runs, then its hosts over),
    the hosts over of the others packed, and one more group whole at the end (its hosts over,
    then its runs; or the group that fills the short run). Two groups whose hosts over make
    exactly one run stay whole side by side. Only a further group with both whole runs and
    hosts over is split in two (its runs in place, its hosts over in the packed part).
    """
    n = max(1, int(group_nodes or 1))
    blocks = {}  # group -> its hosts in hostname order; the groups in the order of their first host
    for h in sorted(set(hosts), key=host_key):
        blocks.setdefault(group_of.get(h, ""), []).append(h)
    over = {g: len(hs) % n for g, hs in blocks.items()}
    whole = {g: len(hs) - over[g] for g, hs in blocks.items()}
    short = sum(len(hs) for hs in blocks.values()) % n  # the last run's size when N does not divide the job
    # the group that ends the order: it fills the short run by itself where one can
    last = next((g for g in reversed(list(blocks)) if short and over[g] >= short), None)
    split = [g for g in blocks if whole[g] and over[g] and g != last]  # both runs and hosts over
    pair_of = _pairs(split, over, n)
    split = [g for g in split if g not in pair_of and g not in pair_of.values()]
    first = split[0] if split else None
    if last is None and len(split) > 1:
        last = split[-1]  # (with a short run it fills: it gives up one whole run for it, no crossing more)
    order = _arranged(blocks, over, whole, pair_of, split, first, last)
    return [(h, group_of.get(h, "")) for h in order]


def _pairs(split: list, over: dict, n: int) -> dict:
    """{a: b} for groups of SPLIT (in order) whose hosts over make exactly one run of N together."""
    pair_of, paired = {}, set()
    for i, a in enumerate(split):
        if a in paired:
            continue
        b = next((b for b in split[i + 1:] if b not in paired and over[a] + over[b] == n), None)
        if b is not None:
            pair_of[a] = b
            paired |= {a, b}
    return pair_of


def _arranged(blocks: dict, over: dict, whole: dict, pair_of: dict, split: list, first, last) -> list:
    """The hosts in rank order (``order_nodes``): the groups without hosts over (and the pairs,
    and the whole runs of the groups split in two) in place, then FIRST whole, the other hosts
    over packed, and LAST whole at the end."""
    paired = set(pair_of) | set(pair_of.values())
    order = []
    for g, hs in blocks.items():
        if g in pair_of:
            order += hs + blocks[pair_of[g]]
        elif not over[g] or (g in split[1:] and g != last):
            order += hs[:whole[g]]  # its whole runs here, its hosts over packed below
    if first is not None and first != last:
        order += blocks[first]
    for g, hs in blocks.items():
        if over[g] and g not in paired and g not in (first, last):
            order += hs[whole[g]:]
    if last is not None:
        order += blocks[last]
    return order


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
    order = order_nodes(hosts, group_of, getattr(args, "group_nodes", 1) or 1)
    print(summary(order, source), file=sys.stderr)
    sys.stdout.write("".join("export %s=%s\n" % (k, shlex.quote(v)) for k, v in node_env(order)))
    return 0


def add_arguments(parser) -> None:
    parser.add_argument("--group-nodes", type=int, default=1, metavar="N",
                        help="nodes of one model-parallel group (layout.group_nodes): the order keeps as few "
                             "runs of N consecutive ranks across two blocks as the allocation allows (default 1)")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog=COMMAND, description=HELP)
    add_arguments(ap)
    return run(ap.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
