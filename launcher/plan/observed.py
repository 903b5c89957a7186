"""What the launcher has seen of spot capacity, kept in the state store for the planner.

``launcher watch`` calls ``observe_job(store, job_row, status)`` for each open job every
cycle (or ``observe_attempt(store, job_row, attempt_row, status)`` for one attempt it sees
end). Every ended attempt that ran somewhere is evidence for the place it
ran (``launcher.plan.chase``):

* it ran ``node_hours`` (nodes x the time it held them) and was interrupted once
  (PREEMPTED, NODE_FAIL: the rates count preemptions and hardware failures) or not at
  all (COMPLETED, CANCELLED, FAILED, TIMEOUT, ...: calm exposure, which is what
  brings a rate back down);
* NO_CAPACITY: a launch refused there, no exposure. It enters the model as a
  launch-failure probability per key, which the ranking turns into expected time lost
  before the job starts (see ``launcher.plan.chase`` for why it is not an interruption).

Keys are ``Offer.key``, (cloud, region, zone, instance type, spot): what the attempt's
handle recorded at launch (the first placement's infra, spot-ness, instance type),
narrowed to the cloud and region the backend reports it actually ran in. When those
differ (SkyPilot failed over to a later candidate) only cloud and region are kept, and
the observation counts for every offer in that region. Slurm attempts are keyed by
(target, "", "", partition, False), like the Slurm offers. Local runs are not recorded.
Each backend says which key its attempts ran on (``Pricing.offer_key``).

The table ``spot_observations`` lives in the state store's database
(``launcher.state.observations``), one row per (job, attempt): watching an ended attempt
again replaces its row, never counts it twice. ``load(store, now)`` gives the rows as
``Observation``s with their ages; the planner (``gather_offers(store=...)``) applies them.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Optional

from launcher.backend.protocols import Pricing, can
from launcher.backend.registry import default_registry
from launcher.backend.sections import spec_from_text
from launcher.core.errors import LauncherError, StateStoreError
from launcher.plan.chase import Observation
from launcher.state import observations

KINDS = ("ran", "preempted", "node_fail", "no_capacity")
MAX_AGE_HOURS = 24.0 * 30  # older rows weigh < 2^-30 at the default half-life: not loaded

_INTERRUPTED = {"PREEMPTED": "preempted", "NODE_FAIL": "node_fail"}
_RAN = {"COMPLETED", "CANCELLED", "FAILED", "FAILED_SETUP", "TIMEOUT", "OUT_OF_MEMORY"}
_ENDED = _RAN | set(_INTERRUPTED) | {"NO_CAPACITY"}


def record(store, key: tuple, node_hours: float, events: int, kind: str, ts: float,
           job_id: Optional[str] = None, attempt: Optional[int] = None) -> None:
    """Store one observation; (job_id, attempt) given: replaces that attempt's earlier row."""
    if kind not in KINDS:
        raise ValueError(f"spot observation kind {kind!r}: expected one of {', '.join(KINDS)}")
    cloud, region, zone, itype, spot = (tuple(key) + ("", "", "", "", False))[:5]
    if not cloud:
        raise ValueError(f"spot observation key {key!r}: the cloud (first element) is empty")
    observations.record(store, (str(cloud), str(region or ""), str(zone or ""), str(itype or ""), bool(spot)),
                        max(float(node_hours), 0.0), int(events), kind, float(ts), job_id, attempt)


def load(store, now: Optional[float] = None, max_age_hours: float = MAX_AGE_HOURS) -> list[Observation]:
    """Every stored observation younger than ``max_age_hours``, aged relative to ``now``."""
    now = time.time() if now is None else now
    rows = observations.since(store, now - max_age_hours * 3600.0)
    out = []
    for r in rows:
        cap = r["kind"] == "no_capacity"
        out.append(Observation(
            key=(r["cloud"], r["region"], r["zone"], r["instance_type"], bool(r["spot"])),
            node_hours=float(r["node_hours"]), events=int(r["events"]),
            age_hours=max(now - float(r["ts"]), 0.0) / 3600.0,
            capacity_failures=1 if cap else 0, launches=1))
    return out


@dataclass(frozen=True)
class Seen:
    """One attempt's evidence, ready for ``record``."""

    key: tuple
    node_hours: float
    events: int
    kind: str
    ts: float


def attempt_key(backend: str, target: str, handle_extra: dict, status_extra: dict,
                registry=None) -> Optional[tuple]:
    """The offer key an attempt ran on, as its backend says (``Pricing.offer_key``), or
    None when it cannot be told (a backend that does not price itself, or is not installed)."""
    try:
        cls = (registry or default_registry()).load(backend, check=False)
    except LauncherError:
        return None
    if not can(cls, Pricing):
        return None
    return cls.offer_key(target, handle_extra, status_extra)


