"""launcher.plan.deadline: the policy's choices, and the safety net's guarantee (the deadline is
met whenever on-demand could still meet it), whatever the heuristic proposes."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest

from launcher.plan import deadline as dl

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import deadline_replay as rp  # noqa: E402

SPOT_A = dl.Offer("us-east-1a", dl.SPOT, 1.0)
OD_A = dl.Offer("us-east-1", dl.ON_DEMAND, 3.0)


def sit(**kw):
    base = dict(elapsed_h=0.0, done_h=0.0, work_h=10.0, deadline_h=14.0, overhead_h=0.5,
                offers=(SPOT_A, OD_A), tick_h=1.0)
    base.update(kw)
    return dl.Situation(**base)


def test_spot_available_is_taken():
    d = dl.decide(sit())
    assert d.placement == dl.Placement(dl.SPOT, "us-east-1a") and d.reason == "spot available"


def test_no_spot_with_slack_waits_and_says_why_with_its_numbers():
    # 7 h left, 13 h to go: slack 13 - 0.5 - 7 = 5.5 h; at reserve=1 the reserve is Uniform
    # Progress's line, 7 x (14 - 10) / 10 - 0.5 = 2.3 h
    gone = dl.Offer("us-east-1a", dl.SPOT, 1.0, available=False)
    d = dl.decide(sit(elapsed_h=1.0, done_h=3.0, offers=(gone, OD_A)), dl.Params(reserve=1.0))
    assert d.placement == dl.NOWHERE and "waiting" in d.reason
    assert d.numbers["slack_h"] == 5.5 and d.numbers["reserve_h"] == pytest.approx(2.3)
    d = dl.decide(sit(elapsed_h=4.0, done_h=3.0, offers=(gone, OD_A)))
    assert d.placement.kind == dl.ON_DEMAND and "behind the reserve" in d.reason


def test_the_net_overrides_a_wait_that_would_lose_the_deadline():
    # 10 h of work, 11 h left, 0.5 h restart: waiting 1 h leaves 10 < 10.5
    s = sit(elapsed_h=3.0, offers=(dl.Offer("us-east-1a", dl.SPOT, 1.0, available=False), OD_A))
    d = dl.safety_net(s, dl.Decision(dl.NOWHERE, "wait"))
    assert d.placement == dl.Placement(dl.ON_DEMAND, "us-east-1") and d.reason.startswith("safety net")
    assert d.numbers["would"] == "wait"


def test_the_net_keeps_a_running_spot_that_leaves_room_to_fall_back():
    # spot running (no overhead left): a tick of progress keeps the same slack
    s = sit(elapsed_h=3.5, current=dl.Placement(dl.SPOT, "us-east-1a"))
    assert dl.safe(s, s.current)
    assert not dl.safe(s, dl.NOWHERE)


def test_a_slurm_target_is_a_fallback_when_its_queue_wait_fits():
    slurm = dl.Offer("cluster-a", dl.QUEUE, 1.5, wait_h=0.5)
    s = sit(elapsed_h=2.0, offers=(dl.Offer("us-east-1a", dl.SPOT, 1.0, available=False), OD_A, slurm))
    assert dl.fallback(s) == slurm                  # cheaper, and 2 + 1 + 10 <= 14
    late = sit(elapsed_h=3.2, offers=s.offers)
    assert dl.fallback(late) == OD_A                # 3.2 + 1 + 10 > 14: its wait no longer fits


def test_a_lost_deadline_finishes_as_soon_as_it_can():
    s = sit(elapsed_h=5.0, offers=(dl.Offer("us-east-1a", dl.SPOT, 1.0, available=False), OD_A))
    assert not dl.can_finish(s, OD_A)
    d = dl.decide(s)
    assert d.placement.kind == dl.ON_DEMAND and "cannot be met" in d.reason


def test_done_is_nowhere():
    assert dl.decide(sit(done_h=10.0)).placement == dl.NOWHERE


def test_multi_region_takes_the_cheapest_spot_and_moves_when_it_pays():
    a, b = dl.Offer("us-east-1a", dl.SPOT, 1.8), dl.Offer("us-west-2a", dl.SPOT, 0.9)
    s = sit(offers=(a, b, OD_A), current=dl.Placement(dl.SPOT, "us-east-1a"), elapsed_h=1.0, done_h=0.5)
    assert dl.decide_multi(s).placement == dl.Placement(dl.SPOT, "us-west-2a")
    near = dl.Offer("us-west-2a", dl.SPOT, 1.75)
    s2 = sit(offers=(a, near, OD_A), current=dl.Placement(dl.SPOT, "us-east-1a"), elapsed_h=1.0, done_h=0.5)
    assert dl.decide_multi(s2).placement == dl.Placement(dl.SPOT, "us-east-1a")


class Adversary(rp.Policy):
    """Proposes the worst: waits, or grabs spot just before it vanishes, or flaps; only the
    safety net stands between it and a miss."""
    name = "adversary"

    def __init__(self, seed):
        self.rng = random.Random(seed)

    def act(self, r):
        w = r.w
        offers = tuple(dl.Offer(w.names[z], dl.SPOT, w.spot_price(z, r.idx), r.up(z)) for z in range(len(w.avail)))
        offers += tuple(dl.Offer(w.names[z], dl.ON_DEMAND, w.od[z]) for z in range(len(w.od)))
        cur = dl.NOWHERE if r.kind == rp.NONE else dl.Placement(
            dl.SPOT if r.kind == rp.SPOT else dl.ON_DEMAND, w.names[r.zone])
        s = dl.Situation(r.t, r.p, r.W, r.D, r.d, cur, r.o, offers, r.g)
        z = self.rng.randrange(len(w.avail))
        want = self.rng.choice([dl.NOWHERE, dl.Placement(dl.SPOT, w.names[z])])
        p = dl.safety_net(s, dl.Decision(want, "adversary")).placement
        kind = {dl.WAIT: rp.NONE, dl.SPOT: rp.SPOT, dl.ON_DEMAND: rp.OD}[p.kind]
        return kind, (w.names.index(p.where) if p.where else -1)


def markov_world(rng, zones, ticks, gap_h):
    avail = []
    for _ in range(zones):
        up, a = True, []
        p_down, p_up = rng.uniform(0.02, 0.5), rng.uniform(0.05, 0.6)
        for _ in range(ticks):
            a.append(up)
            up = (rng.random() > p_down) if up else (rng.random() < p_up)
        avail.append(a)
    return rp.World([f"z{i}-1a" for i in range(zones)], gap_h, avail,
                    [rng.uniform(0.3, 2.0) for _ in range(zones)], [3.0] * zones)


@pytest.mark.parametrize("seed", range(12))
def test_the_net_alone_meets_every_feasible_deadline(seed):
    rng = random.Random(seed)
    gap = rng.choice([1 / 6, 0.25, 195 / 3600])
    w = markov_world(rng, rng.choice([1, 3]), 800, gap)
    for _ in range(5):
        work = rng.uniform(2, 20)
        overhead = rng.choice([0.02, 0.05, 0.1, 0.2, 0.5])
        deadline = work + overhead + rng.uniform(0, 10)          # on-demand can make it
        r = rp.simulate(Adversary(seed), w, rng.randrange(100), work, deadline, overhead)
        assert r.finish <= deadline + 1e-7, (work, deadline, overhead, r.finish)


@pytest.mark.parametrize("seed", range(6))
def test_the_policy_meets_every_feasible_deadline(seed):
    rng = random.Random(100 + seed)
    w = markov_world(rng, rng.choice([1, 4]), 900, 1 / 6)
    for _ in range(5):
        work = rng.uniform(5, 40)
        overhead = rng.choice([0.02, 0.1, 0.2])
        deadline = work + overhead + rng.uniform(0, 30)
        r = rp.simulate(rp.Launcher(multi=len(w.avail) > 1), w, rng.randrange(100), work, deadline, overhead)
        assert r.finish <= deadline + 1e-7


def test_multi_region_waits_for_a_cheap_zone_while_the_slack_allows_then_takes_a_dear_one():
    # the cheap zone (1.0) is down, a dear one (1.5) is up: with slack above the reserve the
    # job waits for the cheap one; behind the reserve it takes the dear spot, not on-demand
    cheap_gone = dl.Offer("us-east-1a", dl.SPOT, 1.0, available=False)
    dear = dl.Offer("us-west-2a", dl.SPOT, 1.5)
    p = dl.Params(reserve=0.8, back=0.0, pick=1.1)
    d = dl.decide(sit(elapsed_h=1.0, done_h=3.0, offers=(cheap_gone, dear, OD_A), tick_h=0.1), p)
    assert d.placement == dl.NOWHERE and "waiting for cheaper spot" in d.reason
    assert d.numbers["cheapest_spot"] == 1.0
    d = dl.decide(sit(elapsed_h=5.0, done_h=3.0, offers=(cheap_gone, dear, OD_A), tick_h=0.1), p)
    assert d.placement == dl.Placement(dl.SPOT, "us-west-2a") and d.reason == "spot available"
    # a zone within pick x the cheapest is taken at once; the single-region form never waits on price
    near = dl.Offer("us-west-2a", dl.SPOT, 1.05)
    d = dl.decide(sit(elapsed_h=1.0, done_h=3.0, offers=(cheap_gone, near, OD_A), tick_h=0.1), p)
    assert d.placement == dl.Placement(dl.SPOT, "us-west-2a")
    assert dl.decide(sit(elapsed_h=1.0, done_h=3.0, offers=(cheap_gone, dear, OD_A), tick_h=0.1),
                     dl.SINGLE).placement == dl.Placement(dl.SPOT, "us-west-2a")


def test_a_job_on_a_guaranteed_offer_returns_to_spot_only_where_spot_is_cheaper():
    # far ahead (5 h left at 2 h of a 14 h deadline): from $3/h on-demand, $1/h spot pays
    ahead = dict(elapsed_h=2.0, done_h=5.0)
    d = dl.decide(sit(current=dl.Placement(dl.ON_DEMAND, "us-east-1"), **ahead))
    assert d.placement == dl.Placement(dl.SPOT, "us-east-1a") and d.reason == "ahead of the reserve: back to spot"
    # a free Slurm queue is kept: leaving it costs money and two restarts of slack
    free = dl.Offer("cluster-a", dl.QUEUE, 0.0)
    d = dl.decide(sit(current=dl.Placement(dl.QUEUE, "cluster-a"), offers=(SPOT_A, OD_A, free), **ahead))
    assert d.placement == dl.Placement(dl.QUEUE, "cluster-a"), d
    # and so is an on-demand region whose saving over the stay would not pay for the restart
    near = dl.Offer("eu-1", dl.ON_DEMAND, 1.05)
    d = dl.decide(sit(current=dl.Placement(dl.ON_DEMAND, "eu-1"), offers=(SPOT_A, near), **ahead),
                  dl.Params(reserve=0.8, back=0.0, stay_h=6.0))
    assert d.placement == dl.Placement(dl.ON_DEMAND, "eu-1"), d
