"""The committed-checkpoint contract: names, COMMIT.json, generations and fencing.

Layout under ROOT (a POSIX directory or s3://bucket/prefix)::

    ROOT/step-<N:09d>.g<G>/...            write-once checkpoint of step N by generation G
    ROOT/step-<N:09d>.g<G>/COMMIT.json    written last, create-only: the commit
    ROOT/GENERATIONS.json                 current generation + the step each one resumed from
    ROOT/GENERATIONS.json.lock            (POSIX only) flock sidecar for compare-and-swap
    ROOT/.launcher/attempts/g<G>.json     per-generation record: start, resume, save timings
    ROOT/.quarantine/<name>.<UTC time>/   torn / stale checkpoints moved aside by gc

A checkpoint is *committed* when COMMIT.json exists, parses, names the directory's own
step and generation, and every file it lists exists with the listed size (sha256 is
checked only when asked). COMMIT.json is exactly::

    {"step": N, "generation": G,
     "files": [{"path": "relative/path", "size": BYTES, "sha256": "hex" | null}, ...],
     "created": "ISO-8601", "run": "job id (optional)"}

Generations: every start of the job bumps ``generation`` in GENERATIONS.json with
compare-and-swap and records the step it resumed from (-1 for a fresh start). A
checkpoint of generation g whose step is above the resume step of any later generation
is a *stale fork*: a superseded (zombie) attempt wrote it after the job had been
restarted elsewhere. It is never chosen, and such a writer's commit is refused.

A run launched with ``--fresh`` starts over: its first start records ``"fresh": true``
(resume step -1) in its generation's history entry, and every checkpoint of an older
generation becomes *stale* ("superseded by a fresh run"): never chosen, never
quarantined by gc, left on disk as the earlier run wrote it.
"""

from __future__ import annotations

import datetime
import json
import re
import socket

from launcher.checkpoint.errors import AlreadyCommitted, CheckpointError, Conflict, ManifestError, Superseded

COMMIT = "COMMIT.json"
GENERATIONS = "GENERATIONS.json"
META_DIR = ".launcher"
QUARANTINE = ".quarantine"
GENERATIONS_FORMAT = "launcher-generations/v1"

STEP_RE = re.compile(r"^step-(\d{9,})\.g(\d+)$")
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_MANIFEST_KEYS = ("step", "generation", "files", "created")


def now_iso() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="microseconds")


def step_dir(step: int, generation: int) -> str:
    if int(step) < 0 or int(generation) < 0:
        raise ValueError("step and generation must be >= 0 (got %r, %r)" % (step, generation))
    return "step-%09d.g%d" % (int(step), int(generation))


def parse_step_dir(name: str):
    """(step, generation) for a contract directory name, else None."""
    m = STEP_RE.match(name)
    return (int(m.group(1)), int(m.group(2))) if m else None


def attempt_key(generation: int) -> str:
    return "%s/attempts/g%d.json" % (META_DIR, int(generation))


MAX_MANIFEST_BYTES = 16 << 20  # COMMIT.json, GENERATIONS.json, framework trackers: never read more
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def unsafe_rel_path(p) -> str:
    """Why P (a path from storage: a manifest entry or an S3 key below a checkpoint) is not
    a plain relative path that stays inside its checkpoint, or '' if it is one.

    Refused: empty, absolute, a backslash (a separator somewhere), a NUL or other control
    character, an empty part ('a//b', trailing '/'), and '.' or '..' parts."""
    if not isinstance(p, str) or not p:
        return "empty"
    if "\x00" in p:
        return "contains a NUL byte"
    if _CONTROL.search(p):
        return "contains a control character"
    if "\\" in p:
        return "contains a backslash"
    if p.startswith("/"):
        return "absolute"
    for part in p.split("/"):
        if part == "":
            return "has an empty part"
        if part in (".", ".."):
            return "has a %r part" % part
    return ""


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


# ---------------------------------------------------------------- COMMIT.json
def build_manifest(step: int, generation: int, files, run=None, created=None, extra=None) -> dict:
    """FILES: iterable of (path, size, sha256-or-None). EXTRA: more top-level keys (a tier's
    "part" {"rank", "world", "node", "nodes"}, a drained checkpoint's "parts": N)."""
    doc = {"step": int(step), "generation": int(generation),
           "files": [{"path": p, "size": int(s), "sha256": h} for p, s, h in sorted(files)],
           "created": created or now_iso()}
    if run:
        doc["run"] = str(run)
    for k, v in (extra or {}).items():
        doc.setdefault(k, v)
    return doc


def manifest_bytes(doc: dict) -> bytes:
    return (json.dumps(doc, indent=1) + "\n").encode()


_MALFORMED = "malformed COMMIT.json: "


