"""The real-trace replay in bench/: the loader of the spot-traces layout, the world it builds,
and the policies run over the synthetic fixture (tests/fixtures/spot_traces)."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "spot_traces"
SET = FIXTURE / "availability" / "1-node" / "aws-01-01-2000"
sys.path.insert(0, str(BENCH))

import spot_traces  # noqa: E402
import trace_world  # noqa: E402


def test_find_and_load_the_fixture_set():
    assert spot_traces.find_sets(FIXTURE) == [SET]
    ts = spot_traces.load_set(SET)
    assert (ts.name, ts.cloud) == ("aws-01-01-2000", "aws")
    assert ts.instances() == ["k80_1", "v100_1"]
    v100 = ts.of("v100_1")
    assert [(z.zone, z.region) for z in v100] == [("us-east-1a", "us-east-1"), ("us-east-2a", "us-east-2"),
                                                  ("us-west-2a", "us-west-2")]
    assert v100[0].gap_seconds == 900 and v100[0].hours == 96 and v100[0].data[:5] == (1, 1, 1, 1, 0)


def test_regions_of_aws_and_gcp_zones():
    assert spot_traces.region_of("us-west-2c") == "us-west-2"
    assert spot_traces.region_of("us-central1-a") == "us-central1"


@pytest.mark.parametrize("name, doc, words", [
    ("nounderscore.json", {"metadata": {"gap_seconds": 60}, "data": [1]}, "<zone>_<instance>_<count>.json"),
    ("us-east-1a_v100_1.json", {"metadata": {}, "data": [1]}, "metadata.gap_seconds"),
    ("us-east-1a_v100_1.json", {"metadata": {"gap_seconds": 60}, "data": []}, "non-empty list"),
    ("us-east-1a_v100_1.json", {"metadata": {"gap_seconds": 60}, "data": [1, -1]}, "data[1]"),
    ("us-east-1a_v100_1.json", {"metadata": {"gap_seconds": 60}, "data": [1, 0.5]}, "data[1]"),
])
def test_bad_trace_files_are_named(tmp_path, name, doc, words):
    f = tmp_path / name
    f.write_text(json.dumps(doc))
    with pytest.raises(spot_traces.TraceError) as e:
        spot_traces.read_zone(f)
    assert str(f) in str(e.value) and words in str(e.value)


def test_empty_and_missing_directories(tmp_path):
    with pytest.raises(spot_traces.TraceError, match="no <zone>"):
        spot_traces.load_set(tmp_path)
    with pytest.raises(spot_traces.TraceError, match="not a directory"):
        spot_traces.find_sets(tmp_path / "nope")


def test_world_capacity_and_preemption_follow_the_counts():
    w = trace_world.build(spot_traces.load_set(SET).of("v100_1"))
    assert [o.zone for o in w.offers] == ["us-east-1a", "us-east-2a", "us-west-2a"]
    assert w.offers[0].base == 0.918 and w.offers[0].instance_type == "p3.2xlarge"
    assert w.has_capacity(0, 0.9) and not w.has_capacity(0, 1.1)  # tick 4 (1:00-1:15) is empty
    assert w.next_event(0, 0.0) == 1.0 and w.next_event(0, 1.25) == 2.25
    assert w.next_event(2, 0.0) == 96.0  # always up: capacity ends with the trace
    assert w.horizon == 96.0
    assert w.drops_between(0.0, 2.5) == 4   # us-east-1a at 1.0 and 2.25, us-east-2a at 0.5 and 1.75


def test_world_with_on_demand_and_unknown_instances():
    zones = spot_traces.load_set(SET).of("v100_1")
    w = trace_world.build(zones, on_demand=True)
    od = [i for i, o in enumerate(w.offers) if not o.spot]
    assert [w.offers[i].region for i in od] == ["us-east-1", "us-east-2", "us-west-2"]
    assert all(w.has_capacity(i, 50.0) and w.next_event(i, 0.0) == float("inf") for i in od)
    with pytest.raises(ValueError, match="no prices for instance 'x_1'"):
        trace_world.build([dataclasses.replace(z, instance="x_1") for z in zones])
    with pytest.raises(ValueError, match="one instance type"):
        trace_world.build(spot_traces.load_set(SET).zones)


def test_the_launcher_learns_to_leave_flapping_zones_and_eager_does_not():
    """us-east-1a and us-east-2a drop every 75 min; EAGER_NEXT_REGION bounces between their
    regions (each preemption blocks only the region it ran in); the launcher's learned rates
    send it to the steady us-west-2a after a preemption or two."""
    import replay_spot_traces as r

    w = trace_world.build(spot_traces.load_set(SET).of("v100_1"))
    res = r.replay(w, r.policies(1, False), work=8.0, interval=0.5, step=24.0)
    assert len(res[r.BASELINE]) == 4
    eager = res[r.BASELINE]
    for name in ("launcher", "launcher, placement_cooldown 0"):
        for mine, base in zip(res[name], eager):
            assert mine["restarts"] <= 2 < base["restarts"]
            assert mine["cost"] < base["cost"]
    assert all(c["restarts"] == 0 for c in res[r.CLAIRVOYANT])


def test_a_gang_needs_as_many_instances_as_nodes():
    z = spot_traces.ZoneTrace("us-east-2b", "us-east-2", "v100_1", 3600.0, (16, 16, 9, 16, 0, 16), "mem")
    w = trace_world.build([z], nodes=16)
    assert [w.has_capacity(0, h + 0.5) for h in range(6)] == [True, True, False, True, False, True]
    assert w.next_event(0, 0.0) == 2.0 and w.next_event(0, 3.0) == 4.0 and w.next_event(0, 5.0) == 6.0
    w8 = trace_world.build([z], nodes=8)
    assert w8.has_capacity(0, 2.5) and w8.next_event(0, 0.0) == 4.0
