"""Where a run's provenance is kept, and how it is written and read back.

* State store: table ``provenance(job_id PRIMARY KEY, created, location, record)``,
  created with ``CREATE TABLE IF NOT EXISTS`` on first use, so existing databases
  gain it without a migration and older launchers simply ignore it.
* Checkpoint root: ``ROOT/.launcher/runs/<job_id>/RUN.json``. The ``.launcher`` folder
  is the contract's metadata folder, invisible to checkpoint discovery and gc.

Both copies hold the same JSON document, redacted with ``launcher.redact`` (the values
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
from typing import Optional

from ..checkpoint.contract import META_DIR

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
    from ..redact import is_secret_name

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


def redact_record(doc: dict, secret_names=()) -> dict:
    """Mask the values of the spec's secrets and of every secret-looking variable of this
    environment, values written under secret-looking keys, and known credential shapes."""
    from ..redact import _masks, redact_obj, secret_values

    extra = secret_values(secret_names) | _values_under_secret_keys(doc, set())
    masks = _masks(extra)
    python = doc.get("python")
    if not (isinstance(python, dict) and isinstance(python.get("packages"), list)):
        return redact_obj(doc, _masks_=masks)
    # the package list (~300 strings) is the same launch after launch: redacted once per list and masks
    out = redact_obj({**doc, "python": {k: v for k, v in python.items() if k != "packages"}}, _masks_=masks)
    out["python"]["packages"] = list(_redacted_strings(tuple(python["packages"]), tuple(masks)))
    return out


@functools.lru_cache(maxsize=4)
def _redacted_strings(values: tuple, masks: tuple) -> tuple:
    from ..redact import redact_obj

    return tuple(redact_obj(list(values), _masks_=list(masks)))


def to_bytes(doc: dict) -> bytes:
    return (json.dumps(doc, indent=1, sort_keys=False, default=str) + "\n").encode()


# ---------------------------------------------------------------- state store
def ensure_table(store) -> None:
    if getattr(store, "_provenance_table", False):  # once per open store, not once per launch
        return
    store.db.executescript(TABLE)
    try:
        store._provenance_table = True
    except AttributeError:
        pass


def save_record(store, job_id: str, doc: dict, location: Optional[str]) -> None:
    ensure_table(store)
    with store.tx() as db:
        db.execute("INSERT OR REPLACE INTO provenance(job_id, created, location, record) VALUES(?,?,?,?)",
                   (job_id, time.time(), location, json.dumps(doc, default=str)))


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
    from ..checkpoint.store import is_s3, open_store

    key = run_key(job_id)
    if is_s3(root):
        store = open_store(root)
        store.put(key, data)
        return store.url(key), ""
    from ..backend import HasSubmitHost, can

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
    from ..checkpoint.store import open_store

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
    from ..checkpoint.store import open_store

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
    from ..backend import Facts, ReportsVersion, can
    from .capture import capture

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


def record_launch(app, *, job_id: str, spec, spec_text: str, spec_path: Optional[str], target_name: str,
                  request=None, handle=None, seed=None, seed_source=None, continues=None) -> Optional[dict]:
    """Capture and keep the provenance of a launched run. Advisory: never raises (a failure
    is recorded as a ``provenance_error`` event and printed as a warning). CONTINUES: what
    the run resumes (or, launched with --fresh, supersedes), as ``launcher.identity`` saw it."""
    store = app.store
    try:
        doc = _document(app, job_id=job_id, spec=spec, spec_text=spec_text, spec_path=spec_path,
                        target_name=target_name, request=request, handle=handle, seed=seed,
                        seed_source=seed_source, continues=continues)
        location, note = None, ""
        if spec.checkpoint.root:
            try:
                location, note = write_run_json(app, target_name, spec.checkpoint.root, job_id, to_bytes(doc))
            except Exception as e:  # the root may be unreachable right now: the store keeps the record
                note = f"could not write RUN.json under {spec.checkpoint.root}: {type(e).__name__}: {e}"
        save_record(store, job_id, doc, location)
        code = doc.get("code") or {}
        store.record_event(job_id, "provenance", run_json=location, note=note or None,
                           commit=code.get("commit"), dirty=code.get("dirty"), seed=seed,
                           packages_sha256=(doc.get("python") or {}).get("packages_sha256"))
        if note:
            print(f"warning: {note}", file=sys.stderr)
        return doc
    except Exception as e:  # noqa: BLE001 - provenance must never fail a launch that was submitted
        try:
            store.record_event(job_id, "provenance_error", error=f"{type(e).__name__}: {e}")
        except Exception:
            pass
        print(f"warning: could not record the provenance of {job_id}: {type(e).__name__}: {e}", file=sys.stderr)
        return None
