"""bench/deadline_replay.py: the paper's simulator rules, Uniform Progress against hand-worked
cases, the offline optimum against brute force, and the CLI's rows over the synthetic fixture
(tests/fixtures/deadline_traces)."""

from __future__ import annotations

import itertools
import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
FIX = Path(__file__).resolve().parents[1] / "fixtures" / "deadline_traces"
sys.path.insert(0, str(BENCH))

import deadline_replay as rp  # noqa: E402

ROW = {"policy", "deadline_h", "overhead_h", "runs", "mean_cost", "p90_cost", "misses", "od_hours",
       "spot_hours", "egress_usd", "region_moves"}


def world(avail, spot=1.0, od=3.0, gap_h=1.0):
    """A made-up world with 1 h ticks: ``avail`` is one string of 0/1 per zone."""
    zones = [avail] if isinstance(avail, str) else avail
    spots = spot if isinstance(spot, list) else [spot] * len(zones)
    return rp.World([f"z{i}-1a" for i in range(len(zones))], gap_h,
                    [[c == "1" for c in a] for a in zones], spots, [od] * len(zones))


class Script(rp.Policy):
    name = "script"

    def __init__(self, actions):
        self.actions = actions

    def act(self, r):
        return self.actions[r.k] if r.k < len(self.actions) else (rp.OD, 0)


# ---- the simulator ----------------------------------------------------------------------------

def test_a_start_pays_its_overhead_billed_and_the_finish_is_exact():
    r = rp.simulate(Script([(rp.SPOT, 0)] * 9), world("1111"), 0, work=2, deadline=4, overhead=0.5)
    assert r.finish == 2.5 and r.cost == 3.0 and r.spot_h == 3.0 and r.od_h == 0


def test_a_preemption_ends_the_tick_boundary_and_a_restart_pays_again():
    # spot ticks 0-1 (1.5 h done), preempted at 2, on-demand from 2: 0.5 h overhead, 0.5 h work
    r = rp.simulate(Script([(rp.SPOT, 0), (rp.SPOT, 0), (rp.OD, 0)]), world("1101"), 0, 2, 4, 0.5)
    assert r.finish == 3.0 and r.spot_h == 2 and r.od_h == 1 and r.cost == 2 * 1.0 + 3.0


def test_a_spot_request_where_there_is_none_gets_nothing():
    r = rp.simulate(Script([(rp.SPOT, 0)] * 4), world("0111"), 0, 1, 4, 0.5)
    assert r.spot_h == 2 and r.finish == 2.5    # tick 0 held nothing, tick 1 started over


def test_a_run_past_its_deadline_is_finished_on_demand_and_counted_late():
    r = rp.simulate(Script([(rp.NONE, -1)] * 9), world("1" * 9), 0, 2, 3, 0.5)
    assert r.finish == 5.5 and r.od_h == 3


# ---- Uniform Progress, worked by hand from the paper's rules -----------------------------------

def test_up_rides_spot_that_is_always_there():
    r = rp.simulate(rp.UniformProgress(), world("111111"), 0, work=2, deadline=4, overhead=0.5)
    assert (r.finish, r.cost, r.od_h) == (2.5, 3.0, 0)


def test_up_waits_while_on_the_line_then_falls_behind_to_on_demand_and_stays():
    # t=0: on the line (0 = 0) and no spot: wait. t=1: behind (0 < 0.5): on-demand (0.5 h
    # overhead). t=2: spot is back but the hysteresis holds ((2 + 1) x 0.5 - 0.5 >= 0) and
    # ceil(1.5 + 0.5) = 2 >= 2 h left: on-demand. t=3: done at 3.5.
    r = rp.simulate(rp.UniformProgress(), world("001111"), 0, work=2, deadline=4, overhead=0.5)
    assert (r.finish, r.od_h, r.spot_h, r.cost) == (3.5, 3, 0, 9.0)


def test_up_goes_back_to_spot_once_two_overheads_ahead_of_the_line():
    # t=1: behind (0 < 1/3): on-demand, 0.75 done. t=2: ahead, no spot: keeps on-demand (1.75).
    # t=3: spot; (3 + 0.5) x 2/6 - 1.75 < 0: back to spot, 0.25 overhead + 0.25 work.
    r = rp.simulate(rp.UniformProgress(), world("00011111"), 0, work=2, deadline=6, overhead=0.25)
    assert (r.finish, r.od_h, r.spot_h, r.cost) == (3.5, 2, 1, 7.0)


def test_up_safety_net_takes_on_demand_for_good_at_work_plus_two_overheads():
    # W=3, D=4, d=0.25: at t=0 ceil(3 + 0.5) = 4 >= 4 h left with nothing held: on-demand,
    # and it never leaves it although spot is there from t=1.
    r = rp.simulate(rp.UniformProgress(), world("0111111"), 0, work=3, deadline=4, overhead=0.25)
    assert (r.finish, r.od_h, r.spot_h) == (3.25, 4, 0)


# ---- the offline optimum ----------------------------------------------------------------------

def brute_force(w, work, deadline, overhead):
    """The cheapest of every action sequence, by the simulator itself."""
    n = int(deadline / w.gap_h) + 1
    acts = [(rp.NONE, -1), (rp.OD, 0)] + [(rp.SPOT, z) for z in range(len(w.avail))]
    best = None
    for seq in itertools.product(acts, repeat=n):
        r = rp.simulate(Script(list(seq)), w, 0, work, deadline, overhead)
        if r.finish <= deadline + 1e-9 and (best is None or r.cost < best - 1e-12):
            best = r.cost
    return best


