"""What a SkyPilot task cannot do with a spec (``launcher.backend.support.Unsupported`` items): render
refuses ``task_limits``; ``launcher validate``, render, launch and the planner refuse all of
``unsupported`` through ``SkyPilotBackend.unsupported``."""

from __future__ import annotations

from launcher.spec.model import JobSpec
from launcher.backend.support import Unsupported

from launcher_backends.skypilot.options import SkyPilotSection


def unsupported(spec: JobSpec) -> list[Unsupported]:
    return topology_limits(spec) + task_limits(spec)


def topology_limits(spec: JobSpec) -> list[Unsupported]:
    """SkyPilot places nodes itself: one node keeps any topology, several may not."""
    r, t = spec.resources, spec.topology
    if r.nodes <= 1:
        return []
    return [Unsupported(f"topology.{key}", f"SkyPilot places the nodes itself and cannot keep {r.nodes} nodes "
                        "under one switch or block", "remove topology, or use a Slurm target")
            for key in ("max_switches", "segment") if getattr(t, key)]


def task_limits(spec: JobSpec) -> list[Unsupported]:
    """What a spec asks that a SkyPilot task cannot express (launcher.backend.support.Unsupported items)."""
    r, out = spec.resources, []
    section = spec.section(SkyPilotSection)
    if section.job_recovery is not None and not section.managed:
        out.append(Unsupported("skypilot.job_recovery", "job_recovery only applies to SkyPilot managed jobs",
                               "set skypilot.managed: true, or drop job_recovery and let the launcher's "
                               "own recovery loop restart the job"))
    in_job = spec.recovery.in_job
    if in_job is not None:  # docs/in-job-recovery.md: rendered on Slurm and local only
        out.append(Unsupported("recovery.in_job", f"a SkyPilot task cannot recover inside the job (kind "
                               f"{in_job.kind}): it renders no rerun loop, torchft lighthouse or NVRx restarts",
                               "remove recovery.in_job (the launcher's own recovery resumes the job from its last "
                               "committed checkpoint), or use a Slurm or local target"))
    if r.gpus_per_node and not r.accelerator:
        out.append(Unsupported("resources.accelerator", "SkyPilot needs an accelerator name with gpus_per_node",
                               "set resources.accelerator (e.g. H100, A100-80GB, L4)"))
    if r.accelerator and not r.gpus_per_node:
        out.append(Unsupported("resources.gpus_per_node", f"accelerator is {r.accelerator} but gpus_per_node is 0",
                               "set gpus_per_node to the number of accelerators per node"))
    return out
