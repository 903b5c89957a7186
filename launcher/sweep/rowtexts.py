"""What a sweep's launch stores for each element, as the texts the state store writes.

``element_rows`` (``launcher.sweep.launching``) gives each element's meta as readers see it;
the store keeps of it only what is the element's own (``launcher.state.sweeps.own_meta``),
dumped with ``json.dumps``. For a sweep of 1,000 elements that is 1,000 dicts built, trimmed
and dumped before sbatch. ``element_texts`` writes the same texts from pieces instead (each
parameter value dumped once per sweep): ``json.dumps(own_meta(row["meta"], shared))`` for
every row, byte for byte (tests/unit/test_sweep_rowtexts.py). Pure: no I/O, no clock.
"""

from __future__ import annotations

import json
from typing import NamedTuple

from launcher.spec.sweep_elements import element_root, element_seeds, elements, json_scalar, sweep_seed_of, value_id


class ElementText(NamedTuple):
    job_id: str
    index: int
    ckpt_root: object  # str or None
    meta: str  # the element's own meta as stored: json.dumps(own_meta(meta, shared))


def shared_meta(sweep_id: str, size: int, sweep_seed: int, spec_base: str) -> dict:
    """What every element of the sweep shares (``statesweeps.shared_of`` of any element's meta)."""
    return {"spec_base": spec_base, "seed_source": "sweep", "sweep": {"id": sweep_id, "size": size, "seed": sweep_seed}}


def element_texts(sweep_id: str, spec, seed: int, spec_base: str) -> tuple[dict, list]:
    """(the shared meta, an ``ElementText`` per element in index order) of the sweep SWEEP_ID
    of SPEC launched with SEED from the folder SPEC_BASE: what ``element_rows`` gives, as stored."""
    from launcher.sweep.launching import element_job_id

    els = elements(spec.sweep)
    sweep_seed = sweep_seed_of(spec, seed)
    seeds = element_seeds(sweep_seed, len(els))
    root = spec.checkpoint.root
    job = element_job_id(sweep_id, "")  # + index
    mid = f', "sweep": {{"id": {json.dumps(sweep_id)}, "index": '
    pieces: dict = {}  # value_id -> '"name": value'
    out = []
    for e in els:
        parts = []
        for name, value in e.params.items():
            got = pieces.get(value_id(name, value))
            if got is None:
                got = pieces[value_id(name, value)] = f"{json_scalar(name, True)}: {json_scalar(value, True)}"
            parts.append(got)
        i = e.index
        out.append(ElementText(job + str(i), i, element_root(root, i) if root else None,
                               f'{{"seed": {seeds[i]}{mid}{i}, "params": {{{", ".join(parts)}}}}}}}'))
    return shared_meta(sweep_id, len(els), sweep_seed, spec_base), out
