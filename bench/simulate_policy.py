"""Trace-driven comparison of placement policies for a checkpointed job on spot capacity.

    .venv/bin/python bench/simulate_policy.py [--seeds 40] [--show 8] [--work 24] [--nodes 2] [--jobs 8]

The world (``bench/simulate_world.py``): 8 spot zones whose interruption hazard switches
between calm and storm regimes, capacity crunches that refuse launches, wandering prices;
``calm`` and ``heavy`` (preemption-heavy) trace kinds. Every policy meets the same traces.
``bench/replay_spot_traces.py`` runs this loop and these policies over real availability
traces instead (``bench/trace_world.py``).

Policies (each decides at the start and after every interruption; a launch walks the
policy's candidate list, best first, past zones that refuse it, as SkyPilot's provisioner
does inside one launch):

* ``launcher``: what ``launcher watch`` and the planner do. Every ended attempt is recorded
  in a real state store through ``launcher.plan.observed`` (``observation_of`` + ``record``,
  the code path watch uses), and the candidates are ``launcher.plan.rank`` over every offer
  at the current prices with the rates ``observed.load`` + ``apply_observations`` give
  (priors: 0.1/h spot, 2e-4/h on-demand; long and short memory, ``launcher.plan.chase``).
  The region that just preempted the job (or refused a whole launch) cools down for
  ``recovery.placement_cooldown`` (30 min, the default), as watch does.
* ``launcher, placement_cooldown 0``: the same with the cool-down switched off in the spec.
* ``launcher, plan's interval``: the same, checkpointing at the interval the plan computes
  for the rate it believes. The product does not hand that interval to the job today, so
  this row shows what doing so would add; every other row checkpoints at one fixed interval.
* ``EAGER_NEXT_REGION``: SkyPilot's managed-job default recovery
  (``EagerFailoverStrategyExecutor``): offers by price; the recovery launch after a
  preemption puts the whole region it was preempted in last (SkyPilot blocks it and falls
  back to no block when nothing else launches); no memory of earlier preemptions.
* ``cheapest-first (same zone)``: by price every time (SkyPilot's FAILOVER recovery).
* ``on-demand-only``: on-demand offers by price.
* ``clairvoyant``: a reference nobody can run: ranks with every zone's true current rate.

Checkpoint interval: one fixed interval for every policy, the model's optimum for the spot
prior (0.1/h per node) and the job's size, as a careful user would set ``checkpoint.interval``;
the launcher's plan is told it (the spec's ``checkpoint.interval``) and ranks with it.

Two scenarios: one job with an empty state store, and ``--jobs`` jobs run back to back on
the same trace (a sweep, one element at a time) sharing one store. Baselines keep no memory.

The target (issue 13): >= 20% cheaper than EAGER_NEXT_REGION on heavy traces, never more
than 1% worse on calm traces."""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from launcher.plan import Offer, PlanParams, apply_observations, rank  # noqa: E402
from launcher.plan.model import expected_run  # noqa: E402
from launcher.plan.observed import load, observation_of, record  # noqa: E402
from launcher.backend.sections import parse_spec  # noqa: E402
from launcher.state.store import StateStore  # noqa: E402
from simulate_report import BASELINE, LAUNCHER, per_seed, report, summary  # noqa: E402
from simulate_world import (C, D, ON_DEMAND, PRIOR_OD, PRIOR_SPOT, REFUSED,  # noqa: E402
                            TRACE_KINDS, SimOffer, Trace, make_trace, market, true_rate)

COOLDOWN = 0.5      # recovery.placement_cooldown default (1800 s), hours
EPOCH = 1.7e9       # simulated hour 0 as a Unix time (state store timestamps)


def user_interval(nodes: int, work: float) -> float:
    """The checkpoint interval every policy uses: the model's optimum at the spot prior."""
    return expected_run(work, C, PRIOR_SPOT * nodes, D).interval_hours


def prior(o: SimOffer) -> float:
    return PRIOR_SPOT if o.spot else PRIOR_OD


def by_price(tr: Trace, idx, t: float) -> list[int]:
    return sorted(idx, key=lambda k: (tr.price_at(k, t), k))


