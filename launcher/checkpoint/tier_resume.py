"""Where a start resumes from across the checkpoint tiers, and the view it restores.

Stdlib only (runs on compute nodes). ``resolve`` (one machine's view of the node-local
directories) and ``resolve_hosts`` (from the holdings records and the new allocation's host
list) pick the newest step, not stale, for which *every* rank's part is complete in a tier the
new allocation reaches: its node's local tier, else the next node's peer copy, else ROOT. The
attempt's tier is the farthest tier any part comes from. ``materialize`` then builds the
directory the program reads: node-local files hard-linked, others linked or fetched, and a copy
that went between its check and its link taken from the next tier.

Only this run's parts count (``tiers.RunCheck``: the layout is bound to ROOT, which names the
directory of its run under each node's local tier, and each part's COMMIT.json must name ROOT
and its generation's start as GENERATIONS.json records it): a part of another run, copied by
hand or left by a root made again, is logged as skipped and never restored; so are the parts
of the earlier layout that named no run.

The layout of the tiers, the parts and the holdings records are ``launcher.checkpoint.tiers``.
"""

from __future__ import annotations

import errno
import json
import os
import socket

from launcher.checkpoint.contract import COMMIT, parse_manifest, parse_step_dir, read_generations
from launcher.checkpoint.discovery import STALE, Entry, latest
from launcher.checkpoint.errors import CheckpointError
from launcher.checkpoint.tiers import (DURABLE, LOCAL, PARTS, PEER, RESUME, RunCheck, durable_committed, farthest,
                                       foreign, legacy_parts, local_parts, part_state, rank_stores, read_holdings)

LEGACY = ("written by the earlier local-tier layout, which names no run (it may be another job's): not restored and "
          "left in place; remove it once no job of an older launcher uses this local path")

# ---------------------------------------------------------------- resume
class Resolution:
    """What a start resumes from: NAME (step STEP of generation GENERATION), the farthest TIER
    used, and for every rank (node, tier, where) of its part. ``path`` is ROOT/NAME."""

    def __init__(self, name, step, generation, tier, path, world, sources):
        self.name, self.step, self.generation, self.tier = name, step, generation, tier
        self.path, self.world, self.sources = path, world, sources

    def to_doc(self) -> dict:
        return {"name": self.name, "step": self.step, "generation": self.generation, "tier": self.tier,
                "path": self.path, "world": self.world,
                "sources": {str(r): dict({"node": src[0], "tier": src[1], "where": src[2]}, **(src[3] if len(src) > 3
                                                                                            else {}))
                            for r, src in sorted(self.sources.items())}}


def _skipped(log, path, name, why) -> None:
    """Note in LOG (the start's list of what it skipped, printed by resume-env) a local part
    that is not restored."""
    if log is None:
        return
    sg = parse_step_dir(name) or (None, None)
    log.append(Entry(name, path, sg[0], sg[1], STALE, why))


def _legacy(layout, nodes, log) -> None:
    for node in nodes:
        for _tier, _r, path in legacy_parts(layout.template, node):
            _skipped(log, path, os.path.basename(path), LEGACY)


def _candidates(durable, layout, holdings, check, log=None):
    """({name: {rank: node}}, [names]): steps some rank holds locally or as a peer copy, from
    the holdings records and from the directories of this run this process can reach; and
    every step name found in those directories (parts of another run among them: a new
    generation is numbered above them, so its parts never clash with theirs). A committed part
    of another run is logged in LOG and not a candidate."""
    cands, names = {}, []
    for node, doc in holdings.items():
        for name, st in doc["steps"].items():
            if parse_step_dir(name) is None or not isinstance(st, dict):
                continue
            for t in (LOCAL, PEER):
                for r in st.get(t) or []:
                    if isinstance(r, int):
                        cands.setdefault(name, {}).setdefault(r, node)
    for node in range(layout.nodes):
        if not layout.reachable(node):
            continue
        for tier, r, store in rank_stores(layout.base(node)):
            owner = node if tier == LOCAL else (node - 1) % layout.nodes
            for _s, _g, name in local_parts(store):
                names.append(name)
                doc, _raw = part_state(store, name)
                why = foreign(doc, check) if doc is not None else ""
                if why:
                    _skipped(log, store.url(name), name, why)
                    continue
                cands.setdefault(name, {}).setdefault(r, owner)
    return cands, names


