"""An offer: one place a job could run, priced per node-instance, and whether it fits a spec.

Prices are always **per node-instance per hour** (one VM, or one Slurm node with the
GPUs the job asks for); the planner multiplies by ``resources.nodes``. Preemption rates
are **per node-hour** for the same reason: a gang of N nodes is interrupted N times as
often as one of them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

GIB = 1024 ** 3


THIS_MACHINE = "local"  # the kind of an offer of this machine's own capacity


@dataclass(frozen=True, slots=True)
class Offer:
    backend: str                   # the name of the backend that priced it
    target: str                    # name of the target in the user's config
    cloud: str                     # aws, gcp, lambda, runpod, ... or the Slurm target's cluster name
    region: Optional[str]
    zone: Optional[str]
    instance_type: str             # VM type, or the Slurm partition
    accelerator: Optional[str]     # GPU name as SkyPilot spells it (H100, A100-80GB, L4), None for CPU-only
    accelerator_count: int         # accelerators per node-instance
    vcpus: Optional[float]         # per node-instance, None when unknown
    memory_gib: Optional[float]    # per node-instance, None when unknown
    spot: bool
    hourly_usd: float              # $ per node-instance-hour
    preemption_rate: float         # interruptions per node-hour (preemptions + failures)
    queue_wait_hours: float = 0.0  # expected wait before the job starts (Slurm queue, provisioning)
    notice_seconds: float = 0.0    # warning before a preemption (AWS 120 s, GCP 30 s, Slurm grace)
    source: str = ""               # where the price came from (catalog file, aws-live, price file, config)
    # where preemption_rate came from: "catalog" (a price file's or the config's rate table),
    # "prior" (the built-in default), "observed" (posterior from this launcher's attempts,
    # launcher.plan.chase); with the decayed evidence behind an observed rate
    rate_source: str = "prior"
    rate_events: float = 0.0          # interruptions seen (decayed)
    rate_node_hours: float = 0.0      # node-hours of exposure (decayed)
    capacity_failures: float = 0.0    # launches refused for lack of capacity (decayed)
    launch_tries: float = 0.0         # launches tried here (decayed), capacity failures included
    # what the backend says about the offer itself (``Pricing``):
    kind: str = ""                    # not spot: "queue" (a scheduler's), "local"...; "" is on-demand

    @property
    def this_machine(self) -> bool:
        """Capacity of the machine the launcher runs on (kind "local"): no placement to choose."""
        return self.kind == THIS_MACHINE
    restart_hours: float = 10 / 60    # re-provision, restart and load after an interruption
    gpu_type_unknown: bool = False    # the GPU type is declared nowhere: a fit when the count is

    @property
    def key(self) -> tuple:
        """Identity used to learn preemption rates across attempts (spot chasing)."""
        return (self.cloud, self.region or "", self.zone or "", self.instance_type, self.spot)

    @property
    def where(self) -> str:
        parts = [self.cloud] + [p for p in (self.region, self.zone) if p]
        return "/".join(parts)

    @property
    def capacity(self) -> str:
        """The kind of capacity, as `launcher plan` shows it: spot, on-demand, queue, local."""
        return "spot" if self.spot else (self.kind or "on-demand")

    @property
    def label(self) -> str:
        return f"{self.target}: {self.where} {self.instance_type} ({self.capacity})"

    def as_dict(self) -> dict:
        return {f: getattr(self, f) for f in self.__dataclass_fields__}

    def placement(self) -> dict:
        """The SkyPilot placement (``infra``, ``use_spot``, ``instance_type``) that asks for this offer.

        AWS catalog zones are zone IDs (``use1-az1``), which map to a different zone name in
        every account; SkyPilot resolves them itself, so AWS placements stop at the region.
        """
        zone = self.zone if self.zone and not _AWS_ZONE_ID.match(self.zone) else None
        infra = "/".join(p for p in (self.cloud, self.region, zone) if p)
        return {"infra": infra, "use_spot": self.spot, "instance_type": self.instance_type}


_AWS_ZONE_ID = re.compile(r"^[a-z]{2,5}\d+-az\d+$")


def resource_mismatch(resources, offer: Offer) -> Optional[str]:
    """Why ``offer`` cannot run a job with these ``resources`` (a spec.Resources), or None.

    GPU counts must match exactly, as SkyPilot's optimizer requires: a bigger instance
    would be paid for and left idle. CPUs and memory are minimums; unknown values
    (Slurm partitions without a price file entry) are not held against an offer.
    """
    return make_matcher(resources)(offer)


def make_matcher(resources):
    """``resource_mismatch`` with the spec's side worked out once (rank calls it per offer)."""
    want_gpus = resources.gpus_per_node
    want_acc = resources.accelerator
    want_acc_l = want_acc.lower() if want_acc else None
    want_gpu = bool(want_acc or want_gpus)
    want_cpus = resources.cpus_per_node
    want_mem = resources.memory_per_node / GIB if resources.memory_per_node else None

    def mismatch(offer: Offer) -> Optional[str]:
        if want_gpu:
            acc = offer.accelerator
            if offer.gpu_type_unknown and acc is None and offer.accelerator_count == want_gpus:
                pass  # e.g. a Slurm partition's GPU type is not declared anywhere: a fit, noted by its backend
            elif not acc or offer.accelerator_count <= 0:
                return f"has no GPUs; spec asks for {want_gpus or 1} x {want_acc or 'GPU'} per node"
            elif want_acc_l and acc.lower() != want_acc_l:
                return f"has {acc}, spec asks for {want_acc}"
            if want_gpus and offer.accelerator_count != want_gpus:
                return (f"has {offer.accelerator_count} x {acc or 'GPU'} per node, "
                        f"spec asks for {want_gpus}")
        if want_cpus and offer.vcpus is not None and offer.vcpus < want_cpus:
            return f"has {offer.vcpus:g} vCPUs per node, spec asks for {want_cpus}"
        if want_mem and offer.memory_gib is not None and offer.memory_gib + 1e-9 < want_mem:
            return f"has {offer.memory_gib:g} GiB memory per node, spec asks for {want_mem:g} GiB"
        return None

    return mismatch
