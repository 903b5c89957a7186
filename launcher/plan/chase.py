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

A day's memory is too slow for the storm itself: two preemptions in the last half hour
after twenty calm node-hours average out to an unremarkable rate. So the same evidence is
also read with a short memory (``recent_half_life_hours``, 2 h) and a weak prior (a
quarter of an event, ``RECENT_PRIOR_EVENTS``), and the planner uses the larger of the
two rates: a zone is as risky as its worst recent evidence says. A burst of preemptions
raises the rate within one or two of them; once the job has left, the short memory fades
within hours and the zone is back to its long-run rate. This is what a placement
cool-down approximates, with a length that follows the evidence instead of a fixed one.
(``bench/simulate_policy.py``: worth about a point of cost either way, +1.2 where nothing
else signals a storm, -0.5 where refused launches already do; see the README.)

Capacity failures (a launch refused with no capacity) are evidence of a different
thing and enter the model separately. They lose no work and bill nothing, so counting
them as interruptions would price a full zone as if it destroyed work; ignoring them
would send the next launch straight back. Each key instead has a launch-failure
probability, Beta-Binomial over the launches tried there (prior mean
``CAPACITY_PRIOR_FAILURE`` worth ``CAPACITY_PRIOR_TRIES`` launches, decayed with the
same half-life: capacity comes back as storms pass), and the planner adds the expected
time lost to refused launches, ``p / (1 - p)`` failed tries of ``capacity_retry_hours``
each (a provisioning attempt), to the offer's wait before it starts. That counts
against ``cost.deadline`` and breaks ties; it adds no dollars, because none are spent.

Keys are ``Offer.key``: (cloud, region, zone, instance type, spot). An observation whose
key leaves zone or instance type empty (the launcher knew only the region it ran in) is
evidence for every offer in that region with that spot-ness. Pure functions: the caller
passes the observations and their ages (``launcher.plan.observed`` keeps them).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterable, Optional

from launcher.plan.offers import Offer

DEFAULT_PRIOR_EVENTS = 1.0
DEFAULT_HALF_LIFE_HOURS = 24.0
DEFAULT_RECENT_HALF_LIFE_HOURS = 2.0  # the short memory that sees a storm (0: off)
RECENT_PRIOR_EVENTS = 0.25
CAPACITY_PRIOR_FAILURE = 0.05     # prior probability that a launch is refused for capacity
CAPACITY_PRIOR_TRIES = 2.0        # ... worth this many launches of evidence
DEFAULT_CAPACITY_RETRY_HOURS = 10 / 60  # a refused provisioning attempt (SkyPilot tries, fails, moves on)


@dataclass(frozen=True, slots=True)
class Observation:
    key: tuple            # Offer.key of the offer the attempt ran on ("" zone / type: the whole region)
    node_hours: float     # exposure: hours the attempt ran x nodes
    events: int           # preemptions / interruptions seen in that time (0 or more)
    age_hours: float = 0.0  # how long ago the attempt ended
    capacity_failures: int = 0  # launches refused for lack of capacity
    launches: int = 0     # launches tried (capacity failures included); 0: not counted


@dataclass(frozen=True, slots=True)
class Evidence:
    node_hours: float = 0.0
    events: float = 0.0
    capacity_failures: float = 0.0
    launches: float = 0.0

    def __add__(self, o: "Evidence") -> "Evidence":
        return Evidence(self.node_hours + o.node_hours, self.events + o.events,
                        self.capacity_failures + o.capacity_failures, self.launches + o.launches)

    @property
    def has_exposure(self) -> bool:
        return self.node_hours > 0 or self.events > 0


def weight(age_hours: float, half_life_hours: float = DEFAULT_HALF_LIFE_HOURS) -> float:
    return 0.5 ** (max(age_hours, 0.0) / half_life_hours) if half_life_hours > 0 else 1.0


def gather(observations: Iterable[Observation], half_life_hours: float = DEFAULT_HALF_LIFE_HOURS
           ) -> dict[tuple, Evidence]:
    """{observation key: decayed Evidence}."""
    out: dict[tuple, Evidence] = {}
    for ob in observations:
        w = weight(ob.age_hours, half_life_hours)
        e = Evidence(w * ob.node_hours, w * ob.events, w * ob.capacity_failures, w * ob.launches)
        out[ob.key] = out.get(ob.key, Evidence()) + e
    return out


