"""Finish by a deadline at the lowest cost: where a job with ``cost.deadline`` should run next.

A pure policy, asked once per tick (``Situation`` -> ``Decision``). All times are hours.

The one resource a deadline gives is **slack**: the time the job may still lose (waiting for
spot, restart overheads) and still finish on a guaranteed offer (on-demand, or a batch
scheduler's queue, such as a Slurm target's, whose expected wait fits)::

    slack = deadline - elapsed - (restart overhead + queue wait + work left)

Waiting spends slack one for one; every start spends its restart overhead; running (spot or
on-demand) keeps it. Money is spent only while an instance is held, far more on on-demand.
So the policy rides spot while it is there, and when it is not, it waits while the slack is
above a **reserve** that shrinks with the work left (``Params.reserve``: at ``reserve=1`` it is
exactly Uniform Progress's line, "Can't Be Late", NSDI '24), else runs on the guaranteed
offer. From on-demand it returns to spot when the slack is above the reserve plus the two
restarts a return risks (``Params.back``: Uniform Progress's 2x-overhead hysteresis), and only
when spot is cheaper by more than the restart costs (a free queue is never left).

**The safety net** (``safety_net``) is checked last and overrides everything: a placement
other than a guaranteed one is allowed for this tick only if, should spot vanish at the next
tick boundary, the guaranteed offer started then still finishes by the deadline. A
preemption takes effect at a tick boundary, so a spot tick's progress is certain; the net
therefore keeps "on-demand can still finish" true from tick to tick, and the deadline is met
whenever on-demand could still meet it when the policy was first asked (``can_finish``).

Two forms: ``decide_single`` (one zone: its spot and on-demand, the Can't-Be-Late setting)
and ``decide_multi`` (spot in many zones with their own prices, on-demand where it is
cheapest, scheduler queues with their wait). Both are ``decide`` with their own tuned
``Params`` (``SINGLE``, ``MULTI``; measured by ``bench/deadline_replay.py``). The multi-region
form also moves a running spot job to a cheaper zone when the saving over the hours it may
stay pays for the restart (``Params.stay_h``), and, while the slack is above the reserve, waits
for a zone priced within ``Params.pick`` x the cheapest zone's price (available or not) rather
than starting in a dearer one: waiting costs slack, not money, and a dear start costs both its
price and, when the cheap zone returns, another restart to move there.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

SPOT, ON_DEMAND, QUEUE, WAIT = "spot", "on_demand", "queue", "wait"
# kinds as earlier versions wrote them in a job's meta (``placements``) and events: a batch
# scheduler's queue was spelt after the one scheduler there was
_STORED_KINDS = {"slurm": QUEUE}
_EPS = 1e-9


@dataclass(frozen=True)
class Offer:
    """A place the job could run this tick."""

    where: str                 # zone (spot), region (on-demand) or queue's target name
    kind: str                  # SPOT | ON_DEMAND | QUEUE
    price: float               # $/h for the whole job
    available: bool = True     # spot: capacity now (what ``watch`` learns); others: True
    wait_h: float = 0.0        # QUEUE: expected queue wait before the job starts
    move_usd: float = 0.0      # $ to move the checkpoint here from where it is (egress), once per start
    move_h: float = 0.0        # hours the transfer adds to a start here

    @property
    def guaranteed(self) -> bool:
        return self.kind != SPOT


@dataclass(frozen=True)
class Placement:
    kind: str = WAIT
    where: Optional[str] = None

    def __str__(self) -> str:
        return self.kind if self.where is None else f"{self.kind}:{self.where}"

    @classmethod
    def parse(cls, text: str) -> "Placement":
        """The Placement ``str`` wrote (``kind:where``), a kind an earlier version stored read
        as today's (``slurm:cluster-a`` is ``queue:cluster-a``)."""
        kind, _, where = text.partition(":")
        return cls(stored_kind(kind), where or None)


def stored_kind(kind: str) -> str:
    """A placement's kind as stored by any version: today's spelling."""
    return _STORED_KINDS.get(kind, kind)


NOWHERE = Placement()


