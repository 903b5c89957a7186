"""Spot that learns: attempts watch saw, kept in a real state store, change the next plan."""

import json
import time
from pathlib import Path

import pytest
import yaml

from launcher.backend.protocols import Handle
from launcher.plan.text import render_plan
from launcher.backend.config import load_config
from launcher.plan import Observation, apply_observations, plan
from launcher.plan.chase import capacity_wait_hours
from launcher.plan.observed import attempt_key, load, observation_of, observe_attempt, observe_job, record
from launcher.backend.sections import parse_spec
from launcher.state.store import StateStore
from launcher.core.status import JobState, Status

ROOT = Path(__file__).resolve().parents[2]
CATALOG = ROOT / "examples" / "catalog"
NOW = 1_800_000_000.0
H = 3600.0
AZ1 = ("aws", "us-east-1", "use1-az1", "p5.48xlarge", True)
AZ2 = ("aws", "us-east-1", "use1-az2", "p5.48xlarge", True)


@pytest.fixture
def store(tmp_path):
    s = StateStore(tmp_path / "home")
    yield s
    s.close()


def make_config(tmp_path, targets, **top):
    p = tmp_path / "config.yaml"
    p.write_text(yaml.safe_dump({"catalog_dir": str(CATALOG), "targets": targets, **top}))
    return load_config(p)


def spec(targets, nodes=1):
    return parse_spec({"name": "t", "run": "true", "targets": targets, "resources": {
        "nodes": nodes, "gpus_per_node": 8, "accelerator": "H100", "time_limit": "10h"}})


SPOT = {"aws": {"backend": "skypilot", "infra": "aws/us-east-1", "use_spot": True}}


# --- persistence ---------------------------------------------------------------------

def test_recorded_observations_come_back_with_their_ages(store):
    record(store, AZ1, 3.0, 1, "preempted", NOW - 2 * H, job_id="j", attempt=1)
    record(store, AZ2, 0.0, 0, "no_capacity", NOW - 30 * 60, job_id="j", attempt=2)
    obs = load(store, NOW)
    assert [(o.key, o.node_hours, o.events, o.capacity_failures) for o in obs] == [
        (AZ1, 3.0, 1, 0), (AZ2, 0.0, 0, 1)]
    assert [o.age_hours for o in obs] == [pytest.approx(2.0), pytest.approx(0.5)]


def test_the_table_survives_reopening_the_store(tmp_path):
    s = StateStore(tmp_path / "home")
    record(s, AZ1, 2.0, 1, "preempted", NOW)
    s.close()
    again = StateStore(tmp_path / "home")
    try:
        assert [o.key for o in load(again, NOW)] == [AZ1]
    finally:
        again.close()


def test_the_same_attempt_recorded_twice_counts_once(store):
    record(store, AZ1, 1.0, 0, "ran", NOW - H, job_id="j", attempt=1)
    record(store, AZ1, 4.0, 1, "preempted", NOW, job_id="j", attempt=1)
    record(store, AZ1, 1.0, 0, "ran", NOW)           # no attempt named: always a new row
    assert sorted((o.node_hours, o.events) for o in load(store, NOW)) == [(1.0, 0), (4.0, 1)]


def test_very_old_observations_are_not_loaded(store):
    record(store, AZ1, 5.0, 1, "preempted", NOW - 40 * 24 * H)
    record(store, AZ1, 5.0, 0, "ran", NOW - 1 * H)
    assert [o.events for o in load(store, NOW)] == [0]


def test_bad_kinds_and_keys_are_refused(store):
    with pytest.raises(ValueError, match="kind 'gone'"):
        record(store, AZ1, 1.0, 1, "gone", NOW)
    with pytest.raises(ValueError, match="cloud"):
        record(store, ("", "r", "z", "t", True), 1.0, 1, "ran", NOW)


# --- the model: decay by age, keying ---------------------------------------------------

def test_evidence_decays_with_age(store):
    offer = plan(spec(["aws"]), make_config(Path(store.home).parent, SPOT)).best.offer
    record(store, AZ1, 2.0, 4, "preempted", NOW)
    def long_memory(now):  # the day-long memory alone (the short one: test_plan_chase_recent.py)
        return apply_observations([offer], load(store, now), recent_half_life_hours=0)[0].preemption_rate

    fresh, day_later, week_later = long_memory(NOW), long_memory(NOW + 24 * H), long_memory(NOW + 7 * 24 * H)
    assert fresh == pytest.approx(5 / 22)                    # prior 0.05/h worth 1 event (20 node-h)
    assert day_later == pytest.approx(3 / 21)                # half the evidence
    assert fresh > day_later > week_later > offer.preemption_rate * 0.99


