"""The thin seam between the backend and SkyPilot's SDK.

``SkyClient`` is what the backend (and, later, the launcher's recovery loop) calls;
``SdkClient`` implements it over the real SDK, one SDK call per method, returning
plain records; ``tests.fixtures.skypilot_fake.FakeSkyClient`` implements it as a stateful fake for unit
tests. Nothing here interprets states: that is ``states.py``. SkyPilot comes from
``sdk.sky_module()`` inside the methods, never at module import.

Contract every implementation keeps:
- ``launch`` / ``jobs_launch`` return a request id at once; provisioning goes on in
  SkyPilot's API server, and ``requests`` reports how it went (its error included).
- ``down``, ``jobs_cancel`` and ``cancel_request`` are idempotent: a missing cluster,
  job or request is not an error.
- ``queue`` answers per cluster: a list of jobs, or ``ClusterUnavailable`` when that
  cluster is not up (a state, not a failure).
- Any other exception means "could not ask": the backend turns it into a
  TransientError, never into a job failure.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Iterator, Mapping, Optional, Protocol, Sequence, Union

from launcher_backends.skypilot import check
from launcher_backends.skypilot.sdk import sky_module


@dataclass(frozen=True)
class RequestRecord:
    request_id: str
    status: str  # PENDING, WAITING, RUNNING, SUCCEEDED, FAILED, CANCELLED
    error: Optional[BaseException] = None
    message: str = ""


@dataclass(frozen=True)
class ClusterRecord:
    name: str
    status: str  # INIT, UP, STOPPED, AUTOSTOPPING, PENDING
    cloud: str = ""
    region: str = ""
    zone: str = ""           # the launched zone (its name, as SkyPilot spells it), "" when not known
    instance_type: str = ""  # the launched instance type, "" when not known
    num_nodes: int = 0
    resources: str = ""
    hourly_usd: Optional[float] = None  # the launched resources' price for the whole cluster
    launched_at: Optional[float] = None


@dataclass(frozen=True)
class ClusterJob:
    job_id: int
    name: str
    status: str  # sky.skylet.job_lib.JobStatus names
    submitted_at: Optional[float] = None
    start_at: Optional[float] = None
    end_at: Optional[float] = None


@dataclass(frozen=True)
class ManagedJob:
    job_id: int
    name: str
    status: str  # sky.jobs.state.ManagedJobStatus names
    recovery_count: int = 0
    failure_reason: str = ""
    cloud: str = ""
    region: str = ""
    zone: str = ""  # where SkyPilot last launched it (kept after its cluster is gone), "" when not known
    cluster: str = ""
    submitted_at: Optional[float] = None
    start_at: Optional[float] = None
    end_at: Optional[float] = None
    extra: dict = field(default_factory=dict)


@dataclass(frozen=True)
class CheckResult:
    """What SkyPilot says about a task before it is launched (see check.py)."""

    warnings: tuple = ()
    notes: tuple = ()  # what could not be checked offline, and why
    hourly_usd: Optional[float] = None  # catalog price of the first placement, whole task


@dataclass(frozen=True)
class PendingLaunch:
    """A launch request SkyPilot has accepted but not finished (its cluster may not exist yet)."""

    request_id: str
    managed: bool
    cluster_name: str = ""  # sky.launch
    name: str = ""  # sky.jobs.launch


class ClusterUnavailable(Exception):
    """A cluster's job table cannot be read because the cluster is not up (or gone)."""


QueueResult = Union[list, ClusterUnavailable]


class SkyClient(Protocol):
    def check(self, task_yaml_text: str, secrets: Mapping[str, str]) -> CheckResult: ...

    def launch(self, task_yaml_text: str, cluster_name: str, *, secrets: Mapping[str, str]) -> str: ...

    def jobs_launch(self, task_yaml_text: str, name: str, *, secrets: Mapping[str, str]) -> str: ...

    def requests(self, request_ids: Sequence[str]) -> dict[str, RequestRecord]: ...

    def cancel_request(self, request_id: str) -> None: ...

    def cancel_requests(self, request_ids: Sequence[str]) -> None: ...

    def pending_launches(self) -> list[PendingLaunch]: ...

    def status(self, cluster_names: Sequence[str]) -> list[ClusterRecord]: ...

    def queue(self, cluster_names: Sequence[str]) -> dict[str, QueueResult]: ...

    def down(self, cluster_name: str) -> None: ...

    def down_many(self, cluster_names: Sequence[str]) -> dict[str, str]: ...

    def tail_logs(self, cluster_name: str, job_id: Optional[int], follow: bool) -> Iterator[str]: ...

    def jobs_queue(self, names: Sequence[str]) -> list[ManagedJob]: ...

    def jobs_cancel(self, name: str) -> None: ...

    def jobs_cancel_many(self, names: Sequence[str]) -> dict[str, str]: ...

    def jobs_tail_logs(self, name: str, follow: bool) -> Iterator[str]: ...

    def enabled_clouds(self) -> list[str]: ...


