"""SkyPilot's states -> launcher JobState, keeping the raw native state and the *why*.

Pure functions of records (client.py) so every branch is testable without SkyPilot;
a test checks the tables cover every member of the installed SkyPilot's enums.

The rule that matters most (SkyPilot #10155): not being able to *ask* is never a job
failure. Those errors never reach this module; the backend raises TransientError.
A cluster in INIT after launch is reported UNKNOWN, not PREEMPTED: SkyPilot also
shows INIT when a status refresh itself failed, and a needless recovery costs more
than waiting for the next poll. Only a STOPPED or vanished cluster means the nodes
are gone.
"""

from __future__ import annotations

import re
from typing import Optional, Sequence

from launcher.core.status import JobState, Status

from launcher_backends.skypilot.client import ClusterJob, ClusterRecord, ClusterUnavailable, ManagedJob, RequestRecord

S = JobState

# sky.skylet.job_lib.JobStatus (a job on a cluster started by sky.launch)
CLUSTER_JOB = {
    "INIT": (S.PENDING, "submitted to the cluster"),
    "PENDING": (S.PENDING, "waiting for the cluster's resources"),
    "SETTING_UP": (S.PENDING, "running setup"),
    "RUNNING": (S.RUNNING, ""),
    "SUCCEEDED": (S.COMPLETED, ""),
    "FAILED": (S.FAILED, "the job's command exited non-zero"),
    "FAILED_SETUP": (S.FAILED_SETUP, "the setup commands failed"),
    "FAILED_DRIVER": (S.NODE_FAIL, "SkyPilot's job driver died (a node lost, or the driver out of memory)"),
    "CANCELLED": (S.CANCELLED, ""),
}

# sky.jobs.state.ManagedJobStatus (delegated mode: SkyPilot's jobs controller owns recovery)
MANAGED = {
    "PENDING": (S.PENDING, "waiting for the jobs controller"),
    "DEPRECATED_SUBMITTED": (S.PENDING, "submitted"),
    "STARTING": (S.PENDING, "provisioning"),
    "RUNNING": (S.RUNNING, ""),
    "RECOVERING": (S.REQUEUED, "SkyPilot is recovering the job (preempted or a node lost)"),
    "WINDING_DOWN": (S.COMPLETING, "winding down"),
    "CANCELLING": (S.COMPLETING, "cancelling"),
    "SUCCEEDED": (S.COMPLETED, ""),
    "CANCELLED": (S.CANCELLED, ""),
    "FAILED": (S.FAILED, "the job's command failed more often than max_restarts_on_errors allows"),
    "FAILED_SETUP": (S.FAILED_SETUP, "the setup commands failed"),
    "FAILED_PRECHECKS": (S.FAILED, "SkyPilot's prechecks failed (the task cannot be launched as written)"),
    "FAILED_NO_RESOURCE": (S.NO_CAPACITY, "no placement had capacity"),
    "FAILED_CONTROLLER": (S.NODE_FAIL, "SkyPilot's jobs controller failed"),
}

# sky.utils.status_lib.ClusterStatus, for reference and the coverage test
CLUSTER = ("INIT", "UP", "STOPPED", "AUTOSTOPPING", "PENDING")

# Exceptions a finished launch request may carry, by class name (no SkyPilot import needed)
LAUNCH_ERRORS = {
    "ResourcesUnavailableError": S.NO_CAPACITY,
    "KubeAPIUnreachableError": S.NO_CAPACITY,
    "RequestCancelled": S.CANCELLED,
    "ClusterSetUpError": S.NODE_FAIL,
    "CommandError": S.NODE_FAIL,
    "FetchClusterInfoError": S.NODE_FAIL,
    "RequestInterruptedError": S.NODE_FAIL,
}

IN_FLIGHT = ("PENDING", "WAITING", "RUNNING")


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _first_line(text, limit: int = 300) -> str:
    line = next((ln.strip() for ln in _ANSI.sub("", str(text)).splitlines() if ln.strip()), "")
    return line[:limit]


def from_request(req: RequestRecord) -> Optional[Status]:
    """The state a launch request implies on its own, or None once it has succeeded."""
    if req.status in IN_FLIGHT:
        return Status(S.PENDING, native_state=f"LAUNCH:{req.status}",
                      reason=req.message or "provisioning through SkyPilot")
    if req.status == "CANCELLED":
        return Status(S.CANCELLED, native_state="LAUNCH:CANCELLED", reason="launch request cancelled")
    if req.status == "FAILED":
        err = req.error
        kind = type(err).__name__ if err is not None else "unknown error"
        state = LAUNCH_ERRORS.get(kind, S.FAILED)
        reason = f"launch failed: {kind}: {_first_line(err)}" if err is not None else "launch failed"
        return Status(state, native_state="LAUNCH:FAILED", reason=reason, extra={"launch_error": kind})
    return None


