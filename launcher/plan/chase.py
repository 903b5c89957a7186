"""Spot chasing: learn each offer's interruption rate from what the launcher has seen.

The configured rates are priors. Every attempt the launcher records (its offer key,
node-hours it ran, whether it was preempted) is evidence. The planner re-ranks with the
posterior mean of a Gamma-Poisson model, so a zone that keeps preempting the job is
priced as the expensive place it is, and the job moves away from it, while one stray
preemption in a calm zone does not send it away:

    rate = (prior_rate x prior_hours + events) / (prior_hours + exposed_hours)

``prior_hours`` is how many node-hours of evidence the prior is worth. Old evidence
fades with ``half_life_hours`` (spot markets change within days). Pure functions: the
caller passes the observations and their ages.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterable

from .offers import Offer

DEFAULT_PRIOR_HOURS = 24.0
DEFAULT_HALF_LIFE_HOURS = 72.0


@dataclass(frozen=True, slots=True)
class Observation:
    key: tuple            # Offer.key of the offer the attempt ran on
    node_hours: float     # exposure: hours the attempt ran x nodes
    events: int           # preemptions / interruptions seen in that time (0 or more)
    age_hours: float = 0.0  # how long ago the attempt ended


def evidence(observations: Iterable[Observation], half_life_hours: float = DEFAULT_HALF_LIFE_HOURS
             ) -> dict[tuple, tuple[float, float]]:
    """{offer key: (decayed node-hours, decayed events)}."""
    out: dict[tuple, list[float]] = {}
    for ob in observations:
        w = 0.5 ** (max(ob.age_hours, 0.0) / half_life_hours) if half_life_hours > 0 else 1.0
        acc = out.setdefault(ob.key, [0.0, 0.0])
        acc[0] += w * ob.node_hours
        acc[1] += w * ob.events
    return {k: (v[0], v[1]) for k, v in out.items()}


def posterior_rate(prior_rate: float, node_hours: float, events: float,
                   prior_hours: float = DEFAULT_PRIOR_HOURS) -> float:
    return (prior_rate * prior_hours + events) / (prior_hours + node_hours)


def apply_observations(offers: Iterable[Offer], observations: Iterable[Observation],
                       prior_hours: float = DEFAULT_PRIOR_HOURS,
                       half_life_hours: float = DEFAULT_HALF_LIFE_HOURS) -> list[Offer]:
    """The offers with their preemption rates replaced by the posterior where there is evidence."""
    ev = evidence(observations, half_life_hours)
    out = []
    for o in offers:
        e = ev.get(o.key)
        if e is None:
            out.append(o)
        else:
            out.append(replace(o, preemption_rate=posterior_rate(o.preemption_rate, e[0], e[1], prior_hours)))
    return out
