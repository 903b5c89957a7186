"""What moving a checkpoint between two regions of one cloud costs, $/GB, with the source of
each figure (the deadline policy prices a move with it, ``launcher.recovery.deadline``).

Object storage to another region of the same cloud (a checkpoint restored from a bucket in the
region it was written in). A pair the table does not know is priced at the cloud's highest
inter-region rate (``highest``), and the caller names it as unknown.
"""

from __future__ import annotations

import re
from typing import Optional

AWS_SOURCE = ("AWS S3 'Data Transfer OUT From Amazon S3 To <region>' (AWS Pricing API, Nov 2024), as "
              "tabulated in skynomad-artifact sky_spot/migration_model.py")
GCP_SOURCE = ("Google Cloud Storage network pricing, data transfer between regions (cloud.google.com/storage/pricing); "
              "figures as published in 2024-2025, not re-read from the live page when added (2026-12-06)")

# (cloud) -> list of (source region pattern, destination region pattern, $/GB); first match wins
_RULES = {
    "aws": [
        (r"us-east-1", r"us-east-2", 0.01),
        (r"us-east-2", r"us-east-1", 0.01),
        (r".*gov.*", r".*", 0.03),
        (r".*", r".*gov.*", 0.03),
        (r"(us|ca|eu)-[a-z]+-\d+", r".*", 0.02),
    ],
    "gcp": [
        (r"(us|northamerica)-[a-z0-9]+", r"(us|northamerica)-[a-z0-9]+", 0.02),
        (r"europe-[a-z0-9]+", r"europe-[a-z0-9]+", 0.02),
        (r"asia-[a-z0-9]+", r"asia-[a-z0-9]+", 0.08),
    ],
}
# the highest inter-region rate of each cloud: what an unknown pair is priced at
_HIGHEST = {"aws": (0.147, AWS_SOURCE + ": Africa (af-south-1), the highest"),
            "gcp": (0.15, GCP_SOURCE + ": Oceania / intercontinental, the highest")}
_SOURCES = {"aws": AWS_SOURCE, "gcp": GCP_SOURCE}


def per_gb(cloud: str, src: str, dst: str) -> Optional[tuple[float, str]]:
    """($/GB, source) to move data from region SRC to region DST of CLOUD; $0 within a region;
    None when the table does not know the pair."""
    cloud = (cloud or "").lower()
    if src == dst:
        return 0.0, "same region: no transfer charge"
    for a, b, usd in _RULES.get(cloud, ()):
        if re.fullmatch(a, src or "") and re.fullmatch(b, dst or ""):
            return usd, _SOURCES[cloud]
    return None


def highest(cloud: str) -> Optional[tuple[float, str]]:
    """($/GB, source) of CLOUD's highest inter-region rate; None for a cloud with no table."""
    return _HIGHEST.get((cloud or "").lower())
