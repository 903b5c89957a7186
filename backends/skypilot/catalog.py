"""SkyPilot's catalog CSVs (layout v8), read directly with ``csv``: no ``import sky``.

SkyPilot downloads them to ``~/.sky/catalogs/v8/<cloud>/vms.csv``. Column order differs
per cloud, so columns are found by name from the header:

* aws:    InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,GpuInfo,Price,SpotPrice,Region,AvailabilityZone,Arch
* gcp:    InstanceType,vCPUs,MemoryGiB,AcceleratorName,AcceleratorCount,GpuInfo,Region,AvailabilityZone,Price,SpotPrice
* lambda: InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Price,Region,GpuInfo,SpotPrice
* runpod: InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Region,SpotPrice,Price,AvailabilityZone,GpuInfo

GCP lists VMs and GPUs on separate rows: a GPU row has an empty InstanceType and the
price of the GPUs alone; SkyPilot attaches them to a host VM (A100 -> a2-highgpu-Ng,
H100 -> a3-highgpu-Ng, L4 -> g2-standard-*, others -> the cheapest n1 VM with enough
vCPUs) and charges the sum. We do the same, so a GCP offer's price is host + GPUs.

An empty Price or SpotPrice means "not offered that way" (Lambda has no spot; some GCP
rows have no spot price). Anything else that is not a number is an error naming the
file, line and column.
"""

from __future__ import annotations

import csv
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Optional

from launcher.core.errors import ConfigError

REQUIRED = ("InstanceType", "AcceleratorName", "AcceleratorCount", "vCPUs", "MemoryGiB", "Price", "Region")
OPTIONAL = ("SpotPrice", "AvailabilityZone")


class CatalogError(ConfigError):
    """A catalog or price file is malformed; the message names the file and line."""


@dataclass(frozen=True, slots=True)
class CatalogRow:
    cloud: str
    instance_type: str
    accelerator: Optional[str]
    accelerator_count: int
    vcpus: Optional[float]
    memory_gib: Optional[float]
    price: Optional[float]        # on-demand $/h per instance, None: not offered on demand
    spot_price: Optional[float]   # None: no spot offer
    region: str
    zone: Optional[str]
    source: str = ""


def default_catalog_dir() -> Path:
    """``$SKY_RUNTIME_DIR/.sky/catalogs/v8`` when SkyPilot's runtime dir is moved, else ``~/.sky/catalogs/v8``."""
    base = os.environ.get("SKY_RUNTIME_DIR")
    root = Path(base).expanduser() if base else Path("~").expanduser()
    return root / ".sky" / "catalogs" / "v8"


def catalog_path(cloud: str, catalog_dir=None) -> Path:
    root = Path(catalog_dir).expanduser() if catalog_dir else default_catalog_dir()
    return root / cloud.lower() / "vms.csv"


AWS_ZONE_ID = re.compile(r"^[a-z]{2,5}\d+-az\d+$")   # use1-az1: the catalog's AWS zones


def aws_zone_id(zone: str, catalog_dir=None) -> str:
    """The zone ID (``use1-az1``, as SkyPilot's AWS catalog lists zones) of the AWS zone named
    ZONE (``us-east-1a``, as SkyPilot reports where a cluster was launched); "" when it cannot
    be told. A name maps to a different ID in every AWS account: the mapping is SkyPilot's own
    ``aws/az_mappings-<user hash>.csv`` (AvailabilityZoneName, AvailabilityZone), which it
    writes beside its catalog once it has the account's credentials; a name the files map to
    two IDs (two accounts) is not told."""
    if not zone or AWS_ZONE_ID.match(zone):
        return zone or ""
    root = Path(catalog_dir).expanduser() if catalog_dir else default_catalog_dir()
    ids = set()
    for path in sorted((root / "aws").glob("az_mappings-*.csv")):
        try:
            with open(path, newline="", encoding="utf-8") as f:
                ids |= {(r.get("AvailabilityZone") or "").strip() for r in csv.DictReader(f)
                        if (r.get("AvailabilityZoneName") or "").strip() == zone}
        except (OSError, csv.Error, UnicodeDecodeError):
            continue
    ids.discard("")
    return ids.pop() if len(ids) == 1 else ""