def _world(holdings, name, rank_nodes, layout, check):
    """How many ranks wrote step NAME: from a part manifest of this run this process reaches,
    else the holdings records, else this job's world."""
    for r, node in sorted(rank_nodes.items()):
        for store, reach in ((layout.own(node, r), node), (layout.peer(node, r), layout.peer_node(node))):
            if layout.reachable(reach):
                doc, _raw = part_state(store, name, check)
                w = ((doc or {}).get("part") or {}).get("world")
                if isinstance(w, int) and w > 0:
                    return w
    for doc in holdings.values():
        w = (doc["steps"].get(name) or {}).get("world")
        if isinstance(w, int) and w > 0:
            return w
    return layout.world


def _find_part(layout, name, rank, node, durable_ok, durable, check):
    """(tier, where) of the nearest complete copy of this run's RANK's part NAME, or None."""
    own = layout.own(node, rank)
    if layout.reachable(node) and part_state(own, name, check)[0] is not None:
        return LOCAL, own.url(name)
    if layout.peers:
        peer = layout.peer(node, rank)
        if layout.reachable(layout.peer_node(node)) and part_state(peer, name, check)[0] is not None:
            return PEER, peer.url(name)
    if durable_ok:
        return DURABLE, durable.url(name)
    return None


def _durable(newest):
    """The Resolution of NEWEST, the newest step committed in ROOT (every part from there), or
    None (a fresh start)."""
    if newest is None:
        return None
    world = (newest.manifest or {}).get("parts") or 1
    return Resolution(newest.name, newest.step, newest.generation, DURABLE, newest.path, world,
                      {r: (None, DURABLE, newest.path) for r in range(int(world))})


def _resumable(names, newest, gens):
    """(name, step, generation) of each step among NAMES a start may resume from, newest first:
    not stale (GENS), and not older than NEWEST (the newest step committed in ROOT, or None)."""
    for name in sorted(names, key=parse_step_dir, reverse=True):
        step, gen = parse_step_dir(name)
        if newest is not None and (newest.step, newest.generation or 0) > (step, gen):
            return
        if not gens.stale_reason(step, gen):
            yield name, step, gen


def _note_max_generation(seen: dict, names: list) -> None:
    """SEEN's "max_generation" raised to the highest generation among the step NAMES."""
    seen["max_generation"] = max([seen.get("max_generation", -1)] + [parse_step_dir(n)[1] for n in names])


def _resolution(durable, name, step, gen, world, sources) -> Resolution:
    """The Resolution of step NAME with each rank's part from SOURCES: its tier is the farthest they use."""
    return Resolution(name, step, gen, farthest([src[1] for src in sources.values()]), durable.url(name), world,
                      sources)


def resolve(durable, layout, gens=None, verify=False, log=None, seen=None):
    """The Resolution a new start resumes from, or None (fresh start). Never a stale fork,
    never a step with a rank's part missing from every reachable tier, never another run's
    part (LOG gets what was skipped), and never older than a newer step that is complete
    somewhere reachable."""
    layout = layout.bind(durable.root)
    gens = gens if gens is not None else read_generations(durable)
    check = RunCheck(durable.root, gens)
    seen = seen if seen is not None else {}
    newest = latest(durable, verify=verify, gens=gens, log=log, seen=seen)
    holdings = read_holdings(durable)
    cands, names = _candidates(durable, layout, holdings, check, log)
    _legacy(layout, [n for n in range(layout.nodes) if layout.reachable(n)], log)
    _note_max_generation(seen, list(cands) + names)
    for name, step, gen in _resumable(cands, newest, gens):
        durable_ok = newest is not None and newest.name == name
        world = _world(holdings, name, cands[name], layout, check)
        sources = {}
        for r in range(world):
            node = cands[name].get(r)
            found = _find_part(layout, name, r, node, durable_ok, durable, check) if node is not None else \
                ((DURABLE, durable.url(name)) if durable_ok else None)
            if found is None:
                break
            sources[r] = (node, found[0], found[1])
        else:
            return _resolution(durable, name, step, gen, world, sources)
    return _durable(newest)


def allocation_hosts():
    """The hosts of this allocation in node-rank order: $LAUNCHER_NODE_HOSTS (comma-separated;
    a backend's job script sets it, the Slurm one from its scheduler's node list); None when
    it is not set."""
    v = os.environ.get("LAUNCHER_NODE_HOSTS", "").strip()
    return [h for h in v.split(",") if h] or None


