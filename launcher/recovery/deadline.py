"""Deadlines, live: ``launcher watch`` keeps a job with ``cost.deadline`` on schedule (issue 21).

Once per watch cycle, for every open job whose spec has ``cost.deadline``, ``step`` asks the
pure policy (``launcher.plan.deadline.decide``) where the job should run now, and carries the
answer out. What the policy is told:

* **elapsed**: now minus the job's creation (its submission); **deadline**: ``cost.deadline``
  resolved against it (a duration from submission, or an absolute time);
* **work**: ``resources.expected_runtime`` (the planner's work estimate, else the time
  limit); **work done**: the checkpoint root's committed step / ``cost.total_steps`` of it
  (without ``total_steps`` nothing counts as done: the policy then plans as if the whole work
  were left, which is safe and dear);
* **restart overhead**: the mean of this job's own starts (an attempt's submission to its
  start, as the backend reports it: provisioning and, where the backend counts it, the
  restore), else the cheapest guaranteed offer's ``restart_hours`` until there is one;
* **offers**: the planner's offers for the spec's targets (``gather_offers``): spot per
  region with its price, on-demand, queues (Slurm targets) with their measured wait. A spot
  zone where an attempt was preempted or refused for capacity less than
  ``recovery.placement_cooldown`` ago (what ``watch`` learns, ``launcher.plan.observed``)
  is unavailable, and a spot region only when every zone of it is, a region priced at its
  cheapest available zone (the zone a move there lands in: ``kept_off``) (an observation that
  names no zone cools its whole region: on SkyPilot the zone is the one its status reports,
  an AWS zone by the catalog's zone ID when SkyPilot's mapping file has it, else none);
* **egress**: a start in a region other than the one the job last ran in (the placement of
  its newest attempt that started, not merely the last submitted: ``_ran_in``) moves its
  checkpoint: the committed checkpoint's size (its manifest's files) x the backend's price
  per GB for that cloud and region pair (``Egress``), a pair the backend does not know at
  the cloud's highest inter-region rate (named in the decision's ``egress_unknown``); and
  its time, the size x 8 / ``cost.transfer_gbps`` (default ``DEFAULT_TRANSFER_GBPS``);
* **tick**: the time since this job's previous decision (the watch interval, measured).

What ``step`` does with the decision:

* a placement that differs from the one the job holds is a **move**: under the job's claim,
  a resubmission to that target (its other regions avoided, and the chosen region's cooling
  zones where the backend names zones: ``kept_off``) by the
  submission protocol (``launcher.launching.launch.resubmit``: exactly once), then the old
  copy is cancelled (the checkpoint's generation fencing keeps one writer). A job whose
  spot attempt was preempted or refused is moved the same way (instead of the ordinary
  retry on its target);
* **wait** on a preempted job: nothing is submitted until a later cycle decides otherwise;
* every decision whose placement or reason changed is recorded as a ``deadline`` event
  with its reason and numbers (``launcher status JOB`` shows it); each move as a
  ``deadline_move`` event with the overhead it is expected to cost.

Any other end (COMPLETED, FAILED, ...) and a job that holds its placement are left to the
ordinary recovery (``step`` returns None).
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Optional

from launcher.backend.protocols import Handle
from launcher.core.errors import LauncherError
from launcher.core.status import JobState, Status
from launcher.launching.launch import resubmit
from launcher.launching.targeting import queue_waits
from launcher.plan import deadline as dl, egress
from launcher.plan.observed import load as load_observations, observe_job
from launcher.recovery.outcome import Outcome
from launcher.recovery.progress import read_progress
from launcher.state.claims import claimed
from launcher.state.store import ClaimLost
from launcher.backend.context import AppContext
from launcher.plan.ranking import params_for, work_estimate
from launcher.plan.sources import gather_offers

EVENT, MOVE_EVENT, META = "deadline", "deadline_move", "deadline"
DEFAULT_TICK_S = 10.0                       # `launcher watch`'s default interval, before a second decision
# Gbit/s a move copies the checkpoint at, unless ``cost.transfer_gbps`` says: the slowest of the
# S3 transfer rates the SkyNomad artifact measured between AWS regions (sky_spot/migration_model.py:
# 9.72 within a region, 8.20 across regions, 3.59 across continents), so a move's time is not
# underestimated; a job whose copy is slower (one stream, a mounted bucket) sets its own
DEFAULT_TRANSFER_GBPS = 3.59
MOVABLE_ENDS = (JobState.PREEMPTED, JobState.NO_CAPACITY)   # ends the deadline decides on, not the retry


def step(app: AppContext, job, spec, status, clock=time.time) -> Optional[Outcome]:
    """One deadline step for one open job in a watch cycle: an Outcome when the deadline
    policy acted on it (a move, a wait), else None (the ordinary recovery applies)."""
    if spec.cost.deadline is None or job.meta.get("sweep") or not isinstance(status, Status):
        return None
    if status.state.is_terminal and status.state not in MOVABLE_ENDS:
        return None
    store = app.store
    latest = store.latest_attempt(job.job_id)
    if latest is None:
        return None
    now = clock()
    if status.state in MOVABLE_ENDS:
        observe_job(store, job, status, registry=app.registry)  # the region that just refused the job is unavailable
    places = live_offers(app, spec, now)
    if not any(p.target == latest.target for _, p in places.values()) and on_this_machine(app, spec, latest.target):
        return None  # launched on this machine as the guaranteed offer: the policy places nothing there
    src = _ran_in(job, store.attempts(job.job_id), places)
    places, unknown = egress_offers(app, places, src, _committed_gb(job),
                                    spec.cost.transfer_gbps or DEFAULT_TRANSFER_GBPS)
    s = situation(app, job, spec, latest, status, places, now)
    d = dl.decide(s, dl.MULTI if _many_spot(places) else dl.SINGLE)
    if unknown:
        d = dl.Decision(d.placement, d.reason, {**d.numbers, "egress_unknown": unknown})
    _record(app, job, d, now, s)
    if d.placement == s.current:
        if status.state in MOVABLE_ENDS:  # spot gone and slack to spare: wait for it
            return Outcome(job.job_id, "deadline_wait", d.reason)
        return None
    if d.placement.kind == dl.WAIT:
        if status.state in MOVABLE_ENDS:
            return Outcome(job.job_id, "deadline_wait", d.reason)
        return None  # a held instance is never given up for nothing
    return move(app, job, latest, status, d, places, s, kept_off(app, spec, d, places, now))


# ---- what the policy is told -----------------------------------------------------------------

def live_offers(app: AppContext, spec, now: float) -> dict:
    """{str(Placement): (deadline Offer, plan Offer)} for the spec's targets, spot regions
    refused or preempted within ``recovery.placement_cooldown`` marked unavailable."""
    targets = list(spec.targets)
    got = _gathered(app, spec, targets or None, queue_waits(app, spec, targets) if targets else {})
    cooling = _cooling(app.store, now, spec.recovery.placement_cooldown or 0)
    nodes = spec.resources.nodes
    out = {}
    for o in got.offers:
        offer = dl.offer_of(o, nodes, available=not (o.spot and cooled(o.key, cooling)))
        if offer is None:
            continue
        k = str(dl.Placement(offer.kind, offer.where))
        if k not in out or _zone_order(offer) < _zone_order(out[k][0]):
            # a region is available while one of its zones is, at its cheapest available
            # zone's price: the zone a move there lands in (``kept_off``)
            out[k] = (offer, o)
    return out


def _zone_order(offer: dl.Offer) -> tuple:
    return (not offer.available, offer.price)


def on_this_machine(app: AppContext, spec, target: str) -> bool:
    """Is TARGET this machine (a ``local`` target)? A deadline job launched there runs as the
    guaranteed offer (``launcher.launching.launch.check_deadline``) and is never moved."""
    got = _gathered(app, spec, [target], {})
    return bool(got.offers) and all(o.this_machine for o in got.offers)


def _gathered(app: AppContext, spec, targets, waits: dict):
    """The planner's offers of TARGETS (None: every configured one) for SPEC."""
    return gather_offers(spec, app.config, targets=targets, registry=app.registry, queue_waits=waits)


