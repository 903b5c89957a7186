"""Multi-tier checkpoints: commit on node-local disk, copy to the next node, drain to the root.

Stdlib only (runs on compute nodes). The durable ROOT keeps the contract of
``launcher.checkpoint.contract`` unchanged: ``ROOT/step-N.gG/`` with every rank's files and
one COMMIT.json, written last, create-only. What is added around it::

    <local of node i>/r<R>/step-N.gG/...           rank R's part, committed on node i (COMMIT.json,
                                                   same create-only manifest, plus "part")
    <local of node i+1>/peer/r<R>/step-N.gG/...    the copy of it on the next node (peers: 1)
    ROOT/step-N.gG/<rank R's files>                uploaded by rank R's drainer
    ROOT/step-N.gG/.parts/r<R>.json                rank R's part manifest, create-only, after its files
    ROOT/step-N.gG/COMMIT.json                     only once every rank's part marker is there
    ROOT/.launcher/holdings/node-<i>.json          what node i's ranks hold in which tier
    ROOT/.launcher/resume/g<G>.json                where generation G resumes each rank's part from

"Local of node i" is the spec's ``checkpoint.local`` with ``{node}`` replaced by i. A part is
the files one rank wrote for one step (``jobside.save`` on every rank); the durable checkpoint is
the union of the parts, so the files of different ranks must have different names (rank-3.pt,
DCP's __3_0.distcp).

Peer transport, two kinds:

- a *path*, when the template has ``{node}``: node i writes its copy into node i+1's local
  directory, named by the same template, reachable when the template's directories are on a
  mount every node of the allocation sees (shared scratch, or in tests different directories
  of one machine);
- the allocation's *network*, when it has none (``Layout.by_host``: every node has its own
  disk at the same path, which no other node reaches): ``launcher.checkpoint.peernet``, a
  TCP server in every training process. Holdings then record *which host* holds each copy,
  and ``resolve_hosts`` decides from them and the new allocation's host list (a rank's part
  is local when the host that runs it holds it, peer when another host of the allocation
  does, else durable); ``jobside.restore`` fetches what is on another host over the network
  and falls back, copy by copy, to the next one (and to ROOT) when a holder lost it.

Fencing: a part is committed locally only after ``check_fence`` against ROOT (the job side
does it), and durable commits obey the stale-fork rule of GENERATIONS.json: a step is
committed in ROOT only if no later generation resumed from an earlier step
(``Generations.stale_reason``). A step of an older generation that a later one resumed from
(or from after) may still be drained to ROOT by a later start: the next drain finishes it.

Resume (``resolve``): the newest step, not stale, for which *every* rank's part is
complete in a tier the new allocation reaches: its node's local tier, else the next node's
peer copy, else ROOT. The attempt's tier is the farthest tier any part comes from.
"""

from __future__ import annotations

import signal
import errno
import json
import os
import re
import shutil
import socket
import time

from launcher.checkpoint.contract import (COMMIT, META_DIR, Generations, build_manifest, commit as _commit,
                                          manifest_bytes, now_iso, parse_manifest, parse_step_dir, read_generations,
                                          step_dir)
from launcher.checkpoint.discovery import _Context, _evaluate, latest
from launcher.checkpoint.errors import CheckpointError, Conflict, ManifestError, Superseded
from launcher.checkpoint.posix_io import write_atomic_stream
from launcher.checkpoint.posix_store import LocalStore

LOCAL, PEER, DURABLE = "local", "peer", "durable"
TIERS = (LOCAL, PEER, DURABLE)
PARTS = ".parts"
HOLDINGS = META_DIR + "/holdings"
RESUME = META_DIR + "/resume"
HOLDINGS_FORMAT = "launcher-holdings/v1"
_RANK_DIR = re.compile(r"^r(\d+)$")


def farthest(tiers) -> str:
    return max(tiers, key=TIERS.index) if tiers else LOCAL


def node_dir(template: str, node: int) -> str:
    return template.replace("{node}", str(int(node)))