def _header_problem(doc, step, generation) -> str:
    """Why DOC (a parsed COMMIT.json) is malformed above its files, or does not belong to the
    directory of STEP and GENERATION (None: not checked); '' if it is fine."""
    if not isinstance(doc, dict):
        return _MALFORMED + "not a JSON object"
    missing = [k for k in _MANIFEST_KEYS if k not in doc]
    if missing:
        return _MALFORMED + "missing %s" % ", ".join(missing)
    if not _is_int(doc["step"]) or not _is_int(doc["generation"]):
        return _MALFORMED + "step and generation must be integers"
    if step is not None and (doc["step"], doc["generation"]) != (step, generation):
        return "COMMIT.json names step %s generation %s, but the directory is step %s generation %s" % (
            doc["step"], doc["generation"], step, generation)
    if not isinstance(doc["created"], str):
        return _MALFORMED + "created must be an ISO-8601 string"
    if "run" in doc and doc["run"] is not None and not isinstance(doc["run"], str):
        return _MALFORMED + "run must be a string"
    return ""


def _file_problem(i: int, f, seen: set) -> str:
    """Why ``files[I]`` (F) of a COMMIT.json is malformed, SEEN holding the paths listed before
    it; '' if it is fine."""
    if not isinstance(f, dict):
        return _MALFORMED + "files[%d] is not an object" % i
    p, s, h = f.get("path"), f.get("size"), f.get("sha256")
    if not isinstance(p, str) or not p:
        return _MALFORMED + "files[%d].path must be a string" % i
    why = unsafe_rel_path(p)
    if why or p == COMMIT:
        return _MALFORMED + "files[%d].path %r must be a plain relative path inside the checkpoint (%s)" % (
            i, p, why or "COMMIT.json lists itself")
    if p in seen:
        return _MALFORMED + "files[%d].path %r is listed twice" % (i, p)
    if not _is_int(s) or s < 0:
        return _MALFORMED + "files[%d].size must be an integer >= 0" % i
    if h is not None and (not isinstance(h, str) or not _HEX64.match(h)):
        return _MALFORMED + "files[%d].sha256 must be 64 hex digits or null" % i
    return ""


def _file_and_directory(paths: set) -> list:
    """The PATHS that are also a parent directory of another one, sorted."""
    parents = set()
    for p in paths:
        parts = p.split("/")
        parents.update("/".join(parts[:k]) for k in range(1, len(parts)))
    return sorted(paths & parents)


def _files_problem(files) -> str:
    """Why the ``files`` list FILES of a COMMIT.json is malformed; '' if it is fine."""
    if not isinstance(files, list) or not files:
        return _MALFORMED + "files must be a non-empty list"
    seen: set = set()
    for i, f in enumerate(files):
        why = _file_problem(i, f, seen)
        if why:
            return why
        seen.add(f["path"])
    clash = _file_and_directory(seen)
    if clash:
        return _MALFORMED + "%r is listed as a file and as a directory" % clash[0]
    return ""


def parse_manifest(raw: bytes, where: str, step=None, generation=None) -> dict:
    """Validate a COMMIT.json; ManifestError (naming WHERE) if it is malformed or does not
    belong to its directory."""
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise ManifestError("%s: malformed COMMIT.json: %s" % (where, e))
    why = _header_problem(doc, step, generation) or _files_problem(doc["files"])
    if why:
        raise ManifestError("%s: %s" % (where, why))
    return doc


# ---------------------------------------------------------------- GENERATIONS.json
class Generations:
    """Parsed GENERATIONS.json: ``generation`` (0 when absent) and ``history``, a list of
    {"generation", "resume_step", "resume_from", "job_id", "started", "host"}."""

    def __init__(self, generation: int = 0, history=None, token=None, exists: bool = False):
        self.generation = generation
        self.history = list(history or [])
        self.token = token
        self.exists = exists

    def fork_point(self, generation):
        """(step, by_generation): the lowest resume step of any later generation of the same
        run, or None. A checkpoint of GENERATION with a step above it is a stale fork. A
        generation that started over (``"fresh": true``, see ``fresh_after``) begins another
        run: neither it nor the generations after it say anything about GENERATION's run."""
        if generation is None:
            return None
        fresh = self.fresh_after(generation)
        end = fresh["generation"] if fresh is not None else None
        best = None
        for h in self.history:
            g, s = h.get("generation"), h.get("resume_step")
            if not (_is_int(g) and _is_int(s)) or g <= generation or (end is not None and g >= end):
                continue
            if best is None or s < best[0]:
                best = (s, g)
        return best

    def fresh_after(self, generation):
        """The record of the first generation above GENERATION that started over (a run
        launched with ``--fresh`` records ``"fresh": true`` and resume step -1), or None.
        Every checkpoint of GENERATION is then an earlier run's: kept, never resumed from."""
        if generation is None:
            return None
        found = None
        for h in self.history:
            g = h.get("generation")
            if h.get("fresh") is True and _is_int(g) and g > generation and \
                    (found is None or g < found["generation"]):
                found = h
        return found

    def stale_cause(self, step, generation):
        """(kind, reason): kind "fork" (a zombie wrote it after a later generation resumed
        from an earlier step), "fresh" (a later run started over), or (None, None)."""
        fp = self.fork_point(generation)
        if fp is not None and step > fp[0]:
            return "fork", ("stale fork: generation %d resumed from step %d, so generation %d wrote this after it "
                            "was superseded" % (fp[1], fp[0], generation))
        fr = self.fresh_after(generation)
        if fr is not None:
            return "fresh", ("superseded by a fresh run: generation %d%s started over (launch --fresh), so this "
                             "checkpoint of generation %d is kept but never resumed from"
                             % (fr["generation"], " (job %s)" % fr["job_id"] if fr.get("job_id") else "", generation))
        return None, None

    def stale_reason(self, step, generation):
        return self.stale_cause(step, generation)[1]

    def record(self, generation):
        for h in self.history:
            if h.get("generation") == generation:
                return h
        return None

    def to_doc(self) -> dict:
        return {"format": GENERATIONS_FORMAT, "generation": self.generation, "history": self.history}


