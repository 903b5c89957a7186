"""Offers for a spec from the user's configured targets.

Config keys read (nothing else):

* top level: ``catalog_dir`` (default ``~/.sky/catalogs/v8``), ``price_files``,
  ``preemption_rates`` (``spot`` / ``on_demand``: cloud -> rate per node-hour).
* ``backend: slurm`` targets: ``partition``, ``gpu_hour_usd``. Everything else about a
  partition (GPU type and count, CPUs, memory, its own price, preemption rate, a static
  queue wait) comes from a price file's ``slurm:`` section.
* ``backend: skypilot`` targets: ``infra`` (``aws``, ``aws/us-east-1``,
  ``gcp/us-central1/us-central1-a``, ``runpod``, ``lambda``, or a neocloud named in a price
  file), ``region``, ``zone``, ``use_spot``, ``instance_type``, ``fallbacks`` (further
  placements with the same keys) and ``gpu_hour_usd`` (a negotiated or internal price per
  GPU-hour: replaces catalog prices, and prices infra without a catalog such as
  ``slurm/NAME`` or ``kubernetes/CONTEXT``).
* ``backend: local``: nothing (the machine is free and its resources are not checked).

Slurm offers are priced ``gpu_hour_usd x gpus_per_node (+ node_hour_usd)`` per node:
the job pays for the GPUs it asks for, not for whole nodes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Mapping, Optional

from .catalog import CatalogError, CatalogRow, load_catalog
from .chase import Observation, apply_observations
from .offers import Offer
from .prices import PriceBook, load_price_book
from .rates import notice_seconds, rate_and_source

_NO_CATALOG_INFRA = {"k8s", "kubernetes", "ssh", "slurm", "local"}


@dataclass
class Gathered:
    offers: list[Offer] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def target_names(spec, config, explicit: Optional[Iterable[str]] = None) -> list[str]:
    if explicit:
        return list(explicit)
    if spec.targets:
        return list(spec.targets)
    names = [n for n in config.target_names if n != "local"]
    return names or ["local"]


def parse_infra(infra: Optional[str]) -> tuple[Optional[str], Optional[str], Optional[str]]:
    """SkyPilot's ``cloud[/region[/zone]]``; ``*`` means any."""
    if not infra:
        return None, None, None
    parts = [p.strip() or None for p in str(infra).split("/")]
    parts = [None if p == "*" else p for p in parts] + [None, None]
    return (parts[0].lower() if parts[0] else None), parts[1], parts[2]


def slurm_offers(name: str, raw: Mapping, spec, book: PriceBook, rates_cfg,
                 queue_waits: Mapping) -> Gathered:
    g = Gathered()
    res = spec.resources
    tprice = book.slurm.get(name)
    pinned = spec.slurm.partition or raw.get("partition")
    if pinned:
        parts = [pinned]
    elif tprice and tprice.partitions:
        parts = list(tprice.partitions)
    else:
        parts = [None]
    grace = spec.recovery.grace or 0
    notice = float(grace) if spec.recovery.checkpoint_on_signal else 0.0
    for part in parts:
        pp = tprice.partitions.get(part) if (tprice and part) else None
        # most specific first: the partition's price, the config's, the target's in a price file
        gpu_hour = _first(_attr(pp, "gpu_hour_usd"), raw.get("gpu_hour_usd"), _attr(tprice, "gpu_hour_usd"))
        node_hour = _first(_attr(pp, "node_hour_usd"), _attr(tprice, "node_hour_usd")) or 0.0
        label = part or "(default partition)"
        if gpu_hour is None and not node_hour:
            g.notes.append(f"target {name}: partition {label} has no price (set gpu_hour_usd in the config "
                           f"or a price file): counted as free")
        price = (gpu_hour or 0.0) * res.gpus_per_node + node_hour
        declared = pp.gpus_per_node if pp and pp.gpus_per_node is not None else None
        if declared is None:
            count = res.gpus_per_node           # unknown: assume the request fits
        elif res.gpus_per_node:
            count = min(res.gpus_per_node, declared)  # Slurm hands out part of a node's GPUs
        else:
            count = declared
        acc = pp.accelerator if pp and pp.accelerator else None
        if acc is None and res.gpus_per_node:
            g.notes.append(f"target {name}: the GPU type of partition {label} is not declared in a price "
                           f"file; assumed to fit")
        if pp and pp.preemption_rate is not None:
            rate, rate_src = pp.preemption_rate, "catalog"
        else:
            rate, rate_src = rate_and_source("slurm", False, rates_cfg)
        wait, wait_src = _queue_wait(name, part, pp, queue_waits)
        if wait_src is None:
            g.notes.append(f"target {name}: queue wait on {label} not estimated (counted as 0)")
        if pp and pp.gpu_hour_usd is not None:
            source = "price file (partition)"
        elif raw.get("gpu_hour_usd") is not None:
            source = "config gpu_hour_usd"
        elif gpu_hour is not None or node_hour:
            source = "price file"
        else:
            source = "unpriced"
        g.offers.append(Offer(
            backend="slurm", target=name, cloud=name, region=None, zone=None, instance_type=label,
            accelerator=acc, accelerator_count=count,
            vcpus=float(pp.cpus_per_node) if pp and pp.cpus_per_node else None,
            memory_gib=pp.memory_gib if pp else None, spot=False, hourly_usd=price,
            preemption_rate=rate, queue_wait_hours=wait, notice_seconds=notice, source=source,
            rate_source=rate_src))
    return g


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


