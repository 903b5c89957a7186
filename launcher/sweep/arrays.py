"""A sweep as ONE scheduler array, on a backend that runs arrays (``Scheduler.runs_arrays``: Slurm), one job row
per element (a backend without it runs each element as a job of its own: ``launcher.sweep.one_by_one``).

The whole sweep is one array submission (one dedupe token, ``launcher:<sweep id>:1``).
Every element is recorded as its own job (``<sweep id>-e<index>``) whose handle names the
array task as the backend names it (``Scheduler.element_native_id``; Slurm:
``<array id>_<index>``): status, logs and cancel of one element then work like those of
any job. Each element row's meta carries ``sweep`` = {id, index, size, params,
array}; its ``ckpt_root`` is the element's own root. All-or-nothing like a single launch:
the rows are written as SUBMITTING first and removed again when the submission fails.
A further attempt of one element is the same array with only its index (``--array=<index>``:
``resubmit_element``); an array whose launch ended before recording it is adopted by its
dedupe token (``adopt_array``).
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Optional

from launcher.backend.protocols import Handle, JobRef
from launcher.launching.submission import Launched, facts_for, find_submission, job_spec, new_job_ref
from launcher.launching.submit import NewSubmission, cancel_in_flight
from launcher.provenance.seed import choose_seed, with_seed
from launcher.provenance.trackers import attach_sweep as attach_trackers
from launcher.spec.secretenv import for_launch
from launcher.spec.sweep_elements import sweep_seed_of
from launcher.state.store import new_job_id
from launcher.sweep.elements import begin_sweep, element_rows, runs_arrays, sweep_rows
from launcher.backend.context import AppContext


def element_handle(array: Handle, job_id: str, index: int, backend) -> Handle:
    """The element's handle from the array's: BACKEND (a ``Scheduler``, its class or an
    instance) names the array (``array_of``) and the element (``element_native_id``)."""
    array_id = backend.array_of(array.native_id)
    extra = {**array.extra, "sweep_array": array_id}
    return replace(array, job_id=job_id, native_id=backend.element_native_id(array_id, index), extra=extra)


def array_handle(array: Handle, backend) -> Handle:
    """ARRAY named by the array's own id (``array_of``): a dedupe lookup finds a pending array
    by a record's name (Slurm's ``<array>_[0-2%2]``), which cancel and status do not take."""
    return replace(array, native_id=backend.array_of(array.native_id))


def submitted_entries(array: Handle, rows: list, backend) -> list[tuple]:
    """Pure: (job id, handle JSON, native id) of each element ROW once the ARRAY is in, for
    ``StateStore.record_submitted`` (BACKEND names the elements: ``element_handle``)."""
    out = []
    for r in rows:
        h = element_handle(array, r["job_id"], r["index"], backend)
        out.append((r["job_id"], h.to_json(), h.native_id))
    return out


def launch_array(app: AppContext, spec, spec_text: str, spec_path: Optional[str], target_name: str, note=None):
    """Render the sweep once, record every element, submit the array once. Returns a
    ``launcher.launching.submission.Launched`` whose job id is the sweep id and whose handle is the array's."""
    backend = app.backend(target_name)
    spec, spec_text = for_launch(spec, spec_text)
    store = app.store
    sweep_id = new_job_id(spec.name)
    seed, source = choose_seed(spec)
    base = os.path.dirname(spec_path) if spec_path else os.getcwd()
    rows = element_rows(sweep_id, spec, seed, base)
    # tracking: a W&B group, an MLflow parent run with a child per element (each element's in its row)
    per_element = attach_trackers(spec, sweep_id, rows, spec_path)
    job = new_job_ref(store, sweep_id, seed=seed,
                      element_env=tuple(sorted((i, tuple(env.items())) for i, env in per_element.items())))
    request = backend.render(spec, facts_for(app, spec, target_name), job)  # errors: nothing recorded yet
    if note:
        note(f"sweep {sweep_id}: {len(rows)} elements as one job array (LAUNCHER_SWEEP_SEED "
             f"{sweep_seed_of(spec, seed)}, {source})")
    # the sweep (its spec once) and every element SUBMITTING before the scheduler is called, in one transaction
    begin_sweep(store, sweep_id, spec, spec_text, spec_path, target_name, backend.name, rows)
    # the submission protocol (launcher.launching.submit): a rejection removes the rows, an
    # unknown outcome keeps them SUBMITTING, to be adopted by the array's dedupe token
    submission = NewSubmission(store, backend, request, [r["job_id"] for r in rows],
                               lambda: store.sweeps.forget(sweep_id))
    handle, _ = submission.run()
    handle = array_handle(handle, backend)
    # a store that fails now leaves the rows SUBMITTING, and the error names the array submitted
    cancelled = submission.recorded(handle, lambda: record_array(store, sweep_id, target_name, handle, rows, backend),
                                    what=f"sweep {sweep_id}")
    if cancelled and note:
        note(f"sweep {sweep_id}: {len(cancelled)} of its {len(rows)} elements were cancelled while it was being "
             f"launched; their array tasks were cancelled")
    return Launched(sweep_id, handle, request)


