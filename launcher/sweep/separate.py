"""A sweep on a backend without arrays: each element is its own job. Pure: no I/O, no clock.

An element's spec is the sweep's spec without its ``sweep:`` section, with the element's
variables in ``env`` (exactly what the Slurm sweep table exports for it:
``launcher.spec.sweep_elements.element_env``) and the element's own checkpoint root, so its seed,
generations and fencing are its own. The launcher keeps ``max_parallel`` itself: elements
beyond it wait in the store as QUEUED (``launcher.sweep.one_by_one``) until a slot frees.
"""

from __future__ import annotations

from typing import Optional, Sequence

from launcher.core.status import QUEUED
from launcher.spec.sweep_elements import Element, element_env, element_root


def element_spec(spec, sweep_id: str, element: Element, size: int, sweep_seed: int):
    """SPEC (a sweep's JobSpec) as the single job that element ELEMENT runs."""
    env = element_env(sweep_id, element, size, sweep_seed, spec.checkpoint.root)
    env.pop("LAUNCHER_CKPT_ROOT", None)  # the element's root is its checkpoint root: exported as such
    root = element_root(spec.checkpoint.root, element.index)
    return spec.model_copy(update={
        "sweep": None, "env": {**spec.env, **env},
        "checkpoint": spec.checkpoint.model_copy(update={"root": root})})


def element_spec_of(spec, sweep_meta: dict):
    """The element spec of a recorded element row: SPEC is the sweep's spec as recorded,
    SWEEP_META the row's ``meta["sweep"]`` (id, index, size, params, seed)."""
    el = Element(int(sweep_meta["index"]), dict(sweep_meta["params"]))
    return element_spec(spec, sweep_meta["id"], el, int(sweep_meta["size"]), int(sweep_meta["seed"]))


def occupies_slot(state: str, open_: bool) -> bool:
    """An element holds one of max_parallel's slots while it is open and no longer QUEUED
    (SUBMITTING, queued or running at the backend, or ended and awaiting recovery's decision,
    which may resubmit it in place)."""
    return open_ and state != QUEUED


def to_start(elements: Sequence[tuple[int, str, bool]], max_parallel: Optional[int]) -> list[int]:
    """The indices to start now, lowest first: ELEMENTS are (index, job state, open); at most
    MAX_PARALLEL (None: no limit) elements hold a slot afterwards."""
    busy = sum(1 for _, state, open_ in elements if occupies_slot(state, open_))
    queued = sorted(i for i, state, open_ in elements if open_ and state == QUEUED)
    if max_parallel is None:
        return queued
    return queued[:max(0, int(max_parallel) - busy)]