def _wanted(row: CatalogRow, res) -> bool:
    if res.accelerator:
        return bool(row.accelerator) and row.accelerator.lower() == res.accelerator.lower()
    if res.gpus_per_node:
        return bool(row.accelerator) and row.accelerator_count > 0
    return not row.accelerator


def skypilot_offers(name: str, raw: Mapping, spec, book: PriceBook, rates_cfg, catalog_dir,
                    live: Optional[Mapping] = None) -> Gathered:
    """The target's own placement, then its ``fallbacks``, each matched against the catalog."""
    g = Gathered()
    own = {k: raw.get(k) for k in ("infra", "region", "zone", "use_spot", "instance_type")}
    if not own["infra"] and raw.get("cloud"):
        own["infra"] = raw.get("cloud")
    seen = set()
    for placement in [own, *(raw.get("fallbacks") or [])]:
        part = _placement_offers(name, placement, raw.get("gpu_hour_usd"), spec, book, rates_cfg,
                                 catalog_dir, live)
        for o in part.offers:
            if (o.key, o.accelerator_count) not in seen:
                seen.add((o.key, o.accelerator_count))
                g.offers.append(o)
        g.notes.extend(n for n in part.notes if n not in g.notes)
    return g


def _placement_offers(name: str, pl: Mapping, gpu_hour: Optional[float], spec, book: PriceBook, rates_cfg,
                      catalog_dir, live: Optional[Mapping]) -> Gathered:
    g = Gathered()
    res = spec.resources
    cloud, region, zone = parse_infra(pl.get("infra"))
    region = pl.get("region") or region
    zone = pl.get("zone") or zone
    spot = bool(pl.get("use_spot", False))
    itype = pl.get("instance_type")
    if not cloud:
        g.notes.append(f"target {name}: no infra (cloud) set, so no catalog to price it from")
        return g
    if cloud in _NO_CATALOG_INFRA:
        if gpu_hour is None:
            g.notes.append(f"target {name}: infra {pl.get('infra')} has no price catalog; set gpu_hour_usd "
                           f"on the target or add it to a price file")
            return g
        # e.g. slurm/NAME or kubernetes/CONTEXT through SkyPilot, priced per GPU-hour
        rate, rate_src = rate_and_source(cloud, False, rates_cfg)
        g.offers.append(Offer(
            backend="skypilot", target=name, cloud=cloud, region=region, zone=None,
            instance_type=itype or str(pl.get("infra")), accelerator=res.accelerator,
            accelerator_count=res.gpus_per_node, vcpus=None, memory_gib=None, spot=False,
            hourly_usd=gpu_hour * res.gpus_per_node, preemption_rate=rate,
            source="config gpu_hour_usd", rate_source=rate_src))
        return g
    rows: dict[tuple, tuple[CatalogRow, object]] = {}
    try:
        for r in load_catalog(cloud, catalog_dir):
            rows[(r.region, r.zone, r.instance_type, r.accelerator)] = (r, None)
    except CatalogError as e:
        if not book.neocloud.get(cloud):
            g.notes.append(f"target {name}: {e}")
    for r, entry in book.neocloud_rows(cloud):  # price files override catalog rows
        rows[(r.region, r.zone, r.instance_type, r.accelerator)] = (r, entry)
    for r, entry in rows.values():
        if region and r.region != region or zone and r.zone != zone or itype and r.instance_type != itype:
            continue
        if not _wanted(r, res):
            continue
        price, source = (r.spot_price, r.source) if spot else (r.price, r.source)
        if spot and live is not None and cloud == "aws":
            lp = live.get((r.region, r.zone or "", r.instance_type))
            if lp is not None:
                price, source = lp, "aws-live"
        if gpu_hour is not None and r.accelerator_count:
            price, source = gpu_hour * r.accelerator_count, "config gpu_hour_usd"  # negotiated contract
        if price is None:
            continue
        if entry is not None and entry.preemption_rate is not None:
            rate, rate_src = entry.preemption_rate, "catalog"
        else:
            rate, rate_src = rate_and_source(cloud, spot, rates_cfg)
        notice = entry.notice if entry is not None and entry.notice is not None else notice_seconds(cloud, spot)
        g.offers.append(Offer(
            backend="skypilot", target=name, cloud=cloud, region=r.region, zone=r.zone,
            instance_type=r.instance_type, accelerator=r.accelerator, accelerator_count=r.accelerator_count,
            vcpus=r.vcpus, memory_gib=r.memory_gib, spot=spot, hourly_usd=float(price),
            preemption_rate=float(rate), queue_wait_hours=0.0, notice_seconds=float(notice), source=source,
            rate_source=rate_src))
    if not g.offers and not g.notes:
        what = f"{res.gpus_per_node} x {res.accelerator}" if res.accelerator else "these resources"
        g.notes.append(f"target {name}: no {'spot ' if spot else ''}offer for {what} in the {cloud} catalog"
                       + (f" in {region}" if region else ""))
    return g


