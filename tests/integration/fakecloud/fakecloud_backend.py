"""A third-party backend for the tests, registered through the `launcher.backends`
entry-point group exactly like a plugin (see the .dist-info beside it), that implements
EVERY protocol of ``launcher.backend.protocols``; ``launcher/`` names it nowhere
(tests/integration/test_third_party_backend.py checks both).

It is a "cloud" with regions that runs the job on this machine, like the local backend it
extends: after a short provisioning phase in which it reports PENDING, the job runs "in"
the first placement the planner ranked that is not cooling down (ChoosesPlacement). A
SIGUSR1 to the job is its spot reclaim notice (the trainer checkpoints and exits 75:
PREEMPTED). Its prices come from its target options (Pricing), its queue wait is an
option too (Scheduler).

It can replay a trace (option ``trace``: a JSON file ``{"t0": unix time, "tick_s": seconds,
"spot": {REGION: [1 = spot capacity, 0 = none, per tick]}, "prices": {REGION: [$ per hour,
per tick]}}``; past its end the last tick holds). Tick ``(now - t0) // tick_s``: a spot
region's offer is priced at that tick's price; a spot submission to a region with no capacity
then ends at once NO_CAPACITY (nothing runs); a running spot job in a region whose capacity
is gone gets its reclaim notice (SIGUSR1) at the first status call of that tick. Option
``restart_s`` is what its offers say a restart costs.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import ClassVar, Optional

from pydantic import BaseModel, ConfigDict, Field

from launcher.backend.protocols import Facts, Handle, JobRef, LogSlice, QueueEstimate, Request, file_slice
from launcher.plan.offers import Offer
from launcher.spec.model import Section
from launcher.core.status import JobState, Status
from launcher.jobside.startclaim import claim_start, holder
from launcher_backends.local.backend import LocalBackend

PROVISIONING_S = 2.0
VERSION = "9.9.9-test"


class FakeCloudOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    python: Optional[str] = None
    regions: list[str] = Field(default_factory=lambda: ["east", "west"])
    hourly_usd: float = 1.0       # $ per node-hour in the first region; each further region +10%
    spot: bool = True
    preemption_rate: float = 0.05  # per node-hour
    queue_hours: float = 0.0
    remote_workdir: bool = False
    trace: Optional[str] = None     # availability and prices to replay (see the module doc)
    restart_s: Optional[float] = None


def _trace(path: Optional[str]) -> Optional[dict]:
    return json.loads(Path(path).read_text()) if path else None


def _at(series, tick: int, default):
    if not series:
        return default
    return series[min(max(tick, 0), len(series) - 1)]


def trace_tick(trace: dict, now: Optional[float] = None) -> int:
    return int(((time.time() if now is None else now) - float(trace["t0"])) // float(trace["tick_s"]))


def spot_up(trace: Optional[dict], region: str, now: Optional[float] = None) -> bool:
    return trace is None or bool(_at(trace.get("spot", {}).get(region), trace_tick(trace, now), 1))


class FakeCloudSection(Section):
    """The plugin's own section of a job spec (``fakecloud:``), validated like any section."""

    label: Optional[str] = None  # shown with the job's handle


def _options(raw) -> FakeCloudOptions:
    return FakeCloudOptions(**{k: v for k, v in dict(raw or {}).items() if k != "backend"})