def _host_rows(holdings: dict) -> dict:
    """{step name: {"world", LOCAL: {rank: host}, PEER: {rank: host}, "node": {rank: node}}}:
    which host holds each rank's copy, by tier, from the HOLDINGS records of nodes that each
    have their own disk (``read_holdings``)."""
    rows: dict = {}
    for node, doc in holdings.items():
        for name, st in doc["steps"].items():
            if parse_step_dir(name) is None or not isinstance(st, dict):
                continue
            row = rows.setdefault(name, {"world": st.get("world"), LOCAL: {}, PEER: {}, "node": {}})
            for t in (LOCAL, PEER):
                for r, h in ((st.get("hosts") or {}).get(t) or {}).items():
                    if str(r).isdigit() and isinstance(h, str):
                        row[t][int(r)] = h
                        row["node"].setdefault(int(r), node)
    return rows


def _host_tier(own, peer, me, alive: set, durable_ok: bool):
    """(tier, {"own" | "peer": host}) of a rank to run on host ME whose own and peer copies the
    hosts OWN and PEER hold (None: no copy), the hosts among them in the allocation ALIVE: local
    when ME holds its own copy, peer when a host of the allocation holds one, else durable when
    ROOT committed the step (DURABLE_OK); None when no tier has it."""
    held = {k: h for k, h in (("own", own), ("peer", peer)) if h in alive}
    tier = LOCAL if own is not None and own == me else PEER if held else DURABLE if durable_ok else None
    return None if tier is None else (tier, held)


