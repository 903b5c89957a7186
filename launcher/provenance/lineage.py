"""``launcher lineage CHECKPOINT``: which run, config and code produced a checkpoint.

Everything is read from the checkpoint root: the checkpoint's COMMIT.json (its
``run``), ``ROOT/.launcher/runs/<run>/RUN.json`` (the run's provenance),
``ROOT/.launcher/attempts/g<G>.json`` (the node that wrote it) and GENERATIONS.json
(what each generation resumed from, back to the fresh start). The state store is
only a fallback for a run whose RUN.json is missing, and is never created here.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

from launcher.backend.config import launcher_home
from launcher.checkpoint import CheckpointError, RootUnavailable, open_store, read_attempt, read_generations, scan
from launcher.checkpoint.contract import parse_step_dir
from launcher.checkpoint.store import is_s3
from launcher.core.errors import LauncherError
from launcher.provenance.record import load_record, read_run_json
from launcher.state.store import StateStore
from launcher.provenance.trackers import META_KEY, describe


def split_checkpoint(path: str) -> tuple[str, Optional[str]]:
    """(ROOT, step directory name or None) for a checkpoint directory or a root."""
    p = path.rstrip("/")
    if not is_s3(p):
        p = os.path.abspath(os.path.expanduser(p))
    parent, _, name = p.rpartition("/")
    if name == "COMMIT.json":
        parent, _, name = parent.rpartition("/")
    if parse_step_dir(name) is not None and parent:
        return parent, name
    return p, None


def _state_store_record(run_id: str, home=None) -> tuple[Optional[dict], Optional[str]]:
    """The run's record from the local state store, if one exists (never creates it)."""

    home = Path(home) if home else launcher_home()
    url = os.environ.get("LAUNCHER_STATE_URL", "").strip()  # a team's PostgreSQL store (launcher.state.engines)
    if not url and not (home / "state.db").exists():
        return None, None
    try:
        st = StateStore(home)
        try:
            doc = load_record(st, run_id)
        finally:
            st.close()
        return doc, (f"state store {st.path}" if doc else None)
    except Exception:
        return None, None


def _trackers_of(run_id: Optional[str], record: Optional[dict], home=None) -> Optional[dict]:
    """The tracker runs (W&B, MLflow) RUN_ID logged to: its record's, else its job's meta in the
    local state store (a sweep element has no record of its own), else None."""
    if (record or {}).get("trackers"):
        return record["trackers"]
    if not run_id:
        return None
    home = Path(home) if home else launcher_home()
    if not (home / "state.db").exists():
        return None
    try:
        st = StateStore(home)
        try:
            return st.get_job(run_id).meta.get(META_KEY) or None
        finally:
            st.close()
    except Exception:
        return None


def lineage(path: str, home=None, max_hops: int = 10000) -> dict:
    """{"checkpoint", "run_id", "run", "record_location", "generation", "save", "ancestry"}."""
    root, name = split_checkpoint(path)
    store, gens, entries = _open_root(root)
    by_name = {e.name: e for e in entries}
    entry = _pick_entry(store, root, name, entries, by_name)
    run_id, run_source = _run_of(store, gens, entry)
    record, location = _run_record(store, run_id, home) if run_id else (None, None)
    attempt = _read_attempt(store, entry.generation)
    save = None
    for s in (attempt or {}).get("saves", []):
        if s.get("step") == entry.step and s.get("committed"):
            save = s
    return {"checkpoint": {**entry.to_dict(), "name": entry.name,
                           "created": (entry.manifest or {}).get("created"),
                           "files": len((entry.manifest or {}).get("files") or [])},
            "root": store.root, "run_id": run_id, "run_id_source": run_source, "record_location": location,
            "run": record, "trackers": _trackers_of(run_id, record, home), "generation": attempt, "save": save,
            "ancestry": _ancestry(store, gens, entry, by_name, max_hops)}


def _open_root(root: str) -> tuple:
    """(store, generations, scanned entries) of a checkpoint root; CheckpointError becomes LauncherError."""
    try:
        store = open_store(root)
        store.check_root()
        gens = read_generations(store)
        entries = scan(store, gens=gens)
    except CheckpointError as e:
        raise LauncherError(str(e)) from None
    return store, gens, entries


