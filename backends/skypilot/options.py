"""A SkyPilot target's settings, the placements ("candidates") a task may run on, and the
job spec's ``skypilot:`` section.

Validated without importing SkyPilot: the cloud names below are SkyPilot 0.14.1's
``sky.skylet.constants.ALL_CLOUDS`` (a test compares them with the installed
library), so a typo in ``infra`` is reported when the config is read, with a
"did you mean", instead of minutes later by SkyPilot.
"""

from __future__ import annotations

import difflib
import re
from typing import Annotated, ClassVar, Optional

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator

from launcher.spec.model import Section

KNOWN_CLOUDS = (
    "aws", "azure", "gcp", "ibm", "lambda", "scp", "oci", "kubernetes", "runpod", "vast", "vsphere",
    "cudo", "fluidstack", "paperspace", "primeintellect", "do", "nebius", "ssh", "slurm", "hyperbolic",
    "seeweb", "shadeform", "yotta", "mithril", "verda",
)
_ALIASES = {"k8s": "kubernetes"}
# Clouds whose second infra component is a cluster/context/pool, not a region.
_NAMED_INFRA = ("kubernetes", "slurm", "ssh")
_PART_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:@-]*$")


def split_infra(infra: str) -> tuple[str, Optional[str], Optional[str]]:
    """``aws/us-east-1/us-east-1a`` -> (cloud, region, zone); the cloud is lower-cased and checked."""
    if not isinstance(infra, str) or not infra.strip():
        raise ValueError("expected an infra like aws, aws/us-east-1, runpod, lambda or slurm/NAME")
    parts = infra.strip().split("/")
    cloud = _ALIASES.get(parts[0].lower(), parts[0].lower())
    if cloud == "*":
        raise ValueError("a target names one cloud; list several placements under 'candidates' instead of '*'")
    if cloud not in KNOWN_CLOUDS:
        guess = difflib.get_close_matches(cloud, KNOWN_CLOUDS, n=1)
        hint = f"; did you mean '{guess[0]}'?" if guess else f" (SkyPilot knows: {', '.join(KNOWN_CLOUDS)})"
        raise ValueError(f"unknown infra cloud '{parts[0]}'{hint}")
    rest = parts[1:]
    if cloud == "kubernetes":  # a context name may itself contain slashes
        return cloud, ("/".join(rest) or None), None
    if len(rest) > 2 or any(not _PART_RE.match(p) for p in rest):
        raise ValueError(f"expected cloud[/region[/zone]], got {infra!r}")
    region = rest[0] if rest else None
    zone = rest[1] if len(rest) > 1 else None
    if cloud in _NAMED_INFRA and zone:
        raise ValueError(f"{cloud} infra is {cloud}/NAME, got {infra!r}")
    return cloud, region, zone


def join_infra(cloud: str, region: Optional[str], zone: Optional[str]) -> str:
    return "/".join(p for p in (cloud, region, zone) if p)


class Placement(BaseModel):
    """One place a task may run: a target's own placement (``SkyPilotOptions`` is one), one of
    its fallbacks, or one of the planner's ranked offers (which carries its price)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    infra: str
    use_spot: bool = False
    region: Optional[str] = None
    zone: Optional[str] = None
    instance_type: Optional[str] = None
    hourly_usd: Optional[float] = Field(None, ge=0)  # the planner's price for the whole job, if it has one

    @field_validator("infra")
    @classmethod
    def _infra(cls, v):
        split_infra(v)
        return v.strip()

    @field_validator("region", "zone", "instance_type")
    @classmethod
    def _plain(cls, v):
        if v is not None and not _PART_RE.match(v):
            raise ValueError("expected a plain name (letters, digits, _ . : @ -)")
        return v

    @model_validator(mode="after")
    def _combine(self):
        cloud, region, zone = split_infra(self.infra)
        if self.region and region and self.region != region:
            raise ValueError(f"region {self.region!r} contradicts infra {self.infra!r}")
        if self.zone and zone and self.zone != zone:
            raise ValueError(f"zone {self.zone!r} contradicts infra {self.infra!r}")
        if (self.region or self.zone) and cloud in _NAMED_INFRA:
            raise ValueError(f"{cloud} has no regions or zones: use infra {cloud}/NAME")
        if self.zone and not (self.region or region):
            raise ValueError("a zone needs its region (infra cloud/region/zone, or region:)")
        if self.use_spot and cloud in ("slurm", "ssh"):
            raise ValueError(f"SkyPilot has no spot instances on {cloud}; set use_spot: false")
        return self

    @property
    def cloud(self) -> str:
        return split_infra(self.infra)[0]

    @property
    def full_infra(self) -> str:
        """infra with region and zone folded in: the one value SkyPilot's ``infra:`` takes."""
        cloud, region, zone = split_infra(self.infra)
        if cloud == "kubernetes":
            return self.infra
        return join_infra(cloud, self.region or region, self.zone or zone)


class SkyPilotOptions(Placement):
    """The keys of a ``backend: skypilot`` target in the user's config: its own placement
    (``Placement``'s keys, checked as any placement is), then the target's settings."""

    hourly_usd: ClassVar[None] = None  # the planner's price of a ranked offer: not a key of a target
    # Internal or negotiated price per GPU-hour where no catalog has one (Slurm, a reserved
    # neocloud contract); it also overrides the catalog for the cost record.
    gpu_hour_usd: Optional[float] = Field(None, ge=0)
    cluster_name_prefix: str = "launcher"
    # Further placements tried in order after the target's own (SkyPilot `ordered:` resources).
    fallbacks: list[Placement] = Field(default_factory=list)
    # Tear the cluster down this many idle minutes after the job ends. The window lets the
    # launcher observe the final state before the cluster (and its job table) is gone.
    idle_minutes: int = Field(5, ge=0, le=10080)
    autodown: bool = True
    # Mount an s3:// checkpoint bucket on the nodes (clouds that cannot mount object stores,
    # such as RunPod, need this off; the job still reaches its checkpoints via the s3:// URI).
    mount_checkpoint_bucket: bool = True

    @field_validator("cluster_name_prefix")
    @classmethod
    def _prefix(cls, v):
        if not re.fullmatch(r"[a-z][a-z0-9-]{0,19}", v):
            raise ValueError("expected 1-20 characters: a lower-case letter, then letters, digits or '-'")
        return v

    def placement(self) -> Placement:
        """The target's own placement, without its settings."""
        return Placement(**self.model_dump(include=set(Placement.model_fields)))

    def placements(self) -> list[Placement]:
        return [self.placement(), *self.fallbacks]


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
    """The job spec's ``skypilot:`` section."""

    managed: bool = False
    job_recovery: Annotated[Optional[JobRecovery], BeforeValidator(_strategy_only)] = None