class Policy:
    name = ""
    tau = 1.0  # checkpoint interval, hours (set by compare)

    def reset(self):
        """A new trace: forget everything (the launcher: a new, empty state store)."""

    def observe(self, offer: SimOffer, node_hours: float, interrupted: bool, t: float):
        """An attempt on OFFER ended at hour T (what `launcher watch` sees)."""

    def refused(self, offer: SimOffer, t: float):
        """A whole launch was refused (every candidate full); OFFER was the first one."""

    def passed(self, offer: SimOffer, t: float):
        """OFFER refused the launch at T, which went on to the next candidate (SkyPilot's
        provisioner does that inside one launch and reports none of it today)."""

    def choose(self, tr, offers, t, remaining, last, preempted) -> tuple[list[int], float]:
        """Candidates best first, and the checkpoint interval."""
        raise NotImplementedError


def sim_key(o: SimOffer) -> tuple:
    return (o.cloud, o.region, o.zone, o.instance_type, o.spot)


def offers_at(tr: Trace, offers, t: float, rate=None) -> list[Offer]:
    return [Offer(backend="skypilot", target=o.name, cloud=o.cloud, region=o.region, zone=o.zone,
                  instance_type=o.instance_type, accelerator=o.accelerator, accelerator_count=o.gpus, vcpus=None,
                  memory_gib=None, spot=o.spot, hourly_usd=tr.price_at(i, t),
                  preemption_rate=(rate or (lambda i, o: prior(o)))(i, o)) for i, o in enumerate(offers)]


class Launcher(Policy):
    """What `launcher watch` + the planner do (see the module doc)."""

    def __init__(self, nodes, cooldown_hours=COOLDOWN, plan_interval=False, name=LAUNCHER, every_refusal=False):
        self.nodes, self.cooldown, self.plan_interval, self.name = nodes, cooldown_hours, plan_interval, name
        self.every_refusal = every_refusal  # told of each refused candidate, not only of a whole refused launch
        self._dir = self.store = None
        self.blocked: dict = {}
        self._spec = None

    def spec(self, o: SimOffer):
        """The job's spec (on O's accelerator): the fixed checkpoint interval unless the plan picks it."""
        if self._spec is None:
            ck = {} if self.plan_interval else {"checkpoint": {"interval": f"{round(self.tau * 3600)}s"}}
            self._spec = parse_spec({"name": "sim", "run": "true", **ck, "resources": {
                "nodes": self.nodes, "gpus_per_node": o.gpus, "accelerator": o.accelerator}})
        return self._spec

    def reset(self):
        self.close()
        self._dir = tempfile.TemporaryDirectory(prefix="simulate-policy-")
        self.store = StateStore(Path(self._dir.name))
        self.blocked = {}

    def close(self):
        if self.store is not None:
            self.store.close()
            self._dir.cleanup()
            self.store = self._dir = None

    def observe(self, offer, node_hours, interrupted, t):
        seen = observation_of(sim_key(offer), "PREEMPTED" if interrupted else "COMPLETED",
                              EPOCH + (t - node_hours / self.nodes) * 3600, EPOCH + t * 3600, self.nodes,
                              EPOCH + t * 3600)
        if seen is not None:
            record(self.store, seen.key, seen.node_hours, seen.events, seen.kind, seen.ts)
        if interrupted:
            self._cool(offer, t)

    def refused(self, offer, t):
        if not self.every_refusal:
            record(self.store, sim_key(offer), 0.0, 0, "no_capacity", EPOCH + t * 3600)
        self._cool(offer, t)

    def passed(self, offer, t):
        if self.every_refusal:
            record(self.store, sim_key(offer), 0.0, 0, "no_capacity", EPOCH + t * 3600)

    def _cool(self, offer, t):
        if self.cooldown > 0:
            self.blocked[(offer.cloud, offer.region)] = t + self.cooldown

    def candidates(self, tr, offers, t) -> list[Offer]:
        return apply_observations(offers_at(tr, offers, t), load(self.store, EPOCH + t * 3600))

    def choose(self, tr, offers, t, remaining, last, preempted):
        cands = self.candidates(tr, offers, t)
        open_ = [c for c, o in zip(cands, offers) if self.blocked.get((o.cloud, o.region), -1) <= t]
        params = PlanParams(work_hours=remaining, checkpoint_cost_hours=tr.C, restart_hours={"skypilot": tr.D})
        ranked = rank(self.spec(offers[0]), open_ or cands, params).ranked
        names = [o.name for o in offers]
        tau = ranked[0].interval_hours
        return [names.index(r.offer.target) for r in ranked], (remaining if math.isinf(tau) else tau)