def _num(text: str, col: str, where: str, integer: bool = False) -> Optional[float]:
    t = text.strip()
    if t == "" or t.lower() in ("nan", "none", "null"):
        return None
    try:
        v = float(t)
    except ValueError:
        raise CatalogError(f"{where}: column {col}: expected a number, got {t!r}") from None
    if v != v:  # NaN spelt some other way
        return None
    if v < 0:
        raise CatalogError(f"{where}: column {col}: expected a non-negative number, got {t!r}")
    if integer:
        if v != int(v):
            raise CatalogError(f"{where}: column {col}: expected a whole number, got {t!r}")
        return int(v)
    return v


def _read_rows(path: Path) -> Iterable[tuple[int, dict]]:
    try:
        f = open(path, newline="", encoding="utf-8")
    except FileNotFoundError:
        raise CatalogError(f"{path}: catalog file not found (SkyPilot writes it on first use; "
                           f"set catalog_dir in the config to use another directory)") from None
    except OSError as e:
        raise CatalogError(f"{path}: cannot read catalog: {e.strerror}") from None
    with f:
        reader = csv.reader(f)
        try:
            header = next(reader, None)
            if header is None:
                raise CatalogError(f"{path}, line 1: empty catalog file (expected a CSV header)")
            header = [h.strip() for h in header]
            missing = [c for c in REQUIRED if c not in header]
            if missing:
                raise CatalogError(f"{path}, line 1: missing column(s) {', '.join(missing)} "
                                   f"(header is: {','.join(header)})")
            n = len(header)
            for row in reader:
                if not row or (len(row) == 1 and not row[0].strip()):
                    continue
                if len(row) != n:
                    raise CatalogError(f"{path}, line {reader.line_num}: expected {n} fields "
                                       f"({','.join(header)}), got {len(row)}")
                yield reader.line_num, dict(zip(header, row))
        except csv.Error as e:
            raise CatalogError(f"{path}, line {reader.line_num}: malformed CSV: {e}") from None
        except UnicodeDecodeError as e:
            raise CatalogError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None


def _parse(path: Path, cloud: str, line: int, r: dict) -> CatalogRow:
    where = f"{path}, line {line}"
    acc = r["AcceleratorName"].strip() or None
    count = _num(r["AcceleratorCount"], "AcceleratorCount", where, integer=True)
    zone = (r.get("AvailabilityZone") or "").strip() or None
    region = r["Region"].strip()
    itype = r["InstanceType"].strip()
    if not region:
        raise CatalogError(f"{where}: column Region is empty")
    if not itype and not acc:
        raise CatalogError(f"{where}: both InstanceType and AcceleratorName are empty")
    return CatalogRow(
        cloud=cloud, instance_type=itype, accelerator=acc,
        accelerator_count=int(count) if count is not None and acc else 0,
        vcpus=_num(r["vCPUs"], "vCPUs", where), memory_gib=_num(r["MemoryGiB"], "MemoryGiB", where),
        price=_num(r["Price"], "Price", where),
        spot_price=_num(r.get("SpotPrice", ""), "SpotPrice", where),
        region=region, zone=zone, source=f"{path}:{line}")


def read_vms_csv(path, cloud: str) -> list[CatalogRow]:
    """Every row of one ``vms.csv``, GCP GPU rows already attached to their host VMs."""
    path = Path(path)
    cloud = cloud.lower()
    rows = [_parse(path, cloud, line, r) for line, r in _read_rows(path)]
    if cloud == "gcp":
        return _gcp_combine(rows)
    return rows


_cache: dict = {}


def load_catalog(cloud: str, catalog_dir=None) -> list[CatalogRow]:
    """``read_vms_csv`` of the cloud's file in ``catalog_dir``, cached while the file is unchanged."""
    path = catalog_path(cloud, catalog_dir)
    try:
        st = path.stat()
    except FileNotFoundError:
        raise CatalogError(f"{path}: no {cloud} catalog (SkyPilot downloads it on first use; set "
                           f"catalog_dir in the config to point at another copy)") from None
    key = (str(path), st.st_mtime_ns, st.st_size)
    hit = _cache.get(key)
    if hit is None:
        hit = read_vms_csv(path, cloud)
        if len(_cache) > 16:
            _cache.clear()
        _cache[key] = hit
    return hit


