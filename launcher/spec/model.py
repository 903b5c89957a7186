"""The job spec's model: a typed, validated, frozen ``JobSpec`` with the portable fields.

Each backend owns its section (``slurm:``, ``skypilot:``), declared on its class and added
where a spec has it by ``launcher.backend.sections``, which also reads spec files. Unknown keys are
rejected (with a "did you mean"), units are parsed here once, so every backend sees seconds
and bytes. A backend reads its own section with ``spec.section(ItsSectionModel)``.
"""

from __future__ import annotations

import os
import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Annotated, Literal, Optional, TypeVar, Union

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator

from launcher.core.errors import SpecError
from launcher.spec import units
from launcher.spec.integrations import NotifySection, TrackingSection
from launcher.spec.sweep import SweepSpec


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
Precision = Literal["fp32", "tf32", "bf16", "fp16", "fp8", "int8"]  # launcher.plan.peaks.PRECISIONS
# where 0 would be silently dropped (no directive) or divide by zero, it is refused
PositiveDuration = Annotated[Optional[int], BeforeValidator(_duration), AfterValidator(_positive_duration)]
PositiveSize = Annotated[Optional[int], BeforeValidator(_size), AfterValidator(_positive_size)]

ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# the job contract's own variables: a spec's env must not shadow them on any target. What a
# backend's scheduler sets (SLURM_*, ...) the backend declares (``SetsEnv``), and a spec is
# refused only on the targets of such a backend (``launcher.backend.support``).
RESERVED_ENV_PREFIXES = ("LAUNCHER_",)
RESERVED_ENV_NAMES = ("MASTER_ADDR", "MASTER_PORT")
# names of targets in the user's config (they reach file names, script comments and logs)
TARGET_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
TARGET_NAME_HINT = "a target name: a letter or digit, then letters, digits, '_', '.' or '-' (at most 64)"

