"""Discovery: which checkpoints under ROOT are committed, torn or stale, and which one a
restart resumes from.

Order is descending (step, generation), from the names alone; never by mtime (clocks
skew, copies reset it). ``latest()`` lists ROOT once (S3: ListObjectsV2 with a
delimiter, paginated) and then opens candidates from the newest down until one is
committed and not a stale fork: typically one COMMIT.json read and one stat per file
(S3: one GET and one listing of that checkpoint's prefix).

Framework layouts are recognised read-only (generation ``None``), next to the launcher's
own ``step-<N>.g<G>`` directories:

- torch DCP: a step-named directory with ``.metadata`` (DCP writes it last).
- Orbax: ``commit_success.txt`` (its commit marker on object stores); on POSIX Orbax
  renames ``<step>.orbax-checkpoint-tmp-*`` into ``<step>`` once complete, so a
  renamed directory with ``_CHECKPOINT_METADATA`` counts too; ``*.orbax-checkpoint-tmp-*``
  is torn.
- Megatron: ``iter_<N>`` directories; ``latest_checkpointed_iteration.txt`` names the
  newest complete one (written after every rank saved), so ``iter_<N>`` above it is torn.
- DeepSpeed: ``global_step<N>`` directories; ``latest`` names the newest tag (DeepSpeed
  may write it before every rank finished, so this is the weakest of the four).

Step-named directories without any marker are listed as torn. Names that carry no step
(``logs/``, ``wandb/``) are ignored.
"""

from __future__ import annotations

import hashlib
import re
from concurrent.futures import ThreadPoolExecutor
from typing import Optional

from launcher.checkpoint.contract import COMMIT, Generations, parse_manifest, parse_step_dir, read_generations
from launcher.checkpoint.errors import CheckpointError, ManifestError, UnsafePath

COMMITTED, TORN, STALE = "committed", "torn", "stale"

_FW_RE = re.compile(r"^(iter_|global_step|step[-_]?|checkpoint[-_]|ckpt[-_]?)?(\d+)(\.orbax-checkpoint-tmp-\d+)?$")
MEGATRON_TRACKER = "latest_checkpointed_iteration.txt"
DEEPSPEED_TRACKER = "latest"


class Entry:
    """One checkpoint directory and its state."""

    __slots__ = ("name", "path", "step", "generation", "state", "reason", "format", "manifest", "malformed",
                 "foreign")

    def __init__(self, name, path, step, generation, state, reason, format="launcher", manifest=None,
                 malformed=False, foreign=False):
        self.name = name
        self.path = path
        self.step = step
        self.generation = generation
        self.state = state
        self.reason = reason
        self.format = format
        self.manifest = manifest
        self.malformed = malformed
        self.foreign = foreign  # not a real directory under ROOT (a link, a FIFO): never touched

    @property
    def committed(self) -> bool:
        return self.state == COMMITTED

    def to_dict(self) -> dict:
        return {"path": self.path, "step": self.step, "generation": self.generation, "state": self.state,
                "reason": self.reason}

    def __repr__(self):
        return "Entry(%s, %s, %s)" % (self.name, self.state, self.reason)


def _candidates(dirs):
    """[(step, generation-or-None, name, format)] sorted newest first."""
    out = []
    for name in dirs:
        sg = parse_step_dir(name)
        if sg is not None:
            out.append((sg[0], sg[1], name, "launcher"))
            continue
        m = _FW_RE.match(name)
        if m:
            out.append((int(m.group(2)), None, name, "framework"))
    out.sort(key=lambda c: (c[0], -1 if c[1] is None else c[1], c[2]), reverse=True)
    return out