@dataclass(frozen=True, slots=True)
class Seen:
    """What one pass over a tick's offers finds (``Situation.seen``; the policy reads it many
    times a tick). ``Seen.of(offers)``."""

    spots: tuple               # the SPOT offers
    up: tuple                  # the SPOT offers available now
    up_at: dict                # where -> the first of ``up`` there
    cheapest_up: float         # the lowest price in ``up`` (inf: none)
    min_wait_h: float          # queue wait of the quickest guaranteed offer (inf: none)
    by_move: bool              # does a spot start somewhere cost a move (egress or transfer time)?

    @classmethod
    def of(cls, offers) -> "Seen":
        spots, up, up_at, waits, by_move = [], [], {}, [], False
        for o in offers:
            if o.kind == SPOT:
                spots.append(o)
                if o.available:
                    up.append(o)
                    up_at.setdefault(o.where, o)
                if o.move_usd or o.move_h:
                    by_move = True
            else:
                waits.append(o.wait_h)
        inf = float("inf")
        return cls(tuple(spots), tuple(up), up_at, min((o.price for o in up), default=inf),
                   min(waits) if waits else inf, by_move)


@dataclass(frozen=True)
class Situation:
    """What the policy is told at one tick."""

    elapsed_h: float           # since the job was submitted
    done_h: float              # work committed (restorable after a restart)
    work_h: float              # total work
    deadline_h: float          # from submission
    overhead_h: float          # one restart: provisioning plus restore
    current: Placement = NOWHERE
    overhead_left_h: float = 0.0   # of the current placement's start (0 once it runs)
    offers: tuple = ()         # Offer, every place known this tick
    tick_h: float = 1 / 6      # the decision holds until the next tick

    # the offers sorted (``Seen.of(offers)``, made here when not given: a caller that asks
    # about the same offers tick after tick may pass it)
    seen: Optional[Seen] = field(default=None, repr=False, compare=False)
    left_h: float = field(init=False, repr=False, compare=False)   # work left (derived)

    def __post_init__(self):
        object.__setattr__(self, "left_h", max(self.work_h - self.done_h, 0.0))
        if self.seen is None:
            object.__setattr__(self, "seen", Seen.of(self.offers))


@dataclass(frozen=True)
class Decision:
    placement: Placement
    reason: str
    numbers: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Params:
    reserve: float = 1.0       # slack kept back, as a fraction of the Uniform Progress line's
    back: float = 2.0          # from on-demand, back to spot only with this many overheads above it
    min_left_h: float = 0.0    # no return to spot with less work than this left
    stay_h: float = 6.0        # multi-region: hours a spot start is expected to last (move test)
    pick: float = float("inf")  # multi-region: a spot zone dearer than this x the cheapest zone's
    #                             price (available or not) is taken only behind the reserve
    move_margin: float = 1.0   # multi-region: a move must save this x what it costs (restart + egress)


SINGLE = Params(reserve=0.8, back=0.0)   # tuned on train windows of the AWS 2022 set (bench/deadline_replay.py)
MULTI = Params(reserve=0.8, back=0.0, pick=1.1)   # tuned on train windows of the H100 and V100 sets


# ---- the guarantee -------------------------------------------------------------------------

def _start_h(s: Situation, o: Offer) -> float:
    """Hours from now until ``o`` makes progress (its overhead, or what is left of it; a new
    start also waits for its queue and for the checkpoint's transfer)."""
    if s.current.kind == o.kind and s.current.where == o.where:
        return s.overhead_left_h
    return s.overhead_h + o.wait_h + o.move_h


def _held(s: Situation, o: Offer) -> bool:
    return s.current.kind == o.kind and s.current.where == o.where


def _move_usd(s: Situation, o: Offer) -> float:
    """Egress a start on ``o`` pays (none for the placement held)."""
    return 0.0 if _held(s, o) else o.move_usd


def can_finish(s: Situation, o: Offer) -> bool:
    """Does the guaranteed offer ``o``, started (or kept) now, finish by the deadline?"""
    return s.elapsed_h + _start_h(s, o) + s.left_h <= s.deadline_h + _EPS