def _pick_entry(store, root: str, name: Optional[str], entries, by_name: dict):
    """The named checkpoint, or the newest committed one for a root; it must carry a generation."""
    if name is None:
        entry = next((e for e in entries if e.committed), None)
        if entry is None:
            raise LauncherError(f"{store.root}: no committed checkpoint (see `launcher checkpoints {root}`)")
    else:
        entry = by_name.get(name)
        if entry is None:
            raise LauncherError(f"{store.url(name)}: no such checkpoint under {store.root}")
    if entry.generation is None:
        raise LauncherError(f"{entry.path}: a {entry.format} checkpoint, not written through the launcher's "
                            f"contract: no run is recorded for it")
    return entry


def _read_attempt(store, generation) -> Optional[dict]:
    """The attempt record of a generation, or None when it is missing or unreadable."""
    try:
        return read_attempt(store, generation)
    except RootUnavailable as e:  # stopped answering: reading on would cost a timeout per read
        raise LauncherError(str(e)) from None
    except Exception:
        return None


def _run_of(store, gens, e) -> tuple[Optional[str], str]:
    """(run id, where it was found) for a checkpoint: COMMIT.json, the attempt record, GENERATIONS.json."""
    if e.manifest and e.manifest.get("run"):
        return e.manifest["run"], "COMMIT.json"
    rec = _read_attempt(store, e.generation)
    if rec and rec.get("job_id"):
        return rec["job_id"], f"attempt record g{e.generation}.json"
    h = gens.record(e.generation)
    if h and h.get("job_id"):
        return h["job_id"], "GENERATIONS.json"
    return None, ""


def _run_record(store, run_id: str, home) -> tuple[Optional[dict], Optional[str]]:
    """(the run's RUN.json, its location), falling back to the local state store."""
    try:
        record, location = read_run_json(store.root, run_id)
    except RootUnavailable as e:
        raise LauncherError(str(e)) from None
    except Exception:
        record, location = None, None
    if record is None:
        rec2, loc2 = _state_store_record(run_id, home)
        if rec2 is not None:
            record, location = rec2, loc2
    return record, location


def _ancestry(store, gens, entry, by_name: dict, max_hops: int) -> list[dict]:
    """This checkpoint's generation resumed from X, whose generation resumed from Y ..."""
    ancestry = []
    cur = entry
    seen = set()
    while cur is not None and len(ancestry) < max_hops and cur.name not in seen:
        seen.add(cur.name)
        rid, _ = _run_of(store, gens, cur) if cur.generation is not None else (None, "")
        h = gens.record(cur.generation) if cur.generation is not None else None
        resume_from = (h or {}).get("resume_from")
        resume_step = (h or {}).get("resume_step")
        ancestry.append({"checkpoint": cur.name, "path": cur.path, "step": cur.step, "generation": cur.generation,
                         "state": cur.state, "run": rid, "resumed_from_step": resume_step,
                         "resumed_from": resume_from})
        if not resume_from or resume_step is None or resume_step < 0:
            break
        base = resume_from.rstrip("/").rpartition("/")[2]
        nxt = by_name.get(base)
        if nxt is None:
            sg = parse_step_dir(base)
            ancestry.append({"checkpoint": base, "path": resume_from, "step": sg[0] if sg else resume_step,
                             "generation": sg[1] if sg else None, "state": "gone (garbage-collected)",
                             "run": None, "resumed_from_step": None, "resumed_from": None})
            break
        cur = nxt
    return ancestry


def _short(h: Optional[str], n: int = 12) -> str:
    return h[:n] if h else "-"


def format_lineage(d: dict) -> str:
    c = d["checkpoint"]
    lines = [f"checkpoint  {c['path']}",
             f"            {c['state']}: step {c['step']}, generation {c['generation']}, "
             f"created {c.get('created') or '?'} ({c['reason']})"]
    r = d.get("run")
    if not d.get("run_id"):
        lines.append("run         unknown (COMMIT.json names no run and no attempt record has a job id)")
    elif r is None:
        lines.append(f"run         {d['run_id']} (from {d['run_id_source']}); its RUN.json is missing "
                     f"({d.get('record_location') or 'no location'}) and no local state store has it")
    else:
        lines += _run_lines(d, r)
    if d.get("trackers"):
        lines += [f"{'tracking' if i == 0 else '':<12}{t}" for i, t in enumerate(describe(d["trackers"]))]
    g = d.get("generation") or {}
    if g:
        lines.append(_generation_line(g))
    sv = d.get("save")
    if sv:
        lines.append(f"saved       {sv.get('start')} in {sv.get('seconds')} s"
                     + (" (on a preemption notice)" if sv.get("preempt") else ""))
    lines.append("lineage     " + " <- ".join(_chain(d.get("ancestry") or [])))
    return "\n".join(lines) + "\n"


