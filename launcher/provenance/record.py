"""Where a run's provenance is kept, and how it is written and read back.

* State store: table ``provenance`` (``launcher.state.provenance``), created with the
  store's schema (``CREATE TABLE IF NOT EXISTS`` on every open, so an older database gains it
  without a migration, and older launchers simply ignore it).
* Checkpoint root: ``ROOT/.launcher/runs/<job_id>/RUN.json``. The ``.launcher`` folder
  is the contract's metadata folder, invisible to checkpoint discovery and gc.

Both copies hold the same JSON document, redacted with ``launcher.core.redact`` (the values
of the spec's secrets and of every secret-looking variable of the launching
environment, plus known credential shapes) before anything is written.
"""

from __future__ import annotations

import json
import posixpath
import re
import sys
from dataclasses import dataclass
from typing import Optional

from launcher.backend.protocols import Facts, Host, can
from launcher.checkpoint.contract import META_DIR
from launcher.checkpoint.store import is_s3, open_store
from launcher.core.redact import is_secret_name, mask_values, redact_obj, secret_values
from launcher.provenance.capture import capture
from launcher.state import provenance as provenance_rows
from launcher.backend.context import AppContext

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


def redact_record(doc: dict, secret_names=()) -> dict:
    """Mask the values of the spec's secrets and of every secret-looking variable of this
    environment, values written under secret-looking keys, and known credential shapes."""
    found = secret_values(secret_names) | _values_under_secret_keys(doc, set())
    return redact_obj(doc, masks=mask_values(found))


DUMP_OPTIONS = {"indent": 1, "sort_keys": False, "default": str}  # RUN.json's and the store's text


def to_bytes(doc: dict) -> bytes:
    return (json.dumps(doc, **DUMP_OPTIONS) + "\n").encode()


# ---------------------------------------------------------------- state store
def save_record(store, job_id: str, doc: dict, location: Optional[str]) -> None:
    provenance_rows.save(store, job_id, location, json.dumps(doc, default=str))


def load_record(store, job_id: str) -> Optional[dict]:
    """The record of JOB_ID (exact id) from the state store, or None."""
    found = provenance_rows.load(store, job_id)
    if found is None:
        return None
    text, location = found
    doc = json.loads(text)
    doc.setdefault("_location", location)
    return doc


# ---------------------------------------------------------------- checkpoint root
def write_run_json(app: AppContext, target_name: str, root: str, job_id: str, data: bytes) -> tuple[Optional[str], str]:
    """Write RUN.json under ROOT where the job will see it. Returns (location, note).

    s3:// roots: through the checkpoint store (S3 PutObject). POSIX roots: on this host
    for a backend that submits from here (local, Slurm on its login node); over the
    target's SSH runner (atomic put_file) for a cluster reached over SSH (``Host.runner``);
    a POSIX root of any other backend (a cloud VM's disk) is not reachable from here and
    is skipped."""
    key = run_key(job_id)
    if is_s3(root):
        store = open_store(root)
        store.put(key, data)
        return store.url(key), ""

    backend = app.backend(target_name)
    runner = backend.runner if can(backend, Host) else None  # local subprocess or SSH
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
    store = open_store(root)
    try:
        tree = store.list_tree(RUNS_DIR)
    except Exception:
        return []
    return sorted({p.split("/")[0] for p in tree if p.endswith("/" + RUN_FILE)})


# ---------------------------------------------------------------- launch hook
def _document(app: AppContext, *, job_id: str, spec, spec_text: str, spec_path: Optional[str], target_name: str,
              request=None, handle=None, seed=None, seed_source=None, continues=None) -> dict:
    """The redacted provenance record (capture + redact; no writes)."""
    backend = app.backend(target_name)
    try:
        facts = app.facts(target_name)
    except Exception:
        facts = Facts(target_name, backend.name, {})
    # asked of the class: the instance check would build the backend's runner (an SSH one's
    # setup) only to read a version
    version = backend.version(facts) if can(type(backend), Host) else None
    doc = capture(job_id=job_id, spec=spec, spec_text=spec_text, spec_path=spec_path, target=target_name,
                  backend=backend.name, facts_data=facts.data, request=request, handle=handle, seed=seed,
                  seed_source=seed_source, backend_version=version)
    if continues:
        doc["continues"] = continues
    return redact_record(doc, spec.secrets)


@dataclass
class Captured:
    """A run's redacted record and where its RUN.json went (or the error that stopped the capture).
    TEXT: the record as RUN.json holds it (a draft has none: ``complete_launch`` adds what only
    the submission knows and makes it)."""

    doc: Optional[dict]
    location: Optional[str] = None
    note: str = ""
    error: str = ""
    text: Optional[str] = None


