"""Where a run's provenance is kept, and how it is written and read back.

* State store: table ``provenance(job_id PRIMARY KEY, created, location, record)``,
  created with ``CREATE TABLE IF NOT EXISTS`` on first use, so existing databases
  gain it without a migration and older launchers simply ignore it.
* Checkpoint root: ``ROOT/.launcher/runs/<job_id>/RUN.json``. The ``.launcher`` folder
  is the contract's metadata folder, invisible to checkpoint discovery and gc.

Both copies hold the same JSON document, redacted with ``launcher.core.redact`` (the values
of the spec's secrets and of every secret-looking variable of the launching
environment, plus known credential shapes) before anything is written.
"""

from __future__ import annotations

import functools
import json
import posixpath
import re
import sys
import time
from dataclasses import dataclass
from typing import Optional

from launcher.checkpoint.contract import META_DIR
from launcher.core.jsonrows import Template
from launcher.core.redact import is_secret_name

TABLE = """
CREATE TABLE IF NOT EXISTS provenance (
  job_id   TEXT PRIMARY KEY,
  created  REAL NOT NULL,
  location TEXT,
  record   TEXT NOT NULL
);
"""
RUNS_DIR = META_DIR + "/runs"
RUN_FILE = "RUN.json"
_SAFE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")


def run_key(job_id: str) -> str:
    """The key of a run's record under its checkpoint root."""
    if not _SAFE_ID.match(job_id or "") or ".." in job_id:
        raise ValueError(f"not a job id: {job_id!r}")
    return f"{RUNS_DIR}/{job_id}/{RUN_FILE}"


