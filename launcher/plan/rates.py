"""Preemption rates and preemption notices, with documented defaults.

Rates are interruptions per **node-hour**, counting preemptions and hardware failures.
A user's measured rates go in the config (``preemption_rates.spot`` / ``.on_demand``,
keyed by cloud name, ``slurm`` for Slurm targets, ``*`` as the fallback) and win over
these defaults. The defaults are deliberately round priors, not measurements:

* on-demand and Slurm nodes: 2e-4 per node-hour. Meta's Llama 3 run reports 419
  unexpected interruptions in 54 days on 16,384 GPUs (2,048 nodes), i.e. about
  1.6e-4 per node-hour; we round up.
* spot/preemptible GPU capacity: 0.05/h on AWS and Azure (MTBF ~20 h), 0.1/h on GCP
  (spot VMs are reclaimed more eagerly, historically within 24 h), 0.2/h on RunPod's
  interruptible pods and on unknown clouds. Spot GPU interruption rates vary by an
  order of magnitude between zones and weeks; the planner's spot chasing
  (``launcher.plan.chase``) replaces these priors with what the launcher observes.

Notices (FACTS.md): AWS 2 min, GCP and Azure 30 s, RunPod 5 s (SIGTERM before the pod
is stopped), Lambda and on-demand capacity none; on Slurm, the spec's ``recovery.grace``
when the job checkpoints on a signal.
"""

from __future__ import annotations

from typing import Mapping, Optional

DEFAULT_ON_DEMAND_RATE = 2e-4
DEFAULT_SPOT_RATES: dict[str, float] = {
    "aws": 0.05,
    "azure": 0.05,
    "gcp": 0.10,
    "runpod": 0.20,
    "*": 0.20,
}
DEFAULT_ON_DEMAND_RATES: dict[str, float] = {"*": DEFAULT_ON_DEMAND_RATE}

SPOT_NOTICE_SECONDS: dict[str, float] = {
    "aws": 120.0,
    "gcp": 30.0,
    "azure": 30.0,
    "runpod": 5.0,
}


def _lookup(table: Mapping[str, float], cloud: str) -> Optional[float]:
    if cloud in table:
        return float(table[cloud])
    if "*" in table:
        return float(table["*"])
    return None


def preemption_rate(cloud: str, spot: bool, configured=None) -> float:
    """Per node-hour rate for ``cloud`` ("slurm" for Slurm targets): config first, then defaults.

    ``configured`` is the config's ``preemption_rates`` (a PreemptionDefaults) or None.
    """
    return rate_and_source(cloud, spot, configured)[0]


def rate_and_source(cloud: str, spot: bool, configured=None) -> tuple[float, str]:
    """``preemption_rate`` and where it came from: "catalog" (the config's rate table, the
    user's own measurements) or "prior" (the built-in defaults above)."""
    cloud = cloud.lower()
    if configured is not None:
        table = configured.spot if spot else configured.on_demand
        hit = _lookup(table or {}, cloud)
        if hit is not None:
            return hit, "catalog"
    hit = _lookup(DEFAULT_SPOT_RATES if spot else DEFAULT_ON_DEMAND_RATES, cloud)
    return (DEFAULT_ON_DEMAND_RATE if hit is None else hit), "prior"


def notice_seconds(cloud: str, spot: bool) -> float:
    """Warning a cloud gives before it reclaims spot capacity (0 when none)."""
    if not spot:
        return 0.0
    return SPOT_NOTICE_SECONDS.get(cloud.lower(), 0.0)
