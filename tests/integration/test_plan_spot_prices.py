"""Live AWS spot prices through boto3 against a real moto_server on 127.0.0.1 (no fakes of boto3).

moto answers describe_spot_price_history from its own instance-type offerings, with a
flat price of 0.00001 in every zone; the expected zones are asked from moto through a
different API (describe_instance_type_offerings by zone ID), so the mapping from zone
names to the catalog's zone IDs is checked against moto's own account layout.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import boto3
import pytest
import yaml

from launcher.backend.config import load_config
from launcher.plan import gather_offers
from launcher_backends.skypilot.spot_aws import fetch_aws_spot_prices
from launcher.backend.sections import parse_spec

pytestmark = pytest.mark.s3

ROOT = Path(__file__).resolve().parents[2]
CATALOG = ROOT / "examples" / "catalog"
MOTO_PRICE = 0.00001


def offered_zone_ids(endpoint, region, types):
    ec2 = boto3.client("ec2", region_name=region, endpoint_url=endpoint)
    out = ec2.describe_instance_type_offerings(
        LocationType="availability-zone-id", Filters=[{"Name": "instance-type", "Values": list(types)}])
    return {(o["Location"], o["InstanceType"]) for o in out["InstanceTypeOfferings"]}


def test_prices_come_back_per_zone_under_zone_name_and_zone_id(moto_server):
    types = ["p5.48xlarge", "g6.xlarge"]
    prices = fetch_aws_spot_prices({"us-east-1": types, "us-west-2": ["p4de.24xlarge"]},
                                   endpoint_url=moto_server.endpoint)
    for region, ts in (("us-east-1", types), ("us-west-2", ["p4de.24xlarge"])):
        want = offered_zone_ids(moto_server.endpoint, region, ts)
        got = {(z, t) for (r, z, t) in prices if r == region and "-az" in z}
        assert got == want and want
    ec2 = boto3.client("ec2", region_name="us-east-1", endpoint_url=moto_server.endpoint)
    name_to_id = {z["ZoneName"]: z["ZoneId"] for z in ec2.describe_availability_zones()["AvailabilityZones"]}
    for (r, z, t), price in prices.items():
        assert price == MOTO_PRICE
        if r == "us-east-1" and z in name_to_id:
            assert prices[(r, name_to_id[z], t)] == price


def make_config(tmp_path):
    p = tmp_path / "config.yaml"
    p.write_text(yaml.safe_dump({"catalog_dir": str(CATALOG), "targets": {
        "aws-spot": {"backend": "skypilot", "infra": "aws", "use_spot": True},
        "aws-od": {"backend": "skypilot", "infra": "aws/us-east-1"}}}))
    return p


SPEC = {"name": "t", "run": "true", "targets": ["aws-spot", "aws-od"],
        "resources": {"gpus_per_node": 8, "accelerator": "H100", "time_limit": "10h"}}


def test_live_prices_replace_catalog_spot_prices(moto_server, tmp_path):
    cfg = load_config(make_config(tmp_path))
    got = gather_offers(parse_spec(SPEC), cfg, live_spot=True, spot_endpoint_url=moto_server.endpoint)
    spot = [o for o in got.offers if o.spot]
    catalog_zones = {("us-east-1", "use1-az1"), ("us-east-1", "use1-az2"), ("us-east-1", "use1-az4"),
                     ("us-west-2", "usw2-az1"), ("us-west-2", "usw2-az2"), ("eu-west-1", "euw1-az1")}
    live_zones = set()
    for region in ("us-east-1", "us-west-2", "eu-west-1"):
        live_zones |= {(region, z) for z, _ in offered_zone_ids(moto_server.endpoint, region, ["p5.48xlarge"])}
    live = {(o.region, o.zone) for o in spot if o.source == "aws-live"}
    assert live == catalog_zones & live_zones and live
    assert all(o.hourly_usd == MOTO_PRICE for o in spot if o.source == "aws-live")
    # use1-az4 has no spot price in the catalog; moto offers p5 there, so now it has one
    assert ("us-east-1", "use1-az4") in live
    # on-demand prices are never replaced
    assert all(o.hourly_usd == 98.32 for o in got.offers if not o.spot)
    assert not got.notes


def test_unreachable_endpoint_falls_back_to_catalog_prices_with_a_note(moto_server, tmp_path, monkeypatch):
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = "http://127.0.0.1:%d" % s.getsockname()[1]
    cfg = load_config(make_config(tmp_path))
    got = gather_offers(parse_spec(SPEC), cfg, live_spot=True, spot_endpoint_url=dead)
    assert any("live AWS spot prices for" in n and "using catalog spot prices" in n for n in got.notes)
    assert {o.hourly_usd for o in got.offers if o.spot and o.zone == "use1-az1"} == {41.2944}


def test_cli_flag_reaches_aws_through_the_standard_endpoint_setting(moto_server, tmp_path):
    cfg = make_config(tmp_path)
    (tmp_path / "train.yaml").write_text(yaml.safe_dump(SPEC))
    env = dict(os.environ, **moto_server.env(), LAUNCHER_CONFIG=str(cfg), LAUNCHER_HOME=str(tmp_path / "h"))
    launcher = str(Path(sys.executable).parent / "launcher")
    p = subprocess.run([launcher, "plan", str(tmp_path / "train.yaml"), "--live-spot-prices", "--json"],
                       env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    rows = json.loads(p.stdout)["rows"]
    best = rows[0]
    assert best["spot"] and best["source"] == "aws-live" and best["hourly_usd_per_node"] == MOTO_PRICE
