"""The job side of multi-tier checkpoints (``launcher.checkpoint.tiers``): save to the local
tier and return, a drainer thread per process that copies each committed part to the peer
node and uploads it to the root, and restore from the nearest complete copy.

Stdlib only (see ``launcher.jobside``). Turned on by ``$LAUNCHER_CKPT_LOCAL`` (the spec's
``checkpoint.local``; the job script exports it with ``LAUNCHER_CKPT_PEERS`` and
``LAUNCHER_CKPT_DRAIN``). Every rank saves its own part: ``save(step)`` on every rank (each
rank's files named as its own: rank-3.pt, DCP's __3_0.distcp); the root's COMMIT.json is
written by whichever drainer uploads the last part.

The drainer is a thread of the training process (never a process left behind): it ends
with it. At exit (``atexit``) the queue is drained for at most
``$LAUNCHER_CKPT_DRAIN_TIMEOUT`` seconds (default 120); what is left stays committed on the
local tier and the next start on the same node drains it. Rank and world come from
``RANK``/``WORLD_SIZE`` (torchrun), else ``LAUNCHER_RANK`` and nodes x tasks per node.

Nodes with their own disks (``checkpoint.local`` without ``{node}``, several nodes): every
process also runs a ``peernet.PeerServer`` thread (ends with it), through which the drainer
sends the peer copy to node i+1 and ``restore`` fetches parts held on other hosts.

The local tier belongs to the run of the root: every directory is under
``<local>/run-<hash of the root>/`` (``Layout.bind``), every part names its run in its
COMMIT.json (``tiers.run_stamp``), and a part of another run is never restored, drained into
this root, nor deleted by this run's gc (``tiers.foreign``).

Local disk full (or less than ``$LAUNCHER_CKPT_LOCAL_MIN_FREE`` bytes free beyond the last
save's size): the save goes synchronously to the root instead, with a warning on stderr and
a ``local_full`` event in the attempt record.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import queue
import shutil
import socket
import sys
import threading
import time
from dataclasses import dataclass
from typing import Callable, Optional

from launcher.checkpoint import (COMMIT, AlreadyCommitted, CheckpointError, Superseded, check_fence, read_attempt,
                                 read_generations, scratch as _scratch, step_dir, write_attempt)
from launcher.checkpoint import peernet
from launcher.checkpoint import tier_resume, tiers
from launcher.checkpoint.posix_store import LocalStore
from launcher.checkpoint.contract import now_iso
from launcher.checkpoint.gc import gc as _gc
from launcher.jobside.env import PROG, env_int
from launcher.jobside.signals import preemption_requested

_STOP = object()  # the drainer's queue: end the thread (``Drainer.close``)


@dataclass
class SaveRecord:
    """One save of this rank as the attempt record keeps it (``record``, ``as_json``).
    ``committed_at`` (the monotonic clock at the local commit) is not stored: the drain lag
    is measured from it."""

    step: int
    start: str
    rank: int
    tier: str = tiers.LOCAL
    preempt: bool = False
    committed: bool = False
    error: Optional[str] = None
    files: Optional[int] = None
    bytes: Optional[int] = None
    end: Optional[str] = None
    seconds: Optional[float] = None  # capture stall: how long training was blocked
    background: bool = False         # committed on the drainer's thread (after async_save): "async"
    fallback: Optional[str] = None   # "local_full": written to the root directly
    drain: Optional[str] = None      # the drain's state: committed, waiting, already, superseded
    drain_seconds: Optional[float] = None  # drain lag: local commit -> this rank's part in the root
    committed_at: Optional[float] = None

    def committed_locally(self, manifest: dict, t0: float) -> None:
        """The part is committed on the local tier now, per MANIFEST; the save began at T0."""
        self.committed_at = time.monotonic()
        self.committed, self.error, self.end = True, None, now_iso()
        self.files, self.bytes = len(manifest["files"]), sum(f["size"] for f in manifest["files"])
        self.seconds = round(self.committed_at - t0, 6)

    def drained(self, state: str, since: Optional[float] = None) -> None:
        """Drained with STATE, SINCE (default: the local commit) until now."""
        start = self.committed_at if since is None else since
        self.drain, self.drain_seconds = state, round(time.monotonic() - start, 6)

    def as_json(self) -> dict:
        out = {"step": self.step, "start": self.start, "tier": self.tier, "rank": self.rank,
               "committed": self.committed, "preempt": self.preempt, "error": self.error}
        if self.background:
            out["async"] = True
        for key in ("files", "bytes", "end", "seconds", "fallback", "drain", "drain_seconds"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        return out


@dataclass(frozen=True)
class DrainItem:
    """What the drainer does next: the local part NAME to the peer and the root. COMMIT, when
    given, commits it locally first (on the drainer's thread, after async_save) and returns its
    SaveRecord; SAVE (or COMMIT's record) is recorded with the drain's state and lag. A part
    left by an earlier start has neither."""

    name: str
    save: Optional[SaveRecord] = None
    commit: Optional[Callable[[], SaveRecord]] = None


@dataclass(frozen=True)
class Config:
    """The tier settings of this process (``config``, from the job script's environment)."""

    layout: tiers.Layout  # the tiers of this rank, bound to a root at use (``layout_for``)
    drain: str            # "async" (the drainer thread) or "sync" (before save returns)
    keep: int             # committed checkpoints kept, in the root and on each local tier
    timeout: float        # seconds the final drain may take at exit
    min_free: int         # bytes the local tier must have free beyond the last save's size

    def layout_for(self, durable):
        """The layout of the run of DURABLE (its directory under each node's local tier)."""
        return self.layout.bind(durable.root)


def _stamp(lay, durable, gen, gens=None) -> dict:
    """The run a part of generation GEN names in its COMMIT.json (GENS: ROOT's GENERATIONS.json,
    read when not given)."""
    return tiers.run_stamp(lay, gens if gens is not None else read_generations(durable), gen)


def config():
    """The tier settings of this process, or None without ``$LAUNCHER_CKPT_LOCAL``."""
    tmpl = os.environ.get("LAUNCHER_CKPT_LOCAL", "").strip()
    if not tmpl:
        return None
    nodes = env_int("LAUNCHER_NUM_NODES") or 1
    node = env_int("LAUNCHER_NODE_RANK") or 0
    rank = env_int("RANK")
    rank = rank if rank is not None else (env_int("LAUNCHER_RANK") or 0)
    world = env_int("WORLD_SIZE") or nodes * (env_int("LAUNCHER_TASKS_PER_NODE") or 1)
    layout = tiers.Layout(tmpl, nodes, node, rank, world, env_int("LAUNCHER_CKPT_PEERS") or 0)
    drain = (os.environ.get("LAUNCHER_CKPT_DRAIN") or "async").strip().lower()
    if drain not in ("async", "sync"):
        raise CheckpointError("LAUNCHER_CKPT_DRAIN=%r: expected async or sync" % drain)
    return Config(layout, drain, keep=env_int("LAUNCHER_CKPT_KEEP") or 3,
                  timeout=float(os.environ.get("LAUNCHER_CKPT_DRAIN_TIMEOUT") or 120),
                  min_free=env_int("LAUNCHER_CKPT_LOCAL_MIN_FREE") or 0)


def _warn(msg):
    print("%s: warning: %s" % (PROG, msg), file=sys.stderr, flush=True)


def record(durable, gen, save: Optional[SaveRecord] = None, event: Optional[dict] = None) -> None:
    """Append a save timing and/or an event to the attempt record (advisory, never fails).
    Saves are recorded by rank 0 only (one record per step, as the single committer records
    it without tiers, so the report's intervals stay per step); events by every rank."""
    if save is not None and save.rank != 0:
        save = None
        if event is None:
            return
    try:
        doc = read_attempt(durable, gen) or {"generation": gen, "saves": []}
        if save is not None:
            doc.setdefault("saves", []).append(save.as_json())
        if event is not None:
            doc.setdefault("events", []).append(event)
        write_attempt(durable, gen, doc)
    except Exception as e:
        _warn("could not update the attempt record: %s" % e)


# ---------------------------------------------------------------- the drainer
class Drainer:
    """Copies this rank's committed local parts to the peer and the root, in order, on one
    thread. ``drain(name)`` does it in the caller's thread (drain: sync)."""

    def __init__(self, cfg, durable, gen, run=None):
        self.cfg, self.durable, self.gen, self.run = cfg, durable, gen, run
        self.lay = cfg.layout_for(durable)
        self.own = self.lay.own()
        self.q = queue.Queue()
        self.lock = threading.Lock()
        self.done = []      # names committed in the root by this drainer (or found there)
        self.errors = []
        self.lag = {}       # name -> seconds from local commit to the root's commit
        self.thread = threading.Thread(target=self._loop, name="launcher-drainer", daemon=True)
        self.thread.start()

    # backlog: parts committed locally by an earlier start of this run that the root lacks
    def backlog(self) -> list:
        out = []
        check = None
        for _s, g, name in reversed(tiers.local_parts(self.own)):
            if g >= self.gen:
                continue  # this start's own parts come through save()
            check = check or tiers.RunCheck(self.durable.root, read_generations(self.durable))
            doc, why = tiers.part_state(self.own, name)
            if doc is not None and tiers.foreign(doc, check):
                _warn("%s: not drained to %s: %s" % (self.own.url(name), self.durable.root, tiers.foreign(doc, check)))
                continue
            if doc is not None and not tiers.durable_committed(self.durable, name):
                out.append(name)
        return out

    def submit(self, item: DrainItem) -> None:
        self.q.put(item)

    def _loop(self):
        while True:
            item = self.q.get()
            try:
                if item is _STOP:
                    return
                self._handle(item)
            except BaseException as e:  # a drain never kills training; the part stays on the local tier
                self.errors.append("%s: %s" % (type(e).__name__, e))
                _warn("drain of %s failed (left committed on the local tier; the next drain retries): %s: %s"
                      % (item.name, type(e).__name__, e))
            finally:
                self.q.task_done()

    def _handle(self, item: DrainItem) -> str:
        rec = item.commit() if item.commit is not None else item.save
        state = self.drain(item.name)
        if rec is not None:
            rec.drained(state)
            record(self.durable, self.gen, save=rec)
        return state

    def drain(self, name, t_commit=None) -> str:
        """Replicate (peers: 1), upload, and commit in the root when every rank's part is
        there. Returns 'committed', 'waiting' (other ranks' parts missing) or 'already'."""
        with self.lock:
            lay, dur = self.lay, self.durable
            tiers.update_holdings(dur, lay, name, lay.rank, tiers.LOCAL)
            held, peer_host = [tiers.DURABLE], None
            if lay.peers:
                try:
                    peer_host = self._replicate(name)
                    held.append(tiers.PEER)
                except (OSError, CheckpointError) as e:
                    _warn("peer copy of %s to node %d failed: %s" % (name, lay.peer_node(), e))
            tiers.upload_part(self.own, dur, name, lay.rank)
            tiers.update_holdings(dur, lay, name, lay.rank, held, peer_host=peer_host)
            try:
                res = tiers.try_commit_durable(dur, name, lay.world, run=self.run)
            except Superseded as e:
                _warn(str(e))
                return "superseded"
            state = "waiting" if res is None else "already" if res == "already" else "committed"
            if res is not None:
                self.done.append(name)
                if t_commit is not None:
                    self.lag[name] = time.monotonic() - t_commit
            if state == "committed":
                try:
                    _gc(dur, self.cfg.keep)
                except Exception as e:
                    _warn("checkpoint gc of the root skipped: %s" % e)
            for store in [self.own] + ([lay.peer()] if lay.peers and not lay.by_host else []):
                for gone in tiers.gc_local(store, dur, self.cfg.keep):
                    tiers.update_holdings(dur, lay, gone, lay.rank, tiers.LOCAL if store is self.own else tiers.PEER,
                                      present=False)
            return state

    def _replicate(self, name):
        """The peer copy of NAME on node i+1: through a path, or over the network to a server
        of that node (``Layout.by_host``). Returns the host it went to (None: a path)."""
        lay = self.lay
        if not lay.by_host:
            tiers.replicate(self.own, lay.peer(), name)
            return None
        server(self.cfg, self.durable, self.gen)
        addr = peernet.wait_address(self.durable, self.gen, node=lay.peer_node(), timeout=self.cfg.timeout / 4)
        if addr is None:
            raise CheckpointError("no peer server of node %d published for generation %d" % (lay.peer_node(),
                                                                                             self.gen))
        peernet.send_part(addr, self.own, name, lay.rank)
        return addr["host"]

    def close(self, timeout=None) -> bool:
        """Finish the queue within TIMEOUT seconds (default the config's); True if it did."""
        self.q.put(_STOP)
        self.thread.join(self.cfg.timeout if timeout is None else timeout)
        if self.thread.is_alive():
            _warn("the final drain did not finish within %gs: what is left stays committed on the local tier "
                  "%s and is drained by the next start on this node" % (self.cfg.timeout if timeout is None
                                                                        else timeout, self.own.root))
            return False
        return True


_DRAINERS = {}
_SERVERS = {}
_LOCK = threading.Lock()


def server(cfg, durable, gen):
    """This process's peer server (``Layout.by_host`` only: it takes the peer copies of node
    i-1 and serves this node's copies to restoring nodes; started once, published under the
    root for generation GEN), or None."""
    lay = cfg.layout_for(durable)
    if not lay.by_host:
        return None
    key = (durable.root, gen)
    with _LOCK:
        srv = _SERVERS.get(key)
        if srv is None:
            srv = _SERVERS[key] = peernet.PeerServer(lay.base(), durable, lay.node, lay.rank,
                                                     gen, port=env_int("LAUNCHER_CKPT_PEER_PORT") or 0,
                                                     keep=cfg.keep)
            srv.publish()
    return srv


def drainer(cfg, durable, gen, run=None) -> Drainer:
    """This process's drainer for DURABLE, generation GEN and its rank (started once; its backlog of
    earlier starts queued first; closed, bounded, at exit)."""
    key = (durable.root, gen, cfg.layout_for(durable).own().root)
    with _LOCK:
        d = _DRAINERS.get(key)
        if d is None:
            d = _DRAINERS[key] = Drainer(cfg, durable, gen, run)
            try:
                for name in d.backlog():
                    d.submit(DrainItem(name))
            except (OSError, CheckpointError) as e:
                _warn("could not look for parts left undrained by an earlier start: %s" % e)
            if len(_DRAINERS) == 1:
                atexit.register(close_all)
    return d


def wait_all(timeout=None) -> bool:
    """Wait until every drainer of this process has nothing queued (at most TIMEOUT seconds,
    default the config's); the drainers keep running. True if they all went idle."""
    with _LOCK:
        items = list(_DRAINERS.values())
    deadline = time.monotonic() + (items[0].cfg.timeout if timeout is None and items else (timeout or 0))
    for d in items:
        while d.q.unfinished_tasks and time.monotonic() < deadline:
            time.sleep(0.01)
        if d.q.unfinished_tasks:
            return False
    return True


def close_all(timeout=None) -> bool:
    ok = True
    with _LOCK:
        items = list(_DRAINERS.values())
        _DRAINERS.clear()
    for d in items:
        ok = d.close(timeout) and ok
    return ok


# ---------------------------------------------------------------- save
_LAST_SIZE = {}


def _local_has_room(cfg, store) -> bool:
    need = _LAST_SIZE.get(store.root, 0) + cfg.min_free
    if not need:
        return True
    free = tiers.free_bytes(store.root)
    return free is None or free >= need


def _tree_size(d) -> int:
    n = 0
    for dirpath, _dirs, files in os.walk(d):
        for f in files:
            try:
                n += os.lstat(os.path.join(dirpath, f)).st_size
            except OSError:
                pass
    return n


@contextlib.contextmanager
def save(cfg, durable, step, gen, run=None, sha256=False, commit=True):
    """The tiered ``jobside.save``: yields this rank's local part directory; on clean exit the
    part is committed locally and handed to the drainer (drain: async) or drained before
    returning (drain: sync). See the module docstring for a full local disk."""
    step = int(step)
    name = step_dir(step, gen)
    lay = cfg.layout_for(durable)
    gens = check_fence(durable, step, gen)  # a zombie stops here, before writing anything
    own = lay.own()
    t0 = time.monotonic()
    rec = SaveRecord(step, now_iso(), lay.rank, preempt=preemption_requested())
    if not _local_has_room(cfg, own):
        msg = ("local tier %s has less free space than this save needs (%d bytes last time, %d reserved): "
               "saving step %d synchronously to %s" % (own.root, _LAST_SIZE.get(own.root, 0), cfg.min_free, step,
                                                        durable.root))
        _warn(msg)
        record(durable, gen, event={"at": now_iso(), "kind": "local_full", "rank": lay.rank, "step": step,
                                    "message": msg})
        with _direct(cfg, durable, name, step, gen, run, rec, t0) as d:
            yield d
        return
    d = own.ensure_dir(name)
    if os.path.lexists(os.path.join(d, COMMIT)):
        raise AlreadyCommitted("%s: already committed (checkpoints are write-once)" % d)
    try:
        yield d
    except BaseException as e:
        if tiers.is_disk_full(e):
            _LAST_SIZE[own.root] = max(_LAST_SIZE.get(own.root, 0), 1 << 62)  # next save goes to the root
            msg = "local tier %s is full (%s): step %d not saved; the next saves go to %s" % (own.root, e, step,
                                                                                               durable.root)
            _warn(msg)
            record(durable, gen, event={"at": now_iso(), "kind": "local_full", "rank": lay.rank, "step": step,
                                        "message": msg})
            shutil.rmtree(d, ignore_errors=True)
        raise
    _LAST_SIZE[own.root] = _tree_size(d)
    if not commit:
        return
    commit_local(cfg, durable, step, gen, run, sha256, rec, t0, gens=gens)


def commit_local(cfg, durable, step, gen, run=None, sha256=False, rec: Optional[SaveRecord] = None, t0=None,
                 gens=None) -> str:
    """Commit this rank's part of STEP on the local tier and hand it to the drainer (or drain
    it now with drain: sync). Returns the drain state ('queued' when async)."""
    lay = cfg.layout_for(durable)
    own = lay.own()
    name = step_dir(step, gen)
    t0 = time.monotonic() if t0 is None else t0
    rec = rec if rec is not None else SaveRecord(step, now_iso(), lay.rank)
    manifest = tiers.commit_part(own, lay, step, gen, run=run, sha256=sha256, stamp=_stamp(lay, durable, gen, gens))
    rec.committed_locally(manifest, t0)
    dr = drainer(cfg, durable, gen, run)
    if cfg.drain == "sync":
        state = dr.drain(name, t_commit=rec.committed_at)
        rec.drained(state)
        rec.seconds = round(time.monotonic() - t0, 6)  # sync: training waited for the drain too
        record(durable, gen, save=rec)
        return state
    dr.submit(DrainItem(name, save=rec))
    return "queued"


def commit_after(cfg, durable, step, gen, future, run=None, sha256=False) -> None:
    """Commit STEP's local part once FUTURE (torch.distributed.checkpoint.async_save's) is
    done, on the drainer's thread; returns at once."""
    name = step_dir(int(step), gen)
    dr = drainer(cfg, durable, gen, run)
    t0 = time.monotonic()
    started = now_iso()

    def commit() -> SaveRecord:
        future.result()
        lay = cfg.layout_for(durable)
        manifest = tiers.commit_part(lay.own(), lay, int(step), gen, run=run, sha256=sha256,
                                     stamp=_stamp(lay, durable, gen))
        # seconds: until the part was committed locally, in the background (training was
        # blocked only by async_save's staging, which the program measures)
        rec = SaveRecord(int(step), started, lay.rank, background=True)
        rec.committed_locally(manifest, t0)
        return rec

    if cfg.drain == "sync":
        rec = commit()
        rec.drain = dr.drain(name)
        record(durable, gen, save=rec)
    else:
        dr.submit(DrainItem(name, commit=commit))


@contextlib.contextmanager
def _direct(cfg, durable, name, step, gen, run, rec, t0):
    """The local tier is full: write this rank's part to a staging directory, then upload it
    and its marker to the root and try the root's commit, before returning."""
    lay = cfg.layout_for(durable)
    staging = _scratch.acquire(durable.root, "direct-" + name)
    try:
        d = os.path.join(staging, _scratch.DATA)
        yield d
        # the staged part, committed where it is, uploaded like a drained one
        part_root = LocalStore(staging)
        os.rename(d, os.path.join(staging, name))
        tiers.commit_part(part_root, lay, step, gen, run=run, stamp=_stamp(lay, durable, gen))
        tiers.upload_part(part_root, durable, name, lay.rank)
        tiers.update_holdings(durable, lay, name, lay.rank, tiers.DURABLE)
        try:
            state = tiers.try_commit_durable(durable, name, lay.world, run=run)
        except Superseded as e:
            _warn(str(e))
            state = None
        rec.tier, rec.committed, rec.end, rec.seconds = tiers.DURABLE, True, now_iso(), round(time.monotonic() - t0, 6)
        rec.fallback, rec.drain = "local_full", "waiting" if state is None else "committed"
        record(durable, gen, save=rec)
    finally:
        _scratch.release(staging)


# ---------------------------------------------------------------- restore
@contextlib.contextmanager
def restore(cfg, durable, gen):
    """Yield a directory with every file of the checkpoint this generation resumes from, each
    rank's part from the nearest complete copy (linked in place from the local or peer tier,
    from ROOT otherwise). None on a fresh start."""
    doc = tier_resume.read_resolution(durable, gen)
    if doc is None:
        if (env_int("LAUNCHER_RESUME_STEP") if env_int("LAUNCHER_RESUME_STEP") is not None else -1) >= 0:
            raise CheckpointError("%s: generation %d resumes from step %s but its resume record %s/g%d.json is "
                                  "missing: refusing to start fresh" % (durable.root, gen,
                                                                       os.environ.get("LAUNCHER_RESUME_STEP"),
                                                                       tiers.RESUME, gen))
        yield None
        return
    lay = cfg.layout_for(durable)
    base = os.path.join(lay.base(), ".restore")
    os.makedirs(base, exist_ok=True)
    dest = os.path.join(base, "%s.r%d.%d.%s" % (doc["name"], lay.rank, os.getpid(), os.urandom(3).hex()))
    check = tiers.RunCheck(durable.root, read_generations(durable))
    try:
        found = None
        if lay.by_host:
            server(cfg, durable, gen)  # before fetching: the other nodes may fetch from this one
            found = _fetch_by_host(cfg, durable, gen, doc, dest + ".fetched", check)
        tier_resume.materialize(durable, lay, doc, dest, found=found, check=check)
        yield dest
    finally:
        shutil.rmtree(dest, ignore_errors=True)
        shutil.rmtree(dest + ".fetched", ignore_errors=True)


def _fetch_by_host(cfg, durable, gen, doc, scratch, check=None) -> dict:
    """{rank: (tier, store)} of every rank's part of DOC this process could get: from this
    host's disk, else over the network from a host of the allocation holding a copy (into
    this rank's own local tier for its own part, so it is local again; into SCRATCH for the
    others'). A rank left out comes from ROOT (``materialize``)."""
    lay, name, me = cfg.layout_for(durable), doc["name"], socket.gethostname()
    base = lay.base()
    out = {}
    for r in range(int(doc.get("world") or 1)):
        src = (doc.get("sources") or {}).get(str(r)) or {}
        dst = lay.own() if r == lay.rank else LocalStore(os.path.join(scratch, "r%d" % r))
        if tiers.part_state(dst, name, check)[0] is not None:
            out[r] = (tiers.LOCAL, dst)
            continue
        for where, host in sorted((src.get("hosts") or {}).items()):
            try:
                if host == me:
                    store = LocalStore(os.path.join(base, *(["r%d" % r] if where == "own" else ["peer", "r%d" % r])))
                    if tiers.part_state(store, name, check)[0] is not None:
                        out[r] = (tiers.LOCAL if where == "own" else tiers.PEER, store)
                        break
                    continue
                addr = peernet.wait_address(durable, gen, host=host, timeout=cfg.timeout / 2)
                if addr is not None and peernet.fetch_part(addr, where, r, name, dst) is not None:
                    out[r] = (tiers.PEER, dst)
                    break
            except (OSError, ValueError, CheckpointError) as e:
                _warn("could not fetch rank %d's part of %s from %s (%s copy): %s" % (r, name, host, where, e))
        else:
            if src.get("tier") != tiers.DURABLE:
                _warn("rank %d's part of %s is on no host of this allocation any more: reading it from %s"
                      % (r, name, durable.root))
    return out
