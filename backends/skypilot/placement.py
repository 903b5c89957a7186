"""Which placements a SkyPilot task may use, in order: the planner's ranked candidates
(``ChoosesPlacement``), minus the regions cooling down after a preemption or a capacity error."""

from __future__ import annotations

from launcher.core.errors import ConfigError, TransientError

from launcher_backends.skypilot.options import Placement, split_infra


def without_avoided(placements: list[Placement], avoid) -> list[Placement]:
    """Drop placements in a region that is cooling down (it just preempted this job or
    had no capacity: SkyPilot's EAGER_NEXT_REGION would go straight back, #10021)."""
    if not avoid:
        return placements
    blocked = {a.lower() for a in avoid}

    def region_of(p: Placement) -> str:
        cloud, region, _zone = split_infra(p.full_infra)
        return f"{cloud}/{region}".lower() if region else cloud.lower()

    kept = [p for p in placements if region_of(p) not in blocked]
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