def attempt_job(jobs: Sequence[ClusterJob], task_name: str) -> Optional[ClusterJob]:
    """The job that runs the attempt TASK_NAME among a cluster's jobs, or None.

    One cluster job per attempt, unless the attempt was launched twice (a watcher paused
    past its claim that submitted anyway): the second launch goes to the same cluster,
    named from the attempt, and is queued there under the same name. Its ``run`` stands
    down before any user code when the other holds the attempt's start claim (render.py),
    and ends FAILED (exit 3). So the launcher follows, in this order: a job that SUCCEEDED
    (a copy that stood down never does), then a job still active (running before queued),
    then the job that started first. A copy that stood down is never taken for the
    attempt while the copy that holds it runs or has succeeded, so it never reads as the
    attempt's failure and starts a resubmission beside the running copy."""
    mine = [j for j in jobs if j.name == task_name]
    if len(mine) <= 1:
        return mine[0] if mine else None

    def precedence(j: ClusterJob) -> tuple:
        state = CLUSTER_JOB.get(j.status, (S.UNKNOWN, ""))[0]
        group = 0 if state == S.COMPLETED else 1 if state.is_active else 2
        return group, j.start_at is None, j.start_at or 0.0, j.job_id

    return min(mine, key=precedence)


def cluster_job_status(job: ClusterJob, cluster: Optional[ClusterRecord]) -> Status:
    cstatus = cluster.status if cluster else "?"
    state, reason = CLUSTER_JOB.get(job.status, (S.UNKNOWN, f"unknown SkyPilot job status {job.status}"))
    if cstatus == "INIT" and state.is_active:
        reason = (reason + "; " if reason else "") + "cluster is INIT (a node may be lost)"
    return Status(state, native_state=f"{cstatus}/{job.status}", reason=reason, start_time=job.start_at,
                  end_time=job.end_at if not state.is_active else None,
                  extra={"job_id": job.job_id, **_cluster_extra(cluster)})


def _cluster_extra(cluster: Optional[ClusterRecord]) -> dict:
    if cluster is None:
        return {}
    out = {"cluster_status": cluster.status, "cloud": cluster.cloud, "region": cluster.region}
    if cluster.zone:
        out["zone"] = cluster.zone                    # where it ran: what a preemption cools (offer_key)
    if cluster.instance_type:
        out["instance_type"] = cluster.instance_type
    if cluster.launched_at:
        out["launched_at"] = cluster.launched_at  # billing starts here, not at the job's start
    if cluster.hourly_usd is not None:
        out["hourly_usd"] = cluster.hourly_usd
    return out


def unmanaged_status(*, use_spot: bool, request: Optional[RequestRecord], cluster: Optional[ClusterRecord],
                     jobs, task_name: str) -> Status:
    """Combine what SkyPilot says about one attempt: its launch request, its cluster, the cluster's jobs."""
    job = attempt_job(jobs, task_name) if isinstance(jobs, list) else None
    if job is not None:
        return cluster_job_status(job, cluster)
    if request is not None:
        st = from_request(request)
        if st is not None:
            return st
    lost = S.PREEMPTED if use_spot else S.NODE_FAIL
    if cluster is None:
        if request is None:
            # Nothing left to ask: the nodes were reclaimed (or the cluster went down after
            # the job ended while nobody watched; a restart then resumes from the last commit).
            return Status(lost, native_state="GONE", reason="the cluster is gone and no final state was recorded")
        return Status(lost, native_state="GONE", reason="the cluster is gone before the job finished")
    if cluster.status == "STOPPED":
        return Status(lost, native_state="STOPPED", reason="the cluster stopped before the job finished",
                      extra=_cluster_extra(cluster))
    if cluster.status in ("INIT", "PENDING") and request is None:
        return Status(S.PENDING, native_state=cluster.status, reason="cluster is being provisioned",
                      extra=_cluster_extra(cluster))
    if cluster.status == "INIT":
        return Status(S.UNKNOWN, native_state="INIT",
                      reason="cluster is INIT after launch (a node may be preempted or unreachable); "
                             "waiting for SkyPilot to settle it", extra=_cluster_extra(cluster))
    why = "job not found in the cluster's queue"
    if isinstance(jobs, ClusterUnavailable):
        why = f"cluster job table unavailable: {_first_line(jobs)}"
    return Status(S.UNKNOWN, native_state=cluster.status, reason=why, extra=_cluster_extra(cluster))


def managed_status(job: Optional[ManagedJob], request: Optional[RequestRecord]) -> Status:
    if job is None:
        if request is not None:
            st = from_request(request)
            if st is not None:
                return st
        return Status(S.UNKNOWN, native_state="MISSING", reason="not in SkyPilot's managed jobs queue")
    state, reason = MANAGED.get(job.status, (S.UNKNOWN, f"unknown SkyPilot managed job status {job.status}"))
    if job.failure_reason and not state.is_active and state != S.COMPLETED:
        reason = f"{reason}: {_first_line(job.failure_reason)}" if reason else _first_line(job.failure_reason)
    extra = {"job_id": job.job_id, "cloud": job.cloud, "region": job.region, "cluster": job.cluster}
    if job.zone:
        extra["zone"] = job.zone
    return Status(state, native_state=job.status, reason=reason, restarts=job.recovery_count,
                  start_time=job.start_at, end_time=job.end_at if not state.is_active else None, extra=extra)
