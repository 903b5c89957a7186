"""Rank offers for a spec by expected total cost: ``rank(spec, offers, params) -> PlanResult``.

Per offer (all times in hours, prices per node-instance):

* work ``W``: ``params.work_hours``, else the spec's ``resources.time_limit`` (the spec has
  no separate work estimate; the time limit is what the user expects one uninterrupted
  run to need at most, so it is the conservative estimate), else ``params.default_work_hours``;
* interruption rate of the gang ``lam = nodes x offer.preemption_rate``;
* checkpoint cost ``C`` (``params.checkpoint_cost_hours``, 5 min by default), restart
  overhead ``D`` as the offer's backend declares it (``Offer.restart_hours``: re-provision,
  restart, load; ``params.restart_hours`` overrides it per backend);
* notice: a fraction ``p = params.notice_delivery`` of interruptions is survived with an
  emergency checkpoint when the spec checkpoints on a signal and the offer's notice
  covers the emergency checkpoint's cost (``Ce``, default ``C``); otherwise ``p = 0``;
* interval: the spec's ``checkpoint.interval`` if it fixes one, else the optimum of the
  exact goodput (``launcher.plan.model``);
* expected run (billed) ``R = W / G(interval)``; expected completion ``queue wait + R``;
* expected cost ``= offer.hourly_usd x nodes x R``. Queue wait is not billed (a pending
  Slurm job costs nothing); restart downtime is (the new instance is up while it restores).

Budgets filter before ranking, each exclusion with its reason: ``cost.max_hourly_usd``
(against $/h x nodes), ``cost.max_total_usd`` (against the expected total) and
``cost.deadline`` (against the expected completion time).

With ``cost.deadline``, every ranked row also carries its ``Outlook``
(``launcher.plan.outlook``): the slack, the cost's spread and the probability of meeting the
deadline on that offer, from the same model; ``PlanResult.deadline`` names the guaranteed
offer the deadline policy keeps reachable (``deadline_summary``).
"""

from __future__ import annotations

import math
import time
from datetime import datetime
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Iterable, Mapping, Optional

from launcher.backend.support import offer_filter
from launcher.plan.model import INF, RunEstimate, expected_run
from launcher.plan.offers import Offer, make_matcher
from launcher.plan.outlook import Outlook, outlook, run_law, run_sd
from launcher.spec.units import format_hours

@dataclass(frozen=True)
class PlanParams:
    work_hours: Optional[float] = None            # overrides the spec's estimate (time_limit)
    default_work_hours: float = 1.0               # when the spec has no time_limit
    checkpoint_cost_hours: float = 5 / 60         # C
    emergency_checkpoint_hours: Optional[float] = None  # Ce; None: same as C
    notice_delivery: float = 0.9                  # of notices, the fraction that arrives in time
    # by backend name: overrides the restart overhead its offers carry (Offer.restart_hours)
    restart_hours: Mapping[str, float] = field(default_factory=dict)
    interval_hours: Optional[float] = None        # fixed checkpoint interval; None: spec's or optimum
    # Re-planning a running job (recovery, burst): what earlier attempts already used up.
    # Pass the work still to do as ``work_hours``; budgets apply to what is left.
    spent_usd: float = 0.0                        # charged against cost.max_total_usd
    elapsed_hours: float = 0.0                    # charged against cost.deadline

    def restart_for(self, offer: Offer) -> float:
        return float(self.restart_hours.get(offer.backend, offer.restart_hours))


@dataclass(frozen=True, slots=True)
class _Context:
    """What a row's explanation is relative to (shared by all rows of one plan)."""

    work: float
    checkpoint: float
    best_hourly: float
    best_total: float


