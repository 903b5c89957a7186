"""Where a SkyPilot attempt ran, as the preemption record keys it (``offers.offer_key``), and
what that record cools for a deadline job (``launcher.recovery.deadline.cooled``, issue 32):
the zone SkyPilot reports, AWS zones by the catalog's zone IDs, and a later candidate's
record still matching its offers when no instance type is known."""

from __future__ import annotations

from types import SimpleNamespace

from launcher.recovery.deadline import cooled
from launcher_backends.skypilot.catalog import aws_zone_id
from launcher_backends.skypilot.client import ManagedJob, SdkClient
from launcher_backends.skypilot.offers import offer_key
from launcher_backends.skypilot.states import _cluster_extra, managed_status

AWS_HANDLE = {"infra": "aws/us-east-1", "instance_type": "p3.2xlarge", "use_spot": True}
P3 = ("aws", "us-east-1", "", "p3.2xlarge", True)


def _mapping(tmp_path, monkeypatch, rows, name="az_mappings-abc123.csv"):
    """SkyPilot's own zone name -> zone ID file, where it writes it ($SKY_RUNTIME_DIR/.sky/catalogs/v8/aws)."""
    d = tmp_path / ".sky" / "catalogs" / "v8" / "aws"
    d.mkdir(parents=True, exist_ok=True)
    (d / name).write_text("AvailabilityZoneName,AvailabilityZone\n" + "".join(f"{n},{i}\n" for n, i in rows))
    monkeypatch.setenv("SKY_RUNTIME_DIR", str(tmp_path))


def test_an_aws_preemption_cools_the_zone_it_ran_in_not_the_region(tmp_path, monkeypatch):
    _mapping(tmp_path, monkeypatch, [("us-east-1a", "use1-az2"), ("us-east-1b", "use1-az4")])
    key = offer_key("aws-spot", AWS_HANDLE, {"cloud": "AWS", "region": "us-east-1", "zone": "us-east-1a"})
    assert key == ("aws", "us-east-1", "use1-az2", "p3.2xlarge", True)
    cooling = {key}
    assert cooled(P3[:2] + ("use1-az2",) + P3[3:], cooling)
    assert not cooled(P3[:2] + ("use1-az4",) + P3[3:], cooling)


def test_an_aws_zone_that_cannot_be_told_cools_the_region_as_before(tmp_path, monkeypatch):
    monkeypatch.setenv("SKY_RUNTIME_DIR", str(tmp_path))         # no mapping file: SkyPilot never wrote one
    key = offer_key("aws-spot", AWS_HANDLE, {"cloud": "AWS", "region": "us-east-1", "zone": "us-east-1a"})
    assert key == ("aws", "us-east-1", "", "p3.2xlarge", True)
    assert cooled(P3[:2] + ("use1-az4",) + P3[3:], {key})
    # two accounts that map the name to different IDs: not told either
    _mapping(tmp_path, monkeypatch, [("us-east-1a", "use1-az2")])
    _mapping(tmp_path, monkeypatch, [("us-east-1a", "use1-az6")], name="az_mappings-def456.csv")
    assert aws_zone_id("us-east-1a") == "" and aws_zone_id("use1-az6") == "use1-az6"


def test_a_failover_between_zones_of_a_region_is_keyed_by_the_zone_skypilot_reports():
    handle = {"infra": "gcp/us-east4/us-east4-a", "instance_type": "a3-highgpu-8g", "use_spot": True}
    key = offer_key("gcp-spot", handle, {"cloud": "GCP", "region": "us-east4", "zone": "us-east4-b"})
    assert key == ("gcp", "us-east4", "us-east4-b", "a3-highgpu-8g", True)
    # a status that names no zone (the cluster is gone): the zone it was launched in
    assert offer_key("gcp-spot", handle, {"cloud": "GCP", "region": "us-east4"})[2] == "us-east4-a"


def test_a_later_candidates_record_cools_its_offers_even_without_an_instance_type():
    key = offer_key("t", AWS_HANDLE, {"cloud": "GCP", "region": "us-central1", "zone": "us-central1-a"})
    assert key == ("gcp", "us-central1", "us-central1-a", "", True)
    assert cooled(("gcp", "us-central1", "us-central1-a", "a2-highgpu-1g", True), {key})
    assert not cooled(("gcp", "us-central1", "us-central1-b", "a2-highgpu-1g", True), {key})
    assert not cooled(("gcp", "us-central1", "us-central1-a", "a2-highgpu-1g", False), {key})
    # with the instance type SkyPilot reports for the cluster, the record names it
    key = offer_key("t", AWS_HANDLE, {"cloud": "GCP", "region": "us-central1", "zone": "us-central1-a",
                                      "instance_type": "a2-highgpu-1g"})
    assert key == ("gcp", "us-central1", "us-central1-a", "a2-highgpu-1g", True)


def test_skypilots_status_carries_the_launched_zone_and_instance_type():
    launched = SimpleNamespace(zone="us-east-1a", instance_type="p3.2xlarge", get_cost=lambda s: 3.06)
    record = {"name": "c1", "status": "UP", "cloud": "AWS", "region": "us-east-1", "nodes": 1,
              "handle": SimpleNamespace(launched_resources=launched, launched_nodes=1)}
    cluster = SdkClient._cluster(record)
    assert (cluster.zone, cluster.instance_type) == ("us-east-1a", "p3.2xlarge")
    assert _cluster_extra(cluster)["zone"] == "us-east-1a" and _cluster_extra(cluster)["instance_type"] == "p3.2xlarge"
    assert "zone" in SdkClient._JOB_FIELDS
    st = managed_status(ManagedJob(1, "t", "RECOVERING", cloud="GCP", region="us-east4", zone="us-east4-b"), None)
    assert st.extra["zone"] == "us-east4-b"


def test_a_region_wide_record_without_an_instance_type_cools_every_offer_of_that_region():
    # what offer_key gave for a later candidate before SkyPilot reported its zone (the audit's case)
    record = {("gcp", "us-east4", "", "", True)}
    assert cooled(("gcp", "us-east4", "us-east4-a", "a3-highgpu-8g", True), record)
    assert not cooled(("gcp", "us-west1", "us-west1-a", "a3-highgpu-8g", True), record)