def read_generations(store) -> Generations:
    raw, token = store.read(GENERATIONS)
    if raw is None:
        return Generations()
    where = store.url(GENERATIONS)
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise ManifestError("%s: malformed (cannot fence writers without it; fix or move it aside): %s"
                            % (where, e))
    if not isinstance(doc, dict) or not _is_int(doc.get("generation")) or \
            not isinstance(doc.get("history", []), list):
        raise ManifestError("%s: malformed: expected {\"generation\": int, \"history\": [...]}" % where)
    return Generations(doc["generation"], doc.get("history", []), token, True)


def bump_generation(store, gens: Generations, resume=None, job_id=None, hint=None, min_generation=0,
                    extra=None) -> Generations:
    """Start a new generation: max(current + 1, HINT, MIN_GENERATION), recording the step it
    resumes from (-1 on a fresh start). Compare-and-swap against GENS.token: raises
    Conflict if another start won the race (re-read and retry)."""
    new = max(gens.generation + 1, int(hint or 0), int(min_generation or 0), 1)
    rec = {"generation": new,
           "resume_step": resume.step if resume is not None else -1,
           "resume_from": resume.path if resume is not None else None,
           "job_id": job_id, "started": now_iso(), "host": socket.gethostname()}
    if extra:
        rec.update(extra)
    out = Generations(new, gens.history + [rec], None, True)
    out.token = store.put_if_match(GENERATIONS, (json.dumps(out.to_doc(), indent=1) + "\n").encode(), gens.token)
    return out


def check_fence(store, step: int, generation: int, gens=None) -> Generations:
    """Raise Superseded if GENERATION may no longer commit STEP."""
    gens = gens if gens is not None else read_generations(store)
    why = gens.stale_reason(step, generation)
    if gens.generation > generation or why:
        fp = gens.fork_point(generation)
        raise Superseded("%s: generation %d was superseded by generation %d%s; commit of step %d refused "
                         "(this attempt is a zombie and should exit)"
                         % (store.root, generation, gens.generation,
                            " (resumed from step %d)" % fp[0] if fp else "", step),
                         generation, gens.generation, fp[0] if fp else None)
    return gens


# ---------------------------------------------------------------- commit
def _is_commit_tmp(relpath: str) -> bool:
    return "/" not in relpath and relpath.startswith("." + COMMIT + ".tmp-")


def commit(store, step: int, generation: int, run=None, sha256=False, fence=True, durable=True, extra=None) -> dict:
    """Publish COMMIT.json for ROOT/step-N.gG listing every file now under it.

    SHA256: False (null hashes), True (hash every file: reads it all back), or a dict
    {path: hex} of hashes already known (others null). FENCE: refuse if this generation
    has been superseded. DURABLE: fsync the files and directories first (POSIX).
    Raises AlreadyCommitted, Superseded, CheckpointError (nothing to commit).
    """
    name = step_dir(step, generation)
    where = store.url(name)
    if fence:
        check_fence(store, step, generation)
    odd = {}
    tree = {p: s for p, s in store.list_tree(name, odd=odd).items() if not _is_commit_tmp(p)}
    if COMMIT in tree or COMMIT in odd:
        raise AlreadyCommitted("%s: already has a COMMIT.json (checkpoints are write-once)" % where)
    for p in sorted(odd):
        raise CheckpointError("%s/%s: is %s: a checkpoint holds regular files only (links are never followed, "
                              "so it could not be restored); nothing committed" % (where, p, odd[p]))
    for p in sorted(tree):
        why = unsafe_rel_path(p)
        if why:
            raise CheckpointError("%s: refused to commit %r: the path %s" % (where, p, why))
    if not tree:
        raise CheckpointError("%s: nothing to commit (no files written)" % where)
    if durable:
        store.fsync_tree(name)
    known = sha256 if isinstance(sha256, dict) else {}
    files = []
    for p in sorted(tree):
        h = known.get(p)
        if h is None and sha256 is True:
            h = store.sha256(name + "/" + p)
        files.append((p, tree[p], h))
    doc = build_manifest(step, generation, files, run=run, extra=extra)
    try:
        store.put_if_absent(name + "/" + COMMIT, manifest_bytes(doc))
    except Conflict:
        raise AlreadyCommitted("%s: already has a COMMIT.json (checkpoints are write-once)" % where)
    return doc
