"""Launching a sweep on Slurm: ONE array submission, one job row per element (a backend
without ``RunsArrays``: each element its own job, ``launcher.sweep.queue``).

The whole sweep is one ``sbatch --array`` (one dedupe token, ``launcher:<sweep id>:1``).
Every element is recorded as its own job (``<sweep id>-e<index>``) whose handle names the
array task ``<array id>_<index>``: status, logs and cancel of one element then work like
those of any job. Each element row's meta carries ``sweep`` = {id, index, size, params,
array}; its ``ckpt_root`` is the element's own root. All-or-nothing like a single launch:
the rows are written as SUBMITTING first and removed again when sbatch fails.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, replace
from typing import Optional

from launcher.backend.protocols import Handle, JobRef
from launcher.state.store import new_job_id
from launcher.sweep.expand import element_root, element_seed, elements, sweep_seed_of
from launcher.sweep.rowtexts import element_texts

ELEMENT_ID = "{sweep_id}-e{index}"


def element_job_id(sweep_id: str, index: int) -> str:
    return ELEMENT_ID.format(sweep_id=sweep_id, index=index)


def element_native_id(array_id: str, index: int) -> str:
    """The array task as Slurm names it (squeue -r, sacct, scancel): ``<array id>_<index>``."""
    return f"{array_id}_{index}"


def element_rows(sweep_id: str, spec, seed: int, spec_base: str) -> list[dict]:
    """Pure: what each element's job row holds (job id, checkpoint root, meta)."""
    els = elements(spec.sweep)
    sweep_seed = sweep_seed_of(spec, seed)
    out = []
    for e in els:
        meta = {"spec_base": spec_base, "seed": element_seed(sweep_seed, e.index), "seed_source": "sweep",
                "sweep": {"id": sweep_id, "index": e.index, "size": len(els), "params": dict(e.params),
                          "seed": sweep_seed}}
        out.append({"job_id": element_job_id(sweep_id, e.index), "index": e.index,
                    "ckpt_root": element_root(spec.checkpoint.root, e.index), "meta": meta})
    return out


def element_handle(array: Handle, job_id: str, index: int) -> Handle:
    """The element's handle from the array's (sbatch prints ``<array>``; a job found by its
    dedupe token may read ``<array>_<task>`` or ``<array>_[0-5%2]``)."""
    array_id = array.native_id.split("_")[0]
    extra = {**array.extra, "sweep_array": array_id}
    return replace(array, job_id=job_id, native_id=element_native_id(array_id, index), extra=extra)


_PLAIN_ID = re.compile(r"[A-Za-z0-9_.:@+-]+")


@dataclass(frozen=True)
class ArrayLayout:
    """How each element's handle and native id follow from its job id ``<sweep id>-e<index>``,
    for ``StateStore.record_array_submitted`` (SQL puts every element's texts together)."""

    handle_pieces: tuple  # an element's handle JSON = [0] + job id + [1] + index + [2]
    index_at: int  # where the index begins in an element's job id (from 1, as SQL's substr counts)
    native_prefix: str  # an element's native id = native_prefix + index
    native_ids: list  # every element's native id (their redaction is checked once)


def array_layout(array: Handle, sweep_id: str, rows: list) -> Optional[ArrayLayout]:
    """Pure: the ``ArrayLayout`` of the elements ROWS of the ARRAY just submitted, or None when
    an id holds a character JSON would escape (then each element's texts are made in Python)."""
    array_id = array.native_id.split("_")[0]
    if not (_PLAIN_ID.fullmatch(sweep_id) and _PLAIN_ID.fullmatch(array_id)):
        return None
    job_mark, index_mark = "\x01job\x01", "\x01index\x01"
    text = element_handle(array, job_mark, index_mark).to_json()
    from launcher.core.jsonrows import split_at

    pieces = split_at(text, [json.dumps(job_mark)[1:-1], json.dumps(index_mark)[1:-1]])
    if pieces is None:
        return None
    head, middle, tail = pieces
    prefix = element_native_id(array_id, "")
    return ArrayLayout((head, middle, tail), len(element_job_id(sweep_id, "")) + 1, prefix,
                       [prefix + str(r["index"]) for r in rows])


def submitted_entries(array: Handle, rows: list) -> list[tuple]:
    """Pure: (job id, handle JSON, native id) of each element ROW once the ARRAY is in, for
    ``StateStore.record_submitted``: each JSON is ``element_handle(...).to_json()``, the
    handle dumped once for the whole sweep."""
    from launcher.core.jsonrows import dumps_varying

    h = element_handle(array, "", 0)
    array_id = h.extra["sweep_array"]
    ids = [r["job_id"] for r in rows]
    native = [element_native_id(array_id, r["index"]) for r in rows]
    texts = dumps_varying(json.loads(h.to_json()), {"job_id": ids, "native_id": native}, sort_keys=True)
    return list(zip(ids, texts, native))


