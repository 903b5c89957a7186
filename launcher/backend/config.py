"""The user's configuration: named targets (clusters, clouds) and price overrides.

Found at ``$LAUNCHER_CONFIG``, else ``~/.config/launcher/config.yaml``. A missing
file is fine: the built-in target ``local`` needs no configuration. Each target
names a backend; the backend's own ``target_options`` model validates the rest of
the target's keys, so plugins own their settings and the core stays generic.
"""

from __future__ import annotations

import difflib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Optional

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from launcher.core.errors import ConfigError, SpecError
from launcher.spec.model import TARGET_NAME_HINT, TARGET_NAME_RE
from launcher.spec.validation import validate_model
from launcher.spec.yamlio import load_yaml, read_text

LOCAL_TARGET = "local"


def config_path() -> Path:
    env = os.environ.get("LAUNCHER_CONFIG")
    if env:
        return Path(env).expanduser()
    return Path(os.environ.get("XDG_CONFIG_HOME", "~/.config")).expanduser() / "launcher" / "config.yaml"


def launcher_home() -> Path:
    env = os.environ.get("LAUNCHER_HOME")
    if env:
        return Path(env).expanduser()
    return Path(os.environ.get("XDG_STATE_HOME", "~/.local/state")).expanduser() / "launcher"


class TargetEntry(BaseModel):
    """Core keys of a target; everything else belongs to its backend."""

    model_config = ConfigDict(extra="allow", frozen=True)
    backend: str


class PreemptionDefaults(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    # preemptions per hour, by cloud name (or "slurm"); "*" is the fallback
    spot: dict[str, float] = Field(default_factory=dict)
    on_demand: dict[str, float] = Field(default_factory=dict)


def _target_name(v: str) -> str:
    if not TARGET_NAME_RE.match(v):
        # names reach file names (the facts cache), script comments and logs
        raise ValueError(f"expected {TARGET_NAME_HINT}, got {v!r}")
    return v


TargetName = Annotated[str, AfterValidator(_target_name)]


class ConfigFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    targets: dict[TargetName, TargetEntry] = Field(default_factory=dict, max_length=1000)
    default_target: Optional[TargetName] = None
    catalog_dir: Optional[str] = None
    price_files: list[str] = Field(default_factory=list)
    preemption_rates: PreemptionDefaults = Field(default_factory=PreemptionDefaults)
    # a team's shared state store: a postgresql:// URL ($LAUNCHER_STATE_URL wins; docs/team-store.md)
    state_url: Optional[str] = None


@dataclass(frozen=True)
class Target:
    """A resolved target: its name, its backend and the backend-validated options."""

    name: str
    backend: str
    options: Any = None  # the backend's target_options model instance (or a dict)
    raw: dict = field(default_factory=dict)

    def opt(self, key: str, default=None):
        if self.options is None:
            return self.raw.get(key, default)
        if isinstance(self.options, dict):
            return self.options.get(key, default)
        return getattr(self.options, key, default)


@dataclass(frozen=True)
class Config:
    path: Path
    file: ConfigFile
    exists: bool

    @property
    def target_names(self) -> list[str]:
        names = list(self.file.targets)
        if LOCAL_TARGET not in names:
            names.insert(0, LOCAL_TARGET)
        return names

    def raw_target(self, name: str) -> dict:
        if name in self.file.targets:
            entry = self.file.targets[name]
            return {"backend": entry.backend, **(entry.model_extra or {})}
        if name == LOCAL_TARGET:
            return {"backend": "local"}
        raise ConfigError(self.unknown_target(name))

    def unknown_target(self, name: str) -> str:
        """Say which file was read (and whether it exists), what it has, and how to add NAME."""
        guess = difflib.get_close_matches(name, self.target_names, n=1)
        hint = f"; did you mean '{guess[0]}'?" if guess else ""
        state = "exists" if self.exists else "does not exist"
        known = ", ".join(f"{n} (built in)" if n == LOCAL_TARGET and n not in self.file.targets else n
                          for n in self.target_names)
        shown = name if _plain_target_name(name) else "my-cluster"
        return (f"unknown target '{name}'{hint}\n"
                f"  known targets: {known}\n"
                f"  config file: {self.path} ({state}; $LAUNCHER_CONFIG overrides it)\n"
                f"  to add a target, put this in that file (README, \"Configuration\", has every key):\n"
                f"    targets:\n"
                f"      {shown}:\n"
                f"        backend: slurm        # or skypilot (infra: aws, use_spot: true)\n"
                f"        partition: gpu")

    def default_target(self) -> str:
        return self.file.default_target or LOCAL_TARGET


def _plain_target_name(name: str) -> bool:
    return bool(TARGET_NAME_RE.match(name))


def load_config(path: Path | None = None) -> Config:
    path = Path(path) if path else config_path()
    if not path.exists():
        if os.environ.get("LAUNCHER_CONFIG"):
            raise ConfigError(f"LAUNCHER_CONFIG points at {path}, which does not exist")
        return Config(path=path, file=ConfigFile(), exists=False)
    text = read_text(path, "config")
    data, line_of = load_yaml(text, str(path))
    cfg = validate_model(ConfigFile, data, str(path), line_of)
    return Config(path=path, file=cfg, exists=True)


def resolve_target(config: Config, name: str, registry) -> Target:
    """Validate a target's options with its backend's model (errors name the config keys)."""
    raw = config.raw_target(name)
    backend_name = raw["backend"]
    cls = registry.load(backend_name)
    model = getattr(cls, "target_options", None)
    opts_raw = {k: v for k, v in raw.items() if k != "backend"}
    if model is None:
        return Target(name=name, backend=backend_name, options=opts_raw, raw=raw)
    try:
        opts = validate_model(model, opts_raw, str(config.path))
    except SpecError as e:
        problems = [(f"targets.{name}.{p}" if p else f"targets.{name}", m) for p, m in e.problems]
        raise SpecError(str(config.path), problems) from None
    return Target(name=name, backend=backend_name, options=opts, raw=raw)