def _host_sources(durable, layout, name: str, row: dict, world: int, hosts: list, durable_ok: bool):
    """{rank: (node, tier, where, {"hosts": held})} for every rank of step NAME (ROW of
    ``_host_rows``) on the allocation HOSTS (in node order), or None when a rank's part is in
    no tier it reaches."""
    alive, rpn = set(hosts), layout.ranks_per_node
    sources = {}
    for r in range(world):
        me = hosts[r // rpn] if r // rpn < len(hosts) else None
        found = _host_tier(row[LOCAL].get(r), row[PEER].get(r), me, alive, durable_ok)
        if found is None:
            return None
        tier, held = found
        where = "%s:%s" % (held.get("own") or held.get("peer"), layout.base()) if held else durable.url(name)
        sources[r] = (row["node"].get(r), tier, where, {"hosts": held})
    return sources


def resolve_hosts(durable, layout, hosts, gens=None, verify=False, log=None, seen=None):
    """``resolve`` for a job whose nodes each have their own disk (``Layout.by_host``), from the
    holdings records only (no other node is reachable by path): the newest step, not stale,
    whose every rank's part is held by a host of the new allocation HOSTS (in node order) or
    committed in ROOT. A rank's tier is local when the host that will run it holds its copy,
    peer when another host of the allocation does, durable otherwise. Each source names the
    hosts holding the copies (``hosts``), which ``jobside.restore`` tries in order."""
    layout = layout.bind(durable.root)
    gens = gens if gens is not None else read_generations(durable)
    seen = seen if seen is not None else {}
    newest = latest(durable, verify=verify, gens=gens, log=log, seen=seen)
    rows = _host_rows(read_holdings(durable))
    names = _own_disk(layout, rows, set(hosts), RunCheck(durable.root, gens), log)
    if rows or names:
        _note_max_generation(seen, list(rows) + names)
    for name, step, gen in _resumable(rows, newest, gens):
        row = rows[name]
        world = row["world"] if isinstance(row["world"], int) and row["world"] > 0 else layout.world
        sources = _host_sources(durable, layout, name, row, world, hosts, newest is not None and newest.name == name)
        if sources is not None:
            return _resolution(durable, name, step, gen, world, sources)
    return _durable(newest)


def _own_disk(layout, rows, alive, check, log=None) -> list:
    """Add to ROWS this run's parts committed on this host's own disk (a part committed just
    before a crash may not be in the holdings record yet), when this host is one of ALIVE;
    another run's are logged in LOG. Returns every step name found there."""
    me = socket.gethostname()
    if me not in alive:
        return []
    _legacy(layout, [layout.node], log)
    names = []
    for tier, r, store in rank_stores(layout.base()):
        for _s, _g, name in local_parts(store):
            names.append(name)
            doc, _raw = part_state(store, name)
            if doc is None:
                continue
            why = foreign(doc, check)
            if why:
                _skipped(log, store.url(name), name, why)
                continue
            part = doc.get("part") or {}
            row = rows.setdefault(name, {"world": part.get("world"), LOCAL: {}, PEER: {}, "node": {}})
            row[tier].setdefault(r, me)
            row["node"].setdefault(r, part.get("node"))
    return names


def resolve_for(durable, layout, gens=None, verify=False, log=None, seen=None):
    """``resolve_hosts`` for a job whose nodes each have their own disk when the allocation's
    hosts are known, ``resolve`` otherwise."""
    hosts = allocation_hosts() if layout.by_host else None
    if hosts:
        return resolve_hosts(durable, layout, hosts, gens, verify, log, seen)
    return resolve(durable, layout, gens, verify, log, seen)


def tier_table(durable) -> dict:
    """{step dir name: {"step", "generation", "world", "local": [ranks], "peer": [ranks],
    "durable": "committed" | "parts R/W" | None, and for nodes with their own disks "hosts":
    {tier: {rank: host}}} from the holdings records and ROOT, newest
    first: what ``launcher checkpoints ROOT --tiers`` shows. Holdings are what the nodes last
    recorded (a lost node's record still names its local copies)."""
    rows = {}
    for _node, doc in read_holdings(durable).items():
        for name, st in doc["steps"].items():
            sg = parse_step_dir(name)
            if sg is None or not isinstance(st, dict):
                continue
            row = rows.setdefault(name, {"step": sg[0], "generation": sg[1], "world": st.get("world"),
                                         LOCAL: [], PEER: [], DURABLE: None})
            for t in (LOCAL, PEER):
                row[t] = sorted(set(row[t]) | set(r for r in st.get(t) or [] if isinstance(r, int)))
                held = (st.get("hosts") or {}).get(t)  # nodes with their own disks: which host holds it
                if isinstance(held, dict) and held:
                    row.setdefault("hosts", {}).setdefault(t, {}).update(held)
    for name, row in rows.items():
        if durable_committed(durable, name):
            row[DURABLE] = "committed"
        else:
            n = len([k for k in durable.list_tree(name + "/" + PARTS) if k.endswith(".json")])
            row[DURABLE] = "parts %d/%s" % (n, row["world"] or "?") if n else None
    return dict(sorted(rows.items(), key=lambda kv: parse_step_dir(kv[0]), reverse=True))


def write_resolution(durable, generation, res) -> None:
    durable.put("%s/g%d.json" % (RESUME, int(generation)), (json.dumps(res.to_doc(), indent=1) + "\n").encode())


def read_resolution(durable, generation):
    raw, _ = durable.read("%s/g%d.json" % (RESUME, int(generation)))
    try:
        doc = json.loads(raw.decode("utf-8")) if raw else None
    except ValueError:
        return None
    return doc if isinstance(doc, dict) else None


# ---------------------------------------------------------------- restore view
def _part_files(where_store, name, check=None):
    doc, raw = part_state(where_store, name, check)
    return None if doc is None else doc["files"]


def _nearer_tiers(layout, found, node, r) -> list:
    """[(tier, store)] where rank R's part (written on NODE, None: not known) may be, nearest
    first, before ROOT: FOUND's copy when a caller fetched them, else the node's local tier and
    its peer copy."""
    if found is not None:
        return [found[r]] if r in found else []
    if node is not None:
        return [(LOCAL, layout.own(node, r))] + ([(PEER, layout.peer(node, r))] if layout.peers else [])
    return []


def _link_part(placed, dest, name, files, store) -> bool:
    """Link the FILES of part NAME in STORE into DEST; False, with none of them left in DEST,
    when the copy went between its check and its link (a superseded generation's local gc, once
    ROOT committed it): the caller takes the next tier, never a torn view."""
    new = []
    try:
        for f in files:
            if _place(placed, dest, f, store.local_path(name + "/" + f["path"])):
                new.append(f["path"])
    except FileNotFoundError:
        for q in new:
            placed.pop(q, None)
            _unlink_quietly(os.path.join(dest, *q.split("/")))
        return False
    return True


def _from_nearer_tier(tried, name, check, placed, dest):
    """The tier of the first of TRIED whose part NAME (of this run: CHECK) is complete and was
    linked into DEST, or None."""
    for tier, store in tried:
        files = _part_files(store, name, check)
        if files is not None and _link_part(placed, dest, name, files, store):
            return tier
    return None


def _place_durable(durable, name, rank, placed, dest) -> None:
    """Place into DEST every file of ROOT's committed NAME not placed yet (linked from a local
    ROOT, downloaded from S3). CheckpointError when ROOT has not committed it: RANK's part is
    then complete nowhere this node reaches."""
    raw, _ = durable.read(name + "/" + COMMIT)
    if raw is None:
        raise CheckpointError("%s: rank %d's part is complete in no tier this node reaches (local, peer, "
                              "durable): refusing a torn restore" % (durable.url(name), rank))
    doc = parse_manifest(raw, durable.url(name + "/" + COMMIT), *parse_step_dir(name))
    missing = [f for f in doc["files"] if f["path"] not in placed]
    if durable.is_local:
        for f in missing:
            _place(placed, dest, f, durable.local_path(name + "/" + f["path"]))
    else:
        durable.download_files(name, [f["path"] for f in missing], dest)
        for f in missing:
            placed[f["path"]] = f["size"]


def _check_sizes(placed, dest) -> None:
    """CheckpointError unless every file PLACED in DEST has the size its manifest lists."""
    for p, size in placed.items():
        got = os.path.getsize(os.path.join(dest, *p.split("/")))
        if got != size:
            raise CheckpointError("%s/%s: size %d, its manifest lists %d" % (dest, p, got, size))


def materialize(durable, layout, doc, dest, found=None, check=None) -> dict:
    """Fill DEST with every file of the checkpoint DOC (a ``read_resolution`` document) resolved
    to: for each rank's part, the nearest complete copy this process reaches (the planned one,
    else the node's local tier, the peer copy, then ROOT). Files on a reachable path are linked
    (read in place), files in an S3 root downloaded. Returns {rank: tier used}. CheckpointError
    when a part is complete nowhere (never a torn view). FOUND ({rank: (tier, store)}, from a
    caller that fetched copies over the network) replaces the path lookup: a rank it lacks
    comes from ROOT. A copy of another run (CHECK, by default ROOT's) is never used."""
    layout = layout.bind(durable.root)
    check = check if check is not None else RunCheck(durable.root, read_generations(durable))
    name = doc["name"]
    os.makedirs(dest, exist_ok=True)
    tiers, placed, durable_placed = {}, {}, False
    for r in range(int(doc.get("world") or 1)):
        node = ((doc.get("sources") or {}).get(str(r)) or {}).get("node")
        tier = _from_nearer_tier(_nearer_tiers(layout, found, node, r), name, check, placed, dest)
        if tier is None:
            if not durable_placed:
                _place_durable(durable, name, r, placed, dest)
                durable_placed = True
            tier = DURABLE
        tiers[r] = tier
    _check_sizes(placed, dest)
    return tiers


def _place(placed, dest, f, src) -> bool:
    """Link SRC into DEST as F's path; False when another rank's part placed it already.
    A hard link where SRC is on the same filesystem (the node-local tiers): the file stays
    readable whatever its tier deletes meanwhile; a symbolic link across filesystems (a
    shared ROOT, which no generation's gc prunes below a step a later one resumes from).
    FileNotFoundError when SRC is gone."""
    p = f["path"]
    if p in placed:
        if placed[p] != f["size"]:
            raise CheckpointError("%s: written by two ranks with different sizes" % p)
        return False
    target = os.path.join(dest, *p.split("/"))
    os.makedirs(os.path.dirname(target), exist_ok=True)
    _unlink_quietly(target)
    try:
        os.link(src, target)
    except OSError as e:
        if e.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.EACCES):
            raise   # FileNotFoundError (ENOENT) among them: the copy is gone
        if not os.path.lexists(src):
            raise FileNotFoundError(errno.ENOENT, "gone", src) from e
        os.symlink(os.path.abspath(src), target)
    placed[p] = f["size"]
    return True


def _unlink_quietly(path):
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


__all__ = ["Resolution", "resolve", "resolve_hosts", "resolve_for", "allocation_hosts", "tier_table",
           "write_resolution", "read_resolution", "materialize"]
