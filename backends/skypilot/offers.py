"""The SkyPilot backend prices itself (``Pricing``): the target's own placement, then
its ``fallbacks``, each matched against SkyPilot's catalog CSVs (read directly: ``sky`` is
never imported), neocloud price files and, with ``--live-spot-prices``, AWS's current spot
prices.

Target keys read: ``infra`` (``aws``, ``aws/us-east-1``, ``gcp/us-central1/us-central1-a``,
``runpod``, ``lambda``, or a neocloud named in a price file; ``cloud`` is the older spelling),
``region``, ``zone``, ``use_spot``, ``instance_type``, ``fallbacks`` (further placements with
the same keys) and ``gpu_hour_usd`` (a negotiated or internal price per GPU-hour: replaces
catalog prices, and prices infra without a catalog such as ``slurm/NAME`` or
``kubernetes/CONTEXT``).
"""

from __future__ import annotations

import dataclasses
from typing import Mapping, Optional

from launcher.plan.context import Gathered, OfferContext
from launcher.plan.offers import Offer
from launcher.plan.rates import notice_seconds, rate_and_source
from launcher_backends.skypilot.catalog import CatalogError, CatalogRow, aws_zone_id, load_catalog
from launcher_backends.skypilot.prices import neocloud_entries, neocloud_rows
from launcher_backends.skypilot.spot_aws import SpotPriceError, fetch_aws_spot_prices

_NO_CATALOG_INFRA = {"k8s", "kubernetes", "ssh", "slurm", "local"}
_LIVE = "skypilot.aws_spot"  # OfferContext.cache key: live AWS spot prices already fetched


def parse_infra(infra: Optional[str]) -> tuple[Optional[str], Optional[str], Optional[str]]:
    """SkyPilot's ``cloud[/region[/zone]]``; ``*`` means any."""
    if not infra:
        return None, None, None
    parts = [p.strip() or None for p in str(infra).split("/")]
    parts = [None if p == "*" else p for p in parts] + [None, None]
    return (parts[0].lower() if parts[0] else None), parts[1], parts[2]


def _wanted(row: CatalogRow, res) -> bool:
    if res.accelerator:
        return bool(row.accelerator) and row.accelerator.lower() == res.accelerator.lower()
    if res.gpus_per_node:
        return bool(row.accelerator) and row.accelerator_count > 0
    return not row.accelerator


def offers(spec, ctx: OfferContext, restart_hours: float) -> list[Offer]:
    """The target's own placement, then its ``fallbacks``, each matched against the catalog
    (``Pricing.offers``)."""
    raw = ctx.options
    live = _live_prices(spec, ctx) if ctx.live_spot else None
    own = {k: raw.get(k) for k in ("infra", "region", "zone", "use_spot", "instance_type")}
    if not own["infra"] and raw.get("cloud"):
        own["infra"] = raw.get("cloud")
    g = Gathered()
    seen = set()
    for placement in [own, *(raw.get("fallbacks") or [])]:
        part = _placement_offers(ctx.target, placement, raw.get("gpu_hour_usd"), spec, ctx, live)
        for o in part.offers:
            if (o.key, o.accelerator_count) not in seen:
                seen.add((o.key, o.accelerator_count))
                g.offers.append(o)
        g.notes.extend(n for n in part.notes if n not in g.notes)
    for n in g.notes:
        ctx.note(n)
    return [_with_restart(o, restart_hours) for o in g.offers]


def _with_restart(o: Offer, hours: float) -> Offer:
    return dataclasses.replace(o, restart_hours=hours)


def _placement_offers(name: str, pl: Mapping, gpu_hour: Optional[float], spec, ctx: OfferContext,
                      live: Optional[Mapping]) -> Gathered:
    """The offers of one placement PL of target NAME (its infra, region, zone, spot or not,
    instance type): from the catalog and price files, or priced per GPU-hour on infra that has
    no catalog (GPU_HOUR: the target's gpu_hour_usd)."""
    g = Gathered()
    cloud, region, zone = parse_infra(pl.get("infra"))
    region = pl.get("region") or region
    zone = pl.get("zone") or zone
    if not cloud:
        g.notes.append(f"target {name}: no infra (cloud) set, so no catalog to price it from")
    elif cloud in _NO_CATALOG_INFRA:
        _uncatalogued_offer(name, cloud, region, pl, gpu_hour, spec.resources, ctx, g)
    else:
        _catalog_offers(name, cloud, region, zone, pl, gpu_hour, spec.resources, ctx, live, g)
    return g