class Layout:
    """Where the tiers of one job are, seen from one rank (NODE of NODES, RANK of WORLD)."""

    def __init__(self, template, nodes=1, node=0, rank=0, world=1, peers=0):
        self.template = template
        self.nodes, self.node = max(1, int(nodes)), int(node)
        self.rank, self.world = int(rank), max(1, int(world))
        self.peers = int(peers or 0)

    def peer_node(self, node=None) -> int:
        return ((self.node if node is None else node) + 1) % self.nodes

    def own(self, node=None, rank=None) -> LocalStore:
        node = self.node if node is None else node
        return LocalStore(os.path.join(node_dir(self.template, node), "r%d" % (self.rank if rank is None else rank)))

    def peer(self, node=None, rank=None) -> LocalStore:
        """The copy of NODE's part of RANK, held on the next node."""
        return LocalStore(os.path.join(node_dir(self.template, self.peer_node(node)), "peer",
                                       "r%d" % (self.rank if rank is None else rank)))

    @property
    def by_host(self) -> bool:
        """Every node has its own local disk at the template's path (no ``{node}``): other
        nodes' copies are reached over the network (``peernet``), located by host."""
        return "{node}" not in self.template and self.nodes > 1

    @property
    def ranks_per_node(self) -> int:
        return max(1, self.world // self.nodes)

    def reachable(self, node) -> bool:
        """Whether NODE's local directory is a path this process can read: always its own; the
        others only through a {node} template (a mount every node sees)."""
        return "{node}" in self.template or int(node) == self.node

    def part_info(self) -> dict:
        return {"rank": self.rank, "world": self.world, "node": self.node, "nodes": self.nodes}


# ---------------------------------------------------------------- committed parts
def part_state(store, name):
    """(manifest, raw COMMIT.json bytes) when STORE/NAME is a committed part (every listed
    file there with its size), else (None, why)."""
    sg = parse_step_dir(name)
    if sg is None:
        return None, "not a checkpoint name"
    try:
        if not os.path.isdir(store.root):
            return None, "%s: not reachable" % store.root
        e = _evaluate(store, (sg[0], sg[1], name, "launcher"), _Context(store, {}, Generations(), False))
    except (OSError, CheckpointError) as err:
        return None, str(err)
    if not e.committed:
        return None, e.reason
    raw, _ = store.read(name + "/" + COMMIT)
    return e.manifest, raw


def commit_part(store, layout, step, generation, run=None, sha256=False) -> dict:
    """Commit rank LAYOUT.rank's part of STEP on its local tier (create-only COMMIT.json, files
    fsynced first). The caller has checked the fence against ROOT."""
    return _commit(store, step, generation, run=run, sha256=sha256, fence=False, durable=True,
                   extra={"part": layout.part_info()})


def local_parts(store):
    """[(step, generation, name)] of the committed-looking part directories of STORE, newest first
    (names only: use part_state to check one)."""
    try:
        dirs, _files, _odd = store.list_top()
    except (OSError, CheckpointError):
        return []
    out = [(sg[0], sg[1], n) for n in dirs for sg in [parse_step_dir(n)] if sg]
    return sorted(out, reverse=True)


def _copy_file(src: str, dst: str) -> int:
    """Copy the regular file SRC to DST (replaced; links never followed); returns the size."""
    fd = os.open(src, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    with os.fdopen(fd, "rb") as f:
        write_atomic_stream(dst, lambda g: shutil.copyfileobj(f, g, 1 << 20), durable=True)
        return os.path.getsize(dst)


def commit_copy(dst, name, raw, write_files) -> str:
    """The rules of every copy of a committed part into DST/NAME (a peer copy over a path or the
    network, a fetched one): WRITE_FILES(dir) writes the files, they are fsynced, then the
    source's COMMIT.json bytes RAW are written last, create-only. 'copied', or 'already' when
    DST has it committed. A copy cut half-way is torn (no COMMIT.json); the next one finishes it."""
    if part_state(dst, name)[0] is not None:
        return "already"
    d = dst.ensure_dir(name)
    if os.path.lexists(os.path.join(d, COMMIT)):
        raise CheckpointError("%s: has a COMMIT.json that does not match its files; left for a human" % d)
    write_files(d)
    dst.fsync_tree(name)
    try:
        dst.put_if_absent(name + "/" + COMMIT, raw)
    except Conflict:
        return "already"
    return "copied"


def replicate(src, dst, name) -> str:
    """Copy the committed part SRC/NAME to DST/NAME (``commit_copy``: COMMIT.json last,
    create-only, the same bytes). Returns 'copied' or 'already'."""
    doc, raw = part_state(src, name)
    if doc is None:
        raise CheckpointError("%s: not a committed part: %s" % (src.url(name), raw))

    def write_files(d):
        for f in doc["files"]:
            _copy_file(src.local_path(name + "/" + f["path"]), os.path.join(d, *f["path"].split("/")))

    return commit_copy(dst, name, raw, write_files)


def fault(point: str) -> None:
    """A fault point for the fault-injection tests (as ``launcher.core.faults``, which the job
    side cannot import): ``$LAUNCHER_FAULTS`` holding ``POINT=kill`` makes this process kill
    itself (SIGKILL) here, ``POINT=sleep:S`` sleep S seconds. A no-op otherwise."""
    spec = os.environ.get("LAUNCHER_FAULTS")
    if not spec:
        return
    for item in spec.split(","):
        name, _, action = item.strip().partition("=")
        if name.strip() != point:
            continue
        action = action.strip()
        if action == "kill":

            os.kill(os.getpid(), signal.SIGKILL)
        elif action.startswith("sleep:"):
            time.sleep(float(action[6:]))


# ---------------------------------------------------------------- durable: parts, then the commit
def durable_committed(durable, name) -> bool:
    raw, _ = durable.read(name + "/" + COMMIT)
    return raw is not None


def upload_part(src, durable, name, rank) -> str:
    """Upload rank RANK's committed part SRC/NAME into ROOT/NAME (its files, then its marker
    ROOT/NAME/.parts/r<RANK>.json, create-only). Returns 'uploaded' or 'already'. Files of a
    step already committed in ROOT are never rewritten (write-once)."""
    doc, raw = part_state(src, name)
    if doc is None:
        raise CheckpointError("%s: not a committed part: %s" % (src.url(name), raw))
    if durable_committed(durable, name):
        return "already"
    marker = "%s/%s/r%d.json" % (name, PARTS, int(rank))
    if durable.read(marker)[0] is not None:
        return "already"
    for i, f in enumerate(doc["files"]):
        durable.upload_file(src.local_path(name + "/" + f["path"]), name + "/" + f["path"])
        if i == 0:
            fault("drain_mid_upload")
    try:
        durable.put_if_absent(marker, raw)
    except Conflict:
        return "already"
    return "uploaded"


def try_commit_durable(durable, name, world, run=None, gens=None):
    """Commit ROOT/NAME when the part markers of all WORLD ranks are there and every file they
    list is there with its size. Returns the manifest, 'already', or None (not complete yet).
    Superseded when the step is a stale fork of its generation."""
    sg = parse_step_dir(name)
    if sg is None:
        raise CheckpointError("%s: not a checkpoint name" % name)
    step, gen = sg
    if durable_committed(durable, name):
        return "already"
    have = durable.list_tree(name + "/" + PARTS)
    want = ["r%d.json" % r for r in range(int(world))]
    if any(w not in have for w in want):
        return None
    files = {}
    for w in want:
        where = durable.url("%s/%s/%s" % (name, PARTS, w))
        raw, _ = durable.read("%s/%s/%s" % (name, PARTS, w))
        doc = parse_manifest(raw, where, step, gen)
        part = doc.get("part") or {}
        if part.get("world") != int(world):
            raise ManifestError("%s: part of a %s-rank checkpoint, expected %d ranks" % (where, part.get("world"),
                                                                                         int(world)))
        for f in doc["files"]:
            old = files.get(f["path"])
            if old is not None and old != (f["size"], f.get("sha256")):
                raise CheckpointError("%s: %s is written by two ranks with different contents: ranks must write "
                                      "files of their own names" % (durable.url(name), f["path"]))
            files[f["path"]] = (f["size"], f.get("sha256"))
    sizes = durable.file_sizes(name, list(files))
    if any(sizes.get(p) != s for p, (s, _h) in files.items()):
        return None
    gens = gens if gens is not None else read_generations(durable)
    why = gens.stale_reason(step, gen)
    if why:
        raise Superseded("%s: not committed: %s" % (durable.url(name), why), gen, gens.generation)
    doc = build_manifest(step, gen, [(p, s, h) for p, (s, h) in files.items()], run=run,
                         extra={"parts": int(world)})
    try:
        durable.put_if_absent(name + "/" + COMMIT, manifest_bytes(doc))
    except Conflict:
        return "already"
    return doc


# ---------------------------------------------------------------- holdings
def holdings_key(node: int) -> str:
    return "%s/node-%d.json" % (HOLDINGS, int(node))


def update_holdings(durable, layout, name, rank, tier, present=True, tries=20, peer_host=None, host=None) -> None:
    """Record (compare-and-swap) that RANK's part NAME is (PRESENT) or is no longer held in TIER
    (one tier or several) by LAYOUT's node: 'local' on this node, 'peer' on the next node,
    'durable' in ROOT. One read and one conditional write unless another rank of the node
    raced it. With ``Layout.by_host`` each step also records the host of each copy (``hosts``:
    {tier: {rank: host}};
    PEER_HOST: the host the peer copy went to; HOST: this one's name unless given), which
    ``resolve_hosts`` reads."""
    tiers = (tier,) if isinstance(tier, str) else tuple(tier)
    key = holdings_key(layout.node)
    for _ in range(max(1, tries)):
        raw, token = durable.read(key)
        try:
            doc = json.loads(raw.decode("utf-8")) if raw else {}
        except ValueError:
            doc, token = {}, token
        if not isinstance(doc, dict) or not isinstance(doc.get("steps"), dict):
            doc = {"steps": {}}
        doc.update(format=HOLDINGS_FORMAT, node=layout.node, nodes=layout.nodes, world=layout.world,
                   host=socket.gethostname(), local=node_dir(layout.template, layout.node),
                   peer=node_dir(layout.template, layout.peer_node()) if layout.peers else None, updated=now_iso())
        st = doc["steps"].setdefault(name, {})
        hosts = st.setdefault("hosts", {})
        for t in tiers:
            ranks = set(st.get(t) or [])
            (ranks.add if present else ranks.discard)(int(rank))
            st[t] = sorted(ranks)
            if t in (LOCAL, PEER) and layout.by_host:
                h = hosts.setdefault(t, {})
                if not present:
                    h.pop(str(int(rank)), None)
                elif t == LOCAL or peer_host:
                    h[str(int(rank))] = (host or socket.gethostname()) if t == LOCAL else peer_host
        st["world"] = layout.world
        if not any(st.get(t) for t in TIERS):
            del doc["steps"][name]
        elif not any(hosts.values()):
            st.pop("hosts", None)
        try:
            durable.put_if_match(key, (json.dumps(doc, indent=1, sort_keys=True) + "\n").encode(), token)
            return
        except Conflict:
            time.sleep(0.005)
    raise CheckpointError("%s: could not update the holdings record (%d concurrent updates)" % (durable.url(key),
                                                                                              tries))


def json_docs(durable, prefix, pattern):
    """[(match, doc)] of the JSON objects under PREFIX whose names match PATTERN (unreadable
    or malformed ones left out)."""
    out = []
    for k in durable.list_tree(prefix):
        m = re.match(pattern, k)
        if not m:
            continue
        raw, _ = durable.read(prefix + "/" + k)
        try:
            doc = json.loads(raw.decode("utf-8")) if raw else None
        except ValueError:
            doc = None
        if isinstance(doc, dict):
            out.append((m, doc))
    return out


def read_holdings(durable) -> dict:
    """{node: holdings doc} of every node that recorded one."""
    return {int(m.group(1)): doc for m, doc in json_docs(durable, HOLDINGS, r"^node-(\d+)\.json$")
            if isinstance(doc.get("steps"), dict)}


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


def _candidates(durable, layout, holdings):
    """{name: {rank: node}}: steps some rank holds locally or as a peer copy, from the holdings
    records and from the local directories this process can reach."""
    cands = {}
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
        for tier, r, store in rank_stores(node_dir(layout.template, node)):
            owner = node if tier == LOCAL else (node - 1) % layout.nodes
            for _s, _g, name in local_parts(store):
                cands.setdefault(name, {}).setdefault(r, owner)
    return cands


def rank_stores(base):
    """[(LOCAL or PEER, rank, store)] of the rank directories under one node's local tier BASE:
    its own parts (BASE/r<R>) and the peer copies it holds (BASE/peer/r<R>)."""
    out = []
    for sub, tier in (("", LOCAL), ("peer", PEER)):
        d = os.path.join(base, sub) if sub else base
        try:
            names = os.listdir(d)
        except OSError:
            continue
        for rd in sorted(names):
            m = _RANK_DIR.match(rd)
            if m:
                out.append((tier, int(m.group(1)), LocalStore(os.path.join(d, rd))))
    return out


def _world(holdings, name, rank_nodes, layout):
    """How many ranks wrote step NAME: from a part manifest this process reaches, else the
    holdings records, else this job's world."""
    for r, node in sorted(rank_nodes.items()):
        for store, reach in ((layout.own(node, r), node), (layout.peer(node, r), layout.peer_node(node))):
            if layout.reachable(reach):
                doc, _raw = part_state(store, name)
                w = ((doc or {}).get("part") or {}).get("world")
                if isinstance(w, int) and w > 0:
                    return w
    for doc in holdings.values():
        w = (doc["steps"].get(name) or {}).get("world")
        if isinstance(w, int) and w > 0:
            return w
    return layout.world


def _find_part(layout, name, rank, node, durable_ok, durable):
    """(tier, where) of the nearest complete copy of RANK's part NAME, or None."""
    own = layout.own(node, rank)
    if layout.reachable(node) and part_state(own, name)[0] is not None:
        return LOCAL, own.url(name)
    if layout.peers:
        peer = layout.peer(node, rank)
        if layout.reachable(layout.peer_node(node)) and part_state(peer, name)[0] is not None:
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


def resolve(durable, layout, gens=None, verify=False, log=None, seen=None):
    """The Resolution a new start resumes from, or None (fresh start). Never a stale fork,
    never a step with a rank's part missing from every reachable tier, and never older than a
    newer step that is complete somewhere reachable."""
    gens = gens if gens is not None else read_generations(durable)
    seen = seen if seen is not None else {}
    newest = latest(durable, verify=verify, gens=gens, log=log, seen=seen)
    holdings = read_holdings(durable)
    cands = _candidates(durable, layout, holdings)
    seen["max_generation"] = max([seen.get("max_generation", -1)] + [parse_step_dir(n)[1] for n in cands])
    for name in sorted(cands, key=parse_step_dir, reverse=True):
        step, gen = parse_step_dir(name)
        if newest is not None and (newest.step, newest.generation or 0) > (step, gen):
            break
        why = gens.stale_reason(step, gen)
        if why:
            continue
        durable_ok = newest is not None and newest.name == name
        world = _world(holdings, name, cands[name], layout)
        sources = {}
        for r in range(world):
            node = cands[name].get(r)
            found = _find_part(layout, name, r, node, durable_ok, durable) if node is not None else \
                ((DURABLE, durable.url(name)) if durable_ok else None)
            if found is None:
                break
            sources[r] = (node, found[0], found[1])
        else:
            return Resolution(name, step, gen, farthest([src[1] for src in sources.values()]), durable.url(name),
                              world, sources)
    return _durable(newest)


def allocation_hosts():
    """The hosts of this allocation in node-rank order: $LAUNCHER_NODE_HOSTS (comma-separated;
    a backend's job script sets it, the Slurm one from its scheduler's node list); None when
    it is not set."""
    v = os.environ.get("LAUNCHER_NODE_HOSTS", "").strip()
    return [h for h in v.split(",") if h] or None


def resolve_hosts(durable, layout, hosts, gens=None, verify=False, log=None, seen=None):
    """``resolve`` for a job whose nodes each have their own disk (``Layout.by_host``), from the
    holdings records only (no other node is reachable by path): the newest step, not stale,
    whose every rank's part is held by a host of the new allocation HOSTS (in node order) or
    committed in ROOT. A rank's tier is local when the host that will run it holds its copy,
    peer when another host of the allocation does, durable otherwise. Each source names the
    hosts holding the copies (``hosts``), which ``jobside.restore`` tries in order."""
    gens = gens if gens is not None else read_generations(durable)
    seen = seen if seen is not None else {}
    newest = latest(durable, verify=verify, gens=gens, log=log, seen=seen)
    alive = set(hosts)
    rows = {}
    for node, doc in read_holdings(durable).items():
        for name, st in doc["steps"].items():
            if parse_step_dir(name) is None or not isinstance(st, dict):
                continue
            row = rows.setdefault(name, {"world": st.get("world"), LOCAL: {}, PEER: {}, "node": {}})
            for t in (LOCAL, PEER):
                for r, h in ((st.get("hosts") or {}).get(t) or {}).items():
                    if str(r).isdigit() and isinstance(h, str):
                        row[t][int(r)] = h
                        row["node"].setdefault(int(r), node)
    _own_disk(layout, rows, alive)
    if rows:
        seen["max_generation"] = max([seen.get("max_generation", -1)] + [parse_step_dir(n)[1] for n in rows])
    rpn = layout.ranks_per_node
    for name in sorted(rows, key=parse_step_dir, reverse=True):
        step, gen = parse_step_dir(name)
        if newest is not None and (newest.step, newest.generation or 0) > (step, gen):
            break
        if gens.stale_reason(step, gen):
            continue
        row = rows[name]
        durable_ok = newest is not None and newest.name == name
        world = row["world"] if isinstance(row["world"], int) and row["world"] > 0 else layout.world
        sources = {}
        for r in range(world):
            me = hosts[r // rpn] if r // rpn < len(hosts) else None
            own, peer = row[LOCAL].get(r), row[PEER].get(r)
            held = {k: h for k, h in (("own", own), ("peer", peer)) if h in alive}
            tier = LOCAL if own is not None and own == me else PEER if held else DURABLE if durable_ok else None
            if tier is None:
                break
            where = "%s:%s" % (held.get("own") or held.get("peer"), layout.template) if held else durable.url(name)
            sources[r] = (row["node"].get(r), tier, where, {"hosts": held})
        else:
            return Resolution(name, step, gen, farthest([src[1] for src in sources.values()]), durable.url(name),
                              world, sources)
    return _durable(newest)


def _own_disk(layout, rows, alive) -> None:
    """Add to ROWS the parts committed on this host's own disk (a part committed just before
    a crash may not be in the holdings record yet), when this host is one of ALIVE."""
    me = socket.gethostname()
    if me not in alive:
        return
    for tier, r, store in rank_stores(node_dir(layout.template, layout.node)):
        for _s, _g, name in local_parts(store):
            doc, _raw = part_state(store, name)
            if doc is None:
                continue
            part = doc.get("part") or {}
            row = rows.setdefault(name, {"world": part.get("world"), LOCAL: {}, PEER: {}, "node": {}})
            row[tier].setdefault(r, me)
            row["node"].setdefault(r, part.get("node"))


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
def _part_files(where_store, name):
    doc, raw = part_state(where_store, name)
    return None if doc is None else doc["files"]


def materialize(durable, layout, doc, dest, found=None) -> dict:
    """Fill DEST with every file of the checkpoint DOC (a ``read_resolution`` document) resolved
    to: for each rank's part, the nearest complete copy this process reaches (the planned one,
    else the node's local tier, the peer copy, then ROOT). Files on a reachable path are linked
    (read in place), files in an S3 root downloaded. Returns {rank: tier used}. CheckpointError
    when a part is complete nowhere (never a torn view). FOUND ({rank: (tier, store)}, from a
    caller that fetched copies over the network) replaces the path lookup: a rank it lacks
    comes from ROOT."""
    name = doc["name"]
    os.makedirs(dest, exist_ok=True)
    tiers = {}
    dur_doc = None
    placed = {}
    for r in range(int(doc.get("world") or 1)):
        src = (doc.get("sources") or {}).get(str(r)) or {}
        node = src.get("node")
        files = None
        if found is not None:
            tried = [found[r]] if r in found else []
        elif node is not None:
            tried = [(LOCAL, layout.own(node, r))] + ([(PEER, layout.peer(node, r))] if layout.peers else [])
        else:
            tried = []
        for tier, store in tried:
            files = _part_files(store, name)
            if files is None:
                continue
            new = []
            try:
                for f in files:
                    if _place(placed, dest, f, store.local_path(name + "/" + f["path"])):
                        new.append(f["path"])
            except FileNotFoundError:
                # the copy went between its check and its link (a superseded generation's
                # local gc, once ROOT committed it): take the next tier, never a torn view
                for q in new:
                    placed.pop(q, None)
                    _unlink_quietly(os.path.join(dest, *q.split("/")))
                files = None
                continue
            tiers[r] = tier
            break
        if files is None:
            if dur_doc is None:
                raw, _ = durable.read(name + "/" + COMMIT)
                if raw is None:
                    raise CheckpointError("%s: rank %d's part is complete in no tier this node reaches (local, peer, "
                                          "durable): refusing a torn restore" % (durable.url(name), r))
                sg = parse_step_dir(name)
                dur_doc = parse_manifest(raw, durable.url(name + "/" + COMMIT), *sg)
                missing = [f for f in dur_doc["files"] if f["path"] not in placed]
                if durable.is_local:
                    for f in missing:
                        _place(placed, dest, f, durable.local_path(name + "/" + f["path"]))
                else:
                    durable.download_files(name, [f["path"] for f in missing], dest)
                    for f in missing:
                        placed[f["path"]] = f["size"]
            tiers[r] = DURABLE
    for p, size in placed.items():
        got = os.path.getsize(os.path.join(dest, *p.split("/")))
        if got != size:
            raise CheckpointError("%s/%s: size %d, its manifest lists %d" % (dest, p, got, size))
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


# ---------------------------------------------------------------- local gc
def gc_local(store, durable, keep: int) -> list:
    """Keep the KEEP newest committed parts of STORE; delete older ones only when ROOT has
    them (or a newer step) committed, so a part not yet drained is never lost. Returns the
    names deleted."""
    parts = local_parts(store)
    committed = [(s, g, n) for s, g, n in parts if part_state(store, n)[0] is not None]
    done = []
    newest_durable = None
    for s, g, n in committed[max(1, int(keep)):]:
        if newest_durable is None:
            e = latest(durable)
            newest_durable = (e.step, e.generation or 0) if e else (-1, -1)
        if newest_durable >= (s, g) or durable_committed(durable, n):
            try:
                store.delete_tree(n, first=(COMMIT,))
                done.append(n)
            except (OSError, CheckpointError):
                pass
    return done


def free_bytes(path: str):
    """Free bytes on the file system holding PATH (its nearest existing parent), or None."""
    p = os.path.abspath(path)
    while p and not os.path.exists(p):
        parent = os.path.dirname(p)
        if parent == p:
            break
        p = parent
    try:
        st = os.statvfs(p)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def is_disk_full(e: BaseException) -> bool:
    return isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT)


__all__ = ["LOCAL", "PEER", "DURABLE", "Layout", "Resolution", "commit_part", "replicate", "upload_part",
           "try_commit_durable", "update_holdings", "read_holdings", "resolve", "write_resolution",
           "read_resolution", "materialize", "gc_local", "part_state", "local_parts", "node_dir", "free_bytes",
           "is_disk_full", "farthest", "tier_table", "fault", "resolve_hosts",
           "resolve_for", "commit_copy", "json_docs",
           "allocation_hosts"]
