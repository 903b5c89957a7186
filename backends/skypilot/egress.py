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

# GCP: Cloud Storage's "data transfer within Google Cloud" between regions
# (cloud.google.com/storage/pricing). Checked on 2026-12-06 with the search tool over stored
# public pages: Google's pricing page is stored, but only its opening (storage prices) could be
# read, not its network table; Google's Cloud Billing API reference (CloudStorageEgressWorkload,
# googleapis.dev) confirms how the table is cut (same continent; different continents, neither
# Australia; one of them Australia) and gives no figure. Two secondary sources were found, and
# they disagree with each other:
#   [S] Skyplane, skyplane/compute/gcp/gcp_pricing.py (GCP VM-to-VM, ~2022): same continent
#       Northern America $0.01, Europe $0.02, Asia $0.05, South America and Australia $0.08;
#       to or from Indonesia (asia-southeast2) or Australia $0.15; other continents $0.08;
#   [M] MongoDB Atlas docs, atlas-stream-processing/gcp-data-transfer-costs.rst (what Atlas bills
#       on GCP): another region in North America $0.02, Oceania and Africa $0.157, other $0.08.
# No figure below could be checked against Google's own table; each says which source it agrees with.
_UNVERIFIED = "not verified against Google's table (2026-12-06: not readable with the search tool)"
GCP_SOURCE = "Cloud Storage data transfer between regions (cloud.google.com/storage/pricing), " + _UNVERIFIED
_GCP_NA = GCP_SOURCE + "; $0.02 agrees with MongoDB Atlas's GCP table, Skyplane's VM-to-VM table says $0.01"
_GCP_EU = GCP_SOURCE + "; $0.02 agrees with Skyplane's VM-to-VM table"
_GCP_ASIA = GCP_SOURCE + "; $0.08 agrees with MongoDB Atlas's 'other', Skyplane's VM-to-VM table says $0.05"
_GCP_HIGH = (GCP_SOURCE + "; $0.15 (Oceania, intercontinental) agrees with Skyplane's VM-to-VM table, "
             "MongoDB Atlas bills $0.157 for Oceania and Africa")

# (cloud) -> list of (source region pattern, destination region pattern, $/GB, source); first match wins
_RULES = {
    "aws": [
        (r"us-east-1", r"us-east-2", 0.01, AWS_SOURCE),
        (r"us-east-2", r"us-east-1", 0.01, AWS_SOURCE),
        (r".*gov.*", r".*", 0.03, AWS_SOURCE),
        (r".*", r".*gov.*", 0.03, AWS_SOURCE),
        (r"(us|ca|eu)-[a-z]+-\d+", r".*", 0.02, AWS_SOURCE),
    ],
    "gcp": [
        (r"(us|northamerica)-[a-z0-9]+", r"(us|northamerica)-[a-z0-9]+", 0.02, _GCP_NA),
        (r"europe-[a-z0-9]+", r"europe-[a-z0-9]+", 0.02, _GCP_EU),
        (r"asia-[a-z0-9]+", r"asia-[a-z0-9]+", 0.08, _GCP_ASIA),
    ],
}
# the highest inter-region rate of each cloud: what an unknown pair is priced at
_HIGHEST = {"aws": (0.147, AWS_SOURCE + ": Africa (af-south-1), the highest"),
            "gcp": (0.15, _GCP_HIGH)}


def per_gb(cloud: str, src: str, dst: str) -> Optional[tuple[float, str]]:
    """($/GB, source) to move data from region SRC to region DST of CLOUD; $0 within a region;
    None when the table does not know the pair."""
    cloud = (cloud or "").lower()
    if src == dst:
        return 0.0, "same region: no transfer charge"
    for a, b, usd, source in _RULES.get(cloud, ()):
        if re.fullmatch(a, src or "") and re.fullmatch(b, dst or ""):
            return usd, source
    return None


def highest(cloud: str) -> Optional[tuple[float, str]]:
    """($/GB, source) of CLOUD's highest inter-region rate; None for a cloud with no table."""
    return _HIGHEST.get((cloud or "").lower())
