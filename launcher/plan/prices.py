"""Price files (YAML): neocloud offers and internal Slurm prices, listed in the config's
``price_files`` (paths relative to the config file).

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
slurm:                          # internal prices of Slurm targets, by target name
  cluster-a:
    gpu_hour_usd: 1.10          # used when neither the partition nor the config sets one
    partitions:
      gpu: {gpu_hour_usd: 1.25, accelerator: H100, gpus_per_node: 8, cpus_per_node: 96, memory_gib: 1000}
      preempt: {gpu_hour_usd: 0.40, accelerator: H100, gpus_per_node: 8, preemption_rate: 0.3}
```

A neocloud entry with the same (cloud, region, zone, instance_type) as a SkyPilot catalog
row replaces that row: this is how a negotiated discount is written down.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Optional

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from launcher.spec import units
from launcher.spec.validation import validate_model
from launcher.spec.yamlio import load_yaml, read_text
from launcher.plan.catalog import CatalogRow


def _duration(v):
    return None if v is None else units.parse_duration(v)


Duration = Annotated[Optional[int], BeforeValidator(_duration)]


class _M(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class NeocloudOffer(_M):
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


class SlurmPartitionPrice(_M):
    gpu_hour_usd: Optional[float] = Field(None, ge=0)
    node_hour_usd: Optional[float] = Field(None, ge=0)   # for CPU-only jobs (or on top of GPU-hours)
    accelerator: Optional[str] = None
    gpus_per_node: Optional[int] = Field(None, ge=0)
    cpus_per_node: Optional[int] = Field(None, ge=1)
    memory_gib: Optional[float] = Field(None, gt=0)
    preemption_rate: Optional[float] = Field(None, ge=0)
    queue_wait: Duration = None                          # a static estimate when nothing is probed


class SlurmTargetPrice(_M):
    gpu_hour_usd: Optional[float] = Field(None, ge=0)
    node_hour_usd: Optional[float] = Field(None, ge=0)
    partitions: dict[str, SlurmPartitionPrice] = Field(default_factory=dict)


class PriceFile(_M):
    neoclouds: list[NeocloudOffer] = Field(default_factory=list)
    slurm: dict[str, SlurmTargetPrice] = Field(default_factory=dict)


@dataclass
class PriceBook:
    """Everything the config's price files say, merged (later files win)."""

    neocloud: dict[str, list[tuple[NeocloudOffer, str]]] = field(default_factory=dict)  # cloud -> entries
    slurm: dict[str, SlurmTargetPrice] = field(default_factory=dict)
    files: list[str] = field(default_factory=list)

    def neocloud_rows(self, cloud: str) -> list[tuple[CatalogRow, NeocloudOffer]]:
        rows = []
        for e, src in self.neocloud.get(cloud.lower(), []):
            rows.append((CatalogRow(cloud=e.cloud.lower(), instance_type=e.instance_type,
                                    accelerator=e.accelerator, accelerator_count=e.accelerator_count,
                                    vcpus=e.vcpus, memory_gib=e.memory_gib, price=e.price,
                                    spot_price=e.spot_price, region=e.region, zone=e.zone, source=src), e))
        return rows


def load_price_file(path) -> PriceFile:
    """Parse one price file; errors name the file, the field and its line."""
    text = read_text(path, "price file")
    data, line_of = load_yaml(text, str(path))
    return validate_model(PriceFile, data, str(path), line_of)


def load_price_book(paths, base_dir=None) -> PriceBook:
    book = PriceBook()
    for p in paths:
        path = Path(p).expanduser()
        if not path.is_absolute() and base_dir is not None:
            path = Path(base_dir) / path
        pf = load_price_file(path)
        book.files.append(str(path))
        for i, e in enumerate(pf.neoclouds):
            book.neocloud.setdefault(e.cloud.lower(), []).append((e, f"{path}:neoclouds[{i}]"))
        for name, t in pf.slurm.items():
            prev = book.slurm.get(name)
            if prev is None:
                book.slurm[name] = t
            else:  # merge: later file wins per key and per partition
                parts = {**prev.partitions, **t.partitions}
                book.slurm[name] = SlurmTargetPrice(
                    gpu_hour_usd=t.gpu_hour_usd if t.gpu_hour_usd is not None else prev.gpu_hour_usd,
                    node_hour_usd=t.node_hour_usd if t.node_hour_usd is not None else prev.node_hour_usd,
                    partitions=parts)
    return book