class _Context:
    """Per-listing state: top-level files (framework trackers), generations, options."""

    def __init__(self, store, files, gens, verify, odd=None):
        self.store = store
        self.files = files
        self.odd = odd or {}  # top-level names that are links or special files: never followed
        self.gens = gens
        self.verify = verify
        self._trackers = {}

    def tracker(self, name):
        """(value, problem): the tracker file's stripped text or None, and why it cannot
        be used ('' if fine or absent)."""
        if name not in self._trackers:
            val, why = None, ""
            if name in self.odd:
                why = "%s is %s, not a regular file" % (name, self.odd[name])
            elif name in self.files:
                try:
                    raw, _ = self.store.read(name, limit=4096)
                except UnsafePath as e:
                    raw, why = None, str(e)
                if raw is not None:
                    val = raw.decode("utf-8", "replace").strip()
            self._trackers[name] = (val, why)
        return self._trackers[name]


def _size_problem(f: dict, got) -> Optional[str]:
    """Why the file F listed in a COMMIT.json does not match what is there (GOT: its size, None
    when missing, or what it is when no regular file), or None."""
    if isinstance(got, str):
        return "%s: listed in COMMIT.json but it is %s, not a regular file (links are never followed)" % (
            f["path"], got)
    if got is None:
        return "%s: listed in COMMIT.json but missing" % f["path"]
    if got != f["size"]:
        return "%s: size %d, COMMIT.json lists %d" % (f["path"], got, f["size"])
    return None


def _files_problem(store, name: str, files: list, verify: bool) -> Optional[str]:
    """Why the FILES a COMMIT.json of STORE/NAME lists are not all there (sizes; with VERIFY,
    the sha256 where recorded), or None."""
    sizes = store.file_sizes(name, [f["path"] for f in files])
    for f in files:
        problem = _size_problem(f, sizes.get(f["path"]))
        if problem:
            return problem
    if verify:
        for f in files:
            if f.get("sha256") and store.sha256(name + "/" + f["path"]) != f["sha256"]:
                return "%s: sha256 mismatch" % f["path"]
    return None


def _commit_summary(files: list, verify: bool) -> str:
    """A committed checkpoint's reason: what its COMMIT.json lists and how much of it was checked."""
    total = sum(f["size"] for f in files)
    hashed = sum(1 for f in files if f.get("sha256"))
    how = ("sizes and sha256 verified" if verify and hashed == len(files)
           else "sizes and %d/%d sha256 verified" % (hashed, len(files)) if verify else "sizes match")
    return "COMMIT.json: %d file(s), %d bytes, %s" % (len(files), total, how)


def _evaluate_launcher(store, step, gen, name, ctx, commit_known=None) -> Entry:
    path = store.url(name)

    def torn(reason, doc=None, malformed=False):
        return Entry(name, path, step, gen, TORN, reason, "launcher", doc, malformed)

    stale = ctx.gens.stale_reason(step, gen)
    if stale:
        return Entry(name, path, step, gen, STALE, stale)
    try:
        raw = None if commit_known is False else store.read(name + "/" + COMMIT)[0]
    except UnsafePath as e:  # a FIFO, a device, a link or a huge file named COMMIT.json
        return torn(str(e), malformed=True)
    if raw is None:
        return torn("no COMMIT.json (uncommitted or torn)")
    try:
        doc = parse_manifest(raw, store.url(name + "/" + COMMIT), step, gen)
    except ManifestError as e:
        return torn(str(e), malformed=True)
    problem = _files_problem(store, name, doc["files"], ctx.verify)
    if problem:
        return torn(problem, doc)
    return Entry(name, path, step, gen, COMMITTED, _commit_summary(doc["files"], ctx.verify), "launcher", doc)


def _has(tree, basename):
    return any(p == basename or p.endswith("/" + basename) for p in tree)