# --- GCP: GPUs are attached to host VMs ------------------------------------------------

# accelerator -> count -> host VM types that come with exactly those GPUs
GCP_ACC_HOSTS: dict[str, dict[int, tuple[str, ...]]] = {
    "A100": {1: ("a2-highgpu-1g",), 2: ("a2-highgpu-2g",), 4: ("a2-highgpu-4g",),
             8: ("a2-highgpu-8g",), 16: ("a2-megagpu-16g",)},
    "A100-80GB": {1: ("a2-ultragpu-1g",), 2: ("a2-ultragpu-2g",), 4: ("a2-ultragpu-4g",),
                  8: ("a2-ultragpu-8g",)},
    "L4": {1: ("g2-standard-4", "g2-standard-8", "g2-standard-12", "g2-standard-16", "g2-standard-32"),
           2: ("g2-standard-24",), 4: ("g2-standard-48",), 8: ("g2-standard-96",)},
    "H100": {1: ("a3-highgpu-1g",), 2: ("a3-highgpu-2g",), 4: ("a3-highgpu-4g",), 8: ("a3-highgpu-8g",)},
    "H100-MEGA": {8: ("a3-megagpu-8g",)},
    "H200": {8: ("a3-ultragpu-8g",)},
    "B200": {8: ("a4-highgpu-8g",)},
}
_GCP_HOST_TYPES = {h for per in GCP_ACC_HOSTS.values() for hosts in per.values() for h in hosts}
_GCP_DEFAULT_HOST_FAMILIES = ("n1-standard-", "n1-highmem-", "n1-highcpu-")
# host vCPUs SkyPilot gives a GPU attached to an n1 VM (per GPU count)
_GCP_HOST_CPUS = {"K80": {1: 4, 2: 8, 4: 16, 8: 32}, "T4": {1: 4, 2: 8, 4: 48}}


def _gcp_host_cpus(acc: str, count: int) -> int:
    return _GCP_HOST_CPUS.get(acc, {}).get(count, 8 * count)


def _add(a: Optional[float], b: Optional[float]) -> Optional[float]:
    return None if a is None or b is None else round(a + b, 6)


def _gcp_combine(rows: list[CatalogRow]) -> list[CatalogRow]:
    vms: dict[tuple, dict[str, CatalogRow]] = {}
    out: list[CatalogRow] = []
    gpus: list[CatalogRow] = []
    for r in rows:
        if r.instance_type:
            vms.setdefault((r.region, r.zone), {})[r.instance_type] = r
            if r.instance_type not in _GCP_HOST_TYPES and not r.accelerator:
                out.append(r)  # a CPU-only VM is an offer by itself
        elif not r.accelerator.lower().startswith("tpu"):
            gpus.append(r)    # TPUs: not planned for (no host VM pricing in this model)
    for g in gpus:
        zone_vms = vms.get((g.region, g.zone), {})
        hosts = GCP_ACC_HOSTS.get(g.accelerator, {}).get(g.accelerator_count)
        if hosts is not None:
            candidates = [zone_vms[h] for h in hosts if h in zone_vms]
        else:
            cpus = _gcp_host_cpus(g.accelerator, g.accelerator_count)
            fit = [v for v in zone_vms.values()
                   if v.instance_type.startswith(_GCP_DEFAULT_HOST_FAMILIES) and v.price is not None
                   and (v.vcpus or 0) >= cpus and (v.memory_gib or 0) >= 4 * cpus]
            candidates = [min(fit, key=lambda v: (v.price, v.instance_type))] if fit else []
        for h in candidates:
            out.append(CatalogRow(
                cloud="gcp", instance_type=h.instance_type, accelerator=g.accelerator,
                accelerator_count=g.accelerator_count, vcpus=h.vcpus, memory_gib=h.memory_gib,
                price=_add(h.price, g.price), spot_price=_add(h.spot_price, g.spot_price),
                region=g.region, zone=g.zone, source=f"{g.source}+{h.source.rsplit(':', 1)[-1]}"))
    return out