def check_env_name(k: str, what: str = "env name") -> None:
    if not ENV_NAME_RE.match(k):
        raise ValueError(f"{what} {k!r} is not a valid variable name for a shell ([A-Za-z_][A-Za-z0-9_]*)")
    if k.startswith(RESERVED_ENV_PREFIXES) or k in RESERVED_ENV_NAMES:
        reserved = ", ".join([*(p + "*" for p in RESERVED_ENV_PREFIXES), *RESERVED_ENV_NAMES])
        raise ValueError(f"{what} {k!r} is reserved: the launcher sets {reserved} for the job")


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
    # MFU's denominator (launcher report): the accelerator's dense peak at this precision, from the
    # peak table (launcher.plan.peaks); peak_tflops overrides it (a CPU, a part not in the table):
    # TFLOPS per accelerator (per node when gpus_per_node is 0)
    precision: Precision = "bf16"
    peak_tflops: Optional[float] = Field(None, gt=0, le=1e6)

    @field_validator("precision", mode="before")
    @classmethod
    def _precision(cls, v):
        return v.strip().lower() if isinstance(v, str) else v

    @field_validator("accelerator")
    @classmethod
    def _acc(cls, v):
        if v is not None and not re.match(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", v):
            raise ValueError("expected an accelerator name like H100, A100-80GB or L4")
        return v


class ModelSection(Section):
    """What the job's model computes, for MFU (``launcher report``): with ``jobside.report(step,
    tokens=N)`` each step's model FLOPs are N x flops_per_token (6N + attention: docs/mfu.md)."""

    flops_per_token: Optional[float] = Field(None, gt=0, le=1e30)


class Topology(Section):
    max_switches: Optional[int] = Field(None, ge=1)
    switch_wait: PositiveDuration = None
    segment: Optional[int] = Field(None, ge=1)


class Layout(Section):
    """The job's parallelism layout, as far as placement is concerned: ``group_nodes`` nodes
    form one model-parallel group (tensor or pipeline parallel), made of consecutive node
    ranks, which must stay inside one block (topology/block) or leaf switch (topology/tree)."""

    group_nodes: Optional[int] = Field(None, ge=1, le=100000)


class Checkpoint(Section):
    root: Optional[str] = None
    keep: int = Field(3, ge=1)
    interval: PositiveDuration = None
    cost: PositiveDuration = None  # time to write one checkpoint (the planner's C); default 5m
    verify: bool = False
    # Multi-tier checkpoints (launcher.checkpoint.tiers): commit on a node-local path, copy each
    # node's shards to the next node (peers: 1), drain to root in the background (drain: async,
    # the default with local) or before save returns (sync). "{node}" in local is the node rank:
    # each node's directory on a mount all nodes see (the peer copy goes through a path);
    # without it every node has its own disk there and the peer copy goes over the network.
    # The local tier belongs to the run: parts go under <local>/run-<hash of root>/ and name
    # their root in COMMIT.json, so jobs with different roots may share one local path.
    local: Optional[str] = None
    peers: int = Field(0, ge=0, le=1)
    drain: Optional[Literal["async", "sync"]] = None

    @field_validator("local")
    @classmethod
    def _local(cls, v):
        if v is None:
            return v
        if not v.strip() or any(c in v for c in "\n\r\0") or "://" in v:
            raise ValueError("checkpoint local must be a one-line node-local POSIX path (e.g. /local/nvme/ckpt)")
        if not v.startswith("/"):
            raise ValueError("checkpoint local must be an absolute path: it names a directory on every node, "
                             "not next to the spec file")
        if re.sub(r"\{node\}", "", v).count("{") or re.sub(r"\{node\}", "", v).count("}"):
            raise ValueError("checkpoint local: the only placeholder is {node} (the node rank)")
        return v

    @model_validator(mode="after")
    def _tiers(self):
        if self.local and not self.root:
            raise ValueError("checkpoint.local needs checkpoint.root: the local tier is drained to the durable root")
        if self.peers and not self.local:
            raise ValueError("checkpoint.peers copies the local tier to a peer node: set checkpoint.local")
        if self.drain and not self.local:
            raise ValueError("checkpoint.drain is how the local tier reaches the root: set checkpoint.local")
        return self

    @property
    def drain_mode(self) -> Optional[str]:
        """'async' or 'sync' with a local tier (async by default), None without one."""
        return (self.drain or "async") if self.local else None

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


IN_JOB_KINDS = ("allocation", "torchft", "nvrx")
IN_JOB_BUILT = IN_JOB_KINDS  # the kinds the launcher renders (docs/in-job-recovery.md)


class InJob(Section):
    """In-job recovery (docs/in-job-recovery.md): the job recovers a failed run inside its
    allocation before the launcher's own recovery (requeue, resubmission) acts. ``allocation``:
    the job script reruns the failed step, resuming from the nearest committed checkpoint, up to
    ``max_restarts`` times within ``window``. ``torchft``: the same, plus torchft's lighthouse
    beside the job script and each node's replica group (``min_replicas``). ``nvrx``: NVIDIA
    Resiliency Extension restarts inside the step (``ft_launcher``/torchrun ``--max-restarts``
    from ``max_restarts``, the in-process wrapper's environment); the job script does not rerun."""

    kind: str = "allocation"
    max_restarts: int = Field(3, ge=1, le=1000)
    window: PositiveDuration = 3600
    # torchft: the replica groups the lighthouse waits for before it forms a quorum
    min_replicas: Optional[int] = Field(None, ge=1)

    @field_validator("kind")
    @classmethod
    def _kind(cls, v):
        if v not in IN_JOB_KINDS:
            raise ValueError(f"expected one of {', '.join(IN_JOB_KINDS)}, got {v!r}")
        return v

    @model_validator(mode="after")
    def _replicas(self):
        if self.min_replicas is not None and self.kind != "torchft":
            raise ValueError(f"min_replicas is torchft's (the lighthouse's quorum), not {self.kind}'s: leave it out")
        return self


class BadNodes(Section):
    """Bad nodes remembered (docs/bad-nodes.md): an attempt that fails on its nodes (the scheduler
    says NODE_FAIL, or the program exits with one of ``exit_codes``) blames them; a node blamed
    ``after`` times within ``window`` (by any job of the store) is quarantined on that target for
    ``quarantine``: later attempts and new launches there exclude it."""

    exit_codes: list[Annotated[int, Field(ge=1, le=255)]] = Field(default_factory=list, max_length=64)
    after: int = Field(2, ge=1, le=1000)
    window: PositiveDuration = 86400
    quarantine: PositiveDuration = 86400

    @field_validator("exit_codes")
    @classmethod
    def _codes(cls, v):
        reserved = sorted({c for c in v if c in (75, 93)})
        if reserved:
            raise ValueError(f"exit {reserved[0]} has its own meaning (75: requeue me, 93: never restart); "
                             "name another code for a bad node")
        return sorted(set(v))


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
    # restarts inside the allocation, before the launcher's own recovery (None: none)
    in_job: Optional[InJob] = None
    # a hang (docs/in-job-recovery.md#hangs): the job runs but reported no step for this long.
    # None: off; a duration; or "auto" (twice the longest gap between its step reports, plus 60 s)
    hang: Optional[Union[int, str]] = None
    # resubmissions after a hang (its own budget; in-job reruns count against in_job.max_restarts)
    hang_restarts: int = Field(2, ge=0)
    # nodes that keep failing jobs are quarantined for the whole store (docs/bad-nodes.md)
    bad_nodes: BadNodes = Field(default_factory=BadNodes)

    @field_validator("hang", mode="before")
    @classmethod
    def _hang(cls, v):
        if v is None or (isinstance(v, str) and v.strip().lower() == "auto"):
            return None if v is None else "auto"
        d = _duration(v)
        if d is None or d <= 0:
            raise ValueError("expected a positive duration (10m) or auto, or leave the key out (no hang detection)")
        return d

    @field_validator("signal")
    @classmethod
    def _sig(cls, v):
        v = v.upper().removeprefix("SIG")
        if v not in {"USR1", "USR2", "TERM", "INT", "HUP", "URG"}:
            raise ValueError("expected one of USR1, USR2, TERM, INT, HUP, URG")
        return v


_ISO_DATE_RE = re.compile(r"^\s*\d{4}-\d{2}-\d{2}[T ]")


def _deadline(v):
    """A duration from submission (``70h``), or an absolute time with its zone
    (``2026-12-10T18:00Z``, ``2026-12-10T18:00:00+01:00``): kept as an aware datetime."""
    if isinstance(v, datetime):
        dt = v
    elif isinstance(v, str) and _ISO_DATE_RE.match(v):
        try:
            dt = datetime.fromisoformat(v.strip())
        except ValueError:
            raise ValueError(f"expected an ISO date and time like 2026-12-10T18:00Z, got {v!r}") from None
    else:
        return _positive_duration(_duration(v))
    if dt.tzinfo is None:
        raise ValueError(f"{v!s}: give the time zone (2026-12-10T18:00Z, or +01:00): "
                         "a deadline without one means a different time on every machine")
    return dt.astimezone(timezone.utc)


Deadline = Annotated[Optional[Union[int, datetime]], BeforeValidator(_deadline)]


class Cost(Section):
    max_total_usd: Optional[float] = Field(None, gt=0)
    max_hourly_usd: Optional[float] = Field(None, gt=0)
    # a duration from the job's submission (70h), or an absolute time (2026-12-10T18:00Z):
    # ``deadline_at`` resolves either; `launcher watch` keeps the job on schedule for it
    # (launcher.recovery.deadline), the planner drops offers that would finish after it
    deadline: Deadline = None
    # the job's total steps: its committed step / total_steps is the work done (with a deadline)
    total_steps: Optional[int] = Field(None, ge=1)
    # Gbit/s at which a deadline move copies the committed checkpoint to another region: its
    # transfer time is size x 8 / transfer_gbps (None: launcher.recovery.deadline.DEFAULT_TRANSFER_GBPS)
    transfer_gbps: Optional[float] = Field(None, gt=0)

    def deadline_at(self, submitted: float) -> Optional[float]:
        """The deadline as a Unix time, for a job submitted at SUBMITTED (None: no deadline)."""
        if self.deadline is None:
            return None
        if isinstance(self.deadline, datetime):
            return self.deadline.timestamp()
        return submitted + float(self.deadline)


class Burst(Section):
    after: Duration = None
    to: list[TargetNameStr] = Field(default_factory=list, max_length=64)


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
    layout: Layout = Field(default_factory=Layout)
    checkpoint: Checkpoint = Field(default_factory=Checkpoint)
    recovery: Recovery = Field(default_factory=Recovery)
    cost: Cost = Field(default_factory=Cost)
    burst: Burst = Field(default_factory=Burst)
    model: ModelSection = Field(default_factory=ModelSection)
    targets: list[TargetNameStr] = Field(default_factory=list, max_length=64)
    seed: Optional[int] = Field(None, ge=0, description="exported as LAUNCHER_SEED (random per launch if unset)")
    sweep: Optional[SweepSpec] = None
    # experiment trackers and notifications (launcher.spec.integrations)
    tracking: TrackingSection = Field(default_factory=TrackingSection)
    notify: Optional[NotifySection] = None
    # backend sections (slurm:, skypilot:, ...) are added by launcher.backend.sections: each backend owns its own

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
        self._check_layout()
        dup = set(self.env) & set(self.secrets)
        if dup:
            raise ValueError(f"{sorted(dup)} are listed both in env and in secrets; secrets are names only")
        if self.checkpoint.peers and self.resources.nodes < 2:
            raise ValueError(f"checkpoint.peers: {self.checkpoint.peers} keeps a copy of each node's checkpoint "
                             f"shards on the next node, and the job has {self.resources.nodes} node: set "
                             "resources.nodes >= 2, or peers: 0")
        ij = self.recovery.in_job
        if ij and ij.kind == "torchft" and (ij.min_replicas or 1) > self.resources.nodes:
            raise ValueError(f"recovery.in_job.min_replicas: {ij.min_replicas} replica groups cannot form on "
                             f"{self.resources.nodes} node(s) (one group per node, or per topology block)")
        if self.recovery.in_job and not self.checkpoint.root:
            raise ValueError("recovery.in_job restarts the run from the nearest committed checkpoint and records "
                             "each restart under it: set checkpoint.root")
        if self.sweep and self.sweep.early_stop and not self.checkpoint.root:
            raise ValueError("sweep.early_stop needs checkpoint.root: each element reports its metrics under its "
                             "own checkpoint root, where `launcher watch` reads them")
        return self

    def _check_layout(self) -> None:
        """A layout that no placement can keep is refused here; the cluster's blocks are
        checked at render (they are probed facts)."""
        n, nodes, seg = self.layout.group_nodes, self.resources.nodes, self.topology.segment
        if not n:
            return
        if nodes % n:
            raise ValueError(f"layout.group_nodes: {n} does not divide resources.nodes {nodes}: every model-parallel "
                             f"group needs {n} whole nodes; set nodes to a multiple of {n}")
        if seg and seg % n:
            raise ValueError(f"layout.group_nodes: {n} does not divide topology.segment {seg}: a group would span two "
                             f"segments; set segment to a multiple of {n}, or leave it out to have it sized")

    # convenience for backends
    @property
    def run_argv_or_shell(self) -> RunCommand:
        return self.run

    def section(self, model: type[S]) -> S:
        """A backend's own section of this spec, as that backend's model (``spec_options``),
        defaulted when the spec has none: ``spec.section(SlurmSection).partition``."""
        for value in self.__dict__.values():
            if type(value) is model:
                return value
        return model()


S = TypeVar("S", bound=BaseModel)


def require_workdir(workdir: str, source: str, base) -> None:
    """Refuse a workdir that is not an existing directory on this machine, naming the path."""
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
