"""The SkyPilot backend: a job spec becomes a SkyPilot task, launched on a cluster of its
own (``sky.launch``) or handed to SkyPilot's managed jobs (``sky.jobs.launch``).

One cluster per attempt, named from the dedupe token, so ``find`` can tell whether an
interrupted submit got through, and a recovery may land on another cloud. Submitting
returns as soon as SkyPilot's API server has the request; provisioning goes on there,
and ``status`` reads how it went (no capacity, setup failure ...) from the request.

Importing this module does not import SkyPilot (2+ s): only submit/status/cancel/logs/
find do, through the ``SkyClient`` seam.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import time
from importlib import metadata
from pathlib import Path
from typing import Callable, ClassVar, Iterator, Optional, Sequence

from launcher.backend.config import Target
from launcher.backend.context import AppContext
from launcher.backend.pricing import PricedByModules
from launcher.backend.protocols import Facts, Handle, JobRef, Request
from launcher.backend.staging import helper_zip_bytes
from launcher.backend.support import secret_values
from launcher.checkpoint.posix_io import write_atomic
from launcher.core.errors import (BackendUnavailable, CapabilityError, ConfigError, LauncherError, SubmitError,
                                  TransientError)
from launcher.core.status import JobState, Status
from launcher.spec.model import JobSpec
from launcher_backends.skypilot import egress, limits, prices, states
from launcher_backends.skypilot.cancelling import cancel_many
from launcher_backends.skypilot.client import ClusterUnavailable, SdkClient, SkyClient, short_error as _short
from launcher_backends.skypilot.finals import FinalStates
from launcher_backends.skypilot.names import cluster_name, task_name
from launcher_backends.skypilot.options import SkyPilotOptions, SkyPilotSection, split_infra
from launcher_backends.skypilot.placement import ranked_placements, without_avoided
from launcher_backends.skypilot.render import HANDOFF_NAME, HELPER_NAME, RenderOptions, render_task

INSTALL_HINT = "pip install 'launcher[skypilot]'"

# Exception class names that mean "SkyPilot could not be asked", not "SkyPilot said no".
_TRANSIENT_NAMES = {
    "ApiServerConnectionError", "ServerTemporarilyUnavailableError", "RequestInterruptedError",
    "ConcurrentWorkerExhaustedError", "NetworkError", "ClusterStatusFetchingError", "RequestException",
    "ConnectionError", "Timeout", "ChunkedEncodingError",
}


def is_transient(e: BaseException) -> bool:
    if isinstance(e, (OSError, TimeoutError)):
        return True
    if isinstance(e, RuntimeError) and "API server" in str(e):
        return True
    return any(c.__name__ in _TRANSIENT_NAMES for c in type(e).__mro__)


class SkyPilotBackend(PricedByModules):
    name: ClassVar[str] = "skypilot"
    target_options: ClassVar = SkyPilotOptions
    install_hint: ClassVar[str] = INSTALL_HINT
    restart_hours: ClassVar[float] = 10 / 60  # re-provision, start, load: per interruption, for the planner
    spec_section: ClassVar[str] = "skypilot"
    env_prefixes: ClassVar[tuple] = ("SKYPILOT_",)  # SkyPilot sets them on every node (SetsEnv)
    spec_options: ClassVar = SkyPilotSection
    # every portable request; topology only as far as one node keeps it (``unsupported``).
    # tasks_per_node reaches the job as LAUNCHER_TASKS_PER_NODE: SkyPilot starts one `run`
    # per node and the job starts its tasks (torchrun --nproc-per-node).
    spec_fields: ClassVar[frozenset] = frozenset({
        "resources.nodes", "resources.tasks_per_node", "resources.gpus_per_node", "resources.accelerator",
        "resources.cpus_per_node", "resources.memory_per_node", "resources.disk_per_node",
        "topology.max_switches", "topology.switch_wait", "topology.segment", "image",
        "checkpoint.local", "checkpoint.peers",  # each VM has its own disk
        "sweep"})  # each element its own task, max_parallel kept by the launcher

    @classmethod
    def unsupported(cls, spec: JobSpec) -> list:
        """Topology across several nodes, and what render refuses (``task_limits``), said at validate."""
        return limits.unsupported(spec)

    def __init__(self, target: Target, app: Optional[AppContext] = None, client: Optional[SkyClient] = None):
        self.target = target
        self.app = app
        self._client = client
        self._finals = FinalStates()  # terminal states seen: they outlive an autodowned cluster

    @classmethod
    def available(cls) -> Optional[str]:
        """None when ``import sky`` would work; else why not, with the install hint. Never imports sky."""
        try:
            found = importlib.util.find_spec("sky") is not None
        except (ImportError, ValueError) as e:
            return f"SkyPilot cannot be found ({e}); install it with: {INSTALL_HINT}"
        return None if found else f"SkyPilot is not installed; install it with: {INSTALL_HINT}"

    @property
    def options(self) -> SkyPilotOptions:
        opts = self.target.options
        if isinstance(opts, SkyPilotOptions):
            return opts
        return SkyPilotOptions(**(opts or {}))

    @property
    def client(self) -> SkyClient:
        if self._client is None:
            problem = self.available()
            if problem:
                raise BackendUnavailable(problem)
            self._client = SdkClient()
        return self._client

    # ---- facts (no SkyPilot import: `launcher render` probes too)
    def probe(self) -> Facts:
        opts = self.options
        return Facts(self.target.name, self.name, {
            "infra": opts.placement().full_infra,
            "use_spot": opts.use_spot,
            "fallbacks": [p.full_infra for p in opts.fallbacks],
            "skypilot": "installed" if self.available() is None else "missing",
        })

    # ---- pricing (Pricing, forwarded): catalogs and price files, never importing sky (offers.py),
    # the price files' neoclouds section (prices.py)
    offers_module: ClassVar[str] = "launcher_backends.skypilot.offers"
    prices_module: ClassVar = prices
    price_section: ClassVar[str] = prices.PRICE_SECTION
    price_options: ClassVar = prices.PRICE_OPTIONS

    @classmethod
    def egress_per_gb(cls, cloud: str, src_region: str, dst_region: str) -> Optional[tuple]:
        return egress.per_gb(cloud, src_region, dst_region)

    @classmethod
    def egress_highest(cls, cloud: str) -> Optional[tuple]:
        return egress.highest(cloud)

    # ---- where jobs run (Host): SkyPilot's API server starts them; no submit host, no remote workdir
    runner = None  # jobs go to SkyPilot's API server, not through a host the launcher reaches

    @classmethod
    def workdir_is_remote(cls, options: dict) -> bool:
        return False  # SkyPilot syncs the workdir from here

    def version(self, facts: Facts) -> Optional[str]:
        """SkyPilot's installed version, from its metadata (``sky`` is not imported)."""
        try:
            return metadata.version("skypilot")
        except metadata.PackageNotFoundError:
            return None

    # ---- placement: the planner's ranked candidates, failed over among in this order
    @staticmethod
    def with_candidates(facts: Facts, candidates: list[dict]) -> Facts:
        return dataclasses.replace(facts, data={**facts.data, "candidates": list(candidates)})

    # ---- render (pure)
    def render(self, spec: JobSpec, facts: Facts, job: JobRef) -> Request:
        placements = ranked_placements(facts.get("candidates")) or self.options.placements()
        placements = without_avoided(placements, job.avoid)
        opts = self.options
        ropts = RenderOptions(cluster_name_prefix=opts.cluster_name_prefix, idle_minutes=opts.idle_minutes,
                              autodown=opts.autodown, mount_checkpoint_bucket=opts.mount_checkpoint_bucket)
        text, meta = render_task(spec, job, placements, ropts)
        return Request(backend=self.name, target=self.target.name, job=job, text=text, kind="task", meta=meta)

    # ---- submit
    def submit(self, request: Request) -> Handle:
        if request.backend != self.name or request.kind != "task":
            raise SubmitError(f"the SkyPilot backend cannot submit a {request.backend}/{request.kind} request")
        meta = request.meta
        secrets = self._secret_values(request, meta.get("secrets", []))
        client = self.client
        self._stage(request)
        try:
            checked = client.check(request.text, secrets)
            self._require_enabled_cloud(client, meta["placements"])
        except LauncherError:
            raise
        except Exception as e:
            if is_transient(e):
                raise TransientError(f"SkyPilot could not be reached to validate the task ({_short(e)})") from e
            raise SubmitError(f"SkyPilot could not validate the task ({_short(e)})") from e
        hourly, source = self._hourly(meta, checked.hourly_usd)
        managed = bool(meta.get("managed"))
        try:
            if managed:
                rid = client.jobs_launch(request.text, meta["task_name"], secrets=secrets)
            else:
                rid = client.launch(request.text, meta["cluster_name"], secrets=secrets)
        except LauncherError:
            raise
        except Exception as e:
            cls = TransientError if is_transient(e) else SubmitError
            raise cls(f"SkyPilot did not accept the launch ({_short(e)}); nothing was launched") from e
        try:
            first = meta["placements"][0]
            return Handle(
                backend=self.name, target=request.target, job_id=request.job.job_id,
                native_id=meta["task_name"] if managed else meta["cluster_name"], attempt=request.job.attempt,
                extra={
                    "managed": managed, "cluster": None if managed else meta["cluster_name"],
                    "task_name": meta["task_name"], "request_id": rid, "infra": first["infra"],
                    "use_spot": bool(first.get("use_spot")), "num_nodes": meta["num_nodes"],
                    "instance_type": first.get("instance_type"),  # keys what watch learns (plan.observed)
                    "hourly_usd": hourly, "price_source": source, "job_dir": request.job.job_dir,
                    "warnings": list(meta.get("warnings", [])) + list(checked.warnings),
                })
        except BaseException as e:
            self._abort(rid, meta)
            raise SubmitError(f"submission failed after SkyPilot accepted it; cancelled it ({_short(e)})") from e

    @staticmethod
    def _stage(request: Request) -> None:
        """Write the files the task's file_mounts name into the job dir (render only names them)."""
        names = request.meta.get("stage") or []
        if not names:
            return

        job_dir = Path(request.job.job_dir)
        job_dir.mkdir(parents=True, exist_ok=True)
        for name in names:
            if name == HELPER_NAME:
                data = helper_zip_bytes()
            elif name == HANDOFF_NAME:
                data = Path(__file__).with_name("handoff.py").read_bytes()
            else:
                raise SubmitError(f"render asked to stage an unknown file {name!r}")
            write_atomic(job_dir / name, data)

    def _abort(self, rid: str, meta: dict) -> None:
        try:
            self.client.cancel_request(rid)
            if meta.get("managed"):
                self.client.jobs_cancel(meta["task_name"])
            else:
                self.client.down(meta["cluster_name"])
        except Exception:  # noqa: BLE001 - the original error is the one to report
            pass

    @staticmethod
    def _secret_values(request: Request, names: Sequence[str]) -> dict[str, str]:
        """Values from the launcher's own environment (or given with the request), kept in memory only."""
        values, missing = secret_values(request, names)
        if missing:
            raise ConfigError(f"secret(s) {', '.join(missing)} not set in the launcher's environment: export them "
                              "before launching (secret values are passed to SkyPilot in memory, never written "
                              "by the launcher)")
        return values

    @staticmethod
    def _require_enabled_cloud(client: SkyClient, placements: list[dict]) -> None:
        needed = sorted({split_infra(p["infra"])[0] for p in placements})
        enabled = sorted({str(c).split("/")[0].lower() for c in client.enabled_clouds()})
        if not set(needed) & set(enabled):
            raise CapabilityError(
                f"SkyPilot has no enabled cloud for this job: it may run on {', '.join(needed)}, and SkyPilot has "
                f"{', '.join(enabled) if enabled else 'no cloud'} enabled. Set up credentials, then run "
                f"`sky check {' '.join(needed)}`")

    def _hourly(self, meta: dict, catalog_usd: Optional[float]) -> tuple[Optional[float], Optional[str]]:
        """Hourly price of the first placement for the whole job: planner > target's gpu_hour_usd > catalog."""
        first = meta["placements"][0]
        if first.get("hourly_usd") is not None:
            return float(first["hourly_usd"]), "planner"
        gpu_hour = self.options.gpu_hour_usd
        if gpu_hour is not None and meta.get("gpus_per_node"):
            return round(gpu_hour * meta["gpus_per_node"] * meta["num_nodes"], 6), "target"
        if catalog_usd is not None:
            return float(catalog_usd), "catalog"
        return None, None

    # ---- status (batched; a failure to ask is a TransientError, never a job failure)
    def status(self, handles: Sequence[Handle]) -> list[Status]:
        out: list[Optional[Status]] = [self._finals.get(h) for h in handles]
        todo = [i for i, st in enumerate(out) if st is None]
        if not todo:
            return out  # type: ignore[return-value]
        plain = [handles[i] for i in todo if not handles[i].extra.get("managed")]
        managed = [handles[i] for i in todo if handles[i].extra.get("managed")]
        answers = _ask_status(self.client, plain, managed, [handles[i] for i in todo])
        for i in todo:
            h = handles[i]
            out[i] = answers.managed_status(h) if h.extra.get("managed") else answers.plain_status(h)
            if not out[i].state.is_active:
                self._finals.put(h, out[i])
        return out  # type: ignore[return-value]

    # ---- cancel (idempotent)
    def cancel(self, handle: Handle) -> None:
        errors = self.cancel_many([handle])
        if errors:
            raise TransientError(f"could not cancel {handle.native_id} through SkyPilot ({errors[handle.native_id]})")

    def cancel_many(self, handles: Sequence[Handle]) -> dict:
        """Cancel HANDLES in a few API calls (``Backend.cancel_many``): their launch
        requests in one, then every teardown (or managed job's cancel) fired before any is
        waited for. {native id: error} of those whose cancel did not go through."""
        errors = cancel_many(self.client, handles)
        for h in handles:
            if h.native_id not in errors and self._finals.get(h) is None:
                self._finals.put(h, Status(JobState.CANCELLED, native_state="CANCELLED", reason="cancelled"))
        return errors

    # ---- logs
    def logs(self, handle: Handle, follow: bool = False, done: Optional[Callable[[], bool]] = None,
             poll: float = 2.0) -> Iterator[str]:
        client = self.client
        try:
            if handle.extra.get("managed"):
                yield from client.jobs_tail_logs(handle.extra.get("task_name") or handle.native_id, follow)
                return
            while True:
                job_id = self._cluster_job_id(client, handle)
                if job_id is not None:
                    yield from client.tail_logs(handle.native_id, job_id, follow)
                    return
                if not follow or (done is not None and done()):
                    return
                time.sleep(poll)  # the cluster is still being provisioned
        except LauncherError:
            raise
        except Exception as e:
            raise TransientError(f"could not read logs of {handle.native_id} from SkyPilot ({_short(e)})") from e

    @staticmethod
    def _cluster_job_id(client: SkyClient, handle: Handle) -> Optional[int]:
        jobs = client.queue([handle.native_id]).get(handle.native_id)
        if not isinstance(jobs, list):
            return None
        job = states.attempt_job(jobs, handle.extra.get("task_name") or "")
        return job.job_id if job is not None else None

    # ---- find (idempotent submission)
    def find(self, job: JobRef) -> Optional[Handle]:
        opts = self.options
        cname = cluster_name(opts.cluster_name_prefix, job.job_id, job.attempt)
        tname = task_name(job.job_id, job.attempt)
        first = opts.placement()
        extra = {"task_name": tname, "request_id": None, "infra": first.full_infra, "use_spot": first.use_spot,
                 "job_dir": job.job_dir, "hourly_usd": None, "price_source": None, "found": True}
        client = self.client
        try:
            if client.status([cname]):
                return Handle(self.name, self.target.name, job.job_id, cname, job.attempt,
                              extra={**extra, "managed": False, "cluster": cname})
            for p in client.pending_launches():  # accepted, but no cluster or managed job yet
                if (not p.managed and p.cluster_name == cname) or (p.managed and p.name == tname):
                    return Handle(self.name, self.target.name, job.job_id, tname if p.managed else cname,
                                  job.attempt, extra={**extra, "request_id": p.request_id, "managed": p.managed,
                                                      "cluster": None if p.managed else cname})
            try:
                managed = client.jobs_queue([tname])
            except Exception as e:  # no jobs controller at all means no managed job either
                if type(e).__name__ != "ClusterNotUpError":
                    raise
                managed = []
            if any(j.name == tname for j in managed):
                return Handle(self.name, self.target.name, job.job_id, tname, job.attempt,
                              extra={**extra, "managed": True, "cluster": None})
        except LauncherError:
            raise
        except Exception as e:
            raise TransientError(f"could not look {tname} up in SkyPilot ({_short(e)}); not submitting twice") from e
        return None

    def close(self) -> None:
        pass


