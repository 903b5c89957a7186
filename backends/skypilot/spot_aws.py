"""Live AWS spot prices through boto3's ``describe_spot_price_history``.

boto3 is imported only when this is called (``s3_client.aws_sdk``) (``launcher plan --live-spot-prices``); the
endpoint follows boto3's own settings (``AWS_ENDPOINT_URL_EC2`` / ``AWS_ENDPOINT_URL``)
unless one is passed. Its timeouts and retries are bounded as for S3
(``launcher.checkpoint.s3_client``). SkyPilot's AWS catalog names zones by zone ID
(``use1-az1``) while the price history names them by zone name (``us-east-1a``, which maps
to a different ID in every account), so prices are returned under both, mapped with
``describe_availability_zones`` of the same account.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Iterable, Mapping, Optional

from launcher.checkpoint.s3_client import aws_sdk, client_config
from launcher.core.errors import LauncherError


class SpotPriceError(LauncherError):
    """Live spot prices could not be fetched (the plan falls back to catalog prices)."""


def fetch_aws_spot_prices(region_types: Mapping[str, Iterable[str]], *, endpoint_url: Optional[str] = None,
                          product: str = "Linux/UNIX", now: Optional[datetime] = None
                          ) -> dict[tuple[str, str, str], float]:
    """``{(region, zone id or zone name, instance type): $/h}``: the latest price per zone."""
    boto3, botocore = aws_sdk()
    BotoCoreError, ClientError = botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError

    now = now or datetime.now(timezone.utc)
    out: dict[tuple[str, str, str], float] = {}
    for region, types in sorted(region_types.items()):
        types = sorted(set(types))
        if not types:
            continue
        try:
            client = boto3.client("ec2", region_name=region, endpoint_url=endpoint_url, config=client_config())
            zones = client.describe_availability_zones()["AvailabilityZones"]
            zone_id = {z["ZoneName"]: z.get("ZoneId") for z in zones}
            latest: dict[tuple[str, str], tuple] = {}
            pages = client.get_paginator("describe_spot_price_history").paginate(
                InstanceTypes=types, ProductDescriptions=[product], StartTime=now)
            for page in pages:
                for item in page.get("SpotPriceHistory", []):
                    if not str(item.get("ProductDescription", "")).startswith(product):
                        continue  # Windows, SUSE, RHEL prices
                    k = (item["AvailabilityZone"], item["InstanceType"])
                    ts = item.get("Timestamp") or now
                    if k not in latest or ts > latest[k][0]:
                        latest[k] = (ts, float(item["SpotPrice"]))
        except (BotoCoreError, ClientError) as e:
            raise SpotPriceError(f"live AWS spot prices for {region} unavailable: {e}") from None
        for (az, itype), (_, price) in latest.items():
            out[(region, az, itype)] = price
            zid = zone_id.get(az)
            if zid:
                out[(region, zid, itype)] = price
    return out