def local_offer(name: str, spec) -> Offer:
    res = spec.resources
    return Offer(backend="local", target=name, cloud="local", region=None, zone=None,
                 instance_type="this machine", accelerator=res.accelerator, accelerator_count=res.gpus_per_node,
                 vcpus=None, memory_gib=None, spot=False, hourly_usd=0.0, preemption_rate=0.0,
                 source="local (resources not checked)")


def _live_requests(spec, config, names) -> dict[str, set]:
    """Regions and instance types of the AWS spot targets, to ask AWS about."""
    want: dict[str, set] = {}
    for n in names:
        raw = config.raw_target(n)
        if raw.get("backend") != "skypilot" or not raw.get("use_spot"):
            continue
        cloud, region, _ = parse_infra(raw.get("infra") or raw.get("cloud"))
        if cloud != "aws":
            continue
        region = raw.get("region") or region
        try:
            rows = load_catalog("aws", config.file.catalog_dir)
        except CatalogError:
            continue
        for r in rows:
            if (not region or r.region == region) and _wanted(r, spec.resources) \
                    and (not raw.get("instance_type") or r.instance_type == raw.get("instance_type")):
                want.setdefault(r.region, set()).add(r.instance_type)
    return want


def gather_offers(spec, config, *, targets: Optional[Iterable[str]] = None, catalog_dir=None,
                  price_book: Optional[PriceBook] = None, live_spot: bool = False,
                  spot_endpoint_url: Optional[str] = None, queue_waits: Optional[Mapping] = None,
                  observations: Iterable[Observation] = (), store=None) -> Gathered:
    """Every offer the spec's targets (or all configured targets) have, priced.

    ``queue_waits``: ``{target or (target, partition): hours}`` measured by the Slurm
    backend (see ``launcher_backends.slurm.queue``). ``observations``: past attempts, for spot chasing;
    ``store``: a StateStore whose recorded attempts (``launcher.plan.observed``, fed by
    ``launcher watch``) are added to them.
    """
    g = Gathered()
    names = target_names(spec, config, targets)
    cfg = config.file
    catalog_dir = catalog_dir or cfg.catalog_dir
    if catalog_dir and not Path(str(catalog_dir)).expanduser().is_absolute():
        catalog_dir = Path(config.path).parent / str(catalog_dir)
    book = price_book if price_book is not None else load_price_book(cfg.price_files, Path(config.path).parent)
    live = None
    if live_spot:
        from .spot_aws import SpotPriceError, fetch_aws_spot_prices

        try:
            live = fetch_aws_spot_prices(_live_requests(spec, config, names), endpoint_url=spot_endpoint_url)
        except SpotPriceError as e:
            g.notes.append(f"{e}; using catalog spot prices")
    for n in names:
        raw = config.raw_target(n)
        backend = raw.get("backend")
        if backend == "slurm":
            part = slurm_offers(n, raw, spec, book, cfg.preemption_rates, queue_waits or {})
        elif backend == "skypilot":
            part = skypilot_offers(n, raw, spec, book, cfg.preemption_rates, catalog_dir, live)
        elif backend == "local":
            part = Gathered([local_offer(n, spec)], [])
        else:
            part = Gathered([], [f"target {n}: backend {backend} has no price source"])
        g.offers.extend(part.offers)
        g.notes.extend(part.notes)
    observations = list(observations)
    if store is not None:
        from .observed import load

        observations += load(store)
    if observations:
        g.offers = apply_observations(g.offers, observations)
    return g


def plan(spec, config, params=None, **gather_kw):
    """Gather the configured offers and rank them: what ``launcher plan`` prints."""
    from .ranking import rank

    got = gather_offers(spec, config, **gather_kw)
    return rank(spec, got.offers, params).with_notes(got.notes)