def _key(key: tuple) -> tuple:
    return tuple(str(k or "") for k in key[:4]) + (bool(key[4]),)


def cooled(key: tuple, cooling: set) -> bool:
    """Is the offer KEY cooling down: its zone preempted or refused (an observation of that
    zone), or its whole region (an observation that names no zone)? An observation with no
    instance type (the backend ran a later candidate and did not say which) matches any."""
    k = _key(key)
    return any((k[0], k[1], zone, itype, k[4]) in cooling for zone in {k[2], ""} for itype in {k[3], ""})


def _cooling(store, now: float, cooldown_s: float) -> set:
    """Keys of spot offers preempted or refused within COOLDOWN_S seconds of NOW (per zone;
    with an empty zone when the observation knew only the region)."""
    out = set()
    for ob in load_observations(store, now):
        if (ob.events or ob.capacity_failures) and ob.age_hours * 3600.0 < cooldown_s:
            out.add(_key(ob.key))
    return out


def egress_offers(app: AppContext, places: dict, src: Optional[tuple], size_gb: float,
                  gbps: float = DEFAULT_TRANSFER_GBPS) -> tuple[dict, list]:
    """PLACES with what a start there costs to move the checkpoint from SRC (cloud, region:
    where the job last ran): ``move_h``, SIZE_GB x 8 / GBPS hours of transfer, for an offer in
    another region (of any cloud; a scheduler's queue has no region to tell); ``move_usd``,
    SIZE_GB x the price per GB of the offer's backend (``Egress``) for another region of the
    same cloud, a pair it does not know at the cloud's highest inter-region rate. Returns
    (places, the pairs priced that way or not at all, as "cloud:src->dst" strings)."""
    if not src or not src[1] or size_gb <= 0:
        return places, []
    hours = size_gb * 8.0 / gbps / 3600.0 if gbps > 0 else 0.0
    out, unknown = {}, []
    for k, (o, p) in places.items():
        if not p.region or (p.cloud, p.region) == tuple(src[:2]) or o.kind == dl.QUEUE:
            out[k] = (o, p)
            continue
        if p.cloud != src[0]:
            out[k] = (replace(o, move_h=hours), p)
            continue
        rate = egress_rate(app, p.backend, p.cloud, src[1], p.region)
        if rate is None or rate[2]:
            unknown.append(f"{p.cloud}:{src[1]}->{p.region}")
        usd = size_gb * rate[0] if rate else 0.0
        out[k] = (replace(o, move_usd=usd, move_h=hours), p)
    return out, sorted(set(unknown))


