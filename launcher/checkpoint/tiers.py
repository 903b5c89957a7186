"""Multi-tier checkpoints: commit on node-local disk, copy to the next node, drain to the root.

Stdlib only (runs on compute nodes). The durable ROOT keeps the contract of
``launcher.checkpoint.contract`` unchanged: ``ROOT/step-N.gG/`` with every rank's files and
one COMMIT.json, written last, create-only. What is added around it::

    <local of node i>/<RUN>/r<R>/step-N.gG/...         rank R's part, committed on node i (COMMIT.json,
                                                       same create-only manifest, plus "part" and
                                                       "tier_run")
    <local of node i+1>/<RUN>/peer/r<R>/step-N.gG/...  the copy of it on the next node (peers: 1)
    ROOT/step-N.gG/<rank R's files>                uploaded by rank R's drainer
    ROOT/step-N.gG/.parts/r<R>.json                rank R's part manifest, create-only, after its files
    ROOT/step-N.gG/COMMIT.json                     only once every rank's part marker is there
    ROOT/.launcher/holdings/node-<i>.json          what node i's ranks hold in which tier
    ROOT/.launcher/resume/g<G>.json                where generation G resumes each rank's part from

"Local of node i" is the spec's ``checkpoint.local`` with ``{node}`` replaced by i. The local
tier belongs to its run: RUN (``run_dir``) is ``run-`` and 16 hex digits of the sha256 of the
durable root as the job names it (``root_id``: absolute and normalised, ``s3://bucket/prefix``
without a trailing slash), so jobs with different roots that share one ``checkpoint.local``
path never see each other's parts, and every relaunch of the same root finds its own. Each
part's COMMIT.json also names its run (``tier_run``: the root, and when its generation started,
from GENERATIONS.json), and nothing is restored, drained or gc'd from a part whose run is not
this one (``foreign``): a part copied by hand from another run's directory, one left by a root
that was removed and made again (its generation's record differs or is gone), one without a
run (the earlier layout, ``<local>/r<R>/``: ``legacy_parts`` names them, left in place). A
``--fresh`` run shares its root's directory: the earlier run's parts are stale there by
GENERATIONS.json ("superseded by a fresh run"), as in ROOT.

A part is
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

Where a start resumes from, and the view of the files it restores: ``tier_resume``.
"""

from __future__ import annotations

import signal
import errno
import hashlib
import json
import os
import re
import shutil
import socket
import time

from launcher.checkpoint.contract import (COMMIT, META_DIR, build_manifest, commit as _commit,
                                          manifest_bytes, now_iso, parse_manifest, parse_step_dir, read_generations)
from launcher.checkpoint.discovery import evaluate_one, latest
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
_RUN_DIR = re.compile(r"^run-[0-9a-f]{16}$")
RUN_KEY = "tier_run"


def farthest(tiers) -> str:
    return max(tiers, key=TIERS.index) if tiers else LOCAL


def node_dir(template: str, node: int) -> str:
    return template.replace("{node}", str(int(node)))


def root_id(root: str) -> str:
    """The durable ROOT as it names a run of the local tier: ``s3://bucket/prefix`` without
    trailing slashes, a POSIX path absolute and normalised (no I/O: links are not resolved, so
    two spellings of one directory through a link are two runs, whose parts are then not
    shared: safe, never mixed)."""
    root = str(root).strip()
    if root.startswith("s3://"):
        bucket, _, prefix = root[5:].partition("/")
        prefix = prefix.strip("/")
        return "s3://%s/%s" % (bucket, prefix) if prefix else "s3://%s" % bucket
    return os.path.abspath(os.path.expanduser(root))


def run_dir(root: str) -> str:
    """The directory under each node's local tier that holds the run of ROOT."""
    return "run-" + hashlib.sha256(root_id(root).encode("utf-8")).hexdigest()[:16]


