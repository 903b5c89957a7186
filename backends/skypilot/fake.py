"""A stateful fake of ``SkyClient`` for pure-logic tests (backend state mapping, recovery loop).

It behaves like SkyPilot's API server as seen through the SDK: launch returns a request
id at once; the request then runs, succeeds (cluster UP, job RUNNING) or fails with the
error SkyPilot would store; clusters can be preempted, stopped or torn down; any method
can be made to fail the way an unreachable API server does. Tests drive time by calling
the event methods (``provision``, ``finish``, ``preempt`` ...), never by sleeping.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace
from typing import Iterator, Optional

from launcher_backends.skypilot.client import (CheckResult, ClusterJob, ClusterRecord, ClusterUnavailable, ManagedJob, PendingLaunch,
                     RequestRecord)


@dataclass
class Launch:
    request_id: str
    cluster_name: str
    task_yaml_text: str
    secrets: dict
    managed: bool = False


class FakeSkyClient:
    def __init__(self, *, enabled=("AWS", "RunPod", "Lambda"), auto_provision: bool = True,
                 hourly_usd: Optional[float] = None, clock=None):
        self.enabled = list(enabled)
        self.auto_provision = auto_provision
        self.hourly_usd = hourly_usd
        self.clock = clock or (lambda: 0.0)
        self.clusters: dict[str, ClusterRecord] = {}
        self.cluster_jobs: dict[str, list[ClusterJob]] = {}
        self.reqs: dict[str, RequestRecord] = {}
        self.managed: dict[int, ManagedJob] = {}
        self.launches: list[Launch] = []
        self.logs: dict[str, str] = {}
        self.calls: list[str] = []
        self.failing: dict[str, BaseException] = {}  # method name -> error raised while set
        self.check_result = CheckResult()
        self._ids = itertools.count(1)

    # ---- test controls
    def fail(self, method: str, error: Optional[BaseException] = None):
        """Make `method` raise (default: the error an unreachable API server gives) until heal()."""
        self.failing[method] = error or ConnectionError("Could not connect to SkyPilot API server at 127.0.0.1")

    def heal(self, method: Optional[str] = None):
        if method is None:
            self.failing.clear()
        else:
            self.failing.pop(method, None)

    def _enter(self, method: str):
        self.calls.append(method)
        if method in self.failing:
            raise self.failing[method]

    def provision(self, request_id: str, *, cloud: str = "AWS", region: str = "us-east-1", nodes: int = 1):
        """The launch request succeeds: cluster UP, the task's job RUNNING."""
        launch = next(la for la in self.launches if la.request_id == request_id)
        self.reqs[request_id] = RequestRecord(request_id, "SUCCEEDED")
        if launch.managed:  # the controller registers the job once the request has run
            job_id = len(self.managed) + 1
            self.managed[job_id] = ManagedJob(job_id, launch.cluster_name, "RUNNING", cloud=cloud, region=region,
                                              submitted_at=self.clock(), start_at=self.clock())
            return
        self.clusters[launch.cluster_name] = ClusterRecord(launch.cluster_name, "UP", cloud=cloud, region=region,
                                                           num_nodes=nodes, hourly_usd=self.hourly_usd,
                                                           launched_at=self.clock())
        name = _task_name(launch.task_yaml_text)
        jobs = self.cluster_jobs.setdefault(launch.cluster_name, [])
        jobs.append(ClusterJob(len(jobs) + 1, name, "RUNNING", submitted_at=self.clock(), start_at=self.clock()))

    def fail_launch(self, request_id: str, error: BaseException):
        self.reqs[request_id] = RequestRecord(request_id, "FAILED", error)

    def finish(self, cluster_name: str, status: str = "SUCCEEDED"):
        jobs = self.cluster_jobs[cluster_name]
        jobs[-1] = replace(jobs[-1], status=status, end_at=self.clock())

    def preempt(self, cluster_name: str, *, stopped: bool = False):
        if stopped:
            self.clusters[cluster_name] = replace(self.clusters[cluster_name], status="STOPPED")
        else:
            self.clusters.pop(cluster_name, None)
            self.cluster_jobs.pop(cluster_name, None)

    def set_cluster_status(self, cluster_name: str, status: str):
        self.clusters[cluster_name] = replace(self.clusters[cluster_name], status=status)

    def set_managed(self, name: str, status: str, *, recovery_count: Optional[int] = None, failure_reason: str = ""):
        job = next(j for j in self.managed.values() if j.name == name)
        self.managed[job.job_id] = replace(job, status=status, failure_reason=failure_reason,
                                           recovery_count=job.recovery_count if recovery_count is None
                                           else recovery_count)

    # ---- SkyClient
    def check(self, task_yaml_text, secrets):
        self._enter("check")
        return self.check_result

    def launch(self, task_yaml_text, cluster_name, *, secrets):
        self._enter("launch")
        rid = f"req-{next(self._ids)}"
        self.launches.append(Launch(rid, cluster_name, task_yaml_text, dict(secrets)))
        self.reqs[rid] = RequestRecord(rid, "RUNNING", message="provisioning")
        if cluster_name in self.clusters:  # sky.launch on an existing cluster runs the task there again
            name = _task_name(task_yaml_text)
            jobs = self.cluster_jobs.setdefault(cluster_name, [])
            jobs.append(ClusterJob(len(jobs) + 1, name, "RUNNING"))
            self.reqs[rid] = RequestRecord(rid, "SUCCEEDED")
        elif self.auto_provision:
            self.provision(rid)
        return rid

    def jobs_launch(self, task_yaml_text, name, *, secrets):
        self._enter("jobs_launch")
        rid = f"req-{next(self._ids)}"
        self.launches.append(Launch(rid, name, task_yaml_text, dict(secrets), managed=True))
        self.reqs[rid] = RequestRecord(rid, "RUNNING", message="submitting to the jobs controller")
        if self.auto_provision:
            self.provision(rid)
        return rid

    def requests(self, request_ids):
        self._enter("requests")
        return {r: self.reqs[r] for r in request_ids if r in self.reqs}

    def cancel_request(self, request_id):
        self._enter("cancel_request")
        req = self.reqs.get(request_id)
        if req is not None and req.status in ("PENDING", "WAITING", "RUNNING"):
            self.reqs[request_id] = replace(req, status="CANCELLED")

    def cancel_requests(self, request_ids):
        self._enter("cancel_requests")
        for rid in request_ids:
            req = self.reqs.get(rid)
            if req is not None and req.status in ("PENDING", "WAITING", "RUNNING"):
                self.reqs[rid] = replace(req, status="CANCELLED")

    def pending_launches(self):
        self._enter("pending_launches")
        return [PendingLaunch(la.request_id, la.managed, "" if la.managed else la.cluster_name,
                              la.cluster_name if la.managed else "")
                for la in self.launches if self.reqs[la.request_id].status in ("PENDING", "WAITING", "RUNNING")]

    def status(self, cluster_names):
        self._enter("status")
        return [self.clusters[n] for n in cluster_names if n in self.clusters]

    def queue(self, cluster_names):
        self._enter("queue")
        out = {}
        for n in cluster_names:
            c = self.clusters.get(n)
            if c is None or c.status not in ("UP", "AUTOSTOPPING"):
                out[n] = ClusterUnavailable(f"Cluster {n!r} is not up")
            else:
                out[n] = list(self.cluster_jobs.get(n, []))
        return out

    def down(self, cluster_name):
        self._enter("down")
        self.clusters.pop(cluster_name, None)
        self.cluster_jobs.pop(cluster_name, None)

    def down_many(self, cluster_names):
        self._enter("down_many")
        for name in cluster_names:
            self.clusters.pop(name, None)
            self.cluster_jobs.pop(name, None)
        return {}

    def tail_logs(self, cluster_name, job_id, follow) -> Iterator[str]:
        self._enter("tail_logs")
        text = self.logs.get(cluster_name, "")
        if text:
            yield text

    def jobs_queue(self, names):
        self._enter("jobs_queue")
        return [j for j in self.managed.values() if not names or j.name in names]

    def jobs_cancel(self, name):
        self._enter("jobs_cancel")
        self._cancel_managed(name)

    def jobs_cancel_many(self, names):
        self._enter("jobs_cancel_many")
        for name in names:
            self._cancel_managed(name)
        return {}

    def _cancel_managed(self, name):
        for j in list(self.managed.values()):
            if j.name == name and j.status not in ("SUCCEEDED", "CANCELLED", "FAILED", "FAILED_SETUP",
                                                   "FAILED_PRECHECKS", "FAILED_NO_RESOURCE", "FAILED_CONTROLLER"):
                self.managed[j.job_id] = replace(j, status="CANCELLED", end_at=self.clock())

    def jobs_tail_logs(self, name, follow) -> Iterator[str]:
        self._enter("jobs_tail_logs")
        text = self.logs.get(name, "")
        if text:
            yield text

    def enabled_clouds(self):
        self._enter("enabled_clouds")
        return list(self.enabled)


def _task_name(text: str) -> str:
    import yaml

    return str((yaml.safe_load(text) or {}).get("name") or "")