def _fresh_fallback_h(s: Situation) -> float:
    """Overhead plus queue wait of the quickest guaranteed offer started from scratch."""
    return s.overhead_h + s.seen.min_wait_h


def safe(s: Situation, p: Placement) -> bool:
    """The safety net's test: after holding ``p`` for this tick, can a guaranteed offer
    started at the next tick boundary still finish? (Guaranteed placements are safe when
    they finish themselves; spot where none is available is a wait.)"""
    left, g = s.left_h, s.tick_h
    if p.kind in (ON_DEMAND, QUEUE):
        o = next((o for o in s.offers if o.kind == p.kind and o.where == p.where), None)
        return o is not None and can_finish(s, o)
    if p.kind == SPOT and p.where in s.seen.up_at:
        start = s.overhead_left_h if s.current == p else s.overhead_h
        if s.elapsed_h + start + left <= s.elapsed_h + g + _EPS:   # it finishes within the tick
            return s.elapsed_h + start + left <= s.deadline_h + _EPS
        left -= max(g - start, 0.0)
    return s.elapsed_h + g + _fresh_fallback_h(s) + left <= s.deadline_h + _EPS


def fallback(s: Situation) -> Optional[Offer]:
    """The guaranteed offer to finish on: the one held if it finishes and no other finishing
    one is cheaper after paying a restart; else the cheapest that finishes; else (the deadline
    is already lost) the one that finishes soonest."""
    gs = [o for o in s.offers if o.guaranteed]
    if not gs:
        return None
    fits = [o for o in gs if can_finish(s, o)]
    if not fits:
        return min(gs, key=lambda o: (_start_h(s, o), o.price, o.where))
    held = next((o for o in fits if _held(s, o)), None)
    best = min(fits, key=lambda o: (o.price * (_start_h(s, o) + s.left_h) + _move_usd(s, o), o.where))
    if held is not None and held.price * (s.overhead_left_h + s.left_h) <= best.price * (
            _start_h(s, best) + s.left_h) + _move_usd(s, best) + _EPS:
        return held
    return best


def safety_net(s: Situation, d: Decision) -> Decision:
    """Let ``d`` stand if it keeps the deadline reachable on a guaranteed offer, else replace
    it by the guaranteed offer (``fallback``)."""
    if d.placement.kind in (SPOT, WAIT) and safe(s, d.placement):
        return d
    if d.placement.kind in (ON_DEMAND, QUEUE) and safe(s, d.placement):
        return d
    f = fallback(s)
    if f is None:
        return d
    numbers = dict(d.numbers, would=str(d.placement))
    why = "safety net: " + ("only a guaranteed offer still meets the deadline"
                            if can_finish(s, f) else "the deadline cannot be met any more; finishing soonest")
    return Decision(Placement(f.kind, f.where), why, numbers)


# ---- the policy ----------------------------------------------------------------------------

def slack_h(s: Situation) -> float:
    """Slack if the job had to start on a guaranteed offer now (see the module docstring)."""
    return s.deadline_h - s.elapsed_h - _fresh_fallback_h(s) - s.left_h


def reserve_h(s: Situation, params: Params) -> float:
    """Slack to keep back with this much work left. Uniform Progress waits while the job is
    ahead of the line ``done = elapsed x work / deadline``, i.e. while
    ``slack >= left x (deadline - work) / work - overhead``; ``params.reserve`` scales it."""
    line = s.left_h * (s.deadline_h - s.work_h) / s.work_h if s.work_h > 0 else 0.0
    return params.reserve * line - s.overhead_h


def _horizon_h(s: Situation, params: Params) -> float:
    """Hours a spot start is expected to run before it ends (the work left, at most ``stay_h``)."""
    return max(min(s.left_h, params.stay_h), _EPS)


def _spot_rate(s: Situation, o: Offer, params: Params, h: Optional[float] = None) -> float:
    """$/h of a spot start on ``o`` over the hours it is expected to last (``h``, default
    ``_horizon_h``): its price, plus its restart (overhead and transfer, at its price) and its
    egress spread over those hours."""
    if _held(s, o):
        return o.price
    if h is None:
        h = _horizon_h(s, params)
    return o.price * (1.0 + (s.overhead_h + o.move_h) / h) + o.move_usd / h


