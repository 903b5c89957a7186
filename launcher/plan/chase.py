"""Spot chasing: learn each offer's interruption rate from what the launcher has seen.

The configured rates are priors. Every attempt the launcher records (its offer key,
node-hours it ran, whether it was preempted) is evidence. The planner re-ranks with the
posterior mean of a Gamma-Poisson model, so a zone that keeps preempting the job is
priced as the expensive place it is and the job moves away from it, while a stray
preemption after a long calm run barely moves the estimate:

    rate = (prior_events + events) / (prior_events / prior_rate + exposed_node_hours)

The prior is Gamma(shape = ``prior_events``, mean = prior rate). The default shape 1 is
the usual weakly informative choice: the configured rate is worth one interruption's
worth of evidence (10 node-hours for a 0.1/h spot prior, 5,000 for a 2e-4/h on-demand
one), because per-zone spot rates differ from any default by an order of magnitude.
Evidence fades with ``half_life_hours`` (24 h by default): preemptions come in storms
that last hours, so what happened yesterday says little about the zone now.
Pure functions: the caller passes the observations and their ages.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterable

from .offers import Offer

DEFAULT_PRIOR_EVENTS = 1.0
DEFAULT_HALF_LIFE_HOURS = 24.0


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
                   prior_events: float = DEFAULT_PRIOR_EVENTS) -> float:
    if prior_rate <= 0:
        return events / node_hours if node_hours > 0 else 0.0
    return (prior_events + events) / (prior_events / prior_rate + node_hours)


def apply_observations(offers: Iterable[Offer], observations: Iterable[Observation],
                       prior_events: float = DEFAULT_PRIOR_EVENTS,
                       half_life_hours: float = DEFAULT_HALF_LIFE_HOURS) -> list[Offer]:
    """The offers with their preemption rates replaced by the posterior where there is evidence."""
    ev = evidence(observations, half_life_hours)
    out = []
    for o in offers:
        e = ev.get(o.key)
        if e is None:
            out.append(o)
        else:
            out.append(replace(o, preemption_rate=posterior_rate(o.preemption_rate, e[0], e[1], prior_events)))
    return out
