"""Offers for a spec from the user's configured targets: each target's backend prices
itself (``launcher.backend.protocols.Pricing``); this module only asks them.

Config keys read here: ``catalog_dir`` (default ``~/.sky/catalogs/v8``; relative to the
config file), ``price_files``, ``preemption_rates`` (``spot`` / ``on_demand``: cloud ->
rate per node-hour). What a target's own keys mean for its prices is its backend's to
say (``backends/<name>/offers.py``); a backend that cannot price itself gives a note.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, Mapping, Optional

from launcher.backend.config import LOCAL_TARGET
from launcher.backend.protocols import Pricing, can
from launcher.backend.registry import default_registry
from launcher.core.errors import LauncherError
from launcher.plan.chase import Observation, apply_observations
from launcher.plan.context import Gathered, OfferContext
from launcher.plan.observed import load
from launcher.plan.prices import PriceBook, load_price_book
from launcher.plan.ranking import rank

__all__ = ["Gathered", "OfferContext", "gather_offers", "plan", "target_names"]


def target_names(spec, config, explicit: Optional[Iterable[str]] = None) -> list[str]:
    if explicit:
        return list(explicit)
    if spec.targets:
        return list(spec.targets)
    names = [n for n in config.target_names if n != LOCAL_TARGET]
    return names or [LOCAL_TARGET]


def gather_offers(spec, config, *, targets: Optional[Iterable[str]] = None, catalog_dir=None,
                  price_book: Optional[PriceBook] = None, live_spot: bool = False,
                  spot_endpoint_url: Optional[str] = None, queue_waits: Optional[Mapping] = None,
                  observations: Iterable[Observation] = (), store=None, registry=None) -> Gathered:
    """Every offer the spec's targets (or all configured targets) have, priced.

    ``queue_waits``: ``{target or (target, queue): hours}`` measured by backends with a
    queue (``launcher.launching.targeting.queue_waits``). ``observations``: past attempts, for spot
    chasing; ``store``: a StateStore whose recorded attempts (``launcher.plan.observed``,
    fed by ``launcher watch``) are added to them. ``registry``: where backends are found
    (default: the ``launcher.backends`` entry points).
    """
    registry = registry or default_registry()
    names = target_names(spec, config, targets)
    cfg = config.file
    catalog_dir = catalog_dir or cfg.catalog_dir
    if catalog_dir and not Path(str(catalog_dir)).expanduser().is_absolute():
        catalog_dir = Path(config.path).parent / str(catalog_dir)
    book = price_book if price_book is not None else load_price_book(cfg.price_files, Path(config.path).parent)
    g = Gathered()
    shared = OfferContext(target="", options={}, price_book=book, rates=cfg.preemption_rates,
                          catalog_dir=catalog_dir, queue_waits=queue_waits or {}, live_spot=live_spot,
                          spot_endpoint_url=spot_endpoint_url, notes=g.notes)
    for n in names:
        raw = config.raw_target(n)
        backend = raw.get("backend")
        try:
            cls = registry.load(backend, check=False)  # pricing needs no SDK: catalogs are read directly
        except LauncherError:
            cls = None
        if cls is None or not can(cls, Pricing):
            g.notes.append(f"target {n}: backend {backend} has no price source")
            continue
        g.offers.extend(cls.offers(spec, shared.for_target(n, raw)))
    observations = list(observations)
    if store is not None:
        observations += load(store)
    if observations:
        g.offers = apply_observations(g.offers, observations)
    return g


def plan(spec, config, params=None, **gather_kw):
    """Gather the configured offers and rank them: what ``launcher plan`` prints."""
    got = gather_offers(spec, config, **gather_kw)
    return rank(spec, got.offers, params).with_notes(got.notes)
