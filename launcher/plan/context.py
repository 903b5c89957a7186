"""What a backend is handed to price a spec (``Pricing.offers(spec, context)``).

One ``OfferContext`` per target of one ``gather_offers`` call: the target's name and raw
config keys, and what every target shares (price book, rate table, catalog folder,
measured queue waits, live-price settings). Backends add notes with ``note`` ("no
price for partition X") and may keep what one gather should fetch only once in ``cache``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Optional

from launcher.plan.offers import Offer
from launcher.plan.prices import PriceBook


@dataclass
class Gathered:
    offers: list[Offer] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass
class OfferContext:
    target: str                        # the target's name in the user's config
    options: Mapping                   # its config keys, as written (``backend`` included)
    price_book: PriceBook
    rates: Any = None                  # the config's preemption_rates (launcher.backend.config.PreemptionDefaults)
    catalog_dir: Any = None            # the config's catalog_dir (catalog CSVs, for the backends that read them)
    queue_waits: Mapping = field(default_factory=dict)  # {target or (target, queue): hours} measured
    live_spot: bool = False            # ask clouds for current spot prices (--live-spot-prices)
    spot_endpoint_url: Optional[str] = None
    notes: list = field(default_factory=list)  # shared by every target of one gather
    cache: dict = field(default_factory=dict)  # shared too: what one gather fetches once

    def note(self, text: str) -> None:
        self.notes.append(text)

    def for_target(self, name: str, options: Mapping) -> "OfferContext":
        """The same gather (notes and cache shared) for another target."""
        return replace(self, target=name, options=options)