def record_array(store, sweep_id: str, target_name: str, array: Handle, rows: list, backend) -> list:
    """Record the submitted ARRAY for every element ROW in ONE transaction: the array's id
    (once, on the sweep) and each element's handle, attempt and "submitted" event. BACKEND
    (``Scheduler``) names the elements. Cancel wins: an element cancelled while the array was
    being submitted stays CANCELLED, and its array task is cancelled now
    (``cancel_in_flight``). Returns the job ids of those elements."""
    detail = {"sweep": sweep_id}
    entries = submitted_entries(array, rows, backend)
    with store.batch():
        store.sweeps.share(sweep_id, array=array.native_id)
        cancelled = store.bulk.record_submitted(target_name, entries, detail=detail)
    for job_id, handle_json, _ in entries:
        if job_id in cancelled:
            cancel_in_flight(store, backend, job_id, Handle.from_json(handle_json))
    return cancelled


def element_ref(app: AppContext, row, attempt: int) -> JobRef:
    """The JobRef of a further attempt of one element: its own job id (so its own dedupe
    token and job dir), the sweep's table, and only its index in the array."""
    sw = row.meta["sweep"]
    return new_job_ref(app.store, row.job_id, attempt, seed=sw.get("seed"), elements=(sw["index"],),
                       sweep_id=sw["id"])


def resubmit_element(app: AppContext, row, target_name: str, attempt: int) -> tuple:
    """(lookup, submit) of element ROW's attempt ATTEMPT alone, for the submission protocol
    (``launcher.launching.submit.fenced_submit``): LOOKUP() gives the element's handle when an
    earlier try got through (its dedupe token), else None; SUBMIT() submits it
    (``--array=<index>`` of the same table, so the same element root: it resumes its own
    latest commit); the other elements are untouched."""
    backend = app.backend(target_name)
    job = element_ref(app, row, attempt)

    def as_element(h: Optional[Handle]) -> Optional[Handle]:
        return None if h is None else element_handle(h, row.job_id, job.elements[0], backend)

    def submit() -> Handle:
        spec = with_seed(job_spec(row), job.seed)  # the table derives every element's seed from the sweep's
        return as_element(backend.submit(backend.render(spec, facts_for(app, spec, target_name), job)))

    return (lambda: as_element(find_submission(backend, job))), submit


def adopt_array(app: AppContext, sweep_id: str):
    """The array of SWEEP_ID, found by the sweep's dedupe token in ONE lookup, recorded for
    every element row still SUBMITTING without a handle (a sweep launch that died, timed out or
    was interrupted after the scheduler accepted the array). The array's Handle, or None (no
    such rows, a backend that does not run arrays, or no array with the token)."""
    rows = sweep_rows(app.store, sweep_id)
    unsettled = [r for r in rows if r.state == "SUBMITTING" and not r.handle and r.meta.get("start_at") is None]
    if not unsettled:
        return None
    target = unsettled[0].target
    backend = app.backend(target)
    if not runs_arrays(backend):
        return None
    found = find_submission(backend, new_job_ref(app.store, sweep_id, 1))
    if found is None:
        return None
    found = array_handle(found, backend)
    record_array(app.store, sweep_id, target, found,
                 [{"job_id": r.job_id, "index": r.meta["sweep"]["index"]} for r in unsettled], backend)
    for r in unsettled:
        app.store.record_event(r.job_id, "adopted", attempt=1, native_id=found.native_id,
                               reason="the sweep's array, found by its dedupe token: the launch that submitted "
                                      "it ended before recording it")
    return found
