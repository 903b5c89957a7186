"""What moving a job's checkpoint between two regions of one cloud costs per GB, asked of the
backend that prices the destination (``launcher.backend.protocols.Egress``), and which region
pairs among a plan's offers it does not know (``launcher plan`` names them; ``launcher watch``
prices a move with ``rate``)."""

from __future__ import annotations

from typing import Callable, Iterable, Optional

from launcher.backend.protocols import Egress, can
from launcher.core.errors import LauncherError


def rate(registry, backend: str, cloud: str, src: str, dst: str) -> Optional[tuple]:
    """($/GB, source, unknown pair?) from the backend named BACKEND: a pair its table does not
    know at the cloud's highest inter-region rate (unknown = True); None when the backend
    prices no egress."""
    try:
        cls = registry.load(backend, check=False)
    except LauncherError:
        return None
    if not can(cls, Egress):
        return None
    got = cls.egress_per_gb(cloud, src, dst)
    if got is not None:
        return float(got[0]), str(got[1]), False
    hi = cls.egress_highest(cloud)
    return (float(hi[0]), str(hi[1]), True) if hi is not None else None


def unknown_pairs(offers: Iterable, rate_of: Callable[[str, str, str, str], Optional[tuple]]) -> list[dict]:
    """Every ordered pair of distinct regions of one cloud among OFFERS (planner offers that a
    job can move between: spot and on-demand, not a queue, not this machine) whose price
    ``rate_of(backend, cloud, src, dst)`` does not know: ``{"pair": "cloud:src->dst",
    "usd_per_gb": the rate it is priced at (None: none), "source": ...}``, sorted."""
    regions: dict = {}
    for o in offers:
        if o.this_machine or o.kind == "queue" or not o.region:
            continue
        regions.setdefault(o.cloud, {}).setdefault(o.region, o.backend)
    out = []
    for cloud, by_region in sorted(regions.items()):
        for src in sorted(by_region):
            for dst, backend in sorted(by_region.items()):
                if dst == src:
                    continue
                got = rate_of(backend, cloud, src, dst)
                if got is None or got[2]:
                    out.append({"pair": f"{cloud}:{src}->{dst}", "usd_per_gb": got[0] if got else None,
                                "source": got[1] if got else f"backend {backend} prices no egress"})
    return out