def _priced_by_move(s: Situation) -> bool:
    """Does a spot start somewhere cost a move (egress or transfer time)? If not, spot zones
    compare by price alone (the rules without egress, unchanged)."""
    return s.seen.by_move


def _best_spot(s: Situation, params: Params) -> Optional[Offer]:
    up = s.seen.up
    if not up:
        return None
    if not _priced_by_move(s):
        return min(up, key=lambda o: (o.price, o.where))
    h = _horizon_h(s, params)
    return min(up, key=lambda o: (_spot_rate(s, o, params, h), o.where))


def _cheapest_spot_price(s: Situation, params: Params) -> float:
    """The cheapest spot rate of every zone known, available now or not (``_spot_rate`` when
    a start somewhere costs a move, else the price)."""
    spots = s.seen.spots
    if not _priced_by_move(s):
        return min((o.price for o in spots), default=float("inf"))
    h = _horizon_h(s, params)
    return min((_spot_rate(s, o, params, h) for o in spots), default=float("inf"))


def _held_spot(s: Situation) -> Optional[Offer]:
    if s.current.kind != SPOT:
        return None
    return s.seen.up_at.get(s.current.where)


def _worth_moving(s: Situation, held: Offer, to: Offer, params: Params) -> bool:
    """Move a running job to cheaper spot when the saving over the hours it may stay there
    pays for the restart (billed at the new price, no progress: the overhead and the
    checkpoint's transfer) and the checkpoint's egress. The transfer's time also shortens
    the hours the saving is made over."""
    hours = min(s.left_h, params.stay_h)
    move = to.price * (s.overhead_h + to.move_h) + to.move_usd
    return (held.price - to.price) * hours > move * params.move_margin + _EPS


def decide(s: Situation, params: Params = SINGLE) -> Decision:
    """One tick's placement, with its reason and the numbers behind it (safety net applied)."""
    if s.left_h <= _EPS:
        return Decision(NOWHERE, "done", {})
    slack, reserve = slack_h(s), reserve_h(s, params)
    nums = {"elapsed_h": round(s.elapsed_h, 4), "left_h": round(s.left_h, 4),
            "slack_h": round(slack, 4), "reserve_h": round(reserve, 4)}
    held = _held_spot(s)
    if held is not None:
        # only a zone priced below the held one can be moved to: the best is looked for then
        best = _best_spot(s, params) if s.seen.cheapest_up < held.price else None
        if best is not None and best.price < held.price and _worth_moving(s, held, best, params):
            d = Decision(Placement(SPOT, best.where), f"moving to cheaper spot {best.where} "
                         f"(${best.price:.4g}/h, from ${held.price:.4g}/h)", nums)
            if safe(s, d.placement):
                return d
        return safety_net(s, Decision(s.current, "riding spot", nums))
    best = _best_spot(s, params)
    if s.current.kind in (ON_DEMAND, QUEUE):
        # the slack a return to spot would leave: this restart, and the next one back
        held_slack = s.deadline_h - s.elapsed_h - s.overhead_left_h - s.left_h - 2 * s.overhead_h
        nums["held_slack_h"] = round(held_slack, 4)
        held_offer = next((o for o in s.offers if o.kind == s.current.kind and o.where == s.current.where), None)
        # back to spot only where it is cheaper by more than the restart costs (a free
        # queue or a cheap on-demand region is kept: leaving it spends slack and money)
        cheaper = best is not None and (held_offer is None or _worth_moving(s, held_offer, best, params))
        if (cheaper and held_slack >= reserve + params.back * s.overhead_h
                and s.left_h > params.min_left_h):
            return safety_net(s, Decision(Placement(SPOT, best.where),
                                          "ahead of the reserve: back to spot", nums))
        f = fallback(s)
        stay = Decision(Placement(f.kind, f.where) if f else s.current,
                        "spot gone" if best is None else "behind the reserve: staying on it", nums)
        return safety_net(s, stay)
    if best is not None:
        ref = _cheapest_spot_price(s, params)
        rate = _spot_rate(s, best, params) if _priced_by_move(s) else best.price
        if rate > params.pick * ref + _EPS and slack - s.tick_h >= reserve:
            nums["cheapest_spot"] = round(ref, 4)
            return safety_net(s, Decision(NOWHERE, f"waiting for cheaper spot (best up ${best.price:.4g}/h, "
                                          f"cheapest zone ${ref:.4g}/h; slack above the reserve)", nums))
        return safety_net(s, Decision(Placement(SPOT, best.where), "spot available", nums))
    if slack - s.tick_h >= reserve:
        return safety_net(s, Decision(NOWHERE, "no spot; waiting (slack above the reserve)", nums))
    f = fallback(s)
    if f is None:
        return Decision(NOWHERE, "no spot and no guaranteed offer", nums)
    return safety_net(s, Decision(Placement(f.kind, f.where), "no spot; behind the reserve", nums))


