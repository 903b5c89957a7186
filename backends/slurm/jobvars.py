"""What the sbatch script tells the job side about Slurm, and reading it back.

The job side (``launcher.jobside``, the checkpoint helper) names no scheduler: the job
script (templates/sbatch.sh.j2) renders what it needs as ``LAUNCHER_*`` variables:

* ``LAUNCHER_SELF_ID``: this job's own id as Slurm names it (an array task: its element,
  ``<array id>_<index>``).
* ``LAUNCHER_REQUEUE_CMD``: requeues this job in place, under the same ids. Where it is
  set, a run superseded by such a restart waits to be cleaned up instead of exiting
  (``launcher.jobside.signals.stand_down``).
* ``LAUNCHER_SCHEDULER_VARS``: the variables each start's attempt record keeps
  (``scheduler`` in ``ROOT/.launcher/attempts/g<G>.json``; an array task's also its
  array's id); ``run_of`` reads them back.
"""

from __future__ import annotations

from typing import Optional

SCHEDULER_VARS = ("SLURM_JOB_ID", "SLURM_RESTART_COUNT", "SLURM_JOB_NODELIST")
ELEMENT_SCHEDULER_VARS = ("SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID", "SLURM_RESTART_COUNT", "SLURM_JOB_NODELIST")


def run_of(scheduler: dict) -> Optional[tuple[str, int]]:
    """An attempt record's scheduler variables -> (job id, restart count: 0 for the first run),
    or None when the record does not say (no job id, an unreadable count)."""
    jid = scheduler.get("SLURM_JOB_ID")
    if not jid:
        return None
    try:
        return str(jid), int(scheduler.get("SLURM_RESTART_COUNT", "0") or 0)
    except (TypeError, ValueError):
        return None