def evidence(observations: Iterable[Observation], half_life_hours: float = DEFAULT_HALF_LIFE_HOURS
             ) -> dict[tuple, tuple[float, float]]:
    """{offer key: (decayed node-hours, decayed events)}."""
    return {k: (e.node_hours, e.events) for k, e in gather(observations, half_life_hours).items()}


def posterior_rate(prior_rate: float, node_hours: float, events: float,
                   prior_events: float = DEFAULT_PRIOR_EVENTS) -> float:
    if prior_rate <= 0:
        return events / node_hours if node_hours > 0 else 0.0
    return (prior_events + events) / (prior_events / prior_rate + node_hours)


def chased_rate(prior_rate: float, long: Evidence, recent: Optional[Evidence],
                prior_events: float = DEFAULT_PRIOR_EVENTS,
                recent_prior_events: float = RECENT_PRIOR_EVENTS) -> float:
    """The rate the planner uses: the long-memory posterior, or the short-memory one when
    recent evidence says more (a storm under way)."""
    rate = posterior_rate(prior_rate, long.node_hours, long.events, prior_events)
    if recent is not None and recent.has_exposure:
        rate = max(rate, posterior_rate(prior_rate, recent.node_hours, recent.events, recent_prior_events))
    return rate


def capacity_failure_probability(failures: float, launches: float) -> float:
    """Posterior mean of the chance a launch here is refused for capacity (Beta-Binomial)."""
    a = CAPACITY_PRIOR_FAILURE * CAPACITY_PRIOR_TRIES + failures
    b = (1.0 - CAPACITY_PRIOR_FAILURE) * CAPACITY_PRIOR_TRIES + max(launches - failures, 0.0)
    return a / (a + b)


def capacity_wait_hours(failures: float, launches: float,
                        retry_hours: float = DEFAULT_CAPACITY_RETRY_HOURS) -> float:
    """Expected time lost to refused launches before one succeeds (geometric number of tries)."""
    p = min(capacity_failure_probability(failures, launches), 0.99)
    return retry_hours * p / (1.0 - p)


def matcher(ev: dict[tuple, Evidence]):
    """A function offer key -> summed Evidence of the observations that apply to it (exact
    keys, plus region-wide ones whose zone or instance type is empty), or None."""
    exact: dict[tuple, Evidence] = {}
    coarse: dict[tuple, list] = {}
    for k, e in ev.items():
        cloud, region, zone, itype, spot = (tuple(k) + ("", "", "", "", False))[:5]
        if zone and itype:
            exact[(cloud, region, zone, itype, bool(spot))] = e
        else:
            coarse.setdefault((cloud, region, bool(spot)), []).append((zone, itype, e))

    def find(key: tuple):
        cloud, region, zone, itype, spot = key
        total = exact.get((cloud, region, zone, itype, bool(spot)))
        for z, t, e in coarse.get((cloud, region, bool(spot)), ()):
            if (not z or z == zone) and (not t or t == itype):
                total = e if total is None else total + e
        return total

    return find


def apply_observations(offers: Iterable[Offer], observations: Iterable[Observation],
                       prior_events: float = DEFAULT_PRIOR_EVENTS,
                       half_life_hours: float = DEFAULT_HALF_LIFE_HOURS,
                       capacity_retry_hours: float = DEFAULT_CAPACITY_RETRY_HOURS,
                       recent_half_life_hours: float = DEFAULT_RECENT_HALF_LIFE_HOURS) -> list[Offer]:
    """The offers with their preemption rates replaced by the posterior where there is
    evidence of running there (``rate_source`` "observed"; ``chased_rate``: the larger of
    the long- and short-memory posteriors), and the expected time lost to capacity
    failures added to their wait where launches were tried."""
    observations = list(observations)
    find = matcher(gather(observations, half_life_hours))
    recent = matcher(gather(observations, recent_half_life_hours)) if recent_half_life_hours > 0 else None
    out = []
    for o in offers:
        e = find(o.key)
        if e is None:
            out.append(o)
            continue
        changes: dict = {"capacity_failures": e.capacity_failures, "launch_tries": e.launches}
        if e.has_exposure:
            rate = chased_rate(o.preemption_rate, e, recent(o.key) if recent else None, prior_events)
            changes.update(preemption_rate=rate,
                           rate_source="observed", rate_events=e.events, rate_node_hours=e.node_hours)
        if e.capacity_failures > 0:
            changes["queue_wait_hours"] = o.queue_wait_hours + capacity_wait_hours(
                e.capacity_failures, e.launches, capacity_retry_hours)
        out.append(replace(o, **changes))
    return out