def egress_rate(app: AppContext, backend: str, cloud: str, src: str, dst: str) -> Optional[tuple]:
    """($/GB, source, unknown pair?) from the backend named BACKEND; None when it prices no
    egress (``launcher.plan.egress.rate``)."""
    return egress.rate(app.registry, backend, cloud, src, dst)


def _many_spot(places: dict) -> bool:
    return len({k for k, (o, _) in places.items() if o.kind == dl.SPOT}) > 1


def situation(app: AppContext, job, spec, latest, status, places: dict, now: float) -> dl.Situation:
    created = job.created
    deadline_h = (spec.cost.deadline_at(created) - created) / 3600.0
    work_h = work_estimate(spec, params_for(spec))[0]
    done_h = 0.0
    step_now = _committed(app, job)
    if step_now is not None and spec.cost.total_steps:
        done_h = min(step_now / spec.cost.total_steps, 1.0) * work_h
    offers = tuple(o for o, _ in places.values())
    overhead_h = measured_overhead_h(app.store.attempts(job.job_id))
    if overhead_h is None:
        gs = [p for o, p in places.values() if o.guaranteed] or [p for _, p in places.values()]
        overhead_h = min((p.restart_hours for p in gs), default=10 / 60)
    active = not status.state.is_terminal
    current = placement_of(job, latest, places) if active else dl.NOWHERE
    left = 0.0
    if active and status.state is not JobState.RUNNING:
        left = max(overhead_h - (now - latest.submitted) / 3600.0, 0.0)
    last = (job.meta.get(META) or {}).get("decided_at")
    tick_s = now - float(last) if last and now > float(last) else DEFAULT_TICK_S
    return dl.Situation(elapsed_h=(now - created) / 3600.0, done_h=done_h, work_h=work_h,
                        deadline_h=deadline_h, overhead_h=overhead_h, current=current,
                        overhead_left_h=left, offers=offers, tick_h=tick_s / 3600.0)