def _run_lines(d: dict, r: dict) -> list[str]:
    """The run, record, spec, code, python, versions, image, seed and secrets lines of a known run."""
    s = r.get("spec") or {}
    py = r.get("python") or {}
    sec = (r.get("secrets") or {}).get("names") or []
    return [_launched_line(d["run_id"], r),
            f"record      {d.get('record_location')}",
            f"spec        {s.get('path') or '-'}  sha256 {_short(s.get('sha256'))}",
            *_code_lines(r.get("code") or {}),
            f"python      {py.get('version')}  {py.get('package_count')} packages, "
            f"sha256 {_short(py.get('packages_sha256'))}",
            _versions_line(r.get("versions") or {}),
            _image_line(r.get("image") or {}),
            f"seed        {r.get('seed')} ({r.get('seed_source')})",
            *([f"secrets     {', '.join(sec)} (names only)"] if sec else [])]


def _launched_line(run_id: str, r: dict) -> str:
    """The run: its name, when, by whom and where it was launched, and its native id."""
    b = (r.get("versions") or {}).get("backend") or {}
    by = r.get("submitted_by") or {}
    return (f"run         {run_id}  ({r.get('name')}, launched {r.get('created')} by "
            f"{by.get('user') or '?'}@{by.get('host') or '?'} to target {r.get('target')} "
            f"[{b.get('name')} {b.get('version') or ''}".rstrip() + "]"
            + (f", native id {r['native_id']}" if r.get("native_id") else "") + ")")


def _versions_line(v: dict) -> str:
    b = v.get("backend") or {}
    return (f"versions    launcher {v.get('launcher')}  {b.get('name')} {b.get('version') or '-'}  "
            f"skypilot {v.get('skypilot') or '-'}")


def _image_line(img: dict) -> str:
    """The container image, its digest or why there is none."""
    return f"image       {img.get('name') or '-'}" + (
        f"  {img['digest']}" if img.get("digest") else (f"  (digest: {img.get('reason')})" if img.get("name") else ""))


def _code_lines(code: dict) -> list[str]:
    if not code.get("commit"):
        return [f"code        {code.get('dir') or '-'}: no commit ({code.get('error') or 'unknown'})"]
    dirty = (f"dirty: {code.get('changed_files')} changed, {code.get('untracked_files')} untracked, "
             f"diff sha256 {_short(code.get('diff_sha256'))}") if code.get("dirty") else "clean"
    lines = [f"code        {code.get('repo')}  commit {code['commit']}"
             + (f" ({code['branch']})" if code.get("branch") else "") + f"  {dirty}"]
    if code.get("remote"):
        lines.append(f"            remote {code['remote']}")
    return lines


def _generation_line(g: dict) -> str:
    node = g.get("node") or {}
    gpu = node.get("gpu") or {}
    gdesc = ("no GPU" if gpu.get("present") is False else
             f"driver {gpu.get('driver_version')}, CUDA {gpu.get('cuda_version')}, {len(gpu.get('gpus') or [])} GPU(s)"
             if gpu else "GPU not probed")
    nccl = (node.get("nccl") or {}).get("version")
    return (f"written by  generation {g.get('generation')} on {node.get('hostname') or g.get('host')} "
            f"(python {node.get('python') or '?'}, {gdesc}" + (f", NCCL {nccl}" if nccl else "") + ")"
            + f", started {g.get('started')}")


def _chain(ancestry: list[dict]) -> list[str]:
    """One "step N gG [run] (state)" per ancestor, then "fresh start" when the chain began from nothing."""
    chain = []
    for a in ancestry:
        chain.append(f"step {a['step']} g{a['generation']}" + (f" [{a['run']}]" if a.get("run") else "")
                     + ("" if a["state"] == "committed" else f" ({a['state']})"))
    last = (ancestry or [{}])[-1]
    if last and (last.get("resumed_from_step") is None or last.get("resumed_from_step", -1) < 0) \
            and not str(last.get("state", "")).startswith("gone"):
        chain.append("fresh start")
    return chain
