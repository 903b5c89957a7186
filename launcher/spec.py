"""The job spec: a YAML file becomes a typed, validated, frozen ``JobSpec``.

Portable fields first, then one section per backend (``slurm:``, ``skypilot:``).
Unknown keys are rejected (with a "did you mean"), units are parsed here once, so
every backend sees seconds and bytes.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Optional, Union

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator

from . import units
from .validation import validate_model
from .yamlio import load_yaml, read_text


def _duration(v):
    return None if v is None else units.parse_duration(v)


def _size(v):
    return None if v is None else units.parse_size(v)


Duration = Annotated[Optional[int], BeforeValidator(_duration)]
Size = Annotated[Optional[int], BeforeValidator(_size)]

ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
RESERVED_ENV_PREFIXES = ("LAUNCHER_", "SLURM_", "SKYPILOT_")


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class Resources(Section):
    nodes: int = Field(1, ge=1, le=100000)
    tasks_per_node: int = Field(1, ge=1, le=1024)
    gpus_per_node: int = Field(0, ge=0, le=64)
    accelerator: Optional[str] = None
    cpus_per_node: Optional[int] = Field(None, ge=1)
    memory_per_node: Size = None
    disk_per_node: Size = None
    time_limit: Duration = None
    # how long the job needs to finish (the planner's work estimate); time_limit is the cap
    expected_runtime: Duration = None

    @field_validator("accelerator")
    @classmethod
    def _acc(cls, v):
        if v is not None and not re.match(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", v):
            raise ValueError("expected an accelerator name like H100, A100-80GB or L4")
        return v


class Topology(Section):
    max_switches: Optional[int] = Field(None, ge=1)
    switch_wait: Duration = None
    segment: Optional[int] = Field(None, ge=1)


class Checkpoint(Section):
    root: Optional[str] = None
    keep: int = Field(3, ge=1)
    interval: Duration = None
    cost: Duration = None  # time to write one checkpoint (the planner's C); default 5m
    verify: bool = False

    @field_validator("root")
    @classmethod
    def _root(cls, v):
        if v is None:
            return v
        if "\n" in v or "\0" in v:
            raise ValueError("checkpoint root must be a single-line path or s3://bucket/prefix")
        if v.startswith("s3://"):
            if not re.match(r"^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/.*)?$", v):
                raise ValueError("expected s3://bucket/prefix with a valid bucket name")
        elif "://" in v:
            raise ValueError("checkpoint root must be a POSIX path or s3://bucket/prefix")
        return v


class Recovery(Section):
    preemption: int = Field(100, ge=0)
    node_failure: int = Field(5, ge=0)
    app_error: int = Field(1, ge=0)
    timeout: int = Field(20, ge=0)
    out_of_memory: int = Field(0, ge=0)
    no_capacity: int = Field(50, ge=0)
    checkpoint_on_signal: bool = True
    grace: Duration = 120
    signal: str = "USR1"
    # how long a cloud region that just preempted the job (or had no capacity) is avoided
    placement_cooldown: Duration = 1800

    @field_validator("signal")
    @classmethod
    def _sig(cls, v):
        v = v.upper().removeprefix("SIG")
        if v not in {"USR1", "USR2", "TERM", "INT", "HUP", "URG"}:
            raise ValueError("expected one of USR1, USR2, TERM, INT, HUP, URG")
        return v


class Cost(Section):
    max_total_usd: Optional[float] = Field(None, gt=0)
    max_hourly_usd: Optional[float] = Field(None, gt=0)
    deadline: Duration = None


class Burst(Section):
    after: Duration = None
    to: list[str] = Field(default_factory=list)


class SlurmSection(Section):
    partition: Optional[str] = None
    account: Optional[str] = None
    qos: Optional[str] = None
    constraint: Optional[str] = None
    exclude: Optional[str] = None
    reservation: Optional[str] = None
    extra: list[str] = Field(default_factory=list)

    @field_validator("partition", "account", "qos", "constraint", "exclude", "reservation")
    @classmethod
    def _plain(cls, v):
        if v is not None and not re.match(r"^[A-Za-z0-9_.,:\[\]|&*()!-]+$", v):
            raise ValueError("expected a Slurm name (letters, digits and _ . , : [ ] | & * ( ) ! -)")
        return v

    @field_validator("extra")
    @classmethod
    def _extra(cls, v):
        for item in v:
            if not item.startswith("--") or "\n" in item:
                raise ValueError(f"each extra sbatch option must be one '--option[=value]' line, got {item!r}")
        return v


class SkyPilotSection(Section):
    managed: bool = False
    job_recovery: Optional[Union[str, dict]] = None


RunCommand = Union[str, list[str]]


class JobSpec(Section):
    name: str
    run: RunCommand
    setup: Optional[RunCommand] = None
    workdir: Optional[str] = None
    image: Optional[str] = None
    env: dict[str, str] = Field(default_factory=dict)
    secrets: list[str] = Field(default_factory=list)
    resources: Resources = Field(default_factory=Resources)
    topology: Topology = Field(default_factory=Topology)
    checkpoint: Checkpoint = Field(default_factory=Checkpoint)
    recovery: Recovery = Field(default_factory=Recovery)
    cost: Cost = Field(default_factory=Cost)
    burst: Burst = Field(default_factory=Burst)
    targets: list[str] = Field(default_factory=list)
    seed: Optional[int] = Field(None, ge=0, description="exported as LAUNCHER_SEED (random per launch if unset)")
    slurm: SlurmSection = Field(default_factory=SlurmSection)
    skypilot: SkyPilotSection = Field(default_factory=SkyPilotSection)

    @field_validator("name")
    @classmethod
    def _name(cls, v):
        if not v.strip() or len(v) > 200 or "\n" in v or "\0" in v:
            raise ValueError("expected a non-empty one-line name of at most 200 characters")
        return v

    @field_validator("run", "setup")
    @classmethod
    def _run(cls, v):
        if isinstance(v, list) and not v:
            raise ValueError("expected a shell command string or a non-empty list of arguments")
        if isinstance(v, str) and not v.strip():
            raise ValueError("expected a non-empty shell command")
        if isinstance(v, (str, list)) and any("\0" in s for s in ([v] if isinstance(v, str) else v)):
            raise ValueError("NUL bytes cannot be passed to a shell")
        return v

    @field_validator("env", mode="before")
    @classmethod
    def _env_values(cls, v):
        # YAML turns `PORT: 80` into an int; the environment only has strings.
        if isinstance(v, dict):
            out = {}
            for k, val in v.items():
                if isinstance(val, bool):
                    val = "true" if val else "false"
                elif isinstance(val, (int, float)):
                    val = str(val)
                out[k] = val
            return out
        return v

    @field_validator("env")
    @classmethod
    def _env(cls, v):
        for k, val in v.items():
            if not ENV_NAME_RE.match(k):
                raise ValueError(f"env name {k!r} is not a valid variable name ([A-Za-z_][A-Za-z0-9_]*)")
            if k.startswith(RESERVED_ENV_PREFIXES[:1]):
                raise ValueError(f"env name {k!r}: the LAUNCHER_ prefix is reserved for the launcher")
            if "\0" in val:
                raise ValueError(f"env {k}: NUL bytes cannot be in an environment value")
        return v

    @field_validator("secrets")
    @classmethod
    def _secrets(cls, v):
        for k in v:
            if not ENV_NAME_RE.match(k):
                raise ValueError(f"secret {k!r} must be the name of an environment variable, not a value")
        return v

    @model_validator(mode="after")
    def _cross(self):
        if self.topology.segment and self.topology.max_switches:
            raise ValueError("topology: use either segment (topology/block) or max_switches (topology/tree), not both")
        dup = set(self.env) & set(self.secrets)
        if dup:
            raise ValueError(f"{sorted(dup)} are listed both in env and in secrets; secrets are names only")
        return self

    # convenience for backends
    @property
    def run_argv_or_shell(self) -> RunCommand:
        return self.run


def parse_spec(data, source: str = "<spec>", line_of=None) -> JobSpec:
    return validate_model(JobSpec, data, source, line_of)


def load_spec(path: str | Path) -> JobSpec:
    """Read and validate a job spec file. Raises SpecError listing every problem."""
    text = read_text(path, "job spec")
    data, line_of = load_yaml(text, str(path))
    return parse_spec(data, str(path), line_of)


def spec_from_text(text: str, source: str = "<spec>") -> JobSpec:
    data, line_of = load_yaml(text, source)
    return parse_spec(data, source, line_of)


def resolve_paths(spec: JobSpec, base: Path) -> JobSpec:
    """Relative ``workdir`` and POSIX ``checkpoint.root`` mean "next to the spec file"."""
    import os

    upd = {}
    if spec.workdir and not os.path.isabs(os.path.expanduser(spec.workdir)):
        upd["workdir"] = str((base / spec.workdir).resolve())
    root = spec.checkpoint.root
    if root and not root.startswith("s3://") and not os.path.isabs(os.path.expanduser(root)):
        upd["checkpoint"] = spec.checkpoint.model_copy(update={"root": str((base / root).resolve())})
    return spec.model_copy(update=upd) if upd else spec
