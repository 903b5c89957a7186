"""A sweep's elements as the state store keeps them, whichever way they run: each element's job id, the rows
recorded for them (SUBMITTING, before the scheduler is called; the sweep's spec and what its elements share stored
once), the element rows read back, and which of the two ways a backend runs them (``runs_arrays``). Pure but for the
store calls; used by both ways: one array (``launcher.sweep.arrays``) and one job per element
(``launcher.sweep.one_by_one``).
"""

from __future__ import annotations

from typing import Optional

from launcher.backend.protocols import JobRef, Scheduler, can
from launcher.core.errors import LauncherError
from launcher.spec.sweep_elements import element_root, element_seed, elements, sweep_seed_of
from launcher.state.sweeps import shared_of
from launcher.sweep.separate import element_spec
from launcher.backend.context import AppContext

ELEMENT_ID = "{sweep_id}-e{index}"


def runs_arrays(backend) -> bool:
    """Whether BACKEND's target runs a sweep as one array job (``Scheduler.runs_arrays``): the sweep goes
    ``launcher.sweep.arrays``'s way, else ``launcher.sweep.one_by_one``'s."""
    return can(backend, Scheduler) and bool(backend.runs_arrays(dict(backend.target.raw or {})))


def spec_to_render(backend, spec, job: JobRef):
    """What ``launcher render`` shows for a sweep: the array where BACKEND runs arrays, else
    element 0 as the job of its own it is launched as."""
    if runs_arrays(backend):
        return spec
    return element_spec(spec, job.job_id, elements(spec.sweep)[0], spec.sweep.size, sweep_seed_of(spec, job.seed))


def element_job_id(sweep_id: str, index: int) -> str:
    return ELEMENT_ID.format(sweep_id=sweep_id, index=index)


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


def begin_sweep(store, sweep_id: str, spec, spec_text: str, spec_path: Optional[str], target_name: str,
                backend_name: str, rows: list) -> None:
    """Record SWEEP_ID (its spec once) and its element ROWS (``element_rows``) SUBMITTING."""
    shared = shared_of(rows[0]["meta"]) if rows else {}
    store.sweeps.begin(sweep_id, spec.name, target_name, backend_name, spec_path, spec_text, shared,
                      [(r["job_id"], r["ckpt_root"], r["meta"]) for r in rows])


def sweep_rows(store, sweep_id: str) -> list:
    """The element rows of SWEEP_ID in index order (empty when no such sweep)."""
    return store.sweeps.jobs(sweep_id)


def element_id(app: AppContext, sweep_id: str, index: int) -> str:
    """The job id of element INDEX of SWEEP_ID, with a clear error when there is none."""
    rows = sweep_rows(app.store, sweep_id)
    if not rows:
        raise LauncherError(f"no sweep '{sweep_id}' (see `launcher status`)")
    size = rows[0].meta["sweep"]["size"]
    if not 0 <= index < size:
        raise LauncherError(f"sweep {sweep_id} has elements 0-{size - 1}; there is no element {index}")
    return element_job_id(sweep_id, index)
