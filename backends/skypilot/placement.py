"""Which placements a SkyPilot task may use, in order: the planner's ranked candidates
(``ChoosesPlacement``), minus the regions and zones kept away from (``JobRef.avoid``): cooling down
after a preemption or a capacity error, or the regions a deadline move leaves."""

from __future__ import annotations

from launcher.core.errors import ConfigError, TransientError

from launcher_backends.skypilot.options import Placement, split_infra


def without_avoided(placements: list[Placement], avoid) -> list[Placement]:
    """Drop the placements that may land where this job is kept away from (it just preempted
    the job or had no capacity: SkyPilot's EAGER_NEXT_REGION would go straight back, #10021).

    An entry names a region (``cloud/region``: every placement in it), a zone
    (``cloud/region/zone``) or a cloud alone (its placements that name no region). A zone entry
    drops the placements pinned to that zone, and those of its region that name no zone, since
    SkyPilot may pick that zone for them: an AWS placement names no zone (the catalog's zones
    are zone IDs, ``Offer.placement``), so on AWS a zone entry keeps the job off its region."""
    if not avoid:
        return placements
    blocked = {a.lower() for a in avoid}

    def is_avoided(p: Placement) -> bool:
        cloud, region, zone = split_infra(p.full_infra)
        cloud = cloud.lower()
        if not region:
            return cloud in blocked
        where = f"{cloud}/{region}".lower()
        if where in blocked:
            return True
        if cloud in ("kubernetes", "slurm", "ssh"):   # a cluster, context or pool: no zones
            return False
        if zone:
            return f"{where}/{zone}".lower() in blocked
        return any(b.startswith(where + "/") for b in blocked)

    kept = [p for p in placements if not is_avoided(p)]
    if not kept:
        raise TransientError(f"every placement of this job is cooling down after a preemption or a capacity "
                             f"error ({', '.join(sorted(blocked))}); retrying when the cool-down ends")
    return kept


def ranked_placements(candidates) -> list[Placement]:
    """The planner's ranked offers (dicts or Placements), in its order."""
    if not candidates:
        return []
    out, problems = [], []
    for i, c in enumerate(candidates):
        try:
            out.append(c if isinstance(c, Placement) else Placement(**dict(c)))
        except Exception as e:  # pydantic ValidationError or a non-mapping
            problems.append(f"candidates[{i}]: {' '.join(str(e).split())}")
    if problems:
        raise ConfigError("invalid SkyPilot candidates:\n  " + "\n  ".join(problems))
    return out
