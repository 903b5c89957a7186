"""What only SkyPilot itself can say about a rendered task, asked at submit time.

- Does SkyPilot accept the task (``sky.Task.from_yaml_config``, name rules)?
- Can each placement do what the task needs (spot, multi-node, bucket mounts,
  docker images)? Answered from SkyPilot's own per-cloud feature tables, so the
  reason shown is SkyPilot's.
- Does the cloud's catalog know the accelerator? Checked only when the catalog CSV
  is already on this machine: validation never downloads anything.
- What does the first placement cost per hour (catalog prices)?

Every function imports SkyPilot inside; this module is never imported on the render path.
Run as ``python -m launcher_backends.skypilot.check FILE...`` it validates task files
and prints one JSON line per file (used by the tests and the bench in a fresh process).
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import re
import sys
from dataclasses import dataclass, field
from typing import Mapping, Optional
import yaml

from launcher.core.errors import CapabilityError, ConfigError, LauncherError
from launcher_backends.skypilot.sdk import sky_module

# Clouds whose feature checks SSH into the cluster or call an API: never at validation time.
_DYNAMIC = ("slurm", "kubernetes", "ssh")


@dataclass
class Checked:
    task: object  # sky.Task
    warnings: list = field(default_factory=list)
    notes: list = field(default_factory=list)  # what could not be checked offline, and why


def load_task(text: str, secrets: Optional[Mapping[str, str]] = None):
    """Parse a task the way ``sky launch`` would; errors become ConfigError with SkyPilot's words."""
    sky = sky_module()

    config = yaml.safe_load(text)
    try:
        task = sky.Task.from_yaml_config(config, secrets_overrides=list((secrets or {}).items()) or None)
        task.validate_name()
    except (ValueError, TypeError, KeyError) as e:  # InvalidSkyPilotConfigError is a ValueError
        raise ConfigError(f"SkyPilot rejects the task: {_clean(e)}") from None
    return task


def check_task(task) -> Checked:
    """Raise CapabilityError when no placement can run the task; warn about the ones that cannot."""
    out = Checked(task)
    problems = []
    resources = list(task.resources)
    for r in resources:
        why = _placement_problems(task, r, out.notes)
        if why:
            problems.append(f"{_describe(r)}: {'; '.join(why)}")
    if problems and len(problems) == len(resources):
        raise CapabilityError("no placement can run this task:\n  " + "\n  ".join(problems))
    out.warnings += [f"skipped placement {p}" for p in problems]
    return out


def _placement_problems(task, r, notes: list) -> list[str]:
    sky = sky_module()
    exceptions, clouds = sky.exceptions, sky.clouds

    cloud = _cloud_name(r)
    why = []
    if cloud and cloud not in _DYNAMIC:
        required = set(task.get_required_cloud_features()) | set(r.get_required_cloud_features())
        try:
            r.cloud.check_features_are_supported(r, required)
        except exceptions.NotSupportedError as e:
            why.append(_clean(e))
        autostop = getattr(r, "autostop_config", None)
        if autostop is not None and autostop.enabled:  # what sky.launch checks later, asked now
            feature = (clouds.CloudImplementationFeatures.AUTODOWN if autostop.down
                       else clouds.CloudImplementationFeatures.AUTOSTOP)
            try:
                r.cloud.check_features_are_supported(r, {feature})
            except exceptions.NotSupportedError as e:
                why.append(f"{_clean(e)} (set autodown: false on the target)")
    acc = _accelerator(r)
    if acc and cloud:
        known = _catalog_accelerators(cloud, acc[0], notes)
        if known is not None and acc[0].lower() not in {k.lower() for k in known}:
            guess = difflib.get_close_matches(acc[0], known, n=3, cutoff=0.5)
            hint = f"; did you mean {', '.join(guess)}?" if guess else ""
            why.append(f"SkyPilot's {cloud} catalog has no accelerator '{acc[0]}'{hint}")
    return why


def _catalog_accelerators(cloud: str, name: str, notes: list) -> Optional[list[str]]:
    """Accelerator names the local catalog of `cloud` knows, or None when there is no local catalog."""
    catalog = sky_module().catalog
    common = catalog.common

    if not os.path.exists(common.get_catalog_path(f"{cloud}/vms.csv")):
        notes.append(f"accelerator not checked: no local SkyPilot catalog for {cloud}")
        return None
    try:
        found = catalog.list_accelerators(gpus_only=False, name_filter=None, clouds=cloud, case_sensitive=False,
                                          all_regions=True, require_price=False)
    except Exception as e:  # noqa: BLE001 - a broken catalog must not block a launch
        notes.append(f"accelerator not checked: {cloud} catalog unreadable ({type(e).__name__})")
        return None
    return sorted(found)


def hourly_usd(task, placement_index: int = 0) -> Optional[float]:
    """Catalog price per hour of one placement for the whole task (all nodes); None if unknown."""
    catalog = sky_module().catalog
    common = catalog.common

    resources = list(task.resources)
    if not resources:
        return None
    r = resources[min(placement_index, len(resources) - 1)]
    cloud = _cloud_name(r)
    if not cloud or not os.path.exists(common.get_catalog_path(f"{cloud}/vms.csv")):
        return None
    try:
        kw = dict(use_spot=bool(r.use_spot), region=r.region, zone=r.zone, clouds=cloud)
        if r.instance_type:
            types = [r.instance_type]
        elif _accelerator(r):
            name, count = _accelerator(r)
            types, _ = catalog.get_instance_type_for_accelerator(name, count, cpus=r.cpus, memory=r.memory, **kw)
        else:
            t = catalog.get_default_instance_type(cpus=r.cpus, memory=r.memory, **kw)
            types = [t] if t else []
        prices = [catalog.get_hourly_cost(t, **kw) for t in (types or [])]
    except Exception:  # noqa: BLE001 - a price is a record, not a precondition
        return None
    prices = [p for p in prices if p is not None and p == p]
    return round(min(prices) * max(1, int(task.num_nodes or 1)), 6) if prices else None


def _accelerator(r) -> Optional[tuple[str, float]]:
    accs = r.accelerators or {}
    if not accs:
        return None
    name, count = next(iter(accs.items()))
    return name, count


def _cloud_name(r) -> str:
    return str(r.cloud).lower() if r.cloud is not None else ""


def _describe(r) -> str:
    infra = getattr(r, "infra", None)
    text = infra.to_str() if hasattr(infra, "to_str") else str(r.cloud)
    return f"{text}{' spot' if r.use_spot else ''}"


def _clean(e: BaseException) -> str:
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(e))
    return " ".join(line.strip() for line in text.splitlines() if line.strip())


def main(argv=None) -> int:
    """Validate task files in this (fresh) process: one JSON line per file, exit 1 if any failed."""

    ap = argparse.ArgumentParser(prog="python -m launcher_backends.skypilot.check")
    ap.add_argument("files", nargs="+")
    args = ap.parse_args(argv)
    failed = 0
    for path in args.files:
        row: dict = {"file": path}
        try:
            with open(path, encoding="utf-8") as f:
                task = load_task(f.read())
            checked = check_task(task)
            row.update(ok=True, name=task.name, num_nodes=task.num_nodes,
                       resources=[str(r) for r in task.resources], warnings=checked.warnings,
                       notes=sorted(set(checked.notes)), hourly_usd=hourly_usd(task))
        except LauncherError as e:
            failed += 1
            row.update(ok=False, error_type=type(e).__name__, error=str(e))
        print(json.dumps(row), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