SUBMISSION_KEYS = ("native_id", "attempt")  # what complete_launch adds to a draft


def capture_launch(app: AppContext, *, job_id: str, spec, spec_text: str, spec_path: Optional[str], target_name: str,
                   request=None, handle=None, seed=None, seed_source=None, continues=None) -> Captured:
    """Capture the record and write RUN.json under the checkpoint root; nothing goes to the
    state store yet (``save_launch``), so a slow root (S3) never holds the store's lock.
    Never raises."""
    draft = draft_launch(app, job_id=job_id, spec=spec, spec_text=spec_text, spec_path=spec_path,
                         target_name=target_name, request=request, handle=handle, seed=seed,
                         seed_source=seed_source, continues=continues)
    return complete_launch(app, draft, spec, target_name, job_id, handle)


def draft_launch(app: AppContext, *, job_id: str, spec, spec_text: str, spec_path: Optional[str], target_name: str,
                 request=None, handle=None, seed=None, seed_source=None, continues=None,
                 trackers=None) -> Captured:
    """The redacted record, captured before the submission is known (``launch`` does this
    while the scheduler answers); ``complete_launch`` adds the handle and writes RUN.json.
    Never raises: an error is kept in the result."""
    try:
        doc = _document(app, job_id=job_id, spec=spec, spec_text=spec_text, spec_path=spec_path,
                        target_name=target_name, request=request, handle=handle, seed=seed,
                        seed_source=seed_source, continues=continues)
    except Exception as e:  # noqa: BLE001 - provenance must never fail a launch that was submitted
        return Captured(None, error=f"{type(e).__name__}: {e}")
    if trackers:  # the tracker runs this run logs to (launcher.provenance.trackers); `lineage` shows them
        doc["trackers"] = trackers
    return Captured(doc)


def complete_launch(app: AppContext, draft: Captured, spec, target_name: str, job_id: str, handle=None) -> Captured:
    """DRAFT with what the submission produced (HANDLE's native id and attempt, redacted like
    the rest), and RUN.json written under the checkpoint root. Never raises."""
    if draft.doc is None:
        return draft
    doc = draft.doc
    try:
        if handle is not None:
            ids = redact_obj([handle.native_id, handle.attempt], extra_values=secret_values(spec.secrets))
            doc = {**doc, **dict(zip(SUBMISSION_KEYS, ids))}
        text = to_bytes(doc).decode()  # what RUN.json and the store keep
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
            if writes.record is not None:
                provenance_rows.save(store, job_id, *writes.record)
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
    return captured.doc if writes.record is not None else None


@dataclass(frozen=True)
class StoreWrites:
    """What keeping a captured record writes to the state store, for the caller to write in
    the transaction that records the submission: the provenance record ((location, text), or
    None), its event ((kind, detail)), and the warning to print once it is written."""

    record: Optional[tuple]
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
        record = (captured.location, text)
        event = ("provenance", {"run_json": captured.location, "note": captured.note or None,
                                "commit": code.get("commit"), "dirty": code.get("dirty"), "seed": seed,
                                "packages_sha256": (doc.get("python") or {}).get("packages_sha256")})
        return StoreWrites(record, (event,), f"warning: {captured.note}" if captured.note else "")
    except Exception as e:  # noqa: BLE001 - provenance must never fail a launch that was submitted
        return failed_writes(job_id, f"{type(e).__name__}: {e}")


def failed_writes(job_id: str, error: str) -> StoreWrites:
    return StoreWrites(None, (("provenance_error", {"error": error}),),
                       f"warning: could not record the provenance of {job_id}: {error}")


def record_launch(app: AppContext, *, job_id: str, spec, spec_text: str, spec_path: Optional[str], target_name: str,
                  request=None, handle=None, seed=None, seed_source=None, continues=None) -> Optional[dict]:
    """Capture and keep the provenance of a launched run. Advisory: never raises (a failure
    is recorded as a ``provenance_error`` event and printed as a warning). CONTINUES: what
    the run resumes (or, launched with --fresh, supersedes), as ``launcher.launching.identity`` saw it."""
    captured = capture_launch(app, job_id=job_id, spec=spec, spec_text=spec_text, spec_path=spec_path,
                              target_name=target_name, request=request, handle=handle, seed=seed,
                              seed_source=seed_source, continues=continues)
    return save_launch(app.store, job_id, captured, seed)