class Clairvoyant(Launcher):
    """Reference, not a policy anyone can run: ranks with each zone's true current rate
    (it sees which regime every zone is in), so it bounds what learning rates can buy."""

    def __init__(self, nodes):
        super().__init__(nodes, cooldown_hours=0.0, name="clairvoyant (knows current rates)")

    def observe(self, offer, node_hours, interrupted, t):
        pass

    def refused(self, offer, t):
        pass

    def candidates(self, tr, offers, t):
        return offers_at(tr, offers, t, lambda i, o: true_rate(tr, i, t))


class EagerNextRegion(Policy):
    """SkyPilot's managed-job default recovery, EAGER_NEXT_REGION
    (sky/jobs/recovery_strategy.py, EagerFailoverStrategyExecutor): the optimizer takes the
    cheapest offer; after a preemption the recovery launch blocks the region it was preempted
    in (every zone of it) and takes the cheapest of the rest, falling back to no block when
    nothing else launches; the launch after that is unblocked again. No memory."""

    name = BASELINE

    def choose(self, tr, offers, t, remaining, last, preempted):
        blocked = (offers[last].cloud, offers[last].region) if (preempted and last is not None) else None
        rest = [i for i, o in enumerate(offers) if (o.cloud, o.region) != blocked]
        return by_price(tr, rest, t) + by_price(tr, [i for i in range(len(offers)) if i not in rest], t), self.tau


class CheapestFirst(Policy):
    """SkyPilot's FAILOVER recovery: relaunch the cheapest, wherever it was preempted."""

    name = "cheapest-first (same zone)"

    def choose(self, tr, offers, t, remaining, last, preempted):
        return by_price(tr, range(len(offers)), t), self.tau


class OnDemandOnly(Policy):
    name = "on-demand-only"

    def choose(self, tr, offers, t, remaining, last, preempted):
        return by_price(tr, [k for k, o in enumerate(offers) if not o.spot], t), self.tau


def launch(policy, tr, offers, t, order) -> tuple[int | None, float]:
    """Walk the candidates past full zones: (the zone that launched or None, the time).
    No candidates: the policy waits (a refused launch's time) and decides again."""
    if not order:
        return None, t + tr.refused_hours
    for k in order:
        if tr.has_capacity(k, t):
            return k, t
        policy.passed(offers[k], t)
        t += tr.refused_hours
    policy.refused(offers[order[0]], t)
    return None, t


def run(policy: Policy, tr: Trace, offers: list[SimOffer], work: float, nodes: int, t0: float = 0.0) -> dict:
    """One job of WORK hours submitted at hour T0; the policy keeps what it learned before."""
    t, committed, cost = t0, 0.0, 0.0
    last, preempted, restarts = None, False, 0
    while committed < work - 1e-9:
        if t > tr.horizon:
            return {"cost": math.inf, "hours": math.inf, "restarts": restarts, "end": t}
        order, tau = policy.choose(tr, offers, t, work - committed, last, preempted)
        i, t = launch(policy, tr, offers, t, order)
        if i is None:
            continue
        start, interrupted = t, False
        up = t + tr.D                       # restart: billed, no progress, can be interrupted too
        if tr.next_event(i, t) < up:
            t, interrupted = tr.next_event(i, t), True
        else:
            t = up
            while committed < work - 1e-9:
                seg = min(tau, work - committed)
                end = t + seg + tr.C
                e = tr.next_event(i, t)
                if e < end:
                    t, interrupted = e, True
                    break
                t, committed = end, committed + seg
        cost += nodes * tr.cost_between(i, start, t)
        policy.observe(offers[i], nodes * (t - start), interrupted, t)
        last, preempted = i, interrupted
        restarts += interrupted
    return {"cost": cost, "hours": t - t0, "restarts": restarts, "end": t}


