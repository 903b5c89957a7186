"""The ``neoclouds:`` section of price files: offers SkyPilot's catalogs do not have (or
negotiated prices), by cloud (``launcher.plan.prices``; read by ``offers.py``).

```yaml
neoclouds:                      # offers SkyPilot's catalogs do not have (or negotiated prices)
  - cloud: nebius               # a skypilot target with infra "nebius" picks these up
    region: eu-north1
    zone: null
    instance_type: gpu-h100-sxm-8gpu
    accelerator: H100
    accelerator_count: 8        # per instance
    vcpus: 128
    memory_gib: 1600
    price: 23.60                # $/h per instance, on demand (null: not offered on demand)
    spot_price: null            # $/h per instance as spot (null: no spot)
    preemption_rate: null       # per node-hour; null: the config's / built-in default
    notice: null                # spot notice, e.g. 30s
```

A neocloud entry with the same (cloud, region, zone, instance_type) as a SkyPilot catalog
row replaces that row: this is how a negotiated discount is written down.
"""

from __future__ import annotations

from typing import Optional

from pydantic import Field

from launcher.backend.pricefiles import Duration, PriceModel

from launcher_backends.skypilot.catalog import CatalogRow

PRICE_SECTION = "neoclouds"


class NeocloudOffer(PriceModel):
    cloud: str = Field(min_length=1)
    region: str = Field(min_length=1)
    zone: Optional[str] = None
    instance_type: str = Field(min_length=1)
    accelerator: Optional[str] = None
    accelerator_count: int = Field(0, ge=0)
    vcpus: Optional[float] = Field(None, gt=0)
    memory_gib: Optional[float] = Field(None, gt=0)
    price: Optional[float] = Field(None, ge=0)
    spot_price: Optional[float] = Field(None, ge=0)
    preemption_rate: Optional[float] = Field(None, ge=0)
    notice: Duration = None


PRICE_OPTIONS = list[NeocloudOffer]


def merge_prices(merged: Optional[dict], section: list, source: str) -> dict:
    """One file's ``neoclouds:`` SECTION added to what earlier files gave: {cloud: [(entry,
    where it is written)]}."""
    out = {cloud: list(entries) for cloud, entries in (merged or {}).items()}
    for i, e in enumerate(section):
        out.setdefault(e.cloud.lower(), []).append((e, f"{source}:{PRICE_SECTION}[{i}]"))
    return out


def neocloud_entries(book, cloud: str) -> list:
    """[(NeocloudOffer, where it is written)] of CLOUD in the price files."""
    return book.section(PRICE_SECTION, {}).get(cloud.lower(), [])


def neocloud_rows(book, cloud: str) -> list[tuple[CatalogRow, NeocloudOffer]]:
    """CLOUD's price-file entries as catalog rows (they override the catalog's)."""
    rows = []
    for e, src in neocloud_entries(book, cloud):
        rows.append((CatalogRow(cloud=e.cloud.lower(), instance_type=e.instance_type,
                                accelerator=e.accelerator, accelerator_count=e.accelerator_count,
                                vcpus=e.vcpus, memory_gib=e.memory_gib, price=e.price,
                                spot_price=e.spot_price, region=e.region, zone=e.zone, source=src), e))
    return rows