def _committed(app: AppContext, job) -> Optional[int]:
    """The checkpoint root's committed step (copied into the job row), else the row's."""
    if job.ckpt_root:
        p = read_progress(job.ckpt_root)
        if not p.unknown and not p.error and p.committed_step is not None:
            if p.committed_step != job.last_step:
                app.store.update_job(job.job_id, last_step=p.committed_step)
            return p.committed_step
    return job.last_step


def _committed_gb(job) -> float:
    """The last committed checkpoint's size in GB (its manifest's files), 0 when unknown
    (a job without a checkpoint root moves nothing)."""
    if not job.ckpt_root:
        return 0.0
    p = read_progress(job.ckpt_root)
    if p.unknown or p.error or not p.committed_bytes:
        return 0.0
    return p.committed_bytes / 1e9


def _ran_in(job, attempts, places: dict) -> Optional[tuple]:
    """(cloud, region) where the job's checkpoint was last written: the placement of its newest
    attempt that STARTED (its backend reported a start, so it ran and made progress there). An
    attempt submitted but never started (still provisioning, refused, preempted before it ran)
    moved nothing: a move from it is priced from where the job last ran. None before any start
    (the first start moves nothing)."""
    for a in sorted(attempts, key=lambda a: a.attempt, reverse=True):
        if not a.started:
            continue
        hit = places.get(str(placement_of(job, a, places)))
        return (hit[1].cloud, hit[1].region) if hit is not None else None
    return None


def measured_overhead_h(attempts) -> Optional[float]:
    """Mean hours from an attempt's submission to its start, over this job's attempts that
    started; None before any did."""
    spans = [a.started - a.submitted for a in attempts if a.started and a.submitted and a.started >= a.submitted]
    return sum(spans) / len(spans) / 3600.0 if spans else None


def placement_of(job, latest, places: dict) -> dl.Placement:
    """Where LATEST (an attempt still queued or running) was placed: as the deadline moved it
    (the job's meta), else its target's offer in the region its handle names, else its
    target's first offer."""
    moved = (job.meta.get(META) or {}).get("placements", {}).get(str(latest.attempt))
    if moved:
        return dl.Placement.parse(moved)
    region = None
    try:
        h = Handle.from_json(latest.handle) if latest.handle else None
        region = (h.extra or {}).get("region") if h else None
    except (ValueError, TypeError, KeyError):
        region = None
    mine = [(o, p) for o, p in places.values() if p.target == latest.target]
    pick = next(((o, p) for o, p in mine if region and p.region == region), mine[0] if mine else None)
    return dl.Placement(pick[0].kind, pick[0].where) if pick else dl.NOWHERE


# ---- what is done with the decision ----------------------------------------------------------

def _record(app: AppContext, job, d: dl.Decision, now: float, s: dl.Situation) -> None:
    """A ``deadline`` event when the placement or the reason changed; the time of the decision."""
    last = job.meta.get(META) or {}
    changed = (last.get("placement"), last.get("reason")) != (str(d.placement), d.reason)
    app.store.patch_meta(job.job_id, **{META: {**last, "placement": str(d.placement), "reason": d.reason,
                                              "decided_at": now}})
    if changed:
        app.store.record_event(job.job_id, EVENT, placement=str(d.placement), reason=d.reason,
                               held=str(s.current), overhead_h=round(s.overhead_h, 6),
                               done_h=round(s.done_h, 6), **d.numbers)