def decide_single(s: Situation, params: Params = SINGLE) -> Decision:
    """The single-region form: ``s.offers`` are one zone's spot and its on-demand."""
    return decide(s, params)


def decide_multi(s: Situation, params: Params = MULTI) -> Decision:
    """The multi-region form: spot in many zones, each with its price; on-demand and queues
    (Slurm targets) as fallbacks."""
    return decide(s, params)


# ---- at launch -----------------------------------------------------------------------------

def refusal(work_h: float, deadline_h: float, overhead_h: float, offers) -> Optional[str]:
    """Why a job of ``work_h`` hours cannot meet a deadline ``deadline_h`` hours away even on
    the quickest guaranteed offer (on-demand, a queue: its overhead, queue wait and the
    work), with the numbers; None when one can. Spot alone guarantees nothing, so a spec
    whose targets have no guaranteed offer is refused too."""
    gs = [o for o in offers if o.guaranteed]
    if not gs:
        if not offers:
            return "no target of the spec has a priced offer (spot, on-demand or a scheduler's queue)"
        return (f"the spec's targets offer only spot, which can be taken away at any time, and no "
                f"on-demand or scheduler's queue to finish on: nothing guarantees the deadline ({deadline_h:.3g} h "
                f"away, {work_h:.3g} h of work)")
    best = min(gs, key=lambda o: (o.wait_h, o.price, o.where))
    need = overhead_h + best.wait_h + work_h
    if need <= deadline_h + _EPS:
        return None
    wait = f" + {best.wait_h:.3g} h queue wait" if best.wait_h else ""
    return (f"the deadline is {deadline_h:.3g} h away, but even {best.kind.replace('_', '-')} on {best.where} "
            f"needs {need:.3g} h ({work_h:.3g} h of work + {overhead_h:.3g} h restart overhead{wait}), "
            f"{need - deadline_h:.3g} h too many")


def on_this_machine(work_h: float, deadline_h: float, overhead_h: float) -> Optional[str]:
    """Why a job of ``work_h`` hours cannot meet a deadline ``deadline_h`` hours away on this
    machine (a ``local`` target: never preempted, no spot, so the guaranteed offer itself):
    its start (``overhead_h``) and its work, with the numbers; None when they fit."""
    need = overhead_h + work_h
    if need <= deadline_h + _EPS:
        return None
    return (f"the deadline is {deadline_h:.3g} h away, but this machine needs {need:.3g} h "
            f"({work_h:.3g} h of work + {overhead_h:.3g} h to start), {need - deadline_h:.3g} h too many")


def offer_of(o, nodes: int = 1, available: bool = True) -> Optional[Offer]:
    """The policy's Offer for a planner offer (``launcher.plan.offers.Offer``): spot per target and
    region, on-demand, a scheduler's queue (an offer of kind "queue": a Slurm target) with its queue wait; None for a local one.
    ``where`` is ``target/region`` (the target alone when it has no region)."""
    if o.this_machine:
        return None
    kind = SPOT if o.spot else (QUEUE if o.kind == "queue" else ON_DEMAND)
    where = f"{o.target}/{o.region}" if o.region else o.target
    return Offer(where, kind, o.hourly_usd * nodes, available=available,
                 wait_h=o.queue_wait_hours if kind == QUEUE else 0.0)