@dataclass(frozen=True, slots=True)
class PlanRow:
    offer: Offer
    rank: Optional[int]            # 1 = best; None when excluded
    excluded: Optional[str]        # why it cannot be used, None when ranked
    job_hourly_usd: float          # offer.hourly_usd x nodes
    interval_hours: float          # checkpoint every this much work (INF: none needed)
    queue_hours: float
    run_hours: float               # expected billed wall time
    expected_hours: float          # queue + run: expected completion
    total_usd: float
    interruptions: float
    goodput: float
    notice_fraction: float
    job_rate: float                # interruptions per hour of the whole job (nodes x offer rate)
    context: Optional[_Context] = None
    outlook: Optional[Outlook] = None   # under cost.deadline: slack, cost spread, P(meet)

    @property
    def why(self) -> str:
        """Why this row sits where it does (computed when shown: ranking 10k offers stays cheap)."""
        return "" if self.context is None else _explain(self, self.context)

    def placement(self) -> dict:
        """``Offer.placement()`` plus the job's $/h: a SkyPilot backend candidate, best first."""
        return {**self.offer.placement(), "hourly_usd": round(self.job_hourly_usd, 6)}

    def to_json(self) -> dict:
        def num(x, nd=6):
            return None if x is None or math.isinf(x) or math.isnan(x) else round(x, nd)

        o = self.offer
        return {
            "rank": self.rank, "target": o.target, "backend": o.backend, "cloud": o.cloud,
            "region": o.region, "zone": o.zone, "instance_type": o.instance_type,
            "accelerator": o.accelerator, "accelerator_count": o.accelerator_count, "spot": o.spot,
            "kind": o.capacity, "hourly_usd_per_node": num(o.hourly_usd), "job_hourly_usd": num(self.job_hourly_usd),
            "preemption_rate_per_node_hour": num(o.preemption_rate), "notice_seconds": num(o.notice_seconds),
            "queue_hours": num(self.queue_hours), "run_hours": num(self.run_hours),
            "expected_hours": num(self.expected_hours), "expected_total_usd": num(self.total_usd, 4),
            "checkpoint_interval_hours": num(self.interval_hours),
            "expected_interruptions": num(self.interruptions), "job_interruptions_per_hour": num(self.job_rate),
            "goodput": num(self.goodput),
            "notice_fraction_used": num(self.notice_fraction), "excluded": self.excluded,
            "why": self.why, "source": o.source,
            "rate_source": o.rate_source, "rate_evidence": self.rate_evidence(),
            "deadline": self.outlook.to_json() if self.outlook is not None else None,
        }

    def rate_evidence(self) -> Optional[dict]:
        """What an observed rate rests on (decayed by age), or None for catalog/prior rates."""
        o = self.offer
        if o.rate_source != "observed" and not o.capacity_failures:
            return None
        return {"interruptions": round(o.rate_events, 3), "node_hours": round(o.rate_node_hours, 3),
                "capacity_failures": round(o.capacity_failures, 3), "launches": round(o.launch_tries, 3)}


@dataclass(frozen=True)
class PlanResult:
    spec_name: str
    rows: tuple                    # ranked rows in rank order, then the excluded ones
    assumptions: dict
    notes: tuple = ()              # target-level problems ("no catalog for ...") and assumptions
    deadline: Optional[dict] = None  # under cost.deadline: hours left, the fallback, egress unknown

    @property
    def ranked(self) -> list[PlanRow]:
        return [r for r in self.rows if r.rank is not None]

    @property
    def excluded(self) -> list[PlanRow]:
        return [r for r in self.rows if r.rank is None]

    @property
    def best(self) -> Optional[PlanRow]:
        for r in self.rows:
            if r.rank is not None:
                return r
        return None

    def candidates(self) -> list[Offer]:
        """Usable offers, best first: the order a backend should try them in."""
        return [r.offer for r in self.ranked]

    def with_notes(self, notes: Iterable[str]) -> "PlanResult":
        return replace(self, notes=tuple(notes) + self.notes)

    def with_egress_unknown(self, pairs: list) -> "PlanResult":
        """The cloud/region pairs whose egress price the backends do not know (priced at the
        cloud's highest rate), in ``deadline``."""
        if self.deadline is None:
            return self
        return replace(self, deadline={**self.deadline, "egress_unknown": list(pairs)})

    def to_json(self) -> dict:
        return {"spec": self.spec_name, "assumptions": self.assumptions, "notes": list(self.notes),
                "deadline": self.deadline, "rows": [r.to_json() for r in self.rows]}


