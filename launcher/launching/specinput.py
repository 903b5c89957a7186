"""A job spec as the commands and ``launcher.api.facade`` take it: a file, YAML text or a JobSpec.

``spec_input`` loads it once (file text read once, relative ``workdir`` and checkpoint
root resolved against the spec's folder, or the given base for text and JobSpec), and
says what to warn about; ``require_local_workdir`` and ``unknown_targets`` are the checks
``validate``, ``render`` and ``launch`` share. Light imports only (no backend, no SDK).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Optional, Union

import yaml
from pydantic import BaseModel
from pydantic_core import to_jsonable_python

from launcher.backend.protocols import Host, can
from launcher.backend.registry import default_registry
from launcher.backend.sections import load_spec, spec_from_text
from launcher.core.errors import LauncherError
from launcher.spec import model as spec_module
from launcher.spec.model import JobSpec, require_workdir, resolve_paths
from launcher.spec.secretenv import warnings
from launcher.spec.yamlio import read_text

if TYPE_CHECKING:
    from launcher.backend.config import Config

SpecLike = Union[str, "os.PathLike[str]", "JobSpec"]


@dataclass(frozen=True)
class SpecInput:
    spec: "JobSpec"
    text: str  # what the state store keeps as the spec's text
    source: str  # the file as given, or "<spec>": what error messages name
    path: Optional[str]  # the file's absolute path (None for text or a JobSpec)
    base: Path  # the folder relative paths were resolved against
    warnings: list[str] = field(default_factory=list)  # "move it to `secrets:`" ...


def is_yaml_text(value: str) -> bool:
    """A str with a line break is YAML text; anything else is a path."""
    return "\n" in value


def spec_input(spec: SpecLike, base: Optional[Union[str, Path]] = None) -> SpecInput:
    """Load a spec given as a path, YAML text or a JobSpec. Raises SpecError naming the
    field (and line, for text) of every problem."""
    if isinstance(spec, JobSpec):
        source, path, text, parsed = "<spec>", None, spec_text(spec), spec
        where = Path(base) if base is not None else Path.cwd()
    elif isinstance(spec, str) and is_yaml_text(spec):
        source, path, text = "<spec>", None, spec
        parsed = spec_from_text(text, source)
        where = Path(base) if base is not None else Path.cwd()
    else:
        source = str(spec)
        parsed = load_spec(spec)
        text = read_text(spec, "job spec")  # what the store keeps, as written
        path = str(Path(spec).resolve())
        where = Path(spec).resolve().parent
    resolved = resolve_paths(parsed, where, source)
    return SpecInput(resolved, text, source, path, where, list(warnings(resolved)))


def spec_text(spec: "JobSpec") -> str:
    """YAML text that parses back into SPEC: what the state store keeps for a spec built in
    Python (only the fields that were set; durations in seconds, sizes in bytes, with units)."""
    return yaml.safe_dump(_plain(spec), sort_keys=False, allow_unicode=True)


def _plain(model) -> dict:

    units = {spec_module._duration: "s", spec_module._size: "B"}
    out = {}
    for name, info in type(model).model_fields.items():
        if name not in model.model_fields_set:
            continue
        v = getattr(model, name)
        unit = next((units[m.func] for m in info.metadata if getattr(m, "func", None) in units), None)
        if isinstance(v, BaseModel):
            v = _plain(v)
        elif unit and isinstance(v, int):
            v = f"{v}{unit}"
        else:
            v = to_jsonable_python(v)
        out[info.alias or name] = v
    return out


def require_local_workdir(spec: "JobSpec", file, config: "Config", names, base: Optional[Path] = None) -> None:
    """The workdir must exist here for every target that runs it from here (local, a login
    node, SkyPilot's sync); a backend may say that a target runs the job in a workdir on its
    own machines (``Host.workdir_is_remote``: a cluster reached over SSH), not staged from this one."""
    def from_here(name):
        try:
            raw = config.raw_target(name)
            cls = default_registry().load(raw["backend"], check=False)
        except LauncherError:
            return True  # unknown targets and backends are reported on their own
        return not (can(cls, Host) and cls.workdir_is_remote(raw))

    if spec.workdir and any(from_here(n) for n in names):
        require_workdir(spec.workdir, str(file), base if base is not None else Path(file).resolve().parent)


def unknown_targets(spec: "JobSpec", config: "Config") -> list[tuple[str, str]]:
    """(field, message) for every name in ``targets:`` and ``burst.to:`` the config lacks."""
    problems = []
    for i, name in enumerate([*spec.targets, *spec.burst.to]):
        if name not in config.target_names:
            where = f"targets[{i}]" if i < len(spec.targets) else f"burst.to[{i - len(spec.targets)}]"
            problems.append((where, config.unknown_target(name)))
    return problems