def launch_sweep(app, spec, spec_text: str, spec_path: Optional[str], target_name: str, note=None):
    """Render the sweep once, record every element, submit the array once. Returns a
    ``launcher.launching.submission.Launched`` whose job id is the sweep id and whose handle is the array's."""
    from launcher.backend.support import require_supported
    from launcher.launching.submission import Launched, facts_for
    from launcher.provenance.seed import choose_seed
    from launcher.spec.secretenv import for_launch

    require_supported(app, spec, target_name, spec_path or "")  # also its burst targets
    backend = app.backend(target_name)
    from launcher.sweep.queue import launch_elements, runs_arrays

    if not runs_arrays(backend):  # each element its own job, max_parallel kept by the launcher
        return launch_elements(app, spec, spec_text, spec_path, target_name, note=note)
    spec, spec_text = for_launch(spec, spec_text)
    store = app.store
    sweep_id = new_job_id(spec.name)
    seed, source = choose_seed(spec)
    job = JobRef(job_id=sweep_id, attempt=1, job_dir=str(store.job_dir(sweep_id)), seed=seed)
    request = backend.render(spec, facts_for(app, spec, target_name), job)  # errors: nothing recorded yet
    base = os.path.dirname(spec_path) if spec_path else os.getcwd()
    shared, texts = element_texts(sweep_id, spec, seed, base)  # what element_rows gives, as stored
    if note:
        note(f"sweep {sweep_id}: {len(texts)} elements as one job array (LAUNCHER_SWEEP_SEED "
             f"{shared['sweep']['seed']}, {source})")
    # the sweep (its spec once) and every element SUBMITTING before the scheduler is called, in one transaction
    store.begin_sweep_texts(sweep_id, spec.name, target_name, backend.name, spec_path, spec_text, shared,
                            [(t.job_id, t.ckpt_root, t.meta) for t in texts])
    try:
        handle = backend.submit(request)
    except BaseException:
        store.forget_sweep(sweep_id)
        raise
    record_array(store, sweep_id, target_name, handle, [{"job_id": t.job_id, "index": t.index} for t in texts])
    return Launched(sweep_id, handle, request)


def record_array(store, sweep_id: str, target_name: str, array: Handle, rows: list) -> None:
    """Record the submitted ARRAY for every element ROW in ONE transaction: the array's id
    (once, on the sweep) and each element's handle, attempt and "submitted" event."""
    detail = {"sweep": sweep_id}
    with store.batch():
        store.share(sweep_id, array=array.native_id)
        layout = array_layout(array, sweep_id, rows)
        if layout is None or not store.record_array_submitted(sweep_id, target_name, layout, detail):
            store.record_submitted(target_name, submitted_entries(array, rows), detail=detail)


def begin_sweep(store, sweep_id: str, spec, spec_text: str, spec_path: Optional[str], target_name: str,
                backend_name: str, rows: list) -> None:
    """Record SWEEP_ID (its spec once) and its element ROWS (``element_rows``) SUBMITTING."""
    from launcher.state.sweeps import shared_of

    shared = shared_of(rows[0]["meta"]) if rows else {}
    store.begin_sweep(sweep_id, spec.name, target_name, backend_name, spec_path, spec_text, shared,
                      [(r["job_id"], r["ckpt_root"], r["meta"]) for r in rows])


def sweep_rows(store, sweep_id: str) -> list:
    """The element rows of SWEEP_ID in index order (empty when no such sweep)."""
    return store.sweep_jobs(sweep_id)


def element_ref(app, row, attempt: int) -> JobRef:
    """The JobRef of a further attempt of one element: its own job id (so its own dedupe
    token and job dir), the sweep's table, and only its index in the array."""
    sw = row.meta["sweep"]
    return JobRef(job_id=row.job_id, attempt=attempt, job_dir=str(app.store.job_dir(row.job_id)),
                  seed=sw.get("seed"), elements=(sw["index"],), sweep_id=sw["id"])


def resubmit_element(app, row, target_name: str, attempt: int):
    """Submit element ROW alone (``--array=<index>`` of the same table, so the same element
    root: it resumes its own latest commit); the other elements are untouched. The element's
    handle, adopted by dedupe token when an earlier try got through."""
    from launcher.launching.submission import facts_for, find_submission, job_spec
    from launcher.provenance.seed import with_seed
    from launcher.sweep.queue import element_job, render_element, runs_arrays

    backend = app.backend(target_name)
    if not runs_arrays(backend):  # the element is a job of its own: submitted as one
        existing = find_submission(backend, element_job(app, row, attempt))
        if existing is not None:
            return existing, True
        return backend.submit(render_element(app, row, attempt, target=target_name)), False
    job = element_ref(app, row, attempt)
    existing = find_submission(backend, job)
    if existing is None:
        spec = with_seed(job_spec(row), job.seed)  # the table derives every element's seed from the sweep's
        existing = backend.submit(backend.render(spec, facts_for(app, spec, target_name), job))
        return element_handle(existing, row.job_id, job.elements[0]), False
    return element_handle(existing, row.job_id, job.elements[0]), True