def params_for(spec, work_hours: Optional[float] = None, checkpoint_cost_hours: Optional[float] = None,
               **kw) -> PlanParams:
    """PlanParams for a spec: explicit values win, then the spec's checkpoint.cost."""
    if checkpoint_cost_hours is None and spec.checkpoint.cost:
        checkpoint_cost_hours = spec.checkpoint.cost / 3600.0
    if checkpoint_cost_hours is not None:
        kw["checkpoint_cost_hours"] = checkpoint_cost_hours
    return PlanParams(work_hours=work_hours, **kw)


def work_estimate(spec, params: PlanParams) -> tuple[float, str]:
    if params.work_hours is not None:
        return params.work_hours, "given"
    if spec.resources.expected_runtime:
        return spec.resources.expected_runtime / 3600.0, "resources.expected_runtime"
    tl = spec.resources.time_limit
    if tl:
        return tl / 3600.0, "resources.time_limit"
    return params.default_work_hours, "default (the spec has no resources.time_limit)"


@lru_cache(maxsize=65536)
def _estimate(work, C, lam, D, p, Ce, interval) -> RunEstimate:
    return expected_run(work, C, lam, D, p, Ce, interval)


@dataclass(frozen=True, slots=True)
class _Model:
    """The model inputs shared by every offer of one plan."""

    work: float
    C: float                       # checkpoint cost, hours
    Ce: float                      # emergency checkpoint cost, hours
    interval: Optional[float]      # fixed checkpoint interval, hours (None: the model picks it)
    p_deliver: float
    use_notice: bool

    def estimate(self, o: Offer, lam: float, D: float) -> RunEstimate:
        p = self.p_deliver if self.use_notice and o.notice_seconds >= self.Ce * 3600.0 and lam > 0 else 0.0
        return _estimate(self.work, self.C, lam, D, p, self.Ce, self.interval)


@dataclass(frozen=True, slots=True)
class _Budget:
    """What is left of spec.cost after what was already spent and elapsed (None: no limit)."""

    max_hourly: Optional[float]
    max_total: Optional[float]
    deadline: Optional[float]      # hours from now

    def exceeded(self, run: float, job_hourly: float, total: float, done: float) -> bool:
        return run == INF or (self.max_hourly is not None and job_hourly > self.max_hourly + 1e-9) or \
            (self.max_total is not None and total > self.max_total + 1e-9) or \
            (self.deadline is not None and done > self.deadline + 1e-9)


def _model(spec, params: PlanParams) -> tuple[_Model, str]:
    work, work_src = work_estimate(spec, params)
    C = params.checkpoint_cost_hours
    Ce = params.emergency_checkpoint_hours if params.emergency_checkpoint_hours is not None else C
    interval = params.interval_hours
    if interval is None and spec.checkpoint.interval:
        interval = spec.checkpoint.interval / 3600.0
    return _Model(work, C, Ce, interval, params.notice_delivery, bool(spec.recovery.checkpoint_on_signal)), work_src


def _budget(spec, params: PlanParams) -> _Budget:
    cost = spec.cost
    max_total = cost.max_total_usd - params.spent_usd if cost.max_total_usd is not None else None
    deadline = None
    if isinstance(cost.deadline, datetime):  # absolute: what is left of it from now
        deadline = (cost.deadline.timestamp() - time.time()) / 3600.0
    elif cost.deadline:
        deadline = cost.deadline / 3600.0 - params.elapsed_hours
    return _Budget(cost.max_hourly_usd, max_total, deadline)