def observation_of(key: Optional[tuple], state: str, started: Optional[float], ended: Optional[float],
                   nodes: int, now: float) -> Optional[Seen]:
    """What an ended attempt says about KEY: exposure and interruptions, or a capacity failure.

    ``started``: when the attempt got its machines (None: never); ``ended``: when it ended
    (None: ``now``). Still-active states and unknown keys give None."""
    if key is None:
        return None
    end = ended if ended is not None else now
    if state == "NO_CAPACITY":
        return Seen(tuple(key), 0.0, 0, "no_capacity", end)
    hours = max(end - started, 0.0) / 3600.0 if started is not None else 0.0
    if state in _INTERRUPTED:
        return Seen(tuple(key), max(nodes, 1) * hours, 1, _INTERRUPTED[state], end)
    if state in _RAN and hours > 0:
        return Seen(tuple(key), max(nodes, 1) * hours, 0, "ran", end)
    return None


def observe_attempt(store, job_row, attempt_row, status=None, now: Optional[float] = None,
                    registry=None, spec=None) -> Optional[Seen]:
    """Record what one ended attempt says about where it ran; what was recorded, or None.

    ``job_row``/``attempt_row``: the state store's rows (``attempt_row`` after ``refresh``
    wrote its state and times); ``status``: the backend's Status for it, when at hand
    (its ``extra`` names the cloud and region that actually ran it, its times win over
    the row's). Safe to call again for the same attempt (the row is replaced). ``registry``:
    where the attempt's backend is found (default: the ``launcher.backends`` entry points)."""
    now = time.time() if now is None else now
    state = getattr(getattr(status, "state", None), "value", None) or attempt_row.state
    backend, h_extra = _handle(attempt_row.handle)
    s_extra = dict(getattr(status, "extra", None) or {})
    key = attempt_key(backend or job_row.backend, attempt_row.target, h_extra, s_extra, registry)
    started = (s_extra.get("launched_at") or getattr(status, "start_time", None) or attempt_row.started)
    ended = getattr(status, "end_time", None) or attempt_row.ended
    seen = observation_of(key, state, started, ended, _nodes(job_row, h_extra, spec), now)
    if seen is not None:
        record(store, seen.key, seen.node_hours, seen.events, seen.kind, seen.ts,
               job_id=attempt_row.job_id, attempt=attempt_row.attempt)
    return seen


def observe_job(store, job_row, status=None, now: Optional[float] = None, registry=None, spec=None,
                attempts=None, observed=None) -> list[Seen]:
    """``observe_attempt`` for every ended attempt of a job not recorded yet, and for its
    latest attempt (with STATUS, the backend's Status of that attempt) when it has ended.

    What ``launcher watch`` calls once per job per cycle: it also catches attempts that
    ended while the job kept going (a Slurm requeue in place makes a new attempt row and
    the job is RUNNING again by the time watch looks). Advisory: a state store error is
    swallowed (learning must never stop recovery); returns what was recorded. SPEC: the job's
    parsed spec, when the caller has it (its node count: otherwise the stored spec is parsed).
    ATTEMPTS and OBSERVED: the job's attempts and those already observed, as the caller read them
    (a watch's claim: ``Claim.attempts``, ``Claim.observed``); otherwise they are read here."""
    try:
        done = observations.attempts_observed(store, job_row.job_id) if observed is None else observed
        attempts = store.attempts(job_row.job_id) if attempts is None else attempts
        out = []
        for a in attempts:
            latest = a is attempts[-1]
            st = status if latest else None
            state = getattr(getattr(st, "state", None), "value", None) or a.state
            if state not in _ENDED or (a.attempt in done and not latest):
                continue
            seen = observe_attempt(store, job_row, a, st, now, registry, spec=spec)
            if seen is not None:
                out.append(seen)
        return out
    except StateStoreError:
        return []


def _handle(handle_json) -> tuple[str, dict]:
    """(backend, extra) of a stored Handle (an attempt on a burst target has its own backend)."""
    try:
        d = json.loads(handle_json or "{}")
        return str(d.get("backend") or ""), dict(d.get("extra") or {})
    except (ValueError, AttributeError, TypeError):
        return "", {}


def _nodes(job_row, h_extra: dict, spec=None) -> int:
    n = h_extra.get("num_nodes")
    if n:
        return int(n)
    if spec is not None:
        return int(spec.resources.nodes)
    try:
        return int(spec_from_text(job_row.spec_yaml, job_row.spec_path or job_row.job_id).resources.nodes)
    except Exception:  # an unreadable spec: count one node rather than lose the observation
        return 1