def _values_under_secret_keys(obj, out: set) -> set:
    """Values of secret-looking keys anywhere in OBJ (e.g. ``env: {WANDB_API_KEY: ...}`` written
    into a spec): they are then masked wherever else they appear (the spec's text, the
    rendered script), not only under their key."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            if isinstance(v, str) and len(v) >= 4 and is_secret_name(str(k)):
                out.add(v)
            elif isinstance(v, (dict, list, tuple)):
                _values_under_secret_keys(v, out)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            if isinstance(v, (dict, list, tuple)):
                _values_under_secret_keys(v, out)
    return out


# Sections of a record that are the same launch after launch (the spec, the code identity, the
# Python environment, ...): their redaction is kept per process, keyed by their exact JSON and
# the masks in force, so an unchanged section is not walked again. The record is read-only.
STATIC_SECTIONS = frozenset({"spec", "code", "python", "versions", "image", "secrets", "submitted_by"})
_MEMO: dict = {}
_MEMO_MAX = 256


def _fingerprint(key: str, value) -> Optional[str]:
    if key not in STATIC_SECTIONS:
        return None
    try:
        return json.dumps(value, default=str)
    except (TypeError, ValueError):  # keys JSON cannot carry: not kept, redacted every time
        return None


def _memo(key: tuple, compute):
    if key[1] is None:
        return compute()
    hit = _MEMO.get(key)
    if hit is None:
        if len(_MEMO) >= _MEMO_MAX:
            _MEMO.clear()
        hit = _MEMO[key] = compute()
    return hit


def redact_record(doc: dict, secret_names=()) -> dict:
    """Mask the values of the spec's secrets and of every secret-looking variable of this
    environment, values written under secret-looking keys, and known credential shapes.
    Section by section (a dict's keys are redacted independently), unchanged sections once."""
    from launcher.core.redact import _masks, redact_obj, secret_values

    python = doc.get("python")
    packages = None
    if isinstance(python, dict) and isinstance(python.get("packages"), list):
        # the package list (~300 strings, no keys) is the same launch after launch: redacted once per list and masks
        packages = python["packages"]
        doc = {**doc, "python": {k: v for k, v in python.items() if k != "packages"}}
    prints = {k: _fingerprint(k, v) for k, v in doc.items()}
    found = set(secret_values(secret_names))
    for k, v in doc.items():
        found |= _memo(("keyed", prints[k], k), lambda: frozenset(_values_under_secret_keys({k: v}, set())))
    masks = tuple(_masks(found))
    out: dict = {}
    for k, v in doc.items():
        out[k] = _memo(("redacted", prints[k], k, masks), lambda: redact_obj({k: v}, _masks_=list(masks))[k])
    if packages is not None:  # the same section object launch after launch (dump_record keeps its text)
        listed, python_print = tuple(packages), prints.get("python")
        out["python"] = _memo(("python", python_print, masks, listed),
                              lambda: {**out["python"], "packages": list(_redacted_strings(listed, masks))})
    return out


@functools.lru_cache(maxsize=4)
def _redacted_strings(values: tuple, masks: tuple) -> tuple:
    from launcher.core.redact import redact_obj

    return tuple(redact_obj(list(values), _masks_=list(masks)))


DUMP_OPTIONS = {"indent": 1, "sort_keys": False, "default": str}  # RUN.json's and the store's text


def to_bytes(doc: dict) -> bytes:
    return (json.dumps(doc, **DUMP_OPTIONS) + "\n").encode()


_DUMPED: dict = {}  # (key, id(section)) -> (section, its text): redact_record hands out its memoized sections


def dump_record(doc: dict) -> str:
    """``json.dumps(DOC, **DUMP_OPTIONS)``, with the text of each section that ``redact_record``
    kept from an earlier launch (the very same object) taken from then: indented JSON is
    made by Python's slow encoder, and most of a record is the same launch after launch."""
    if not all(isinstance(k, str) for k in doc):
        return json.dumps(doc, **DUMP_OPTIONS)
    parts = []
    for k, v in doc.items():
        hit = _DUMPED.get((k, id(v))) if isinstance(v, (dict, list)) else None
        if hit is not None and hit[0] is v:
            text = hit[1]
        else:
            text = json.dumps(v, **DUMP_OPTIONS).replace("\n", "\n ")  # one level deeper
            if isinstance(v, (dict, list)) and _is_kept(k, v):
                if len(_DUMPED) >= _MEMO_MAX:
                    _DUMPED.clear()
                _DUMPED[(k, id(v))] = (v, text)  # holding V: its id is not reused while kept
        parts.append(f" {json.dumps(k)}: {text}")
    return "{\n" + ",\n".join(parts) + "\n}" if parts else "{}"


def _is_kept(key: str, value) -> bool:
    """Is VALUE a section redact_record keeps between launches (handed out again as is)?"""
    return key in STATIC_SECTIONS and any(v is value for v in _MEMO.values())


# ---------------------------------------------------------------- state store
def ensure_table(store) -> None:
    if getattr(store, "_provenance_table", False):  # once per open store, not once per launch
        return
    store.db.execute(TABLE)  # one statement, so it joins an open batch (executescript would commit it)
    if store.db.in_transaction:  # made inside a transaction that may yet be rolled back: not known to stay
        return
    try:
        store._provenance_table = True
    except AttributeError:
        pass


INSERT_RECORD = "INSERT OR REPLACE INTO provenance(job_id, created, location, record) VALUES(?,?,?,?)"


def save_record(store, job_id: str, doc: dict, location: Optional[str]) -> None:
    ensure_table(store)
    with store.tx() as db:
        db.execute(INSERT_RECORD, (job_id, time.time(), location, json.dumps(doc, default=str)))


def load_record(store, job_id: str) -> Optional[dict]:
    """The record of JOB_ID (exact id) from the state store, or None."""
    ensure_table(store)
    row = store.db.execute("SELECT record, location FROM provenance WHERE job_id=?", (job_id,)).fetchone()
    if row is None:
        return None
    doc = json.loads(row["record"])
    doc.setdefault("_location", row["location"])
    return doc


# ---------------------------------------------------------------- checkpoint root
def write_run_json(app, target_name: str, root: str, job_id: str, data: bytes) -> tuple[Optional[str], str]:
    """Write RUN.json under ROOT where the job will see it. Returns (location, note).

    s3:// roots: through the checkpoint store (S3 PutObject). POSIX roots: on this host
    for a backend that submits from here (local, Slurm on its login node); over the
    target's SSH runner (atomic put_file) for a cluster reached over SSH (HasSubmitHost);
    a POSIX root of any other backend (a cloud VM's disk) is not reachable from here and
    is skipped."""
    from launcher.checkpoint.store import is_s3, open_store

    key = run_key(job_id)
    if is_s3(root):
        store = open_store(root)
        store.put(key, data)
        return store.url(key), ""
    from launcher.backend.protocols import HasSubmitHost, can

    backend = app.backend(target_name)
    runner = backend.runner if can(backend, HasSubmitHost) else None  # local subprocess or SSH
    where = runner.where if runner is not None else None
    if runner is not None and where != "localhost":
        path = posixpath.join(root, key)
        runner.put_file(path, data, 0o644)
        return f"{where}:{path}", ""
    if where == "localhost":
        store = open_store(root)
        store.put(key, data)
        return store.url(key), ""
    return None, (f"the checkpoint root {root} is on the {backend.name} target's file system, not reachable "
                  f"from the submit host: RUN.json not written (use an s3:// root to keep it with the checkpoints)")


def read_run_json(root: str, run_id: str) -> tuple[Optional[dict], str]:
    """(record, location) of RUN_ID under ROOT, or (None, location) if absent."""
    from launcher.checkpoint.store import open_store

    store = open_store(root)
    key = run_key(run_id)
    raw, _ = store.read(key)
    if raw is None:
        return None, store.url(key)
    try:
        doc = json.loads(raw.decode("utf-8"))
    except ValueError:
        return None, store.url(key)
    return (doc if isinstance(doc, dict) else None), store.url(key)


def list_runs(root: str) -> list[str]:
    """Run ids with a RUN.json under ROOT (POSIX roots: a directory listing; S3: a prefix listing)."""
    from launcher.checkpoint.store import open_store

    store = open_store(root)
    try:
        tree = store.list_tree(RUNS_DIR)
    except Exception:
        return []
    return sorted({p.split("/")[0] for p in tree if p.endswith("/" + RUN_FILE)})


# ---------------------------------------------------------------- launch hook
def _document(app, *, job_id: str, spec, spec_text: str, spec_path: Optional[str], target_name: str,
              request=None, handle=None, seed=None, seed_source=None, continues=None) -> dict:
    """The redacted provenance record (capture + redact; no writes)."""
    from launcher.backend.protocols import Facts, ReportsVersion, can
    from launcher.provenance.capture import capture

    backend = app.backend(target_name)
    try:
        facts = app.facts(target_name)
    except Exception:
        facts = Facts(target_name, backend.name, {})
    doc = capture(job_id=job_id, spec=spec, spec_text=spec_text, spec_path=spec_path, target=target_name,
                  backend=backend.name, facts_data=facts.data, request=request, handle=handle, seed=seed,
                  seed_source=seed_source,
                  backend_version=backend.version(facts) if can(backend, ReportsVersion) else None)
    if continues:
        doc["continues"] = continues
    return redact_record(doc, spec.secrets)


@dataclass
class Captured:
    """A run's redacted record and where its RUN.json went (or the error that stopped the capture).
    TEXT: the record as RUN.json holds it; a draft holds instead TEMPLATE, its text with holes
    for what only the submission knows (``complete_launch`` fills them)."""

    doc: Optional[dict]
    location: Optional[str] = None
    note: str = ""
    error: str = ""
    text: Optional[str] = None
    template: Optional[object] = None  # launcher.core.jsonrows.Template


SUBMISSION_KEYS = ("native_id", "attempt")  # what complete_launch adds to a draft


def capture_launch(app, *, job_id: str, spec, spec_text: str, spec_path: Optional[str], target_name: str,
                   request=None, handle=None, seed=None, seed_source=None, continues=None) -> Captured:
    """Capture the record and write RUN.json under the checkpoint root; nothing goes to the
    state store yet (``save_launch``), so a slow root (S3) never holds the store's lock.
    Never raises."""
    draft = draft_launch(app, job_id=job_id, spec=spec, spec_text=spec_text, spec_path=spec_path,
                         target_name=target_name, request=request, handle=handle, seed=seed,
                         seed_source=seed_source, continues=continues)
    return complete_launch(app, draft, spec, target_name, job_id, handle)


def draft_launch(app, *, job_id: str, spec, spec_text: str, spec_path: Optional[str], target_name: str,
                 request=None, handle=None, seed=None, seed_source=None, continues=None) -> Captured:
    """The redacted record, captured before the submission is known (``launch`` does this
    while the scheduler answers); ``complete_launch`` adds the handle and writes RUN.json.
    Never raises: an error is kept in the result."""
    try:
        doc = _document(app, job_id=job_id, spec=spec, spec_text=spec_text, spec_path=spec_path,
                        target_name=target_name, request=request, handle=handle, seed=seed,
                        seed_source=seed_source, continues=continues)
        # the table, made outside any transaction: once per open store, never again inside save_launch's batch
        ensure_table(app.store)
        template = Template.of(doc, SUBMISSION_KEYS, dumps=dump_record, **DUMP_OPTIONS)  # now, while sbatch runs
    except Exception as e:  # noqa: BLE001 - provenance must never fail a launch that was submitted
        return Captured(None, error=f"{type(e).__name__}: {e}")
    return Captured(doc, template=template)


def complete_launch(app, draft: Captured, spec, target_name: str, job_id: str, handle=None) -> Captured:
    """DRAFT with what the submission produced (HANDLE's native id and attempt, redacted like
    the rest), and RUN.json written under the checkpoint root. Never raises."""
    if draft.doc is None:
        return draft
    doc = draft.doc
    try:
        if handle is not None:
            from launcher.core.redact import redact_obj, secret_values

            ids = redact_obj([handle.native_id, handle.attempt], extra_values=secret_values(spec.secrets))
            doc = {**doc, **dict(zip(SUBMISSION_KEYS, ids))}
        # what RUN.json and the store keep: the draft's text with the submission filled in
        text = (draft.template.fill({k: doc.get(k) for k in SUBMISSION_KEYS}) if draft.template is not None
                else json.dumps(doc, **DUMP_OPTIONS)) + "\n"
    except Exception as e:  # noqa: BLE001 - provenance must never fail a launch that was submitted
        return Captured(None, error=f"{type(e).__name__}: {e}")
    location, note = None, ""
    if spec.checkpoint.root:
        try:
            location, note = write_run_json(app, target_name, spec.checkpoint.root, job_id, text.encode())
        except Exception as e:  # the root may be unreachable right now: the store keeps the record
            note = f"could not write RUN.json under {spec.checkpoint.root}: {type(e).__name__}: {e}"
    return Captured(doc, location, note, text=text)


def save_launch(store, job_id: str, captured: Captured, seed=None) -> Optional[dict]:
    """Keep a captured record in the state store, with its ``provenance`` event (or a
    ``provenance_error`` event, printed as a warning too). Never raises."""
    writes = store_writes(job_id, captured, seed)
    try:
        with store.batch():
            if writes.statements:
                ensure_table(store)
            for sql, params in writes.statements:
                store.db.execute(sql, params)
            for kind, detail in writes.events:
                store.record_event(job_id, kind, **detail)
    except Exception as e:  # noqa: BLE001 - provenance must never fail a launch that was submitted
        writes = failed_writes(job_id, f"{type(e).__name__}: {e}")
        try:
            for kind, detail in writes.events:
                store.record_event(job_id, kind, **detail)
        except Exception:
            pass
    writes.warn()
    return captured.doc if writes.statements else None


@dataclass(frozen=True)
class StoreWrites:
    """What keeping a captured record writes to the state store, for the caller to write in
    the transaction that records the submission: the provenance row ((sql, params)), its
    event ((kind, detail)), and the warning to print once it is written."""

    statements: tuple
    events: tuple
    warning: str = ""

    def warn(self) -> None:
        if self.warning:
            print(self.warning, file=sys.stderr)


def store_writes(job_id: str, captured: Captured, seed=None) -> StoreWrites:
    """The writes that keep CAPTURED (the ``provenance`` row and event), or, for a capture
    that failed, its ``provenance_error`` event. Never raises."""
    if captured.doc is None:
        return failed_writes(job_id, captured.error)
    try:
        doc = captured.doc
        code = doc.get("code") or {}
        text = captured.text if captured.text is not None else to_bytes(doc).decode()
        row = (INSERT_RECORD, (job_id, time.time(), captured.location, text))
        event = ("provenance", {"run_json": captured.location, "note": captured.note or None,
                                "commit": code.get("commit"), "dirty": code.get("dirty"), "seed": seed,
                                "packages_sha256": (doc.get("python") or {}).get("packages_sha256")})
        return StoreWrites((row,), (event,), f"warning: {captured.note}" if captured.note else "")
    except Exception as e:  # noqa: BLE001 - provenance must never fail a launch that was submitted
        return failed_writes(job_id, f"{type(e).__name__}: {e}")


def failed_writes(job_id: str, error: str) -> StoreWrites:
    return StoreWrites((), (("provenance_error", {"error": error}),),
                       f"warning: could not record the provenance of {job_id}: {error}")


def record_launch(app, *, job_id: str, spec, spec_text: str, spec_path: Optional[str], target_name: str,
                  request=None, handle=None, seed=None, seed_source=None, continues=None) -> Optional[dict]:
    """Capture and keep the provenance of a launched run. Advisory: never raises (a failure
    is recorded as a ``provenance_error`` event and printed as a warning). CONTINUES: what
    the run resumes (or, launched with --fresh, supersedes), as ``launcher.launching.identity`` saw it."""
    captured = capture_launch(app, job_id=job_id, spec=spec, spec_text=spec_text, spec_path=spec_path,
                              target_name=target_name, request=request, handle=handle, seed=seed,
                              seed_source=seed_source, continues=continues)
    return save_launch(app.store, job_id, captured, seed)