def rank(spec, offers: Iterable[Offer], params: Optional[PlanParams] = None) -> PlanResult:
    """Expected cost of every offer for ``spec``, budgets applied, best first. Pure."""
    params = params or PlanParams()
    nodes = spec.resources.nodes
    m, work_src = _model(spec, params)
    budget = _budget(spec, params)
    restart = {}

    fits = make_matcher(spec.resources)
    cannot = offer_filter(spec)  # a target that cannot honour the spec: the words `launcher validate` uses
    ok: list[tuple] = []
    bad: list[PlanRow] = []
    for i, o in enumerate(offers):
        mismatch = cannot(o) or fits(o)
        job_hourly = o.hourly_usd * nodes
        lam = o.preemption_rate * nodes
        if mismatch:
            bad.append(PlanRow(o, None, mismatch, job_hourly, INF, o.queue_wait_hours, INF, INF, INF,
                               0.0, 0.0, 0.0, lam))
            continue
        D = params.restart_for(o)
        restart.setdefault(o.backend, D)
        est = m.estimate(o, lam, D)
        run = est.run_hours
        total = job_hourly * run if run != INF else INF
        done = o.queue_wait_hours + run
        if budget.exceeded(run, job_hourly, total, done):
            why = _budget_reasons(run, lam, m.C, nodes, job_hourly, total, done,
                                  budget.max_hourly, budget.max_total, budget.deadline)
            bad.append(PlanRow(o, None, why, job_hourly, est.interval_hours, o.queue_wait_hours, run, done,
                               total, est.interruptions, est.goodput, est.notice_fraction, lam))
            continue
        view = None
        if budget.deadline is not None:
            view = deadline_outlook(m, budget.deadline, D, o.queue_wait_hours, est, lam, job_hourly)
        ok.append((total, done, job_hourly, i, o, est, lam, view))
    ranked = _ranked_rows(ok, m)
    summary = deadline_summary(ranked, budget.deadline) if budget.deadline is not None else None
    return PlanResult(spec.name, tuple(ranked) + tuple(bad), _assumptions(nodes, m, work_src, restart, params),
                      deadline=summary)


def deadline_outlook(m: _Model, hours_left: float, D: float, queue_h: float, est: RunEstimate, lam: float,
                     job_hourly: float) -> Outlook:
    """A row's Outlook: the first start (``D``), the queue wait, and the run's law under the
    same model as its expected cost (``launcher.plan.outlook``)."""
    sd = run_sd(m.work, est.interval_hours, m.C, lam, D, est.notice_fraction, m.Ce)
    law = run_law(m.work, est.interval_hours, m.C, lam, D, est.notice_fraction, m.Ce, est.run_hours, sd,
                  est.interruptions)
    return outlook(hours_left, D, queue_h, law, est.run_hours, sd, job_hourly)


def deadline_summary(ranked: list, hours_left: float) -> dict:
    """What ``launcher plan`` says of the deadline as a whole: the hours left, the guaranteed
    row (not spot, not this machine) the policy would finish on: the cheapest whose slack is
    not negative, else the one with the most slack (``launcher.plan.deadline.fallback`` chooses
    the same way live), and the ranked rows of this machine (a launch there runs as the
    guaranteed offer and is not moved: ``launcher.launching.launch.check_deadline``)."""
    gs = [r for r in ranked if not r.offer.spot and not r.offer.this_machine and r.outlook is not None]
    fits = [r for r in gs if r.outlook.slack_h >= -1e-9]
    pick = min(fits, key=lambda r: r.total_usd) if fits else max(gs, key=lambda r: r.outlook.slack_h, default=None)
    fallback = None
    if pick is not None:
        o = pick.offer
        fallback = {"rank": pick.rank, "target": o.target, "where": o.where, "kind": o.capacity,
                    "slack_hours": round(pick.outlook.slack_h, 6), "p_meet": round(pick.outlook.p_meet, 6)}
    here = [{"rank": r.rank, "target": r.offer.target} for r in ranked if r.offer.this_machine]
    return {"hours_left": round(hours_left, 6), "fallback": fallback, "egress_unknown": [], "this_machine": here}