def _judge_megatron(step: int, tree: dict, tracker: Optional[str], why: str) -> tuple[str, str]:
    """(state, reason) of Megatron's ``iter_<STEP>`` holding TREE, by its tracker file's text
    TRACKER (None: absent; WHY: why it cannot be used)."""
    if why:
        return TORN, "Megatron: %s" % why
    top = set(p for p in tree if "/" not in p)
    complete = ".metadata" in top or _has(tree, "model_optim_rng.pt") or ("common.pt" in top and
                                                                        "metadata.json" in top)
    if tracker is None:
        return TORN, "Megatron: no %s" % MEGATRON_TRACKER
    if not tracker.isdigit():
        return TORN, "Megatron: %s holds %r, not an iteration" % (MEGATRON_TRACKER, tracker[:40])
    if step > int(tracker):
        return TORN, "Megatron: newer than iteration %s named in %s" % (tracker, MEGATRON_TRACKER)
    if not complete:
        return TORN, "Megatron: incomplete (no model_optim_rng.pt or .metadata)"
    return COMMITTED, "Megatron: %s %s" % (
        "named in" if step == int(tracker) else "older than iteration %s in" % tracker, MEGATRON_TRACKER)


def _judge_deepspeed(step: int, name: str, tree: dict, tracker: Optional[str], why: str) -> tuple[str, str]:
    """(state, reason) of DeepSpeed's NAME (``global_step<STEP>``) holding TREE, by its ``latest``
    file's text TRACKER (None: absent; WHY: why it cannot be used)."""
    if why:
        return TORN, "DeepSpeed: %s" % why
    complete = any(p.endswith("model_states.pt") and s > 0 for p, s in tree.items())
    if tracker is None:
        return TORN, "DeepSpeed: no '%s' file" % DEEPSPEED_TRACKER
    m = _FW_RE.match(tracker)
    tstep = int(m.group(2)) if m else None
    if tracker != name and (tstep is None or step > tstep):
        return TORN, "DeepSpeed: newer than tag %r named in '%s'" % (tracker[:40], DEEPSPEED_TRACKER)
    if not complete:
        return TORN, "DeepSpeed: incomplete (no *model_states.pt)"
    return COMMITTED, "DeepSpeed: %s '%s' (DeepSpeed may write it before every rank finished; sizes unchecked)" % (
        "named in" if tracker == name else "older than the tag in", DEEPSPEED_TRACKER)


def _judge_by_marker(tree: dict, is_local: bool) -> tuple[str, str, str]:
    """(state, format, reason) of a step-named directory holding TREE, by the commit marker in
    it: torch DCP's ``.metadata``, Orbax's ``commit_success.txt`` (or, on a local filesystem,
    its ``_CHECKPOINT_METADATA`` renamed into place)."""
    top = set(p for p in tree if "/" not in p)
    if ".metadata" in top:
        return COMMITTED, "dcp", "torch DCP: .metadata present"
    if "commit_success.txt" in top:
        return COMMITTED, "orbax", "Orbax: commit_success.txt present"
    if "_CHECKPOINT_METADATA" in top:
        if is_local:
            return COMMITTED, "orbax", "Orbax: renamed into place (_CHECKPOINT_METADATA present)"
        return TORN, "orbax", "Orbax: no commit_success.txt"
    if any(p.endswith(".distcp") for p in tree):
        return TORN, "dcp", "torch DCP: shards without .metadata"
    if not tree:
        return TORN, "unknown", "empty directory"
    return TORN, "unknown", "no commit marker (COMMIT.json, .metadata, commit_success.txt, %s, %s)" % (
        MEGATRON_TRACKER, DEEPSPEED_TRACKER)


def _evaluate_framework(store, step, name, ctx) -> Entry:
    path = store.url(name)
    if ".orbax-checkpoint-tmp-" in name:
        state, fmt, reason = TORN, "orbax", "Orbax: temporary directory, never renamed into place"
    elif name.startswith("iter_"):
        tree = store.list_tree(name)
        fmt = "megatron"
        state, reason = _judge_megatron(step, tree, *ctx.tracker(MEGATRON_TRACKER))
    elif name.startswith("global_step"):
        tree = store.list_tree(name)
        fmt = "deepspeed"
        state, reason = _judge_deepspeed(step, name, tree, *ctx.tracker(DEEPSPEED_TRACKER))
    else:
        state, fmt, reason = _judge_by_marker(store.list_tree(name), store.is_local)
    return Entry(name, path, step, None, state, reason, fmt)