def _value(x) -> str:
    """An enum member or a string -> its name (SkyPilot returns either, depending on the call)."""
    if x is None:
        return ""
    return getattr(x, "name", None) or str(x)


def _plain(x) -> str:
    """A SkyPilot message without its terminal colour codes."""
    return re.sub(r"\x1b\[[0-9;]*m", "", str(x)) if x else ""


def _get(obj, key, default=None):
    if isinstance(obj, Mapping):
        return obj.get(key, default)
    return getattr(obj, key, default)


class SdkClient:
    """SkyClient over the real SkyPilot SDK (client/API-server mode of SkyPilot >= 0.10)."""

    def _sky(self):
        return sky_module()

    def task(self, task_yaml_text: str, secrets: Mapping[str, str]):
        """The sky.Task for a rendered task; secret values are merged in memory only."""
        return check.load_task(task_yaml_text, secrets)

    def check(self, task_yaml_text, secrets):
        task = check.load_task(task_yaml_text, secrets)
        checked = check.check_task(task)
        return CheckResult(tuple(checked.warnings), tuple(sorted(set(checked.notes))), check.hourly_usd(task))

    # ---- launching
    def launch(self, task_yaml_text, cluster_name, *, secrets):
        sky = self._sky()
        task = self.task(task_yaml_text, secrets)
        return str(sky.launch(task, cluster_name=cluster_name, retry_until_up=False, _need_confirmation=False))

    def jobs_launch(self, task_yaml_text, name, *, secrets):
        sky = self._sky()
        task = self.task(task_yaml_text, secrets)
        return str(sky.jobs.launch(task, name=name))

    def requests(self, request_ids):
        sky = self._sky()
        if not request_ids:
            return {}
        out = {}
        for p in sky.api_status(request_ids=list(request_ids)):
            error = None
            if p.status == "FAILED":
                try:
                    sky.get(p.request_id)
                except BaseException as e:  # noqa: BLE001 - the stored error is the answer
                    if isinstance(e, (KeyboardInterrupt, SystemExit)):
                        raise
                    error = e
            out[p.request_id] = RequestRecord(p.request_id, str(p.status), error, p.status_msg or "")
        return {rid: out[rid] for rid in request_ids if rid in out}

    def cancel_request(self, request_id):
        sky = self._sky()
        sky.get(sky.api_cancel(request_id, silent=True))

    def cancel_requests(self, request_ids):
        """Cancel many requests in ONE call to the API server (idempotent: finished ones stay)."""
        if request_ids:
            sky = self._sky()
            sky.get(sky.api_cancel(list(request_ids), silent=True))

    _LAUNCHES = {"sky.launch": False, "sky.jobs.launch": True}

    def pending_launches(self):
        sky = self._sky()
        out = []
        for p in sky.api_status():  # unfinished requests only
            if p.name not in self._LAUNCHES or p.status not in ("PENDING", "WAITING", "RUNNING"):
                continue
            try:  # the owner sees the request body as JSON; parsed in memory, never kept
                body = json.loads(p.request_body or "null") or {}
            except ValueError:
                body = {}
            out.append(PendingLaunch(p.request_id, self._LAUNCHES[p.name], str(body.get("cluster_name") or ""),
                                     str(body.get("name") or "")))
        return out

    # ---- clusters
    def status(self, cluster_names):
        sky = self._sky()
        common = sky.utils.common

        if not cluster_names:
            return []
        records = sky.get(sky.status(cluster_names=list(cluster_names), refresh=common.StatusRefreshMode.AUTO))
        return [self._cluster(r) for r in records]

    @staticmethod
    def _cluster(r) -> ClusterRecord:
        handle = _get(r, "handle")
        nodes = _get(r, "nodes") or _get(handle, "launched_nodes") or 0
        hourly = None
        launched = _get(handle, "launched_resources")
        if launched is not None:
            try:
                hourly = float(launched.get_cost(3600)) * max(1, int(nodes))
            except Exception:  # noqa: BLE001 - no local catalog, a cloud without prices: no figure
                hourly = None
        return ClusterRecord(
            name=_get(r, "name"), status=_value(_get(r, "status")), cloud=str(_get(r, "cloud") or ""),
            region=str(_get(r, "region") or ""), zone=str(_get(launched, "zone") or ""),
            instance_type=str(_get(launched, "instance_type") or ""), num_nodes=int(nodes or 0),
            resources=str(_get(r, "resources_str") or ""), hourly_usd=hourly, launched_at=_get(r, "launched_at"))

    def queue(self, cluster_names):
        sky = self._sky()
        exceptions = sky.exceptions

        pending = {}
        out: dict = {}
        for name in cluster_names:  # fire every request first, then collect: one round trip of latency
            try:
                pending[name] = sky.queue(name, skip_finished=False)
            except (exceptions.ClusterNotUpError, exceptions.ClusterDoesNotExist) as e:
                out[name] = ClusterUnavailable(str(e))
        for name, rid in pending.items():
            try:
                jobs = sky.get(rid)
            except (exceptions.ClusterNotUpError, exceptions.ClusterDoesNotExist) as e:
                out[name] = ClusterUnavailable(str(e))
                continue
            out[name] = [ClusterJob(job_id=int(_get(j, "job_id")), name=str(_get(j, "job_name") or ""),
                                    status=_value(_get(j, "status")), submitted_at=_get(j, "submitted_at"),
                                    start_at=_get(j, "start_at"), end_at=_get(j, "end_at")) for j in jobs]
        return out

    def down(self, cluster_name):
        sky = self._sky()
        exceptions = sky.exceptions

        try:
            sky.get(sky.down(cluster_name))
        except exceptions.ClusterDoesNotExist:
            pass

    def down_many(self, cluster_names):
        """Tear down many clusters: every request fired first, then each waited for (the
        downs run side by side on the API server, not one after the other). {name: error} of
        those that failed; a cluster that does not exist is torn down already."""
        sky = self._sky()
        exceptions = sky.exceptions

        return _fire_then_wait(sky, cluster_names, lambda n: sky.down(n), (exceptions.ClusterDoesNotExist,))

    def tail_logs(self, cluster_name, job_id, follow):
        sky = self._sky()
        for chunk in sky.tail_logs(cluster_name, job_id, follow, preload_content=False):
            if chunk is None:  # end of the stream
                return
            yield chunk

    # ---- managed jobs
    _JOB_FIELDS = ["job_id", "task_id", "job_name", "status", "recovery_count", "failure_reason", "cloud", "region",
                   "zone", "submitted_at", "start_at", "end_at", "current_cluster_name"]

    def jobs_queue(self, names):
        sky = self._sky()
        if hasattr(sky.jobs, "queue_v2"):  # 0.14: queue(version=1) is deprecated
            records = sky.get(sky.jobs.queue_v2(refresh=False, skip_finished=False, fields=self._JOB_FIELDS))[0]
        else:
            records = sky.get(sky.jobs.queue(refresh=False, skip_finished=False))
        wanted = set(names)
        out = []
        for r in records:
            name = str(_get(r, "job_name") or "")
            if wanted and name not in wanted:
                continue
            out.append(ManagedJob(
                job_id=int(_get(r, "job_id")), name=name, status=_value(_get(r, "status")),
                recovery_count=int(_get(r, "recovery_count") or 0),
                failure_reason=_plain(_get(r, "failure_reason")), cloud=_plain(_get(r, "cloud")).strip("-"),
                region=_plain(_get(r, "region")).strip("-"), zone=_plain(_get(r, "zone")).strip("-"),
                cluster=_plain(_get(r, "current_cluster_name")),
                submitted_at=_get(r, "submitted_at"), start_at=_get(r, "start_at"), end_at=_get(r, "end_at")))
        return out

    def jobs_cancel(self, name):
        sky = self._sky()
        sky.get(sky.jobs.cancel(name=name))  # "No job to cancel" is not an error in SkyPilot

    def jobs_cancel_many(self, names):
        """``jobs_cancel`` of many managed jobs, every request fired first, then each waited for."""
        sky = self._sky()
        return _fire_then_wait(sky, names, lambda n: sky.jobs.cancel(name=n), ())

    def jobs_tail_logs(self, name, follow):
        sky = self._sky()
        stream = sky.jobs.tail_logs(name=name, follow=follow, preload_content=False)
        for chunk in stream or ():
            if chunk is None:
                return
            yield chunk

    # ---- facts
    def enabled_clouds(self):
        sky = self._sky()
        sdk = sky.client.sdk

        return [str(c) for c in sky.get(sdk.enabled_clouds())]


def short_error(e: BaseException) -> str:
    """An error in one line: its class and the first 300 characters of its text."""
    text = " ".join(str(e).split())
    return f"{type(e).__name__}: {text[:300]}"


def _fire_then_wait(sky, names: Sequence[str], start, gone: tuple) -> dict[str, str]:
    """{name: error} of START(name) for every name, all started before any is waited for;
    errors of the GONE classes mean there was nothing left to do."""
    started, errors = {}, {}
    for name in dict.fromkeys(names):
        try:
            started[name] = start(name)
        except gone:
            pass
        except Exception as e:  # noqa: BLE001 - reported per name
            errors[name] = short_error(e)
    for name, rid in started.items():
        try:
            sky.get(rid)
        except gone:
            pass
        except Exception as e:  # noqa: BLE001 - reported per name
            errors[name] = short_error(e)
    return errors
