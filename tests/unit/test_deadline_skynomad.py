"""bench/deadline_skynomad.py: SkyNomad's own policy (the artifact's rate-ratio arm) as a replay
baseline: its lifetime estimate, its progress value, its choice among zones, its probes."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import deadline_replay as rp  # noqa: E402
import deadline_skynomad as sn  # noqa: E402


def world(avail, spot, od=3.0, names=None, gap_h=1.0):
    names = names or [f"us-east-{i + 1}a" for i in range(len(avail))]
    return rp.World(names, gap_h, [[c == "1" for c in a] for a in avail], list(spot), [od] * len(avail))


def test_nelson_aalen_knots_and_the_cumulative_hazard():
    z = sn.Zone()
    for start, end, failed in ((0, 3600, True), (0, 7200, True), (0, 3 * 3600, False)):
        z.start(start, "spot")
        z.end(end, failed)
    knots, tail = z.knots(0, virtual=False)
    assert knots == [(1.0, pytest.approx(1 / 3)), (2.0, pytest.approx(1 / 2))]
    assert tail == pytest.approx(1 / 2)
    assert sn.Zone.hazard(knots, 1.5, tail) == pytest.approx(1 / 3 + 0.5 * 0.5)
    assert sn.Zone.hazard(knots, 0.5, tail) == pytest.approx(0.5 * 0.5)   # the tail rate before the first knot
    assert z.tick_failures == 2          # failures count for the burst factor


def test_a_zone_never_seen_failing_lives_as_long_as_the_cap():
    z = sn.Zone()
    assert z.expected_life_h(0.0, 1.0, 0.0, virtual=False) > 1e6
    w = world(["1111", "1111"], [1.0, 2.0])
    r = rp.Run(w, 0, 2.0, 4.0, 0.1)
    pol = sn.SkyNomad(rp.egress_usd_per_gb)
    pol.reset(r)
    assert pol._life_h(r, 0, 0.0) == 2.0                  # the default 2 h cap
    pol = sn.SkyNomad(rp.egress_usd_per_gb, max_prediction_h=1e9)
    pol.reset(r)
    assert pol._life_h(r, 0, 0.0) == 4.0                  # the time left


def test_the_burst_factor_is_the_densest_recent_suffix_once_a_unit_of_risk_is_seen():
    z = sn.Zone()
    z.add_burst(0.6, 0)
    assert z.g == 1.0                     # under a unit of risk: no burst yet
    z.add_burst(0.5, 2)
    assert z.g == pytest.approx(2 / 0.5)  # the newest event alone is the densest suffix
    z.add_burst(0.5, 0)
    assert z.g == pytest.approx(2 / 1.0)


def test_the_first_start_goes_to_the_cheapest_zone_and_a_refused_one_falls_through():
    w = world(["0111", "1111", "1111"], [0.5, 1.0, 1.2])
    moves = []

    class Spy(sn.SkyNomad):
        def act(self, r):
            moves.append(super().act(r))
            return moves[-1]
    r = rp.simulate(Spy(rp.egress_usd_per_gb), w, 0, 2.0, 5.0, 0.1, 50.0)
    # zone 0 ($0.5) has no spot at tick 0: zone 1 ($1.0) is next best and runs the job; a tick
    # later zone 0 is up, but $0.5/h saved is below the gate (0.5 + 0.01 + 0.05 x V)
    assert moves[0] == (rp.SPOT, 1) and r.spot_h == 3.0 and r.od_h == 0.0
    pol = sn.SkyNomad(rp.egress_usd_per_gb)
    r = rp.Run(w, 0, 2.0, 5.0, 0.1, 50.0)
    pol.reset(r)
    assert pol.act(r) == (rp.SPOT, 1)
    # the refused launch counts as a failure of zone 0 (not probed again this tick); zone 2 is probed
    assert pol.zones[0].tick_failures == 1 and not pol.zones[0].probing
    assert pol.zones[2].probing and pol.zones[1].cur_src == "spot"


def test_a_running_job_is_not_moved_for_a_saving_below_the_gate():
    # holding zone 1 ($1.0); zone 0 comes up at $0.6 a tick later: the saving, $0.4/h, is below
    # the gate (0.5 + 0.0002 x 50 + 0.05 x V), so it stays
    w = world(["0111111", "1111111"], [0.6, 1.0])
    moves = []

    class Spy(sn.SkyNomad):
        def act(self, r):
            out = super().act(r)
            moves.append(out)
            return out
    rp.simulate(Spy(rp.egress_usd_per_gb), w, 0, 4.0, 6.0, 0.1, 50.0)
    assert moves[0] == (rp.SPOT, 1) and all(m == (rp.SPOT, 1) for m in moves)


def test_the_progress_value_is_on_demand_scaled_by_the_rate_needed_and_floored_at_spot():
    w = world(["1" * 10], [0.9], od=3.0)
    pol = sn.SkyNomad(rp.egress_usd_per_gb)
    seen = []
    real = sn.SkyNomad.act

    def act(self, r):
        left, time_left = r.W - r.p, r.D - r.t
        seen.append(max(3.0 * left * r.D / (time_left * r.W), 0.9))
        return real(self, r)
    pol.act = act.__get__(pol)
    rp.simulate(pol, w, 0, 4.0, 8.0, 0.1)
    assert seen[0] == pytest.approx(3.0)          # on schedule at the start: V = c_od


def test_probes_bill_a_minute_of_spot_and_are_not_repeated_on_a_zone_with_a_live_probe():
    w = world(["1" * 20, "1" * 20, "0" * 20], [1.0, 1.2, 1.5])
    r = rp.simulate(sn.SkyNomad(rp.egress_usd_per_gb), w, 0, 10.0, 15.0, 0.1, 0.0)
    # zone 1 is probed once (it stays up: its probe run stays open); zone 2 every 6 ticks, never billed
    assert r.probe_usd == pytest.approx(1.2 / 60)
    assert r.cost == pytest.approx(1.0 * 11 + 1.2 / 60)


def test_the_safety_net_latches_on_demand_for_good():
    w = world(["1100000000", "0000000000"], [1.0, 1.0])
    r = rp.simulate(sn.SkyNomad(rp.egress_usd_per_gb), w, 0, 4.0, 6.0, 0.5, 0.0)
    assert r.finish <= 6.0 and r.od_h > 0


@pytest.mark.parametrize("virtual", [False, True])
def test_skynomad_never_misses_on_random_worlds(virtual):
    import random
    rng = random.Random(7)
    for _ in range(30):
        z = rng.randint(1, 4)
        avail = ["".join("1" if rng.random() < 0.6 else "0" for _ in range(40)) for _ in range(z)]
        names = [rng.choice(["us-east-1", "us-east-2", "us-west-2"]) + "abc"[i % 3] for i in range(z)]
        w = world(avail, [rng.uniform(0.5, 1.5) for _ in range(z)], names=names, gap_h=0.5)
        pol = sn.SkyNomad(rp.egress_usd_per_gb, max_prediction_h=1e9 if virtual else 2.0, virtual=virtual)
        r = rp.simulate(pol, w, 0, 8.0, 12.0, rng.choice([0.1, 0.3]), 50.0)
        assert r.finish is not None and r.finish <= 12.0 + 1e-7
        assert math.isfinite(r.cost)


def test_availability_is_the_share_of_the_last_12_hours_a_zone_was_seen_running():
    z = sn.Zone()
    assert z.availability(7200) == 0.0                   # never seen: 0
    z.start(0, "spot")
    z.end(3600, True)
    assert z.availability(7200) == pytest.approx(0.5)
    z.start(5400, "probe")
    assert z.availability(7200) == pytest.approx(0.75)   # the open run counts up to now
    z.end(10 * 3600, True)
    assert z.availability(20 * 3600) == pytest.approx((10 - 8) / 12)   # the window is the last 12 h


def test_the_reference_value_plans_on_demand_for_what_the_seen_zones_cannot_do():
    w = world(["1" * 10, "1" * 10], [1.0, 1.2], od=3.0)
    pol = sn.SkyNomad(rp.egress_usd_per_gb, value="reference")
    r = rp.Run(w, 0, 4.0, 8.0, 0.1, 50.0)
    pol.reset(r)
    # nothing seen yet: every hour is planned on on-demand, V = 1.2 x $3
    assert pol._reference_usd_h(r, 4.0, 8.0, [1.0, 1.2], 3.0, 0.0) == pytest.approx(3.0)
    assert pol._od_weight(r) == 0.0
    # 1 h done in 2 h (rate 0.5): the line through it, shifted by two restarts, meets the
    # deadline's at 7.6 h, so (8 - 7.6) / 6 of the 3 h left is planned on on-demand; zone 0, up
    # the whole 2 h, lifetime the 2 h cap, covers the rest at $1 x 2 / 1.9; two kinds used: one switch
    pol.zones[0].start(0, "spot")
    r.k, r.t, r.p = 2, 2.0, 1.0
    pol.done = [0.5, 0.5]
    assert pol._od_weight(r) == pytest.approx(0.4 / 6)
    ref = pol._reference_usd_h(r, 3.0, 6.0, [1.0, 1.2], 3.0, 7200.0)
    share = pol._od_weight(r) * 3.0
    spot_h = 3.0 - share
    assert ref == pytest.approx((share * 3.0 + spot_h * 1.0 * 2 / 1.9 + (50 * 0.02 if share > 0 else 0)) / 3.0)


def test_the_h100_arm_reproduces_its_choice_of_the_cheapest_zone_first():
    w = world(["1" * 30, "1" * 30], [1.0, 1.2], od=3.0)
    r = rp.simulate(sn.SkyNomad(rp.egress_usd_per_gb, value="reference"), w, 0, 10.0, 15.0, 0.1, 50.0)
    assert r.finish <= 15.0 and r.od_h == 0.0 and r.moves == 0