def test_keys_separate_zones_types_and_spot_and_region_keys_cover_every_zone(tmp_path):
    base = plan(spec(["aws"]), make_config(tmp_path, SPOT)).rows
    offers = [r.offer for r in base]
    by_zone = {o.zone: o for o in offers if o.instance_type == "p5.48xlarge"}
    learned = apply_observations(offers, [Observation(AZ1, 1.0, 3)])
    after = {o.zone: o for o in learned if o.instance_type == "p5.48xlarge"}
    assert after["use1-az1"].rate_source == "observed"
    assert after["use1-az2"].preemption_rate == by_zone["use1-az2"].preemption_rate
    assert after["use1-az2"].rate_source == "prior"
    on_demand = ("aws", "us-east-1", "use1-az1", "p5.48xlarge", False)
    assert apply_observations(offers, [Observation(on_demand, 1.0, 3)]) == offers
    region_wide = apply_observations(offers, [Observation(("aws", "us-east-1", "", "", True), 1.0, 3)])
    assert all(o.rate_source == "observed" and o.rate_events == 3 for o in region_wide)
    elsewhere = apply_observations(offers, [Observation(("aws", "us-west-2", "", "", True), 1.0, 3)])
    assert elsewhere == offers


def test_capacity_failures_add_expected_wait_not_interruptions(tmp_path):
    offers = [r.offer for r in plan(spec(["aws"]), make_config(tmp_path, SPOT)).rows]
    top = offers[0]
    got = apply_observations([top], [Observation(top.key, 0.0, 0, capacity_failures=1, launches=1)] * 3)[0]
    assert got.preemption_rate == top.preemption_rate and got.rate_source == top.rate_source
    assert got.capacity_failures == 3
    assert got.queue_wait_hours == pytest.approx(capacity_wait_hours(3, 3)) and got.queue_wait_hours > 0
    # successes in between bring the expected wait back down
    mixed = [Observation(top.key, 0.0, 0, capacity_failures=1, launches=1),
             *[Observation(top.key, 5.0, 0, launches=1)] * 5]
    assert 0 < apply_observations([top], mixed)[0].queue_wait_hours < got.queue_wait_hours


# --- an attempt becomes an observation -------------------------------------------------

def test_attempt_keys():
    extra = {"infra": "gcp/us-central1/us-central1-a", "use_spot": True, "instance_type": "a3-highgpu-8g"}
    assert attempt_key("skypilot", "g", extra, {"cloud": "gcp", "region": "us-central1"}) == \
        ("gcp", "us-central1", "us-central1-a", "a3-highgpu-8g", True)
    # SkyPilot ran a later candidate: only where it really ran is known
    assert attempt_key("skypilot", "g", extra, {"cloud": "gcp", "region": "europe-west4"}) == \
        ("gcp", "europe-west4", "", "", True)
    # the first placement named only a cloud: the status says the region
    assert attempt_key("skypilot", "a", {"infra": "aws", "use_spot": True}, {"cloud": "aws", "region": "us-east-1"}) \
        == ("aws", "us-east-1", "", "", True)
    assert attempt_key("slurm", "cluster-a", {}, {"partition": "gpu"}) == ("cluster-a", "", "", "gpu", False)
    assert attempt_key("local", "local", {}, {}) is None
    assert attempt_key("skypilot", "k", {"infra": "kubernetes/ctx"}, {}) is None


