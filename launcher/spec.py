"""The job spec: a YAML file becomes a typed, validated, frozen ``JobSpec``.

Portable fields first, then one section per backend (``slurm:``, ``skypilot:``).
Unknown keys are rejected (with a "did you mean"), units are parsed here once, so
every backend sees seconds and bytes.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Optional, Union

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator

from . import units
from .errors import SpecError
from .sweep.spec import SweepSpec
from .validation import validate_model
from .yamlio import load_yaml, read_text


def _duration(v):
    return None if v is None else units.parse_duration(v)


def _size(v):
    return None if v is None else units.parse_size(v)


def _positive_duration(v):
    if v is not None and v <= 0:
        raise ValueError("a zero duration makes no sense here: give a positive duration, or leave the key out")
    return v


def _positive_size(v):
    if v is not None and v <= 0:
        raise ValueError("a zero size makes no sense here: give a positive size, or leave the key out")
    return v


Duration = Annotated[Optional[int], BeforeValidator(_duration)]
# where 0 would be silently dropped (no directive) or divide by zero, it is refused
PositiveDuration = Annotated[Optional[int], BeforeValidator(_duration), AfterValidator(_positive_duration)]
PositiveSize = Annotated[Optional[int], BeforeValidator(_size), AfterValidator(_positive_size)]

ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# the job contract's own variables: a spec's env must not shadow them
RESERVED_ENV_PREFIXES = ("LAUNCHER_", "SLURM_", "SKYPILOT_")
RESERVED_ENV_NAMES = ("MASTER_ADDR", "MASTER_PORT")
# names of targets in the user's config (they reach file names, script comments and logs)
TARGET_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
TARGET_NAME_HINT = "a target name: a letter or digit, then letters, digits, '_', '.' or '-' (at most 64)"

# sbatch options the launcher sets itself, with why a spec may not change them
# (sbatch takes any unambiguous prefix of a long option, so prefixes are refused too)
RESERVED_SBATCH = {
    "comment": "carries the launcher's dedupe token (how a job is found after an unclear submit)",
    "output": "the launcher reads the job's log from its own path",
    "error": "the launcher reads the job's log (stdout and stderr together) from its own path",
    "open-mode": "a requeued job must append to its log, not truncate it",
    "requeue": "the launcher's recovery relies on Slurm requeueing the job",
    "no-requeue": "the launcher's recovery relies on Slurm requeueing the job",
    "signal": "the preemption notice is set from recovery.signal and recovery.grace",
    "job-name": "set from the spec's name",
    "array": "one spec is one job: the launcher tracks a single job id per attempt",
    "export": "the job's environment is the spec's env and secrets (and secrets travel through it over SSH)",
    "parsable": "the launcher parses sbatch's output itself",
    "wrap": "the launcher submits its own script",
}


def check_sbatch_option(item: str) -> str:
    """Raise ValueError if ITEM is not one '--option[=value]' the launcher leaves to the spec."""
    name = item[2:].split("=", 1)[0].strip().lower()
    if not item.startswith("--") or not name or not item.isprintable():
        raise ValueError(f"each extra sbatch option must be one '--option[=value]' item (long form), got {item!r}")
    for reserved, why in RESERVED_SBATCH.items():
        if reserved.startswith(name):
            shown = f"--{reserved}" if reserved == name else f"--{name} (read by sbatch as --{reserved})"
            raise ValueError(f"{shown} is set by the launcher and cannot be overridden in slurm.extra: {why}")
    return item


def check_env_name(k: str, what: str = "env name") -> None:
    if not ENV_NAME_RE.match(k):
        raise ValueError(f"{what} {k!r} is not a valid variable name for a shell ([A-Za-z_][A-Za-z0-9_]*)")
    if k.startswith(RESERVED_ENV_PREFIXES) or k in RESERVED_ENV_NAMES:
        reserved = ", ".join([*(p + "*" for p in RESERVED_ENV_PREFIXES), *RESERVED_ENV_NAMES])
        raise ValueError(f"{what} {k!r} is reserved: the launcher and the scheduler set {reserved} for the job")


def _env_name(k: str) -> str:
    check_env_name(k)
    return k


EnvName = Annotated[str, AfterValidator(_env_name)]


def _target_name(v: str) -> str:
    if not TARGET_NAME_RE.match(v):
        raise ValueError(f"expected {TARGET_NAME_HINT}, got {v!r}")
    return v


def _secret_name(k: str) -> str:
    if not ENV_NAME_RE.match(k):
        raise ValueError(f"secret {k!r} must be the name of an environment variable, not a value")
    check_env_name(k, "secret")
    return k


TargetNameStr = Annotated[str, AfterValidator(_target_name)]
SecretName = Annotated[str, AfterValidator(_secret_name)]


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class Resources(Section):
    nodes: int = Field(1, ge=1, le=100000)
    tasks_per_node: int = Field(1, ge=1, le=1024)
    gpus_per_node: int = Field(0, ge=0, le=64)
    accelerator: Optional[str] = None
    cpus_per_node: Optional[int] = Field(None, ge=1)
    memory_per_node: PositiveSize = None
    disk_per_node: PositiveSize = None
    time_limit: PositiveDuration = None
    # how long the job needs to finish (the planner's work estimate); time_limit is the cap
    expected_runtime: PositiveDuration = None

    @field_validator("accelerator")
    @classmethod
    def _acc(cls, v):
        if v is not None and not re.match(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", v):
            raise ValueError("expected an accelerator name like H100, A100-80GB or L4")
        return v


class Topology(Section):
    max_switches: Optional[int] = Field(None, ge=1)
    switch_wait: PositiveDuration = None
    segment: Optional[int] = Field(None, ge=1)


class Checkpoint(Section):
    root: Optional[str] = None
    keep: int = Field(3, ge=1)
    interval: PositiveDuration = None
    cost: PositiveDuration = None  # time to write one checkpoint (the planner's C); default 5m
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
    # 0 would silently send no notice: checkpoint_on_signal: false says that
    grace: PositiveDuration = 120
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
    deadline: PositiveDuration = None


class Burst(Section):
    after: Duration = None
    to: list[TargetNameStr] = Field(default_factory=list, max_length=64)


class SlurmSection(Section):
    partition: Optional[str] = None
    account: Optional[str] = None
    qos: Optional[str] = None
    constraint: Optional[str] = None
    exclude: Optional[str] = None
    reservation: Optional[str] = None
    extra: list[Annotated[str, AfterValidator(check_sbatch_option)]] = Field(default_factory=list, max_length=256)

    @field_validator("partition", "account", "qos", "constraint", "exclude", "reservation")
    @classmethod
    def _plain(cls, v):
        if v is not None and not re.match(r"^[A-Za-z0-9_.,:\[\]|&*()!-]+$", v):
            raise ValueError("expected a Slurm name (letters, digits and _ . , : [ ] | & * ( ) ! -)")
        return v


SKYPILOT_STRATEGIES = ("FAILOVER", "EAGER_NEXT_REGION")  # sky.jobs.recovery_strategy registry, 0.14


def _strategy(v):
    if v is not None and v.upper() not in SKYPILOT_STRATEGIES:
        raise ValueError(f"expected a SkyPilot recovery strategy: {' or '.join(SKYPILOT_STRATEGIES)}")
    return v.upper() if v is not None else v


def _strategy_only(v):
    return {"strategy": v} if isinstance(v, str) else v


class JobRecovery(Section):
    """SkyPilot managed jobs' ``job_recovery`` (its own schema, typed here so nothing unbounded passes).
    A plain string is the strategy."""

    strategy: Annotated[Optional[str], AfterValidator(_strategy)] = None
    max_restarts_on_errors: Optional[int] = Field(None, ge=0, le=10000)
    recover_on_exit_codes: Optional[list[Annotated[int, Field(ge=0, le=255)]]] = Field(None, max_length=256)


class SkyPilotSection(Section):
    managed: bool = False
    job_recovery: Annotated[Optional[JobRecovery], BeforeValidator(_strategy_only)] = None


RunCommand = Union[str, list[str]]


class JobSpec(Section):
    name: str
    run: RunCommand
    setup: Optional[RunCommand] = None
    workdir: Optional[str] = None
    image: Optional[str] = None
    env: dict[EnvName, str] = Field(default_factory=dict, max_length=4096)
    secrets: list[SecretName] = Field(default_factory=list, max_length=1024)
    resources: Resources = Field(default_factory=Resources)
    topology: Topology = Field(default_factory=Topology)
    checkpoint: Checkpoint = Field(default_factory=Checkpoint)
    recovery: Recovery = Field(default_factory=Recovery)
    cost: Cost = Field(default_factory=Cost)
    burst: Burst = Field(default_factory=Burst)
    targets: list[TargetNameStr] = Field(default_factory=list, max_length=64)
    seed: Optional[int] = Field(None, ge=0, description="exported as LAUNCHER_SEED (random per launch if unset)")
    slurm: SlurmSection = Field(default_factory=SlurmSection)
    skypilot: SkyPilotSection = Field(default_factory=SkyPilotSection)
    sweep: Optional[SweepSpec] = None

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
            if "\0" in val:
                raise ValueError(f"env {k}: NUL bytes cannot be in an environment value")
        return v

    @field_validator("workdir")
    @classmethod
    def _one_line(cls, v):
        if v is not None and (not v.strip() or any(c in v for c in "\n\r\0")):
            raise ValueError("expected a non-empty one-line path")
        return v

    @field_validator("image")
    @classmethod
    def _image(cls, v):
        # a reference as docker and pyxis take it (registry/name:tag, name@sha256:..., nvcr.io#name,
        # /path/image.sqsh); container runtimes put it on command lines, so nothing else passes
        if v is not None and not re.match(r"^[A-Za-z0-9_./][A-Za-z0-9_./:@#+-]*$", v):
            raise ValueError("expected a container image reference like nvcr.io/nvidia/pytorch:24.01-py3, "
                             "ubuntu@sha256:..., nvcr.io#nvidia/pytorch:24.01-py3 or /path/image.sqsh")
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


def require_workdir(workdir: str, source: str, base) -> None:
    """Refuse a workdir that is not an existing directory on this machine, naming the path."""
    import os

    resolved = os.path.abspath(os.path.expanduser(workdir))
    if not os.path.isdir(resolved):
        why = "is not a directory" if os.path.exists(resolved) else "does not exist"
        raise SpecError(source, [("workdir", f"{resolved} {why} (relative paths are read "
                                             f"from the spec file's folder, {base})")])


def resolve_paths(spec: JobSpec, base: Path, source: str = "", must_exist: bool = False) -> JobSpec:
    """Relative ``workdir`` and POSIX ``checkpoint.root`` mean "next to the spec file".

    With ``must_exist``, a workdir that is not an existing
    directory on this machine is refused, naming the path it resolved to: it is what SkyPilot
    syncs, what provenance reads, and where the job starts."""
    import os

    upd = {}
    workdir = spec.workdir
    if workdir and not os.path.isabs(os.path.expanduser(workdir)):
        workdir = upd["workdir"] = str((base / workdir).resolve())
    if must_exist and workdir:
        require_workdir(workdir, source or str(base), base)
    root = spec.checkpoint.root
    if root and not root.startswith("s3://") and not os.path.isabs(os.path.expanduser(root)):
        upd["checkpoint"] = spec.checkpoint.model_copy(update={"root": str((base / root).resolve())})
    return spec.model_copy(update=upd) if upd else spec
