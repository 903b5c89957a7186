"""The Slurm backend prices itself (``Pricing``): one offer per partition.

Target keys read: ``partition``, ``gpu_hour_usd``. Everything else about a partition
(GPU type and count, CPUs, memory, its own price, preemption rate, a static queue wait)
comes from a price file's ``slurm:`` section (``prices.py``). Offers are priced ``gpu_hour_usd x
gpus_per_node (+ node_hour_usd)`` per node: the job pays for the GPUs it asks for, not
for whole nodes. The queue wait is the one measured (``SlurmBackend.queue_wait``, passed
in the context by target and partition), else a price file's static one.
"""

from __future__ import annotations

from typing import Optional

from launcher.plan.context import OfferContext
from launcher.plan.offers import Offer
from launcher.plan.rates import rate_and_source

from launcher_backends.slurm.options import SlurmSection
from launcher_backends.slurm.prices import target_price

RATE_KEY = "slurm"  # the key of Slurm targets in the config's preemption_rates


def offers(spec, ctx: OfferContext, restart_hours: float) -> list[Offer]:
    """One offer per partition the job may go to (``Pricing.offers``)."""
    tprice = target_price(ctx.price_book, ctx.target)
    grace = spec.recovery.grace or 0
    notice = float(grace) if spec.recovery.checkpoint_on_signal else 0.0
    return [_partition_offer(spec, ctx, part, tprice, notice, restart_hours)
            for part in _partitions(spec, ctx.options, tprice)]


def _partitions(spec, raw: dict, tprice) -> list:
    """The partitions the job may go to: the one the spec or the target pins, else every one a
    price file lists for the target, else the cluster's default (None)."""
    pinned = spec.section(SlurmSection).partition or raw.get("partition")
    if pinned:
        return [pinned]
    if tprice and tprice.partitions:
        return list(tprice.partitions)
    return [None]


def _gpu_count(requested: int, declared: Optional[int]) -> int:
    """The GPUs per node an offer on a partition with DECLARED GPUs per node (None: not
    declared) gives a job that asks for REQUESTED."""
    if declared is None:
        return requested  # unknown: assume the request fits
    if requested:
        return min(requested, declared)  # Slurm hands out part of a node's GPUs
    return declared


def _partition_offer(spec, ctx: OfferContext, part: Optional[str], tprice, notice: float,
                     restart_hours: float) -> Offer:
    """The offer of partition PART (None: the default one) of the target; what is not known
    about it goes to the context's notes."""
    name, raw, res = ctx.target, ctx.options, spec.resources
    pp = tprice.partitions.get(part) if (tprice and part) else None
    # most specific first: the partition's price, the config's, the target's in a price file
    gpu_hour = _first(_attr(pp, "gpu_hour_usd"), raw.get("gpu_hour_usd"), _attr(tprice, "gpu_hour_usd"))
    node_hour = _first(_attr(pp, "node_hour_usd"), _attr(tprice, "node_hour_usd")) or 0.0
    label = part or "(default partition)"
    if gpu_hour is None and not node_hour:
        ctx.note(f"target {name}: partition {label} has no price (set gpu_hour_usd in the config "
                 f"or a price file): counted as free")
    acc = pp.accelerator if pp and pp.accelerator else None
    if acc is None and res.gpus_per_node:
        ctx.note(f"target {name}: the GPU type of partition {label} is not declared in a price "
                 f"file; assumed to fit")
    if pp and pp.preemption_rate is not None:
        rate, rate_src = pp.preemption_rate, "catalog"
    else:
        rate, rate_src = rate_and_source(RATE_KEY, False, ctx.rates)
    wait, wait_src = _queue_wait(name, part, pp, ctx.queue_waits)
    if wait_src is None:
        ctx.note(f"target {name}: queue wait on {label} not estimated (counted as 0)")
    return Offer(
        backend="slurm", target=name, cloud=name, region=None, zone=None, instance_type=label,
        accelerator=acc, accelerator_count=_gpu_count(res.gpus_per_node, pp.gpus_per_node if pp else None),
        vcpus=float(pp.cpus_per_node) if pp and pp.cpus_per_node else None,
        memory_gib=pp.memory_gib if pp else None, spot=False,
        hourly_usd=(gpu_hour or 0.0) * res.gpus_per_node + node_hour,
        preemption_rate=rate, queue_wait_hours=wait, notice_seconds=notice,
        source=_price_source(pp, raw, gpu_hour, node_hour), rate_source=rate_src,
        kind="queue", restart_hours=restart_hours, gpu_type_unknown=acc is None)


def _price_source(pp, raw, gpu_hour, node_hour) -> str:
    if pp and pp.gpu_hour_usd is not None:
        return "price file (partition)"
    if raw.get("gpu_hour_usd") is not None:
        return "config gpu_hour_usd"
    if gpu_hour is not None or node_hour:
        return "price file"
    return "unpriced"


def offer_key(target: str, handle_extra: dict, status_extra: dict) -> Optional[tuple]:
    """Slurm attempts are keyed like the Slurm offers: (target, "", "", partition, False)."""
    part = status_extra.get("partition") or handle_extra.get("partition") or ""
    return (target, "", "", str(part), False)


def _first(*vals):
    for v in vals:
        if v is not None:
            return v
    return None


def _attr(obj, name):
    return None if obj is None else getattr(obj, name)


def _queue_wait(name, part, pp, queue_waits) -> tuple[float, Optional[str]]:
    for k in ((name, part), name):
        if k in queue_waits:
            return float(queue_waits[k]), "given"
    if pp and pp.queue_wait is not None:
        return pp.queue_wait / 3600.0, "price file"
    return 0.0, None
