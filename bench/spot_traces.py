"""Read spot availability traces laid out as in skypilot-org/spot-traces (the data of the
NSDI'24 paper "Can't Be Late"). We do not ship that data (its repository has no licence):

    git clone https://github.com/skypilot-org/spot-traces ~/spot-traces
    export LAUNCHER_SPOT_TRACES=~/spot-traces

Layout: ``<root>/<kind>/<n>-node/<cloud>-<date>/<zone>_<instance>_<count>.json``, each file
``{"metadata": {"gap_seconds": N}, "data": [...]}``: per tick of N seconds, how many spot
instances of that type could be had in that zone (0: none; the 16-node traces count up to
16). ``load_set(dir)`` reads one set directory (every zone of one collection); ``find_sets``
lists the set directories under a root. ``tests/fixtures/spot_traces`` is a tiny synthetic
set in the same format.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

ENV = "LAUNCHER_SPOT_TRACES"
_NAME = re.compile(r"^(?P<zone>[a-z0-9-]+?)_(?P<instance>[A-Za-z0-9.-]+_\d+)\.json$")


class TraceError(ValueError):
    """A trace file or directory is not in the expected layout; the message names it."""


@dataclass(frozen=True)
class ZoneTrace:
    zone: str            # e.g. us-east-1a
    region: str          # e.g. us-east-1 (AWS zone minus its letter; GCP zone minus "-a")
    instance: str        # e.g. v100_1 (the file name's instance part)
    gap_seconds: float
    data: tuple          # instances obtainable per tick
    path: str

    @property
    def hours(self) -> float:
        return len(self.data) * self.gap_seconds / 3600.0


@dataclass(frozen=True)
class TraceSet:
    name: str            # e.g. aws-02-15-2023
    cloud: str           # e.g. aws
    zones: tuple         # ZoneTrace, sorted by (instance, zone)

    def instances(self) -> list[str]:
        return sorted({z.instance for z in self.zones})

    def of(self, instance: str) -> list[ZoneTrace]:
        return [z for z in self.zones if z.instance == instance]


def region_of(zone: str) -> str:
    if re.match(r"^[a-z]+-[a-z]+\d+-[a-z]$", zone):      # GCP: us-central1-a
        return zone.rsplit("-", 1)[0]
    if re.match(r"^[a-z]+-[a-z]+-\d+[a-z]$", zone):      # AWS: us-east-1a
        return zone[:-1]
    return zone


def read_zone(path: Path) -> ZoneTrace:
    m = _NAME.match(path.name)
    if not m:
        raise TraceError(f"{path}: expected a file named <zone>_<instance>_<count>.json")
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise TraceError(f"{path}: not readable JSON ({e})") from None
    gap = (doc.get("metadata") or {}).get("gap_seconds") if isinstance(doc, dict) else None
    data = doc.get("data") if isinstance(doc, dict) else None
    if not isinstance(gap, (int, float)) or isinstance(gap, bool) or gap <= 0:
        raise TraceError(f"{path}: metadata.gap_seconds must be a positive number, got {gap!r}")
    if not isinstance(data, list) or not data:
        raise TraceError(f"{path}: data must be a non-empty list of instance counts")
    for k, v in enumerate(data):
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            raise TraceError(f"{path}: data[{k}] must be a whole number >= 0, got {v!r}")
    zone = m.group("zone")
    return ZoneTrace(zone, region_of(zone), m.group("instance"), float(gap), tuple(data), str(path))


def load_set(directory) -> TraceSet:
    d = Path(directory).expanduser()
    files = sorted(d.glob("*.json"))
    if not files:
        raise TraceError(f"{d}: no <zone>_<instance>_<count>.json trace files")
    zones = sorted((read_zone(f) for f in files), key=lambda z: (z.instance, z.zone))
    cloud = d.name.split("-", 1)[0]
    return TraceSet(d.name, cloud, tuple(zones))


def find_sets(root) -> list[Path]:
    """Every directory under ROOT (ROOT included) that holds trace files, sorted."""
    r = Path(root).expanduser()
    if not r.is_dir():
        raise TraceError(f"{r}: not a directory (set --traces or ${ENV} to a spot-traces checkout)")
    return sorted({p.parent for p in r.rglob("*.json") if _NAME.match(p.name)})


def default_root() -> str | None:
    return os.environ.get(ENV) or None