def _evaluate(store, cand, ctx, commit_known=None) -> Entry:
    step, gen, name, kind = cand
    if name in ctx.odd:
        return Entry(name, store.url(name), step, gen, TORN, "not a checkpoint: %s is %s (links are never "
                     "followed out of ROOT)" % (name, ctx.odd[name]), kind, foreign=True)
    try:
        return _evaluate_dir(store, cand, ctx, commit_known)
    except UnsafePath as e:  # something below it is a link where a directory belongs
        return Entry(name, store.url(name), step, gen, TORN, str(e), kind, malformed=True)


def _evaluate_dir(store, cand, ctx, commit_known=None) -> Entry:
    step, gen, name, kind = cand
    if kind == "launcher":
        return _evaluate_launcher(store, step, gen, name, ctx, commit_known)
    return _evaluate_framework(store, step, name, ctx)


def _list(store, gens, verify):
    dirs, files, odd = store.list_top()
    if gens is None:
        gens = read_generations(store)
    return _candidates(list(dirs) + list(odd)), _Context(store, files, gens, verify, odd)


def evaluate_one(store, name: str, step: int, generation: int) -> Entry:
    """The Entry of the one launcher checkpoint STORE/NAME (step STEP of GENERATION), judged by
    itself: committed when its COMMIT.json lists files that are all there, no stale rule (no
    generation history). Node-local parts of the checkpoint tiers are judged this way."""
    return _evaluate(store, (step, generation, name, "launcher"), _Context(store, {}, Generations(), False))


def latest(store, verify: bool = False, gens=None, log=None, seen=None):
    """The newest committed checkpoint that is not a stale fork, or None. Every candidate
    looked at on the way (newer torn / stale ones) is appended to LOG as an Entry. SEEN
    (a dict), if given, receives "candidates" and "max_generation" (highest G in any
    step-N.gG name, -1 if none)."""
    cands, ctx = _list(store, gens, verify)
    if seen is not None:
        seen["candidates"] = len(cands)
        seen["max_generation"] = max([c[1] for c in cands if c[1] is not None] or [-1])
    for c in cands:
        e = _evaluate(store, c, ctx)
        if log is not None:
            log.append(e)
        if e.committed:
            return e
    return None


def scan(store, verify: bool = False, gens=None, workers: int = 16):
    """Every checkpoint under ROOT with its state and reason, newest first.

    On S3 the whole ROOT is listed once (paginated) and the COMMIT.json reads run on
    WORKERS threads."""
    cands, ctx = _list(store, gens, verify)
    if store.is_local or not cands:
        return [_evaluate(store, c, ctx) for c in cands]
    tree = store.prefetch_all()
    has_commit = set(k.split("/", 1)[0] for k in tree if k.endswith("/" + COMMIT) and k.count("/") == 1)

    def one(c):
        return _evaluate(store, c, ctx, commit_known=(c[2] in has_commit) if c[3] == "launcher" else None)

    try:
        with ThreadPoolExecutor(max_workers=max(1, workers)) as ex:
            return list(ex.map(one, cands))
    finally:
        store._tree_cache = None


def verify_files(store, entry) -> None:
    """Re-check a committed launcher checkpoint's sizes and sha256 (where recorded)."""
    if entry.manifest is None:
        raise CheckpointError("%s: not a launcher checkpoint with a COMMIT.json" % entry.path)
    for f in entry.manifest["files"]:
        if f.get("sha256") and store.sha256(entry.name + "/" + f["path"]) != f["sha256"]:
            raise CheckpointError("%s/%s: sha256 mismatch" % (entry.path, f["path"]))


def sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for b in iter(lambda: f.read(1 << 20), b""):
            h.update(b)
    return h.hexdigest()
