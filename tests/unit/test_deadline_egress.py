"""Egress (issue 32): SkyNomad's price per GB in the replay, its billing (and ``--ckpt-gb 0`` =
the rules before it), the optimum with egress against brute force, the policy's move test
with a move's dollars and time, the backend's egress catalog, and a deadline on local."""

from __future__ import annotations

import importlib.util
import itertools
import random
import sys
from pathlib import Path

import pytest
import yaml

from launcher.plan import deadline as dl

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import deadline_replay as rp  # noqa: E402


def _egress_catalog():
    # the worktree's backends/skypilot/egress.py (launcher_backends may resolve elsewhere)
    spec = importlib.util.spec_from_file_location("skypilot_egress", ROOT / "backends" / "skypilot" / "egress.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def world(zones, avail, spot, od=3.0, gap_h=1.0):
    return rp.World(zones, gap_h, [[c == "1" for c in a] for a in avail], spot, [od] * len(zones))


class Script(rp.Policy):
    name = "script"

    def __init__(self, actions):
        self.actions = actions

    def act(self, r):
        return self.actions[r.k] if r.k < len(self.actions) else (rp.OD, 0)


# ---- the replay's rules -----------------------------------------------------------------------

def test_skynomad_price_per_gb_and_regions_from_zone_names():
    assert rp.egress_usd_per_gb("us-east-1", "us-east-1") == 0.0
    assert rp.egress_usd_per_gb("us-east-1", "us-east-2") == rp.egress_usd_per_gb("us-east-2", "us-east-1") == 0.01
    assert rp.egress_usd_per_gb("us-east-2", "us-west-2") == 0.02
    assert rp.egress_usd_per_gb("us-central1", "asia-south2") == 0.02
    assert [rp.dl_region(z) for z in ("us-east-1c", "us-west-2a", "us-central1-a")] == \
        ["us-east-1", "us-west-2", "us-central1"]


ZONES = ["us-east-1a", "us-east-1b", "us-east-2a", "us-west-2a"]


def test_a_start_in_another_region_than_the_last_progress_is_billed_and_the_first_is_not():
    w = world(ZONES, ["1" * 9] * 4, [1.0] * 4)
    # 1a (progress), 1b (same region: free), 2a (us-east-1 -> us-east-2: $0.01/GB), 2w (-> us-west-2: $0.02)
    acts = [(rp.SPOT, 0), (rp.SPOT, 1), (rp.SPOT, 2), (rp.SPOT, 3), (rp.SPOT, 3)]
    base = rp.simulate(Script(acts), w, 0, work=2, deadline=8, overhead=0.5)
    r = rp.simulate(Script(acts), w, 0, work=2, deadline=8, overhead=0.5, ckpt_gb=50)
    assert r.moves == 2 and r.egress == pytest.approx(50 * 0.01 + 50 * 0.02)
    assert r.cost == pytest.approx(base.cost + 1.5) and r.finish == base.finish
    assert base.egress == 0 and base.moves == 0


def test_the_source_is_where_the_job_last_made_progress_not_where_it_last_started():
    w = world(ZONES, ["1" * 9] * 4, [1.0] * 4)
    # a 1 h overhead on 1 h ticks: 1a makes progress in its second tick; a start in us-west-2
    # abandoned after its overhead (no progress there), then us-east-1b: us-east-1 -> us-west-2
    # billed, back to us-east-1 not
    acts = [(rp.SPOT, 0), (rp.SPOT, 0), (rp.SPOT, 3), (rp.NONE, -1)] + [(rp.SPOT, 1)] * 4
    r = rp.simulate(Script(acts), w, 0, work=2, deadline=9, overhead=1.0, ckpt_gb=10)
    assert r.moves == 1 and r.egress == pytest.approx(10 * 0.02)


def test_transfer_time_lengthens_a_cross_region_start_only():
    w = world(ZONES, ["1" * 12] * 4, [1.0] * 4)
    acts = [(rp.SPOT, 0), (rp.SPOT, 3)] + [(rp.SPOT, 3)] * 9
    slow = rp.simulate(Script(acts), w, 0, work=3, deadline=11, overhead=0.25, ckpt_gb=450, transfer_gbps=1.0)
    fast = rp.simulate(Script(acts), w, 0, work=3, deadline=11, overhead=0.25, ckpt_gb=450)
    assert slow.finish == pytest.approx(fast.finish + 450 * 8 / 1.0 / 3600)


def test_ckpt_gb_zero_is_the_rules_before_egress_for_every_policy():
    fix = ROOT / "tests" / "fixtures" / "deadline_traces" / "multi"
    w = rp.load_multi(fix)
    for pol in (rp.Greedy(), rp.UniformProgressEager(), rp.Launcher(multi=True)):
        for start in (0, 37, 120):
            a = rp.simulate(pol, w, start, 20, 30, 0.2)
            b = rp.simulate(pol, w, start, 20, 30, 0.2, ckpt_gb=0)
            assert (a.cost, a.finish, a.od_h, a.spot_h, b.egress) == (b.cost, b.finish, b.od_h, b.spot_h, 0)
    # and egress costs something on this set (zones in three regions) for a hopping policy
    r = rp.simulate(rp.Greedy(), w, 0, 20, 30, 0.2, ckpt_gb=50)
    assert r.moves > 0 and r.egress > 0


def brute_force(w, work, deadline, overhead, gb):
    n = int(deadline / w.gap_h) + 1
    acts = [(rp.NONE, -1)] + [(rp.OD, z) for z in range(len(w.od))] + [(rp.SPOT, z) for z in range(len(w.avail))]
    best = None
    for seq in itertools.product(acts, repeat=n):
        r = rp.simulate(Script(list(seq)), w, 0, work, deadline, overhead, ckpt_gb=gb)
        if r.finish <= deadline + 1e-9 and (best is None or r.cost < best - 1e-12):
            best = r.cost
    return best


@pytest.mark.parametrize("seed, overhead, gb", [(1, 0.5, 50), (2, 0.5, 100), (3, 1.5, 50), (4, 0.25, 200),
                                                (5, 0.5, 0)])
def test_optimal_with_egress_matches_brute_force(seed, overhead, gb):
    rng = random.Random(seed)
    zones = ["us-east-1a", "us-east-2a", "us-west-2a"]
    avail = ["".join(rng.choice("0111") for _ in range(5)) for _ in zones]
    w = world(zones, avail, [rng.choice([0.5, 1.0, 1.5]) for _ in zones], od=3.0)
    got = rp.optimal_cost(w, 0, 2.0, 4.0, overhead, ckpt_gb=gb)
    want = brute_force(w, 2.0, 4.0, overhead, gb)
    assert got is not None and want is not None
    assert got[0] == pytest.approx(want)


# ---- the policy's move test -------------------------------------------------------------------

def _running(held_price, to_price, move_usd=0.0, move_h=0.0, left=20.0):
    offers = (dl.Offer("a", dl.SPOT, held_price), dl.Offer("b", dl.SPOT, to_price, move_usd=move_usd, move_h=move_h),
              dl.Offer("od", dl.ON_DEMAND, 3.0))
    return dl.Situation(elapsed_h=10, done_h=40 - left, work_h=40, deadline_h=60, overhead_h=0.2,
                        current=dl.Placement(dl.SPOT, "a"), offers=offers, tick_h=0.05)


def test_a_move_pays_for_its_egress_and_its_transfer_time():
    # $0.5/h saved over stay_h 6 h = $3 against a restart of 0.2 h x $1 = $0.2: moves
    assert dl.decide(_running(1.5, 1.0), dl.MULTI).placement == dl.Placement(dl.SPOT, "b")
    # the same with $3 of egress does not pay
    assert dl.decide(_running(1.5, 1.0, move_usd=3.0), dl.MULTI).placement == dl.Placement(dl.SPOT, "a")
    assert dl.decide(_running(1.5, 1.0, move_usd=2.5), dl.MULTI).placement == dl.Placement(dl.SPOT, "b")
    # nor with 3 h of transfer billed at the new price
    assert dl.decide(_running(1.5, 1.0, move_h=3.0), dl.MULTI).placement == dl.Placement(dl.SPOT, "a")


def test_a_start_from_nothing_weighs_egress_against_price():
    offers = (dl.Offer("near", dl.SPOT, 1.0), dl.Offer("far", dl.SPOT, 0.95, move_usd=1.0),
              dl.Offer("od", dl.ON_DEMAND, 3.0))
    s = dl.Situation(elapsed_h=10, done_h=20, work_h=40, deadline_h=60, overhead_h=0.2, offers=offers, tick_h=0.05)
    assert dl.decide(s, dl.MULTI).placement == dl.Placement(dl.SPOT, "near")
    free = tuple(dl.Offer(o.where, o.kind, o.price) for o in offers)
    assert dl.decide(dl.Situation(10, 20, 40, 60, 0.2, offers=free, tick_h=0.05), dl.MULTI).placement == \
        dl.Placement(dl.SPOT, "far")


def test_the_fallback_counts_egress_and_the_guarantee_counts_transfer_time():
    offers = (dl.Offer("od-near", dl.ON_DEMAND, 3.0), dl.Offer("od-far", dl.ON_DEMAND, 2.99, move_usd=5.0))
    s = dl.Situation(elapsed_h=10, done_h=20, work_h=40, deadline_h=31, overhead_h=0.2, offers=offers, tick_h=0.05)
    assert dl.fallback(s).where == "od-near"
    late = (dl.Offer("od", dl.ON_DEMAND, 3.0, move_h=2.0),)
    assert not dl.can_finish(dl.Situation(10, 20, 40, 31, 0.2, offers=late), late[0])
    assert dl.can_finish(dl.Situation(10, 20, 40, 31, 0.2, offers=late[:0]), dl.Offer("od", dl.ON_DEMAND, 3.0))



def test_a_move_within_the_region_goes_to_its_cheapest_zone():
    # riding us-east-1a at $1: us-east-1b ($0.8) and us-east-1c ($0.75) are free to move to,
    # us-west-2a ($0.69) costs $1 of egress: the cheapest zone of the region wins
    offers = (dl.Offer("us-east-1a", dl.SPOT, 1.0), dl.Offer("us-east-1b", dl.SPOT, 0.8),
              dl.Offer("us-east-1c", dl.SPOT, 0.75), dl.Offer("us-west-2a", dl.SPOT, 0.69, move_usd=1.0),
              dl.Offer("od", dl.ON_DEMAND, 3.0))
    s = dl.Situation(elapsed_h=10, done_h=20, work_h=40, deadline_h=60, overhead_h=0.2, offers=offers,
                     tick_h=0.05, current=dl.Placement(dl.SPOT, "us-east-1a"))
    assert dl.decide(s, dl.MULTI).placement == dl.Placement(dl.SPOT, "us-east-1c")
    # preempted there: the start goes to the region's cheapest zone still up
    gone = tuple(dl.Offer(o.where, o.kind, o.price, available=o.where != "us-east-1c", move_usd=o.move_usd)
                 for o in offers)
    s = dl.Situation(10, 20, 40, 60, 0.2, offers=gone, tick_h=0.05)
    assert dl.decide(s, dl.MULTI).placement == dl.Placement(dl.SPOT, "us-east-1b")


def test_the_replay_moves_within_a_region_to_its_cheapest_zone_and_bills_no_egress():
    # the job starts in us-east-1a ($0.78), preempted at tick 3: of us-east-1b ($0.9), us-east-1c
    # ($0.8) and us-west-2a ($0.75, up from tick 3, $1 of egress away) it restarts in us-east-1c
    w = world(["us-east-1a", "us-east-1b", "us-east-1c", "us-west-2a"],
              ["111" + "0" * 27, "1" * 30, "1" * 30, "000" + "1" * 27], [0.78, 0.9, 0.8, 0.75])
    held = []

    class Spy(rp.Launcher):
        def act(self, r):
            held.append(super().act(r))
            return held[-1]
    r = rp.simulate(Spy(multi=True), w, 0, 20.0, 28.0, 0.2, 50.0)
    assert held[:3] == [(rp.SPOT, 0)] * 3 and set(held[3:]) == {(rp.SPOT, 2)}
    assert r.moves == 0 and r.egress == 0.0

# ---- the backend's catalog --------------------------------------------------------------------

def test_the_skypilot_egress_catalog_prices_pairs_with_a_source_and_knows_its_highest_rate():
    eg = _egress_catalog()
    assert eg.per_gb("aws", "us-east-1", "us-east-1")[0] == 0.0
    usd, source = eg.per_gb("aws", "us-east-1", "us-east-2")
    assert usd == 0.01 and "AWS" in source
    assert eg.per_gb("aws", "us-west-2", "eu-west-1")[0] == 0.02
    assert eg.per_gb("gcp", "us-central1", "us-east4")[0] == 0.02
    assert eg.per_gb("aws", "ap-south-1", "us-east-1") is None          # not in the table
    assert eg.per_gb("lambda", "us-west-1", "us-east-1") is None
    assert eg.highest("aws")[0] >= 0.02 and eg.highest("lambda") is None
    # GCP's figures say where and when they were checked, and that Google's own table could
    # not be read (each names the secondary source it agrees with)
    for pair, usd in ((("us-central1", "northamerica-northeast1"), 0.02), (("europe-west1", "europe-west4"), 0.02),
                      (("asia-east1", "asia-south1"), 0.08)):
        got, source = eg.per_gb("gcp", *pair)
        assert got == usd and "2026-12-06" in source and "not verified" in source
    assert eg.per_gb("gcp", "us-central1", "europe-west1") is None     # between continents: not in the table
    assert eg.per_gb("gcp", "us-central1", "asia-east1") is None
    usd, source = eg.highest("gcp")
    assert usd == 0.15 and "Skyplane" in source and "0.157" in source


# ---- a deadline on local ----------------------------------------------------------------------

def _local_app(tmp_path, **more):
    from launcher.api.context import App

    cfg = tmp_path / "config.yaml"
    cfg.write_text(yaml.safe_dump({"catalog_dir": str(ROOT / "examples" / "catalog"),
                                   "targets": {"here": {"backend": "local"}, **more}}))
    return App(config_path=cfg, home=tmp_path / "home")


def _deadline_spec(deadline, **more):
    from launcher.spec.model import JobSpec

    return JobSpec(name="j", run="true", resources={"expected_runtime": "1h"}, cost={"deadline": deadline}, **more)


def test_a_deadline_on_local_runs_there_as_the_guaranteed_offer_with_a_note_never_calling_it_spot(tmp_path):
    from launcher.launching.launch import check_deadline

    app = _local_app(tmp_path)
    try:
        said = []
        check_deadline(app, _deadline_spec("10h"), "here", note=said.append)
        (note,) = said
        assert "here is this machine" in note and "guaranteed offer" in note and "1 h of work, 10 h left" in note
        assert "does not move it" in note and "no spot there" in note
        check_deadline(app, _deadline_spec("10h"), "here")   # no NOTE: nothing to tell, nothing raised
    finally:
        app.close()
        app.store.close()


def test_a_deadline_this_machine_cannot_meet_is_refused_with_its_numbers_never_as_spot(tmp_path):
    from launcher.core.errors import LauncherError
    from launcher.launching.launch import check_deadline

    app = _local_app(tmp_path)
    try:
        with pytest.raises(LauncherError) as e:
            check_deadline(app, _deadline_spec("30m"), "here", note=pytest.fail)
        msg = str(e.value)
        assert "cannot be met on here" in msg and "this machine needs 1.02 h" in msg and "0.5 h away" in msg
        assert "1 h of work" in msg and "resources.expected_runtime" in msg and "spot" not in msg
    finally:
        app.close()
        app.store.close()


def test_local_chosen_over_a_specs_cloud_targets_runs_as_the_guaranteed_offer(tmp_path):
    # --target here with targets [aws-spot, aws-od]: the job runs here, and says so (it was
    # launched without a word before, and watch then moved it to spot)
    from launcher.launching.launch import check_deadline

    app = _local_app(tmp_path, **{"aws-spot": {"backend": "skypilot", "infra": "aws", "use_spot": True},
                                  "aws-od": {"backend": "skypilot", "infra": "aws"}})
    try:
        said = []
        check_deadline(app, _deadline_spec("10h", targets=["aws-spot", "aws-od"]), "here", note=said.append)
        assert len(said) == 1 and "guaranteed offer" in said[0]
        said.clear()
        check_deadline(app, _deadline_spec("10h", targets=["aws-spot", "aws-od"]), "aws-spot", note=said.append)
        assert said == []                    # a cloud target: the policy's, checked as before
    finally:
        app.close()
        app.store.close()


def test_the_policy_says_why_this_machine_cannot_meet_a_deadline():
    assert dl.on_this_machine(1.0, 3.0, 1 / 60) is None
    assert dl.on_this_machine(3.0, 3.0, 0.0) is None
    why = dl.on_this_machine(4.0, 3.0, 0.5)
    assert why == ("the deadline is 3 h away, but this machine needs 4.5 h (4 h of work + 0.5 h to start), "
                   "1.5 h too many")


def test_a_cloud_target_chosen_over_a_spec_that_names_only_this_machine_is_refused_saying_so(tmp_path):
    from launcher.core.errors import LauncherError
    from launcher.launching.launch import check_deadline

    app = _local_app(tmp_path, **{"aws-od": {"backend": "skypilot", "infra": "aws"}})
    try:
        with pytest.raises(LauncherError) as e:
            check_deadline(app, _deadline_spec("10h", targets=["here"]), "aws-od")
        msg = str(e.value)
        assert "cannot be used on aws-od" in msg and "targets (here) run on this machine" in msg
        assert "launch on here" in msg and "add aws-od" in msg and "spot" not in msg.split(";")[0]
    finally:
        app.close()
        app.store.close()