def test_observation_of_each_kind_of_end():
    k = AZ1
    pre = observation_of(k, "PREEMPTED", NOW - 2 * H, NOW, nodes=4, now=NOW)
    assert (pre.node_hours, pre.events, pre.kind, pre.ts) == (pytest.approx(8.0), 1, "preempted", NOW)
    assert observation_of(k, "NODE_FAIL", NOW - H, NOW, 1, NOW).kind == "node_fail"
    cap = observation_of(k, "NO_CAPACITY", None, NOW - 60, 2, NOW)
    assert (cap.node_hours, cap.events, cap.kind, cap.ts) == (0.0, 0, "no_capacity", NOW - 60)
    calm = observation_of(k, "COMPLETED", NOW - 3 * H, NOW, 2, NOW)
    assert (calm.node_hours, calm.events, calm.kind) == (pytest.approx(6.0), 0, "ran")
    # preempted before it started: the interruption counts, with no exposure
    early = observation_of(k, "PREEMPTED", None, NOW, 2, NOW)
    assert (early.node_hours, early.events) == (0.0, 1)
    assert observation_of(k, "RUNNING", NOW - H, None, 1, NOW) is None
    assert observation_of(k, "CANCELLED", None, NOW, 1, NOW) is None      # never ran: nothing learned
    assert observation_of(None, "PREEMPTED", NOW - H, NOW, 1, NOW) is None


def _job_with_attempt(store, state, started, ended, infra="aws/us-east-1", extra=None, status_extra=None):
    spec_yaml = yaml.safe_dump({"name": "t", "run": "true", "resources": {"nodes": 2, "gpus_per_node": 8,
                                                                          "accelerator": "H100"}})
    store.begin_job("j1", "t", "aws", "skypilot", None, spec_yaml)
    h = Handle("skypilot", "aws", "j1", "sky-j1-1", 1, {"infra": infra, "use_spot": True, **(extra or {})})
    store.record_attempt("j1", 1, "aws", h.to_json(), h.native_id)
    store.update_attempt("j1", 1, state=state, started=started, ended=ended)
    st = Status(JobState(state), start_time=started, end_time=ended, extra=status_extra or {})
    return store.get_job("j1"), store.attempts("j1")[0], st


def test_observe_attempt_records_a_preemption_once_and_the_next_plan_moves_away(tmp_path, store):
    cfg = make_config(tmp_path, SPOT)
    s = spec(["aws"], nodes=2)
    before = plan(s, cfg, store=store)
    assert before.best.offer.zone == "use1-az1" and before.best.offer.rate_source == "prior"
    job, att, st = _job_with_attempt(store, "PREEMPTED", NOW - 1.5 * H, NOW,
                                     infra="aws/us-east-1/use1-az1", extra={"instance_type": "p5.48xlarge"},
                                     status_extra={"cloud": "aws", "region": "us-east-1"})
    for _ in range(2):                    # watch sees the same ended attempt on every cycle
        seen = observe_attempt(store, job, att, st, now=NOW)
    assert seen.key == AZ1 and seen.node_hours == pytest.approx(3.0) and seen.events == 1
    assert len(load(store, NOW)) == 1
    for extra_attempt in range(2, 5):     # three more quick preemptions there
        record(store, AZ1, 0.5, 1, "preempted", NOW, job_id="j1", attempt=extra_attempt)
    after = plan(s, cfg, store=store)
    assert after.best.offer.zone == "use1-az2"
    moved = [r for r in after.rows if r.offer.zone == "use1-az1" and r.offer.instance_type == "p5.48xlarge"][0]
    assert moved.offer.rate_source == "observed"
    assert moved.to_json()["rate_evidence"]["interruptions"] == pytest.approx(4.0, rel=1e-3)


def test_observe_attempt_without_status_uses_the_rows_times_and_the_specs_nodes(store):
    job, att, _ = _job_with_attempt(store, "COMPLETED", NOW - 2 * H, NOW)
    seen = observe_attempt(store, job, att, None, now=NOW)
    assert seen.key == ("aws", "us-east-1", "", "", True)
    assert (seen.node_hours, seen.events, seen.kind) == (pytest.approx(4.0), 0, "ran")


def test_observe_attempt_records_a_capacity_failure(store):
    job, att, st = _job_with_attempt(store, "NO_CAPACITY", None, NOW)
    seen = observe_attempt(store, job, att, st, now=NOW)
    assert seen.kind == "no_capacity"
    [ob] = load(store, NOW)
    assert (ob.capacity_failures, ob.node_hours, ob.events) == (1, 0.0, 0)


# --- `launcher plan` says where each rate came from ------------------------------------