def _ranked_rows(ok: list[tuple], m: _Model) -> list[PlanRow]:
    """The usable offers as rows numbered from 1, cheapest first."""
    ok.sort(key=lambda t: t[:4])  # ties keep the offers' order (catalog order: deterministic)
    ranked = []
    if ok:
        ctx = _Context(m.work, m.C, ok[0][2], ok[0][0])
        for n, (total, done, job_hourly, _, o, est, lam, view) in enumerate(ok, 1):
            ranked.append(PlanRow(o, n, None, job_hourly, est.interval_hours, o.queue_wait_hours, est.run_hours,
                                  done, total, est.interruptions, est.goodput, est.notice_fraction, lam, ctx,
                                  view))
    return ranked


def _assumptions(nodes: int, m: _Model, work_src: str, restart: dict, params: PlanParams) -> dict:
    return {
        "nodes": nodes, "work_hours": m.work, "work_source": work_src,
        "checkpoint_cost_hours": m.C, "emergency_checkpoint_hours": m.Ce,
        "restart_hours": restart, "notice_delivery": m.p_deliver,
        "checkpoint_on_signal": m.use_notice, "fixed_interval_hours": m.interval,
        "spent_usd": params.spent_usd, "elapsed_hours": params.elapsed_hours,
        "prices": "per node-instance-hour; job $/h = price x nodes",
        "preemption_rates": "per node-hour; the job is interrupted at nodes x rate",
    }


def _budget_reasons(run, lam, C, nodes, job_hourly, total, done, max_hourly, max_total, deadline) -> str:
    reasons = []
    if math.isinf(run):
        reasons.append(f"never finishes: interrupted every {format_hours(1 / lam)} with {format_hours(C)} checkpoints")
    if max_hourly is not None and job_hourly > max_hourly + 1e-9:
        reasons.append(f"${job_hourly:.2f}/h for {nodes} node(s) is over cost.max_hourly_usd ${max_hourly:g}")
    if max_total is not None and total > max_total + 1e-9 and not math.isinf(run):
        reasons.append(f"expected ${total:.2f} is over what is left of cost.max_total_usd (${max_total:.2f})")
    if deadline is not None and deadline <= 0:
        reasons.append(f"cost.deadline has passed ({format_hours(-deadline)} ago): give a later one, or leave it out")
    elif deadline is not None and done > deadline + 1e-9 and not math.isinf(run):
        reasons.append(f"expected to finish in {format_hours(done)}, after what is left of cost.deadline "
                       f"({format_hours(max(deadline, 0.0))})")
    return "; ".join(reasons)


def _explain(r: PlanRow, ctx: _Context) -> str:
    o, work, C = r.offer, ctx.work, ctx.checkpoint
    bits = []
    if r.interruptions >= 0.05:
        extra = (r.run_hours / work - 1.0) * 100 if work > 0 else 0.0
        bits.append(f"~{r.interruptions:.1f} interruptions (one every {format_hours(1 / r.job_rate)}): "
                    f"+{extra:.0f}% time")
    elif not math.isinf(r.interval_hours) and r.run_hours > work * 1.005:
        bits.append(f"checkpoints: +{(r.run_hours / work - 1) * 100:.1f}% time")
    if o.spot and o.preemption_rate > 0:
        if r.notice_fraction > 0:
            bits.append(f"{o.notice_seconds:g}s notice saves work")
        elif o.notice_seconds > 0:
            bits.append(f"{o.notice_seconds:g}s notice < {C * 60:g} min checkpoint")
    if r.queue_hours > 0:
        bits.append(f"queue ~{format_hours(r.queue_hours)}")
    if r.rank and r.rank > 1 and r.job_hourly_usd < ctx.best_hourly - 1e-9:
        bits.append(f"cheaper per hour than #1 but ${r.total_usd - ctx.best_total:.2f} more in total")
    return "; ".join(bits)
