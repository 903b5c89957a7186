"""Dense peak throughput of accelerators, by the names users have for them (pure; data in
``peaks.json`` beside this file).

A name is looked up exactly, after one normalisation that every form goes through: a SkyPilot
accelerator (``H100``, ``A100-80GB:8``, ``tpu-v5litepod-8``), a Slurm GRES type
(``gpu:h100:8``, ``nvidia_h100_80gb_hbm3``, ``a100_80g``), an ``nvidia-smi`` / ``rocm-smi``
product name (``NVIDIA H100 80GB HBM3``, ``Tesla V100-SXM2-16GB``, ``AMD Instinct MI300X``),
any case. Normalising lower-cases, splits on ``-_:/.`` and spaces, drops vendor words
(NVIDIA, Tesla, AMD, Instinct, ...), memory sizes (``80GB``, ``HBM3``) and trailing counts
(``:8``, a TPU slice's ``-8``). What is left must equal one row's alias: there is no substring
or prefix match, so ``GB300`` never finds ``B300`` and ``H100 PCIe`` never finds the SXM row.
A name that matches nothing raises ``PeakUnknown`` ("peak unknown: NAME"): no silent fallback.
"""

from __future__ import annotations

import difflib
import functools
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from launcher.core.errors import LauncherError

PRECISIONS = ("fp32", "tf32", "bf16", "fp16", "fp8", "int8")
DEFAULT_PRECISION = "bf16"
_TABLE = Path(__file__).with_name("peaks.json")

_VENDOR_WORDS = {"nvidia", "tesla", "amd", "instinct", "intel", "habana", "google", "cloud", "amazon", "gpu",
                 "gres", "tpu", "tensor", "core", "accelerator"}
_MEMORY = re.compile(r"^(\d+(gb|g|gib)|hbm\d*e?)$")
_INSTANCE_SIZE = re.compile(r"^\d*x?large$")
_FAMILY_DIGIT = re.compile(r"\b(gaudi|trainium|trn|inferentia) (\d)\b")


class PeakUnknown(LauncherError):
    """No peak for a name (or for its precision): the message starts with "peak unknown: NAME"."""


@dataclass(frozen=True)
class Row:
    name: str
    vendor: str
    per: str  # what one figure is for: "GPU", "chip", "HPU", "GCD"
    tflops: dict  # {precision: dense TFLOPS or None}
    aliases: tuple
    source: str
    date: str
    dense: bool
    note: str = ""

    def to_dict(self) -> dict:
        return {"name": self.name, "vendor": self.vendor, "per": self.per, "dense": self.dense,
                "tflops": dict(self.tflops), "source": self.source, "date": self.date, "note": self.note,
                "aliases": list(self.aliases)}


@dataclass(frozen=True)
class Peak:
    """The denominator of MFU: one accelerator's dense peak at one precision."""

    name: str
    precision: str
    tflops: float
    source: str
    per: str = "GPU"
    dense: Optional[bool] = True  # None: a figure the user gave (resources.peak_tflops)

    def describe(self) -> str:
        """'dense BF16 peak, H100 SXM, 989 TFLOPS per GPU'."""
        kind = "dense " if self.dense else ("" if self.dense is None else "sparse ")
        return f"{kind}{self.precision.upper()} peak, {self.name}, {fmt_tflops(self.tflops)} TFLOPS per {self.per}"

    def to_dict(self) -> dict:
        return {"name": self.name, "precision": self.precision, "tflops": self.tflops, "source": self.source,
                "per": self.per, "dense": self.dense}


def fmt_tflops(x: float) -> str:
    return f"{x:.0f}" if x >= 100 else f"{x:.3g}"


def normalise(name: str) -> str:
    """The lookup key of NAME (see the module docstring)."""
    s = re.sub(r"[-_:/.,()\s]+", " ", str(name).strip().lower())
    s = _FAMILY_DIGIT.sub(r"\1\2", s)
    tokens = [t for t in s.split() if t not in _VENDOR_WORDS and not _MEMORY.match(t)
              and not _INSTANCE_SIZE.match(t)]
    while len(tokens) > 1 and tokens[-1].isdigit():  # a count: H100:8, tpu-v4-8, A100:0.5
        tokens.pop()
    return " ".join(tokens)


@functools.lru_cache(maxsize=1)
def rows() -> tuple:
    """Every row of the table, in its order."""
    doc = json.loads(_TABLE.read_text(encoding="utf-8"))
    return tuple(Row(name=r["name"], vendor=r["vendor"], per=r["per"],
                     tflops={p: r["tflops"].get(p) for p in PRECISIONS}, aliases=tuple(r["aliases"]),
                     source=r["source"], date=r["date"], dense=bool(r["dense"]), note=r.get("note", ""))
                 for r in doc["rows"])


@functools.lru_cache(maxsize=1)
def _index() -> dict:
    """{normalised alias: row}; an alias two rows share is a table error, raised here."""
    out: dict = {}
    for row in rows():
        for alias in (row.name, *row.aliases):
            key = normalise(alias)
            other = out.get(key)
            if other is not None and other is not row:
                raise ValueError(f"peaks.json: {alias!r} ({key!r}) names both {other.name} and {row.name}")
            out[key] = row
    return out


def find(name: str) -> Row:
    """The row NAME names; PeakUnknown when none does."""
    key = normalise(name or "")
    row = _index().get(key)
    if row is None:
        raise PeakUnknown(f"peak unknown: {name}" + _hint(key))
    return row


def _hint(key: str) -> str:
    close = difflib.get_close_matches(key, list(_index()), n=6, cutoff=0.75) if key else []
    names = list(dict.fromkeys(_index()[k].name for k in close))[:3]
    near = f"did you mean {' or '.join(names)}? " if names else ""
    return f" ({near}`launcher peaks` lists the known parts; set resources.peak_tflops for another one)"


def peak(name: str, precision: str = DEFAULT_PRECISION) -> Peak:
    """NAME's dense peak at PRECISION; PeakUnknown for an unknown name or a precision the part
    has no figure for (never another part's or another precision's figure)."""
    precision = (precision or DEFAULT_PRECISION).lower()
    if precision not in PRECISIONS:
        raise PeakUnknown(f"peak unknown: {name}: precision {precision!r} is not one of {', '.join(PRECISIONS)}")
    row = find(name)
    tf = row.tflops.get(precision)
    if tf is None:
        have = ", ".join(f"{p.upper()} {fmt_tflops(v)}" for p, v in row.tflops.items() if v is not None)
        raise PeakUnknown(f"peak unknown: {name}: {row.name} has no dense {precision.upper()} figure (listed: "
                          f"{have}): set resources.precision to one of those, or resources.peak_tflops")
    return Peak(row.name, precision, float(tf), f"{row.source} ({row.date})", row.per, row.dense)


def custom_peak(tflops: float, precision: str = DEFAULT_PRECISION, name: Optional[str] = None) -> Peak:
    """The peak a spec gives (resources.peak_tflops): for a CPU or a part not in the table."""
    return Peak(name or "resources.peak_tflops", (precision or DEFAULT_PRECISION).lower(), float(tflops),
                "resources.peak_tflops", "accelerator", None)
