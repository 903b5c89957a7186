"""The ``slurm:`` section of price files: internal prices of Slurm targets, by target name
(``launcher.plan.prices``; read by ``offers.py``).

```yaml
slurm:                          # internal prices of Slurm targets, by target name
  cluster-a:
    gpu_hour_usd: 1.10          # used when neither the partition nor the config sets one
    partitions:
      gpu: {gpu_hour_usd: 1.25, accelerator: H100, gpus_per_node: 8, cpus_per_node: 96, memory_gib: 1000}
      preempt: {gpu_hour_usd: 0.40, accelerator: H100, gpus_per_node: 8, preemption_rate: 0.3}
```

Later files win per key and per partition.
"""

from __future__ import annotations

from typing import Optional

from pydantic import Field

from launcher.backend.pricefiles import Duration, PriceModel

PRICE_SECTION = "slurm"


class SlurmPartitionPrice(PriceModel):
    gpu_hour_usd: Optional[float] = Field(None, ge=0)
    node_hour_usd: Optional[float] = Field(None, ge=0)   # for CPU-only jobs (or on top of GPU-hours)
    accelerator: Optional[str] = None
    gpus_per_node: Optional[int] = Field(None, ge=0)
    cpus_per_node: Optional[int] = Field(None, ge=1)
    memory_gib: Optional[float] = Field(None, gt=0)
    preemption_rate: Optional[float] = Field(None, ge=0)
    queue_wait: Duration = None                          # a static estimate when nothing is probed


class SlurmTargetPrice(PriceModel):
    gpu_hour_usd: Optional[float] = Field(None, ge=0)
    node_hour_usd: Optional[float] = Field(None, ge=0)
    partitions: dict[str, SlurmPartitionPrice] = Field(default_factory=dict)


PRICE_OPTIONS = dict[str, SlurmTargetPrice]


def merge_prices(merged: Optional[dict], section: dict, source: str) -> dict:
    """One file's ``slurm:`` SECTION folded into what earlier files gave: later wins per key
    and per partition."""
    out = dict(merged or {})
    for name, t in section.items():
        prev = out.get(name)
        if prev is None:
            out[name] = t
        else:
            out[name] = SlurmTargetPrice(
                gpu_hour_usd=t.gpu_hour_usd if t.gpu_hour_usd is not None else prev.gpu_hour_usd,
                node_hour_usd=t.node_hour_usd if t.node_hour_usd is not None else prev.node_hour_usd,
                partitions={**prev.partitions, **t.partitions})
    return out


def target_price(book, name: str) -> Optional[SlurmTargetPrice]:
    """The price files' entry for target NAME, or None."""
    return book.section(PRICE_SECTION, {}).get(name)