def run_stream(policy: Policy, tr: Trace, offers, work: float, nodes: int, jobs: int) -> dict:
    """JOBS jobs back to back (a sweep run one element at a time), one memory for all."""
    policy.reset()
    t, total = 0.0, {"cost": 0.0, "hours": 0.0, "restarts": 0}
    for _ in range(jobs):
        r = run(policy, tr, offers, work, nodes, t)
        for k in total:
            total[k] += r[k]
        t = r["end"]
    return total


def compare(policies, kinds, seeds, work, nodes, offers, jobs=1, refusals=True):
    """{(kind, policy name): [result per seed]} plus the mean storm share per kind."""
    out, storms = {}, {}
    for p in policies:
        p.tau = user_interval(nodes, work)
        if isinstance(p, Launcher):
            p._spec = None  # its spec carries the interval
    for kind in kinds:
        storm = []
        for seed in range(seeds):
            tr = make_trace(kind, seed, offers, nodes, refusals)
            storm.append(statistics.mean(s for s, o in zip(tr.storm_share, offers) if o.spot))
            for p in policies:
                out.setdefault((kind, p.name), []).append(run_stream(p, tr, offers, work, nodes, jobs))
        storms[kind] = statistics.mean(storm)
    for p in policies:
        if isinstance(p, Launcher):
            p.close()
    return out, storms


def policies_for(nodes: int) -> list[Policy]:
    return [Launcher(nodes), Launcher(nodes, cooldown_hours=0.0, name="launcher, placement_cooldown 0"),
            Launcher(nodes, plan_interval=True, name="launcher, plan's interval"),
            EagerNextRegion(), CheapestFirst(), OnDemandOnly(), Clairvoyant(nodes)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=40)
    ap.add_argument("--show", type=int, default=8, help="seeds shown one by one (the mean covers all)")
    ap.add_argument("--work", type=float, default=24.0, help="hours of work the job needs")
    ap.add_argument("--nodes", type=int, default=2)
    ap.add_argument("--jobs", type=int, default=8,
                    help="jobs run back to back in the sweep scenario (one state store for all); 1: skip it")
    ap.add_argument("--sweep-seeds", type=int, default=10, help="traces per kind in the sweep scenario")
    ap.add_argument("--no-refusals", action="store_true",
                    help="no zone ever refuses a launch (the world the earlier figures came from)")
    args = ap.parse_args()
    refusals = not args.no_refusals
    offers = market()
    policies = policies_for(args.nodes)
    print(f"job: {args.nodes} node(s) x 8 H100, {args.work:g} h of work, checkpoint {C * 60:.0f} min every "
          f"{user_interval(args.nodes, args.work) * 60:.0f} min, restart {D * 60:.0f} min, refused launch "
          f"{REFUSED * 60:.0f} min; {args.seeds} traces per kind; on-demand ${ON_DEMAND:.0f}/h per node; "
          f"placement cool-down {COOLDOWN * 60:.0f} min; launches refused in full zones: {'yes' if refusals else 'no'}")
    shown = [LAUNCHER, "launcher, placement_cooldown 0", "clairvoyant (knows current rates)"]
    res, storms = compare(policies, TRACE_KINDS, args.seeds, args.work, args.nodes, offers, 1, refusals)
    report(res, storms, policies, "one job, empty state store")
    per_seed(res, args.show, shown)
    lines = summary(res, "one job") + summary(res, "one job", "clairvoyant (knows current rates)")
    if args.jobs > 1:
        res, storms = compare(policies, TRACE_KINDS, args.sweep_seeds, args.work, args.nodes, offers, args.jobs,
                              refusals)
        report(res, storms, policies, f"{args.jobs} jobs back to back (a sweep, one element at a time), "
                                      f"one state store; totals per trace")
        per_seed(res, args.show, shown)
        lines += summary(res, f"{args.jobs}-job sweep")
    print()
    print("\n".join(lines))


if __name__ == "__main__":
    main()