def kept_off(app: AppContext, spec, d: dl.Decision, places: dict, now: float) -> list:
    """What a move to D's placement keeps its target's backend off (``JobRef.avoid``), so that
    the job lands where the policy chose: every other region of that target (``cloud/region``),
    and, for spot where the backend's placements name zones, the zones of the chosen region
    that are cooling down or dearer than the zone the region was priced at (its cheapest
    available zone, ``live_offers``): a move, within a region or into one, lands in its
    cheapest zone (``cloud/region/zone``). A placement that names no zone (AWS through
    SkyPilot: ``Offer.placement``) cannot be kept off one zone without leaving the region, so
    there the backend picks the zone."""
    chosen, planned = places[str(d.placement)]
    mine = [p for _, p in places.values() if p.target == planned.target]
    avoid = sorted({f"{p.cloud}/{p.region}".lower() for p in mine if p.region and p.region != planned.region})
    if not (planned.spot and planned.region):
        return avoid
    cooling = _cooling(app.store, now, spec.recovery.placement_cooldown or 0)
    nodes = spec.resources.nodes
    for o in _gathered(app, spec, [planned.target], {}).offers:
        if not (o.spot and o.region == planned.region and o.zone and o.placement()["infra"].count("/") == 2):
            continue
        if cooled(o.key, cooling) or o.hourly_usd * nodes > chosen.price + 1e-9:
            avoid.append(f"{o.cloud}/{o.region}/{o.zone}".lower())
    return list(dict.fromkeys(avoid))


def move(app: AppContext, job, latest, status, d: dl.Decision, places: dict, s: dl.Situation,
         avoid=()) -> Outcome:
    """Resubmit the job to D's placement under its claim, keeping it off AVOID (``kept_off``),
    then cancel the copy it leaves."""
    store = app.store
    offer, planned = places[str(d.placement)]
    reason = f"deadline: {d.reason} -> {d.placement}"
    with claimed(store, job.job_id) as c:
        if c is None:
            return Outcome(job.job_id, "claimed", "another watcher is deciding on it")
        if not c.attempts or c.attempts[-1].attempt != latest.attempt:
            return Outcome(job.job_id, "claimed", "another watcher acted on it first")
        attempt = latest.attempt + 1
        try:
            handle = resubmit(app, c.job, planned.target, attempt, reason, avoid=avoid, owner=c.owner)
        except ClaimLost:
            raise
        except LauncherError as e:
            store.record_event(job.job_id, "deadline_move_failed", to=str(d.placement), error=str(e))
            return Outcome(job.job_id, "deadline_move_failed", str(e))
        meta = store.get_job(job.job_id).meta.get(META) or {}
        placements = {**meta.get("placements", {}), str(attempt): str(d.placement)}
        store.patch_meta(job.job_id, **{META: {**meta, "placements": placements}})
    cancelled = None
    if not status.state.is_terminal and latest.handle:  # the copy it leaves: cancelled once the new one is in
        try:
            app.backend(latest.target).cancel(Handle.from_json(latest.handle))
            store.update_attempt(job.job_id, latest.attempt, state="CANCELLED", reason=f"deadline: moved to "
                                 f"{d.placement}")
            cancelled = latest.native_id
        except LauncherError as e:
            store.record_event(job.job_id, "watch_error", error=f"deadline move: cancelling attempt "
                               f"{latest.attempt}: {e}")
    store.record_event(job.job_id, MOVE_EVENT, frm=str(s.current), to=str(d.placement), attempt=attempt,
                       native_id=handle.native_id, cancelled_native_id=cancelled,
                       overhead_h=round(s.overhead_h, 6), price=offer.price, reason=d.reason)
    return Outcome(job.job_id, "deadline_move", f"{s.current} -> {d.placement}: {d.reason}")