@pytest.mark.parametrize("seed, overhead", [(1, 0.5), (2, 0.5), (3, 1.5), (4, 0.25), (5, 1.5)])
def test_optimal_matches_brute_force_on_tiny_worlds(seed, overhead):
    rng = random.Random(seed)
    avail = ["".join(rng.choice("0111") for _ in range(8)) for _ in range(2)]
    w = world(avail, spot=[rng.choice([0.5, 1.0, 1.5]) for _ in avail], od=3.0)
    work, deadline = 2.5, 5.0
    got = rp.optimal_cost(w, 0, work, deadline, overhead)
    want = brute_force(w, work, deadline, overhead)
    assert got is not None and want is not None
    assert got[0] == pytest.approx(want)
    assert got[1] >= 0 and got[2] >= 0 and got[1] + got[2] >= work


def test_optimal_is_none_when_even_on_demand_cannot_finish():
    assert rp.optimal_cost(world("1111"), 0, work=3, deadline=3, overhead=0.5) is None
    assert rp.optimal_cost_plain(world("1111"), 0, work=3, deadline=3, overhead=0.5) is None


def test_the_optimum_over_live_columns_is_the_plain_one():
    # optimal_cost touches only the columns of time lost a live schedule can have;
    # optimal_cost_plain, every column: the same cost and the same hours, with and without egress,
    # a start shorter and longer than a tick (0.05 h, 0.2 h against 600 s), tight and loose deadlines
    multi = rp.load_multi(FIX / "multi")
    for start, deadline, overhead, gb in itertools.product((0, 37, 151), (22, 30), (0.05, 0.2), (0, 50)):
        fast = rp.optimal_cost(multi, start, 20, deadline, overhead, gb)
        assert fast is not None and fast == rp.optimal_cost_plain(multi, start, 20, deadline, overhead, gb)


# ---- the launcher's offers, built once per epoch against built every tick ----------------------

def _outcome(r):
    return (r.cost, r.finish, r.od_h, r.spot_h, r.egress, r.moves, r.p)


def test_offers_reused_across_ticks_and_runs_replay_exactly_as_built_every_tick():
    # the plain adapter (``plain=True``: every tick's offers built and sorted anew) is the
    # oracle of the reuse by (world epoch, checkpoint's region); one adapter replays every run
    # in turn, as run_grid does, so what it keeps from run to run is exercised too
    multi = rp.load_multi(FIX / "multi")
    singles = rp.load_single(FIX / "single")
    fast_m, fast_s = rp.Launcher(multi=True), rp.Launcher()
    for gb, gbps, deadline, overhead in itertools.product([50, 0, 200], [0.0, 1.0], [30, 24, 40], [0.2, 0.05]):
        for start in (0, 17, 64, 151):
            plain = rp.simulate(rp.Launcher(multi=True, plain=True), multi, start, 20, deadline, overhead, gb, gbps)
            fast = rp.simulate(fast_m, multi, start, 20, deadline, overhead, gb, gbps)
            assert _outcome(fast) == _outcome(plain)
        for env, w in sorted(singles.items()):
            plain = rp.simulate(rp.Launcher(plain=True), w, 40, 20, deadline, overhead, gb, gbps)
            assert _outcome(rp.simulate(fast_s, w, 40, 20, deadline, overhead, gb, gbps)) == _outcome(plain)


def test_the_epoch_changes_exactly_when_a_zone_does():
    w = world(["1100", "1111"], spot=[[1.0, 1.0, 1.0, 2.0], 1.0])
    epochs = [w.epoch(i) for i in range(6)]
    # tick 2: zone 0 goes down; tick 3: its price changes; past the end (4, 5): all down, for good
    assert epochs[0] == epochs[1] < epochs[2] < epochs[3] < epochs[4] == epochs[5]


# ---- the CLI over the fixture -----------------------------------------------------------------

def run_cli(*args):
    out = subprocess.run([sys.executable, str(BENCH / "deadline_replay.py"), *args, "--json"],
                         capture_output=True, text=True, check=True)
    return [json.loads(line) for line in out.stdout.splitlines()]


def test_single_region_rows_have_the_issue_fields_and_every_policy():
    rows = run_cli("--traces", str(FIX / "single"), "--windows", str(FIX / "single_windows.json"),
                   "--deadlines", "52,70", "--overheads", "0.05,0.2")
    assert all(set(r) == ROW for r in rows)
    assert {r["policy"] for r in rows} == {"od", "greedy", "up", "launcher"}
    assert len(rows) == 4 * 2 * 2 and all(r["runs"] == 6 for r in rows)
    od = [r for r in rows if r["policy"] == "od"]
    assert all(1.0 <= r["mean_cost"] < 1.01 and r["spot_hours"] == 0 for r in od)
    assert all(r["misses"] == 0 for r in rows if r["policy"] in ("up", "launcher"))


def test_multi_region_rows_add_up_eager_skynomad_and_the_optimum_below_everyone():
    rows = run_cli("--traces", str(FIX / "multi"), "--windows", str(FIX / "multi_windows.json"),
                   "--multi-region", "--deadlines", "60", "--overheads", "0.1")
    by = {r["policy"]: r for r in rows}
    assert set(by) == {"od", "greedy", "up", "up_eager", "skynomad", "optimal", "launcher"}
    assert all(set(r) == ROW for r in rows)
    assert all(by["optimal"]["mean_cost"] <= r["mean_cost"] + 1e-9 for r in rows)
    assert by["launcher"]["misses"] == by["up_eager"]["misses"] == by["optimal"]["misses"] == 0
    assert by["skynomad"]["misses"] == 0


def test_bad_windows_are_named(tmp_path):
    f = tmp_path / "w.json"
    f.write_text('[{"start": 3}]')
    with pytest.raises(rp.ReplayError, match="window 0"):
        rp.parse_windows(f, multi=False)