def test_plan_shows_catalog_prior_and_observed_rates(tmp_path, store):
    cfg = make_config(tmp_path, {**SPOT, "od": {"backend": "skypilot", "infra": "aws/us-east-1"}},
                      preemption_rates={"spot": {"aws": 0.08}})
    record(store, AZ1, 6.0, 2, "preempted", NOW)
    result = plan(spec(["aws", "od"]), cfg, store=store)
    rows = {(r.offer.zone, r.offer.instance_type, r.offer.spot): r for r in result.ranked}
    assert rows[("use1-az1", "p5.48xlarge", True)].offer.rate_source == "observed"
    assert rows[("use1-az2", "p5.48xlarge", True)].offer.rate_source == "catalog"   # the config's table
    assert rows[("use1-az1", "p5.48xlarge", False)].offer.rate_source == "prior"    # built-in default
    data = json.loads(json.dumps(result.to_json()))
    obs = [r for r in data["rows"] if r["rate_source"] == "observed"]
    assert obs and obs[0]["rate_evidence"]["node_hours"] > 5.9 and obs[0]["rate_evidence"]["interruptions"] > 1.9
    assert all(r["rate_evidence"] is None for r in data["rows"] if r["rate_source"] != "observed")
    text = render_plan(result)
    assert "interruptions" in text.splitlines()[1]
    assert "/h observed (2 in 6 node-h)" in text and "/h catalog" in text and "/h prior" in text


def test_observe_job_catches_attempts_that_ended_while_the_job_went_on(store):
    """A Slurm requeue in place: attempt 1 was PREEMPTED, attempt 2 is RUNNING when watch looks."""
    spec_yaml = yaml.safe_dump({"name": "t", "run": "true", "resources": {"nodes": 2}})
    store.begin_job("s1", "t", "cluster-a", "slurm", None, spec_yaml)
    h = Handle("slurm", "cluster-a", "s1", "123", 1, {"script": "x"})
    store.record_attempt("s1", 1, "cluster-a", h.to_json(), "123")
    store.update_attempt("s1", 1, state="PREEMPTED", started=NOW - 3 * H, ended=NOW - H)
    store.record_attempt("s1", 2, "cluster-a", h.to_json(), "123")
    store.update_attempt("s1", 2, state="RUNNING", started=NOW - H + 60)
    job = store.get_job("s1")
    running = Status(JobState.RUNNING, extra={"partition": "gpu"})
    [seen] = observe_job(store, job, running, now=NOW)
    assert (seen.key, seen.events, seen.node_hours) == (("cluster-a", "", "", "", False), 1, pytest.approx(4.0))
    assert observe_job(store, job, running, now=NOW) == []          # recorded once
    store.update_attempt("s1", 2, state="COMPLETED", ended=NOW)
    done = Status(JobState.COMPLETED, start_time=NOW - H + 60, end_time=NOW, extra={"partition": "gpu"})
    [last] = observe_job(store, job, done, now=NOW)
    assert (last.key, last.kind) == (("cluster-a", "", "", "gpu", False), "ran")
    assert len(load(store, NOW)) == 2


def test_the_next_skypilot_submission_orders_its_candidates_by_the_learned_rates(tmp_path):
    """Resubmission (watch) and launch render through facts_for: the planner there reads the store."""
    from launcher.api.context import App
    from launcher.launching.submission import facts_for

    cfg = tmp_path / "config.yaml"
    cfg.write_text(yaml.safe_dump({"catalog_dir": str(CATALOG), "targets": {
        "aws": {"backend": "skypilot", "infra": "aws", "use_spot": True}}}))
    app = App(config_path=cfg, home=tmp_path / "home")
    s = spec(["aws"], nodes=2)
    try:
        first = facts_for(app, s, "aws").data["candidates"][0]
        assert first["infra"] == "aws/us-west-2"                 # the cheapest spot price in the catalog
        now = time.time()
        job, att, st = _job_with_attempt(app.store, "PREEMPTED", now - 0.25 * H, now, infra="aws",
                                         status_extra={"cloud": "aws", "region": "us-west-2"})
        seen = observe_attempt(app.store, job, att, st)
        assert seen.key == ("aws", "us-west-2", "", "", True)
        for n in (2, 3):        # and twice more in quick succession
            record(app.store, seen.key, 0.5, 1, "preempted", now, job_id="j1", attempt=n)
        assert facts_for(app, s, "aws").data["candidates"][0]["infra"] == "aws/us-east-1"
    finally:
        app.close()
        app.store.close()