class Layout:
    """Where the tiers of one job are, seen from one rank (NODE of NODES, RANK of WORLD). Bound
    to the durable ROOT (``bind``) it names directories: ``<local of node>/<run_dir(ROOT)>/``."""

    def __init__(self, template, nodes=1, node=0, rank=0, world=1, peers=0, root=None):
        self.template = template
        self.nodes, self.node = max(1, int(nodes)), int(node)
        self.rank, self.world = int(rank), max(1, int(world))
        self.peers = int(peers or 0)
        self.root = root_id(root) if root is not None else None
        self.run = run_dir(root) if root is not None else None

    def bind(self, root) -> "Layout":
        """This layout for the durable ROOT (self when it is bound to it already)."""
        if self.root is not None and self.root == root_id(root):
            return self
        return Layout(self.template, self.nodes, self.node, self.rank, self.world, self.peers, root=root)

    def peer_node(self, node=None) -> int:
        return ((self.node if node is None else node) + 1) % self.nodes

    def base(self, node=None) -> str:
        """NODE's directory of this run: ``<local of node>/<run_dir(root)>``."""
        if self.run is None:
            raise CheckpointError("local tier %s: no checkpoint root bound: the root names the run the local tier "
                                  "belongs to" % self.template)
        return os.path.join(node_dir(self.template, self.node if node is None else node), self.run)

    def own(self, node=None, rank=None) -> LocalStore:
        return LocalStore(os.path.join(self.base(node), "r%d" % (self.rank if rank is None else rank)))

    def peer(self, node=None, rank=None) -> LocalStore:
        """The copy of NODE's part of RANK, held on the next node."""
        return LocalStore(os.path.join(self.base(self.peer_node(node)), "peer",
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


# ---------------------------------------------------------------- the run of a part
class RunCheck:
    """What a part must name to belong to the run of ROOT: ROOT itself, and for its generation
    the start GENS (ROOT's GENERATIONS.json) records."""

    def __init__(self, root, gens):
        self.root, self.gens = root_id(root), gens


def run_stamp(layout, gens, generation) -> dict:
    """The ``tier_run`` of a part GENERATION commits on LAYOUT's (bound) local tier: the root,
    and when GENS records that GENERATION started (None when it records none)."""
    if layout.root is None:
        raise CheckpointError("local tier %s: no checkpoint root bound" % layout.template)
    rec = gens.record(int(generation)) or {}
    started = rec.get("started")
    return {"root": layout.root, "dir": layout.run, "started": started if isinstance(started, str) else None}


def foreign(doc, check) -> str:
    """Why the part manifest DOC is not of CHECK's run (a ``RunCheck``), or ''."""
    st = doc.get(RUN_KEY)
    if not isinstance(st, dict):
        return "names no run (written by the earlier local-tier layout or by hand): not restored"
    if st.get("root") != check.root:
        return "belongs to the run of %s, not of %s: never restored here" % (st.get("root"), check.root)
    rec = check.gens.record(doc.get("generation")) or {}
    want = rec.get("started") if isinstance(rec.get("started"), str) else None
    if st.get("started") != want:
        return ("generation %s is not this root's (GENERATIONS.json records it started at %s, the part says %s): "
                "written before the root was made again; never restored" % (doc.get("generation"), want,
                                                                             st.get("started")))
    return ""


# ---------------------------------------------------------------- committed parts
def part_state(store, name, check=None):
    """(manifest, raw COMMIT.json bytes) when STORE/NAME is a committed part (every listed
    file there with its size) and, with CHECK (a ``RunCheck``), of CHECK's run; else (None, why)."""
    sg = parse_step_dir(name)
    if sg is None:
        return None, "not a checkpoint name"
    try:
        if not os.path.isdir(store.root):
            return None, "%s: not reachable" % store.root
        e = evaluate_one(store, name, sg[0], sg[1])
    except (OSError, CheckpointError) as err:
        return None, str(err)
    if not e.committed:
        return None, e.reason
    if check is not None:
        why = foreign(e.manifest, check)
        if why:
            return None, why
    raw, _ = store.read(name + "/" + COMMIT)
    return e.manifest, raw


def commit_part(store, layout, step, generation, run=None, sha256=False, stamp=None) -> dict:
    """Commit rank LAYOUT.rank's part of STEP on its local tier (create-only COMMIT.json, files
    fsynced first), naming its run (STAMP: ``run_stamp``). The caller has checked the fence
    against ROOT."""
    extra = {"part": layout.part_info()}
    if stamp is not None:
        extra[RUN_KEY] = stamp
    return _commit(store, step, generation, run=run, sha256=sha256, fence=False, durable=True, extra=extra)


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


def _parse_holdings(raw) -> dict:
    """A node's holdings record from its bytes RAW (None: none yet); a malformed one starts over."""
    try:
        doc = json.loads(raw.decode("utf-8")) if raw else {}
    except ValueError:
        doc = {}
    if not isinstance(doc, dict) or not isinstance(doc.get("steps"), dict):
        doc = {"steps": {}}
    return doc


def _mark_part(st: dict, tiers: tuple, rank: int, present: bool, by_host: bool, this_host: str, peer_host) -> None:
    """Record in ST (one step's holdings) that RANK's part is (PRESENT) or is no longer held in
    each of TIERS; BY_HOST: also which host holds the copy (THIS_HOST the local one, PEER_HOST
    the peer one, when known)."""
    hosts = st.setdefault("hosts", {})
    for t in tiers:
        ranks = set(st.get(t) or [])
        (ranks.add if present else ranks.discard)(int(rank))
        st[t] = sorted(ranks)
        if t in (LOCAL, PEER) and by_host:
            h = hosts.setdefault(t, {})
            if not present:
                h.pop(str(int(rank)), None)
            elif t == LOCAL or peer_host:
                h[str(int(rank))] = this_host if t == LOCAL else peer_host


def _with_part(doc: dict, layout, name: str, rank: int, tiers: tuple, present: bool, peer_host, host) -> dict:
    """DOC (LAYOUT's node's holdings record) with RANK's part NAME marked in TIERS, and the node's
    own fields brought up to date; a step no tier holds any more is left out."""
    doc.update(format=HOLDINGS_FORMAT, node=layout.node, nodes=layout.nodes, world=layout.world,
               host=socket.gethostname(), local=layout.base(),
               peer=layout.base(layout.peer_node()) if layout.peers else None, updated=now_iso())
    st = doc["steps"].setdefault(name, {})
    _mark_part(st, tiers, rank, present, layout.by_host, host or socket.gethostname(), peer_host)
    st["world"] = layout.world
    if not any(st.get(t) for t in TIERS):
        del doc["steps"][name]
    elif not any(st["hosts"].values()):
        st.pop("hosts", None)
    return doc


def update_holdings(durable, layout, name, rank, tier, present=True, tries=20, peer_host=None, host=None) -> None:
    """Record (compare-and-swap) that RANK's part NAME is (PRESENT) or is no longer held in TIER
    (one tier or several) by LAYOUT's node: 'local' on this node, 'peer' on the next node,
    'durable' in ROOT. One read and one conditional write unless another rank of the node
    raced it. With ``Layout.by_host`` each step also records the host of each copy (``hosts``:
    {tier: {rank: host}};
    PEER_HOST: the host the peer copy went to; HOST: this one's name unless given), which
    ``resolve_hosts`` reads."""
    tiers = (tier,) if isinstance(tier, str) else tuple(tier)
    layout = layout.bind(durable.root)
    key = holdings_key(layout.node)
    for _ in range(max(1, tries)):
        raw, token = durable.read(key)
        doc = _with_part(_parse_holdings(raw), layout, name, rank, tiers, present, peer_host, host)
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


def rank_stores(base):
    """[(LOCAL or PEER, rank, store)] of the rank directories under one node's directory of a
    run BASE (``Layout.base``): its own parts (BASE/r<R>) and the peer copies it holds
    (BASE/peer/r<R>). Given the node's local directory itself, the parts of the earlier
    layout, which named no run (``legacy_parts``)."""
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


def legacy_parts(template, node) -> list:
    """[(tier, rank, path of the part)] committed under NODE's local directory in the layout
    before the local tier named its run (``<local>/r<R>/``, ``<local>/peer/r<R>/``). Which run
    wrote them is unknown: never restored, never deleted (see docs/checkpoints.md)."""
    out = []
    for tier, r, store in rank_stores(node_dir(template, node)):
        for _s, _g, name in local_parts(store):
            if part_state(store, name)[0] is not None:
                out.append((tier, r, store.url(name)))
    return out


# ---------------------------------------------------------------- local gc
def gc_local(store, durable, keep: int, check=None) -> list:
    """Keep the KEEP newest committed parts of this run in STORE; delete older ones only when
    ROOT has them (or a newer step) committed, so a part not yet drained is never lost.
    Parts of another run (``foreign``: CHECK, by default ROOT's) are never counted nor
    deleted; this run's stale ones (a zombie's fork, an earlier run's before a --fresh one)
    are not counted, and deleted only when ROOT has them committed. Returns the names deleted."""
    keep = max(1, int(keep))
    committed = [(s, g, n, doc) for s, g, n in local_parts(store) for doc in [part_state(store, n)[0]]
                 if doc is not None]
    if len(committed) <= keep:
        return []
    check = check if check is not None else RunCheck(durable.root, read_generations(durable))
    live, stale = [], []
    for s, g, n, doc in committed:
        if foreign(doc, check):
            continue
        (stale if check.gens.stale_reason(s, g) else live).append((s, g, n))
    done = []
    newest_durable = None
    for s, g, n in live[keep:] + stale:
        if (s, g, n) in live:
            if newest_durable is None:
                e = latest(durable, gens=check.gens)
                newest_durable = (e.step, e.generation or 0) if e else (-1, -1)
            gone = newest_durable >= (s, g) or durable_committed(durable, n)
        else:
            gone = durable_committed(durable, n)
        if gone:
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


__all__ = ["LOCAL", "PEER", "DURABLE", "Layout", "RunCheck", "run_stamp", "foreign", "root_id", "run_dir",
           "legacy_parts", "commit_part", "replicate", "upload_part", "try_commit_durable",
           "update_holdings", "read_holdings", "gc_local", "part_state", "local_parts", "node_dir", "free_bytes",
           "is_disk_full", "farthest", "fault", "commit_copy", "json_docs", "rank_stores"]