def _uncatalogued_offer(name: str, cloud: str, region: Optional[str], pl: Mapping, gpu_hour: Optional[float], res,
                        ctx: OfferContext, g: Gathered) -> None:
    """Add to G the offer of infra without a price catalog (e.g. slurm/NAME or kubernetes/CONTEXT
    through SkyPilot), priced per GPU-hour; without GPU_HOUR a note says it cannot be priced."""
    if gpu_hour is None:
        g.notes.append(f"target {name}: infra {pl.get('infra')} has no price catalog; set gpu_hour_usd "
                       f"on the target or add it to a price file")
        return
    rate, rate_src = rate_and_source(cloud, False, ctx.rates)
    g.offers.append(Offer(
        backend="skypilot", target=name, cloud=cloud, region=region, zone=None,
        instance_type=pl.get("instance_type") or str(pl.get("infra")), accelerator=res.accelerator,
        accelerator_count=res.gpus_per_node, vcpus=None, memory_gib=None, spot=False,
        hourly_usd=gpu_hour * res.gpus_per_node, preemption_rate=rate,
        source="config gpu_hour_usd", rate_source=rate_src))


def _catalog_offers(name: str, cloud: str, region: Optional[str], zone: Optional[str], pl: Mapping,
                    gpu_hour: Optional[float], res, ctx: OfferContext, live: Optional[Mapping], g: Gathered) -> None:
    """Add to G the offers of the catalog rows of CLOUD (price files' rows overriding them) in
    REGION and ZONE (None: any) of the placement's instance type that fit RES; a note when none does."""
    spot = bool(pl.get("use_spot", False))
    itype = pl.get("instance_type")
    for r, entry in _rows(name, cloud, ctx, g).values():
        if region and r.region != region or zone and r.zone != zone or itype and r.instance_type != itype:
            continue
        if not _wanted(r, res):
            continue
        offer = _catalog_offer(name, cloud, r, entry, spot, gpu_hour, ctx, live)
        if offer is not None:
            g.offers.append(offer)
    if not g.offers and not g.notes:
        what = f"{res.gpus_per_node} x {res.accelerator}" if res.accelerator else "these resources"
        g.notes.append(f"target {name}: no {'spot ' if spot else ''}offer for {what} in the {cloud} catalog"
                       + (f" in {region}" if region else ""))


def _rows(name: str, cloud: str, ctx: OfferContext, g: Gathered) -> dict:
    """The cloud's catalog rows, price files' rows overriding them: {key: (row, price file entry)}."""
    book = ctx.price_book
    rows: dict[tuple, tuple[CatalogRow, object]] = {}
    try:
        for r in load_catalog(cloud, ctx.catalog_dir):
            rows[(r.region, r.zone, r.instance_type, r.accelerator)] = (r, None)
    except CatalogError as e:
        if not neocloud_entries(book, cloud):
            g.notes.append(f"target {name}: {e}")
    for r, entry in neocloud_rows(book, cloud):  # price files override catalog rows
        rows[(r.region, r.zone, r.instance_type, r.accelerator)] = (r, entry)
    return rows