@dataclasses.dataclass(frozen=True)
class _StatusAnswers:
    """What SkyPilot answered in one status pass: {cluster name: cluster}, {cluster name: its
    jobs} (for the clusters that are up), the managed jobs, {launch request id: request}."""
    clusters: dict
    queues: dict
    managed_jobs: list
    requests: dict

    def plain_status(self, h: Handle) -> Status:
        """The status of H, a task on a cluster of its own."""
        c = self.clusters.get(h.native_id)
        jobs = self.queues.get(h.native_id)
        if c is not None and jobs is None:
            jobs = ClusterUnavailable(f"cluster is {c.status}")
        return states.unmanaged_status(use_spot=bool(h.extra.get("use_spot")),
                                       request=self.requests.get(h.extra.get("request_id") or ""), cluster=c,
                                       jobs=jobs, task_name=h.extra.get("task_name", ""))

    def managed_status(self, h: Handle) -> Status:
        """The status of H, a managed job: its newest job of that name."""
        want = h.extra.get("task_name") or h.native_id
        mine = [j for j in self.managed_jobs if j.name == want]
        job = max(mine, key=lambda j: j.job_id) if mine else None
        return states.managed_status(job, self.requests.get(h.extra.get("request_id") or ""))


def _ask_status(client: SkyClient, plain: list, managed: list, handles: list) -> _StatusAnswers:
    """Ask SkyPilot in a few calls about the clusters of PLAIN, the managed jobs of MANAGED and
    the launch requests of HANDLES. A failure to ask is a TransientError: the jobs' states are
    unknown, not failed."""
    try:
        clusters, queues, mjobs = {}, {}, []
        if plain:
            names = [h.native_id for h in plain]
            clusters = {c.name: c for c in client.status(names)}
            up = [n for n in names if n in clusters and clusters[n].status in ("UP", "AUTOSTOPPING")]
            queues = client.queue(up) if up else {}
        if managed:
            mjobs = client.jobs_queue([h.extra.get("task_name") or h.native_id for h in managed])
        rids = [h.extra.get("request_id") for h in handles if h.extra.get("request_id")]
        reqs = client.requests(rids) if rids else {}
    except LauncherError:
        raise
    except Exception as e:
        raise TransientError(f"could not read SkyPilot status ({_short(e)}); the jobs' states are unknown, "
                             "not failed: retry later") from e
    return _StatusAnswers(clusters, queues, mjobs, reqs)
