"""A backend's ``Pricing`` (``launcher.backend.protocols``) forwarded to two modules of its own.

A backend that prices itself keeps the work in its own modules and points at them:

- ``offers_module``, the dotted name of its offers module: ``offers(spec, context,
  restart_hours)`` and ``offer_key(target, handle_extra, status_extra)``. It is imported when
  the planner first asks: it reads the planner's types (``launcher.plan``), which `launcher
  render` and `status` never load.
- ``prices_module``, its price-file section: ``merge_prices(merged, section, source)`` (the
  class declares ``price_section`` and ``price_options`` from the same module).
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any, ClassVar, Optional


class PricedByModules:
    """``offers``, ``offer_key`` and ``merge_prices`` forwarded to the backend's
    ``offers_module`` and ``prices_module`` (see the module doc)."""

    offers_module: ClassVar[str]
    prices_module: ClassVar[ModuleType]
    restart_hours: ClassVar[float]

    @classmethod
    def _offers(cls) -> ModuleType:
        return importlib.import_module(cls.offers_module)

    @classmethod
    def offers(cls, spec: Any, context: Any) -> list:
        return cls._offers().offers(spec, context, cls.restart_hours)

    @classmethod
    def offer_key(cls, target: str, handle_extra: dict, status_extra: dict) -> Optional[tuple]:
        return cls._offers().offer_key(target, handle_extra, status_extra)

    @classmethod
    def merge_prices(cls, merged: Any, section: Any, source: str) -> Any:
        return cls.prices_module.merge_prices(merged, section, source)