def _catalog_offer(name, cloud, r: CatalogRow, entry, spot, gpu_hour, ctx, live) -> Optional[Offer]:
    price, source = (r.spot_price, r.source) if spot else (r.price, r.source)
    if spot and live is not None and cloud == "aws":
        lp = live.get((r.region, r.zone or "", r.instance_type))
        if lp is not None:
            price, source = lp, "aws-live"
    if gpu_hour is not None and r.accelerator_count:
        price, source = gpu_hour * r.accelerator_count, "config gpu_hour_usd"  # negotiated contract
    if price is None:
        return None
    if entry is not None and entry.preemption_rate is not None:
        rate, rate_src = entry.preemption_rate, "catalog"
    else:
        rate, rate_src = rate_and_source(cloud, spot, ctx.rates)
    notice = entry.notice if entry is not None and entry.notice is not None else notice_seconds(cloud, spot)
    return Offer(
        backend="skypilot", target=name, cloud=cloud, region=r.region, zone=r.zone,
        instance_type=r.instance_type, accelerator=r.accelerator, accelerator_count=r.accelerator_count,
        vcpus=r.vcpus, memory_gib=r.memory_gib, spot=spot, hourly_usd=float(price),
        preemption_rate=float(rate), queue_wait_hours=0.0, notice_seconds=float(notice), source=source,
        rate_source=rate_src)


def _live_prices(spec, ctx: OfferContext) -> Optional[Mapping]:
    """AWS's current spot prices for this target's regions and instance types (boto3), or
    None. Asked once per gather for the same request; a failure is a note, and catalog
    prices stand."""
    want = _live_requests(spec, ctx)
    if not want:
        return None
    key = (_LIVE, tuple(sorted((r, tuple(sorted(t))) for r, t in want.items())))
    if key not in ctx.cache:
        try:
            ctx.cache[key] = fetch_aws_spot_prices(want, endpoint_url=ctx.spot_endpoint_url)
        except SpotPriceError as e:
            ctx.cache[key] = None
            ctx.note(f"{e}; using catalog spot prices")
    return ctx.cache[key]


def _live_requests(spec, ctx: OfferContext) -> dict[str, set]:
    """Regions and instance types of this target, when it is an AWS spot target, to ask AWS about."""
    raw = ctx.options
    if not raw.get("use_spot"):
        return {}
    cloud, region, _ = parse_infra(raw.get("infra") or raw.get("cloud"))
    if cloud != "aws":
        return {}
    region = raw.get("region") or region
    try:
        rows = load_catalog("aws", ctx.catalog_dir)
    except CatalogError:
        return {}
    want: dict[str, set] = {}
    for r in rows:
        if (not region or r.region == region) and _wanted(r, spec.resources) \
                and (not raw.get("instance_type") or r.instance_type == raw.get("instance_type")):
            want.setdefault(r.region, set()).add(r.instance_type)
    return want


def offer_key(target: str, handle_extra: dict, status_extra: dict) -> Optional[tuple]:
    """(cloud, region, zone, instance type, spot) of the attempt: what it was launched with,
    narrowed to where SkyPilot reports it ran (``status_extra``: cloud, region, zone, instance
    type). A later candidate in another region has the instance type SkyPilot reports, else ""
    (which matches any: ``launcher.recovery.deadline.cooled``). AWS zones are reported by name
    and keyed by zone ID as the catalog lists them (``aws_zone_id``: SkyPilot's own mapping
    file); a zone that cannot be told is "", which cools its whole region."""
    infra = str(handle_extra.get("infra") or "")
    parts = [p for p in infra.split("/")] + ["", "", ""]
    cloud, region, zone = (parts[0] or "").lower(), parts[1] or "", parts[2] or ""
    itype = str(handle_extra.get("instance_type") or "")
    ran_cloud = str(status_extra.get("cloud") or "").lower()
    ran_region = str(status_extra.get("region") or "")
    if ran_cloud and (ran_cloud != cloud or (ran_region and ran_region != region)):
        cloud, region, zone, itype = ran_cloud, ran_region, "", ""   # a later candidate ran it
    elif ran_region and not region:
        region = ran_region
    ran_zone = str(status_extra.get("zone") or "")
    if ran_zone and ran_zone != "*":
        zone = ran_zone               # SkyPilot may have failed over between zones of the region
    zone = "" if zone == "*" else zone
    if cloud == "aws":
        zone = aws_zone_id(zone)
    itype = str(status_extra.get("instance_type") or "") or itype
    if not cloud or cloud in ("*", "kubernetes", "k8s", "ssh", "local"):
        return None
    return (cloud, "" if region == "*" else region, zone, itype, bool(handle_extra.get("use_spot")))
