"""Price files (YAML), listed in the config's ``price_files`` (paths relative to the config
file): what negotiated, internal or extra offers cost.

Each top-level key of a price file is a backend's section, read by that backend alone
(``launcher.backend.protocols.Pricing``: the key, the type validating it and how
later files fold into earlier ones). The built-in sections are ``slurm:`` (internal prices
of Slurm targets, ``launcher_backends.slurm.prices``) and ``neoclouds:`` (offers SkyPilot's
catalogs do not have, or negotiated prices: ``launcher_backends.skypilot.prices``)::

    neoclouds:
      - {cloud: nebius, region: eu-north1, instance_type: gpu-h100-sxm-8gpu, accelerator: H100,
         accelerator_count: 8, price: 23.60}
    slurm:
      cluster-a:
        gpu_hour_usd: 1.10
        partitions: {gpu: {gpu_hour_usd: 1.25, accelerator: H100, gpus_per_node: 8}}

A file is validated against every installed backend's section (an unknown key is an error
naming the file, the field and its line); the merged result is a ``PriceBook`` whose
``section(key)`` a backend's offers read (``OfferContext.price_book``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, create_model

from launcher.backend.pricefiles import PriceModel
from launcher.backend.protocols import Pricing, can
from launcher.backend.registry import default_registry
from launcher.core.errors import LauncherError
from launcher.spec.validation import validate_model
from launcher.spec.yamlio import load_yaml, read_text


@dataclass
class PriceBook:
    """Everything the config's price files say, merged (later files win), by section."""

    sections: dict[str, Any] = field(default_factory=dict)  # section key -> its backend's merged value
    files: list[str] = field(default_factory=list)

    def section(self, key: str, default: Any = None) -> Any:
        """What the files' KEY sections gave, merged by the backend owning the section."""
        return self.sections.get(key, default)


def price_sections(registry=None) -> dict:
    """{section key: backend class} of every installed backend that reads price files; a
    backend that cannot be imported reads none, a built-in's key cannot be taken."""
    reg = registry if registry is not None else default_registry()
    out: dict = {}
    for name in reg.entries:  # built-ins first
        try:
            cls = reg.load_class(name)
        except LauncherError:
            continue
        if can(cls, Pricing) and cls.price_section and cls.price_section not in out:
            out[cls.price_section] = cls
    return out


@lru_cache(maxsize=8)
def _price_file_model(sections: tuple) -> type[BaseModel]:
    fields = {key: (options, Field(default=None)) for key, options in sections}
    return create_model("PriceFile", __base__=PriceModel, **fields)


def price_file_model(registry=None) -> type[BaseModel]:
    """The model a price file is validated with: one optional field per backend section."""
    return _price_file_model(tuple((k, cls.price_options) for k, cls in sorted(price_sections(registry).items())))


def load_price_file(path, registry=None) -> BaseModel:
    """Parse one price file; errors name the file, the field and its line."""
    text = read_text(path, "price file")
    data, line_of = load_yaml(text, str(path))
    return validate_model(price_file_model(registry), data, str(path), line_of)


def load_price_book(paths, base_dir=None, registry=None) -> PriceBook:
    book = PriceBook()
    if not paths:
        return book
    owners = price_sections(registry)
    for p in paths:
        path = Path(p).expanduser()
        if not path.is_absolute() and base_dir is not None:
            path = Path(base_dir) / path
        pf = load_price_file(path, registry)
        book.files.append(str(path))
        for key, cls in owners.items():
            section = getattr(pf, key, None)
            if section is not None:
                book.sections[key] = cls.merge_prices(book.sections.get(key), section, str(path))
    return book