class FakeCloudBackend(LocalBackend):
    name: ClassVar[str] = "fakecloud"
    target_options: ClassVar = FakeCloudOptions
    install_hint: ClassVar[str] = "tests/integration/fakecloud on PYTHONPATH"
    restart_hours: ClassVar[float] = 2 / 60
    env_prefixes: ClassVar[tuple] = ("FAKECLOUD_",)  # SetsEnv: what its (imagined) scheduler sets
    # ---- SpecOwner: its own section (spec_fields and unsupported come with LocalBackend: one
    # process on this machine)
    spec_section: ClassVar[str] = "fakecloud"
    spec_options: ClassVar = FakeCloudSection

    @property
    def opts(self) -> FakeCloudOptions:
        o = self.target.options
        return o if isinstance(o, FakeCloudOptions) else _options(self.target.raw)

    # ---- ExcludesNodes: its instances are never named, so an attempt's status names no node to
    # blame and there is nothing to keep a job off (a third-party backend can declare it all the same)
    @classmethod
    def attempt_nodes(cls, status) -> list:
        return []

    # ---- Egress: a flat rate between its regions (a test double: the figure is its own)
    EGRESS_USD_PER_GB: ClassVar[float] = 0.02

    @classmethod
    def egress_per_gb(cls, cloud: str, src_region: str, dst_region: str) -> Optional[tuple]:
        if src_region == dst_region:
            return 0.0, "fakecloud: same region"
        return cls.EGRESS_USD_PER_GB, "fakecloud's flat rate between its regions"

    @classmethod
    def egress_highest(cls, cloud: str) -> Optional[tuple]:
        return cls.EGRESS_USD_PER_GB, "fakecloud's flat rate between its regions"

    # ---- Host (available; runner, the local one, inherited) and Backend.close
    @classmethod
    def available(cls) -> Optional[str]:
        return None  # nothing to install: it runs the job on this machine

    def close(self) -> None:
        pass

    # ---- Pricing, its price section: a price file may say `fakecloud: {REGION: $ per node-hour}`; a later
    # file's region replaces an earlier one's
    price_section: ClassVar[str] = "fakecloud"
    price_options: ClassVar = dict[str, float]

    @classmethod
    def merge_prices(cls, merged, section, source: str):
        return {**(merged or {}), **section}

    # ---- Pricing, its offers
    @classmethod
    def offers(cls, spec, context) -> list:
        opts = _options(context.options)
        res = spec.resources
        wait = float(context.queue_waits.get(context.target, opts.queue_hours))
        listed = context.price_book.section(cls.price_section) or {}
        trace = _trace(opts.trace) if opts.spot else None
        if trace:
            tick = trace_tick(trace)
            listed = {**listed, **{r: float(_at(p, tick, 0.0)) for r, p in trace.get("prices", {}).items()}}
        restart = opts.restart_s / 3600.0 if opts.restart_s is not None else cls.restart_hours
        return [Offer(backend=cls.name, target=context.target, cloud=cls.name, region=r, zone=None,
                      instance_type="vm", accelerator=res.accelerator, accelerator_count=res.gpus_per_node,
                      vcpus=None, memory_gib=None, spot=opts.spot,
                      hourly_usd=round(listed.get(r, opts.hourly_usd * (1 + i / 10)), 6),
                      preemption_rate=opts.preemption_rate, queue_wait_hours=wait, notice_seconds=60.0,
                      source=f"{cls.name} price list", rate_source="catalog", restart_hours=restart)
                for i, r in enumerate(opts.regions)]

    @classmethod
    def offer_key(cls, target: str, handle_extra: dict, status_extra: dict) -> Optional[tuple]:
        region = status_extra.get("region") or handle_extra.get("region")
        return (cls.name, region, "", "vm", bool(handle_extra.get("use_spot"))) if region else None

    # ---- Scheduler: its queue wait is an option
    def queue_wait(self, spec, exclude_job: Optional[str] = None) -> Optional[QueueEstimate]:
        return QueueEstimate(self.opts.queue_hours, f"{self.name}: queue_hours option", queue="vm")

    # ---- Scheduler: no restart in place, so one run per native id
    def run_history(self, handle: Handle) -> list[dict]:
        if handle.extra.get("no_capacity"):
            return []
        st = self._status_one(handle)
        return [{"state": st.state.value, "nodes": "localhost"}] if st.state.is_terminal else []

    # ---- ChoosesPlacement
    @staticmethod
    def with_candidates(facts: Facts, candidates: list[dict]) -> Facts:
        return dataclasses.replace(facts, data={**facts.data, "candidates": list(candidates)})

    # ---- Host: the version of what runs the jobs
    def version(self, facts: Facts) -> Optional[str]:
        return VERSION

    # ---- Host: a target option says where the workdir is
    @classmethod
    def workdir_is_remote(cls, options: dict) -> bool:
        return bool(options.get("remote_workdir"))

    # ---- Scheduler's arrays: declared, but no target of it runs an array (each sweep element is its
    # own job, max_parallel kept by the launcher); were one to, its elements would be named so
    @classmethod
    def runs_arrays(cls, options: dict) -> bool:
        return False

    @classmethod
    def array_of(cls, native_id: str) -> str:
        return native_id.split(".", 1)[0]

    @classmethod
    def element_native_id(cls, array_id: str, index) -> str:
        return f"{array_id}.{index}"

    # ---- Scheduler: a run is named by the job's own id as its script exports it; no restart in place
    @classmethod
    def run_of(cls, scheduler: dict) -> Optional[tuple[str, int]]:
        native = scheduler.get("LAUNCHER_SELF_ID")
        return (str(native), 0) if native else None

    # ---- the job: in the first ranked placement that is not cooling down
    def render(self, spec, facts: Facts, job: JobRef) -> Request:
        req = super().render(spec, facts, job)
        cands = facts.get("candidates") or [{"infra": f"{self.name}/{r}", "use_spot": self.opts.spot,
                                             "hourly_usd": None} for r in self.opts.regions]
        avoid = {a.lower() for a in job.avoid}
        usable = [c for c in cands if c["infra"].lower() not in avoid] or cands
        return dataclasses.replace(req, meta={**req.meta, "placement": dict(usable[0])})

    def submit(self, request: Request) -> Handle:
        p = request.meta.get("placement") or {}
        region = p.get("infra", "").partition("/")[2]
        placed = {"infra": p.get("infra"), "region": region, "use_spot": bool(p.get("use_spot")),
                  "hourly_usd": p.get("hourly_usd")}
        if self.opts.spot and not spot_up(_trace(self.opts.trace), region):  # refused: nothing runs
            job = request.job
            return Handle(self.name, self.target.name, job.job_id, f"nocap-{job.job_id}-{job.attempt}", job.attempt,
                          extra={**placed, "no_capacity": True, "submitted": time.time(),
                                 "job_dir": str(job.job_dir)})
        h = super().submit(request)
        return dataclasses.replace(h, extra={**h.extra, **placed})

    def cancel(self, handle: Handle) -> None:
        if not handle.extra.get("no_capacity"):
            super().cancel(handle)

    def _reclaim(self, h: Handle) -> None:
        """The trace took the region's spot capacity away: the reclaim notice, once."""
        sent = Path(h.extra["job_dir"]) / f"reclaimed-{h.attempt}"
        if sent.exists():
            return
        script = Path(h.extra["job_dir"]) / f"attempt-{h.attempt}.sh"
        out = subprocess.run(["pgrep", "-f", f"bash {script}"], capture_output=True, text=True).stdout.split()
        if not out:  # its process not found (this time): the next status call tries again
            return
        sent.touch()
        for pid in out:
            try:
                os.kill(int(pid), signal.SIGUSR1)
            except OSError:
                pass

    # ---- StartsSubmit: the "cloud API call" is made when the submission starts; wait() hands
    # back its Handle or raises its error, exactly as submit() would
    def start_submit(self, request: Request) -> "_Started":
        try:
            return _Started(self.submit(request), None)
        except Exception as e:  # noqa: BLE001 - handed to wait(), which raises it
            return _Started(None, e)

    # ---- RemoteStarts: its job folders are this machine's, which the launcher reads itself
    # (starts_elsewhere is False); the members read and claim a start there all the same
    def starts_elsewhere(self) -> bool:
        return False

    def _start_folder(self, folder: str) -> Optional[str]:
        return str(Path(self.app.home) / "jobs" / folder) if self.app is not None else None

    def start_holder(self, folder: str, attempt: int) -> Optional[str]:
        path = self._start_folder(folder)
        return holder(path, attempt) if path else None

    def claim_start(self, folder: str, attempt: int, native_id: str) -> Optional[str]:
        path = self._start_folder(folder)
        if not path or not os.path.isdir(self._start_folder(folder.split("/", 1)[0])):
            return None  # only in an existing job folder (an element folder in it is made)
        return claim_start(path, attempt, native_id)[1]

    # ---- ReadsLog: its output is a file on this machine, read as a slice of its bytes
    def read_log(self, handle: Handle, offset: int, limit: int, timeout: float) -> LogSlice:
        path = self.log_file(handle, {})  # FileNotFoundError: no output yet, as the protocol says
        return file_slice(path, offset, limit, f"{self.target.name}:{path}")

    # ---- Scheduler.find_many: one lookup per job (its marker file), the same answer as find()
    def find_many(self, jobs) -> dict:
        found = {j.dedupe_token: self.find(j) for j in jobs}
        return {t: h for t, h in found.items() if h is not None}

    # ---- Backend.cancel_many: the local backend's (one grace period for all), inherited

    def status(self, handles):
        trace = _trace(self.opts.trace) if self.opts.spot else None
        refused = [h for h in handles if h.extra.get("no_capacity")]
        ran = [h for h in handles if not h.extra.get("no_capacity")]
        got = dict(zip([id(h) for h in ran], super().status(ran) if ran else []))
        for h in refused:
            at = h.extra.get("submitted")
            got[id(h)] = Status(JobState.NO_CAPACITY, "no capacity", f"no spot capacity in {h.extra.get('region')}",
                                start_time=None, end_time=at)
        out = []
        for h in handles:
            st = got[id(h)]
            if (trace and st.state is JobState.RUNNING and h.extra.get("use_spot")
                    and not spot_up(trace, h.extra.get("region", ""))):
                self._reclaim(h)
            if st.state is JobState.RUNNING and time.time() - h.extra.get("submitted", 0) < PROVISIONING_S:
                st = Status(JobState.PENDING, "provisioning", "provisioning a VM")
            out.append(dataclasses.replace(st, extra={**st.extra, "cloud": self.name,
                                                      "region": h.extra.get("region")}))
        return out


@dataclasses.dataclass(frozen=True)
class _Started:
    """A submission start_submit made: wait() gives its Handle or raises its error."""

    handle: Optional[Handle]
    error: Optional[Exception]

    def wait(self) -> Handle:
        if self.error is not None:
            raise self.error
        return self.handle
